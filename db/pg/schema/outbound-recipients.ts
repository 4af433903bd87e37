import { index, pgTable, text } from 'drizzle-orm/pg-core';
import { RECIPIENT_STATES } from '../../schema/outbound-recipients.js';
import { createdAtColumn, idColumn, int64, timestampColumn } from './columns.js';
import { outboundMessages } from './outbound-messages.js';

/** The durable outbound queue: one row per recipient, claimed by workers with a lease (db/schema/outbound-recipients.ts). */
export const outboundRecipients = pgTable(
  'outbound_recipients',
  {
    id: idColumn(),
    messageId: text('message_id')
      .notNull()
      .references(() => outboundMessages.id, { onDelete: 'cascade' }),
    /** The sending account (the message's), so claims can take each account's due mail in turn from an index. */
    accountId: text('account_id').notNull(),
    recipient: text('recipient').notNull(),
    recipientDomain: text('recipient_domain').notNull(),
    status: text('status', { enum: RECIPIENT_STATES }).notNull(),
    attempts: int64('attempts').notNull().default(0),
    nextAttemptAt: int64('next_attempt_at').notNull(),
    lockedBy: text('locked_by'),
    lockedUntil: timestampColumn('locked_until'),
    createdAt: createdAtColumn(),
  },
  (t) => [
    index('outbound_recipients_due_idx').on(t.status, t.nextAttemptAt),
    index('outbound_recipients_account_due_idx').on(t.status, t.accountId, t.nextAttemptAt, t.id),
    index('outbound_recipients_message_idx').on(t.messageId),
  ],
);

export type OutboundRecipientRow = typeof outboundRecipients.$inferSelect;

import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';
import { outboundMessages } from './outbound-messages.js';

export const RECIPIENT_STATES = ['queued', 'delivered', 'bounced'] as const;
export type RecipientState = (typeof RECIPIENT_STATES)[number];

/** The durable outbound queue: one row per recipient, claimed by workers with a lease. */
export const outboundRecipients = sqliteTable(
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
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: integer('next_attempt_at').notNull(),
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

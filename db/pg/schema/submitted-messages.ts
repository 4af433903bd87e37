import { index, pgTable, primaryKey, text } from 'drizzle-orm/pg-core';
import { accounts } from './accounts.js';
import { int64 } from './columns.js';
import { emails } from './emails.js';

/** The Message-IDs an account submitted over SMTP in the last 24 hours (db/schema/submitted-messages.ts). */
export const submittedMessages = pgTable(
  'submitted_messages',
  {
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    /** The Message-ID header's value as the client wrote it, angle brackets included, trimmed. */
    messageId: text('message_id').notNull(),
    emailId: text('email_id')
      .notNull()
      .references(() => emails.id, { onDelete: 'cascade' }),
    createdAt: int64('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.accountId, t.messageId] }), index('submitted_messages_created_idx').on(t.createdAt)],
);

export type SubmittedMessageRow = typeof submittedMessages.$inferSelect;

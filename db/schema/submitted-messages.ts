import { index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { emails } from './emails.js';

/**
 * The Message-IDs of messages an account submitted over SMTP in the last 24 hours (docs/api/decisions.md section 10):
 * a client that retries after a lost reply is answered with the same email id and the message is not sent again.
 */
export const submittedMessages = sqliteTable(
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
    createdAt: integer('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.accountId, t.messageId] }), index('submitted_messages_created_idx').on(t.createdAt)],
);

export type SubmittedMessageRow = typeof submittedMessages.$inferSelect;

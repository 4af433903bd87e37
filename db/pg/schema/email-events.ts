import { index, pgTable, text } from 'drizzle-orm/pg-core';
import { EVENT_STATUSES } from '../../schema/email-events.js';
import { idColumn, int64 } from './columns.js';
import { emails } from './emails.js';

/** One delivery outcome of one recipient, in the order they happened (db/schema/email-events.ts). */
export const emailEvents = pgTable(
  'email_events',
  {
    id: idColumn(),
    emailId: text('email_id')
      .notNull()
      .references(() => emails.id, { onDelete: 'cascade' }),
    /** The email's account, so an account's outcomes (GET /events, replay) are read from an index, newest first. */
    accountId: text('account_id').notNull(),
    recipient: text('recipient').notNull(),
    status: text('status', { enum: EVENT_STATUSES }).notNull(),
    dsn: text('dsn').notNull(),
    detail: text('detail').notNull(),
    occurredAt: int64('occurred_at').notNull(),
  },
  (t) => [index('email_events_email_idx').on(t.emailId, t.id), index('email_events_account_idx').on(t.accountId, t.id)],
);

export type EmailEventRow = typeof emailEvents.$inferSelect;

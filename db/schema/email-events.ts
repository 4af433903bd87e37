import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { idColumn } from './columns.js';
import { emails } from './emails.js';

export const EVENT_STATUSES = ['delivered', 'bounced', 'deferred', 'complained'] as const;
export type EventStatus = (typeof EVENT_STATUSES)[number];

/** One delivery outcome of one recipient, from the service's own mail server log, in the order they happened. */
export const emailEvents = sqliteTable(
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
    occurredAt: integer('occurred_at').notNull(),
  },
  (t) => [index('email_events_email_idx').on(t.emailId, t.id), index('email_events_account_idx').on(t.accountId, t.id)],
);

export type EmailEventRow = typeof emailEvents.$inferSelect;

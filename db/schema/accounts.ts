import { type AnySQLiteColumn, index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';

export const SUSPENDED_BY = ['api', 'operator', 'breaker'] as const;
export type SuspendedBy = (typeof SUSPENDED_BY)[number];

/** Top-level accounts and their sub-accounts (one level), with quota, reputation and credit counters. */
export const accounts = sqliteTable(
  'accounts',
  {
    id: idColumn(),
    parentId: text('parent_id').references((): AnySQLiteColumn => accounts.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    createdAt: createdAtColumn(),
    dailyQuota: integer('daily_quota').notNull(),
    /** UTC day (YYYY-MM-DD) that sentTodayCount belongs to; a count of another day reads as zero. */
    sentTodayDay: text('sent_today_day'),
    sentTodayCount: integer('sent_today_count').notNull().default(0),
    totalSent: integer('total_sent').notNull().default(0),
    totalBounced: integer('total_bounced').notNull().default(0),
    totalComplained: integer('total_complained').notNull().default(0),
    suspendedAt: timestampColumn('suspended_at'),
    suspendedBy: text('suspended_by', { enum: SUSPENDED_BY }),
    suspendedReason: text('suspended_reason'),
    creditsBalance: integer('credits_balance').notNull().default(0),
    creditsTotalPurchased: integer('credits_total_purchased').notNull().default(0),
    creditsTotalUsed: integer('credits_total_used').notNull().default(0),
    freeUntil: timestampColumn('free_until'),
    graceStartedAt: timestampColumn('grace_started_at'),
    graceEmailsUsed: integer('grace_emails_used').notNull().default(0),
  },
  (t) => [index('accounts_parent_idx').on(t.parentId, t.id)],
);

export type AccountRow = typeof accounts.$inferSelect;

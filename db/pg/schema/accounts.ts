import { type AnyPgColumn, index, pgTable, text } from 'drizzle-orm/pg-core';
import { SUSPENDED_BY } from '../../schema/accounts.js';
import { createdAtColumn, idColumn, int64, timestampColumn } from './columns.js';

/** Top-level accounts and their sub-accounts (one level), with quota, reputation and credit counters (db/schema/accounts.ts). */
export const accounts = pgTable(
  'accounts',
  {
    id: idColumn(),
    parentId: text('parent_id').references((): AnyPgColumn => accounts.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    createdAt: createdAtColumn(),
    dailyQuota: int64('daily_quota').notNull(),
    /** UTC day (YYYY-MM-DD) that sentTodayCount belongs to; a count of another day reads as zero. */
    sentTodayDay: text('sent_today_day'),
    sentTodayCount: int64('sent_today_count').notNull().default(0),
    totalSent: int64('total_sent').notNull().default(0),
    totalBounced: int64('total_bounced').notNull().default(0),
    totalComplained: int64('total_complained').notNull().default(0),
    suspendedAt: timestampColumn('suspended_at'),
    suspendedBy: text('suspended_by', { enum: SUSPENDED_BY }),
    suspendedReason: text('suspended_reason'),
    creditsBalance: int64('credits_balance').notNull().default(0),
    creditsTotalPurchased: int64('credits_total_purchased').notNull().default(0),
    creditsTotalUsed: int64('credits_total_used').notNull().default(0),
    freeUntil: timestampColumn('free_until'),
    graceStartedAt: timestampColumn('grace_started_at'),
    graceEmailsUsed: int64('grace_emails_used').notNull().default(0),
  },
  (t) => [index('accounts_parent_idx').on(t.parentId, t.id)],
);

export type AccountRow = typeof accounts.$inferSelect;

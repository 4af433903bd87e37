import { index, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn } from './columns.js';

export const SUPPRESSION_REASONS = ['bounce', 'complaint', 'manual'] as const;
export type SuppressionReason = (typeof SUPPRESSION_REASONS)[number];

/** Addresses an account will not send to; lower-cased. */
export const suppressions = sqliteTable(
  'suppressions',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    address: text('address').notNull(),
    reason: text('reason', { enum: SUPPRESSION_REASONS }).notNull(),
    detail: text('detail').notNull().default(''),
    createdAt: createdAtColumn(),
  },
  (t) => [uniqueIndex('suppressions_account_address_idx').on(t.accountId, t.address), index('suppressions_account_idx').on(t.accountId, t.id)],
);

export type SuppressionRow = typeof suppressions.$inferSelect;

import { index, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { SUPPRESSION_REASONS } from '../../schema/suppressions.js';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn } from './columns.js';

/** Addresses an account will not send to; lower-cased (db/schema/suppressions.ts). */
export const suppressions = pgTable(
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

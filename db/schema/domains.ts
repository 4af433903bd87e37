import { index, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';
import { domainKeys } from './domain-keys.js';

export type RecordKind = 'ownership' | 'spf' | 'receiving' | 'signing';
export type RecordStatus = 'pending' | 'published';
export type CheckValue = 'proven' | 'published' | 'missing' | 'unknown';

/**
 * A domain connected to an account. Only what DNS showed is stored (each record's status and the last checks); the
 * flags of the Domain resource are derived from it (deriveFlags in server/core/domain-checks.ts).
 */
export const domains = sqliteTable(
  'domains',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    keyId: text('key_id')
      .notNull()
      .references(() => domainKeys.id, { onDelete: 'cascade' }),
    recordStatus: text('record_status', { mode: 'json' }).$type<Record<RecordKind, RecordStatus>>().notNull(),
    checks: text('checks', { mode: 'json' }).$type<Record<RecordKind, CheckValue>>(),
    createdAt: createdAtColumn(),
    lastCheckedAt: timestampColumn('last_checked_at').notNull(),
  },
  (t) => [
    uniqueIndex('domains_account_name_idx').on(t.accountId, t.name),
    index('domains_name_idx').on(t.name),
    index('domains_account_idx').on(t.accountId, t.id),
  ],
);

export type DomainRow = typeof domains.$inferSelect;

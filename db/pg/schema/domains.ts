import { index, json, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import type { CheckValue, RecordKind, RecordStatus } from '../../schema/domains.js';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';
import { domainKeys } from './domain-keys.js';

/** A domain connected to an account: each record's status and the last checks (db/schema/domains.ts). */
export const domains = pgTable(
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
    recordStatus: json('record_status').$type<Record<RecordKind, RecordStatus>>().notNull(),
    checks: json('checks').$type<Record<RecordKind, CheckValue>>(),
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

import { index, json, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';

/** API keys, stored only as the SHA-256 of the full key and looked up by that hash (db/schema/api-keys.ts). */
export const apiKeys = pgTable(
  'api_keys',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    prefix: text('prefix').notNull(),
    keyHash: text('key_hash').notNull(),
    /** JSON array of scope names. */
    scopes: json('scopes').$type<string[]>().notNull(),
    createdAt: createdAtColumn(),
    lastUsedAt: timestampColumn('last_used_at'),
    revokedAt: timestampColumn('revoked_at'),
  },
  (t) => [uniqueIndex('api_keys_hash_idx').on(t.keyHash), index('api_keys_account_idx').on(t.accountId, t.id)],
);

export type ApiKeyRow = typeof apiKeys.$inferSelect;

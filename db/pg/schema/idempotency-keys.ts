import { index, json, pgTable, primaryKey, text } from 'drizzle-orm/pg-core';
import { idempotencyKeys as sqliteIdempotencyKeys } from '../../schema/idempotency-keys.js';
import { accounts } from './accounts.js';
import { int64 } from './columns.js';

/** Idempotency-Key claims of POST /emails, per acting account (db/schema/idempotency-keys.ts). */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    key: text('key').notNull(),
    /** SHA-256 of the raw request body. */
    fingerprint: text('fingerprint').notNull(),
    /** Identifies the request holding a running claim, so only it can settle or release the claim. */
    claimToken: text('claim_token').notNull(),
    /** The node (NODE_NAME) whose request holds a running claim (db/schema/idempotency-keys.ts). */
    heldBy: text('held_by'),
    // The SQLite file writes its states inline; they are taken from its column rather than written twice.
    state: text('state', { enum: sqliteIdempotencyKeys.state.enumValues }).notNull(),
    /** The settled answer, replayed byte for byte: `json`, which keeps it as written (jsonb would reorder its keys). */
    response: json('response').$type<unknown>(),
    claimedAt: int64('claimed_at').notNull(),
    completedAt: int64('completed_at'),
  },
  (t) => [primaryKey({ columns: [t.accountId, t.key] }), index('idempotency_keys_completed_idx').on(t.completedAt)],
);

import { index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';

/**
 * Idempotency-Key claims of POST /emails, per acting account; only a settled 200 answer is kept, and only for its 24-hour
 * window: past it the row is forgotten (server/core/idempotency.ts forgetExpiredKeys, by the index on completed_at).
 */
export const idempotencyKeys = sqliteTable(
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
    /**
     * The node (NODE_NAME) whose request holds a running claim: on Postgres, when that node's liveness lock is gone,
     * the other nodes free its claims at once (server/app/liveness.ts). Null on SQLite, where one process holds them all.
     */
    heldBy: text('held_by'),
    state: text('state', { enum: ['running', 'done'] }).notNull(),
    response: text('response', { mode: 'json' }).$type<unknown>(),
    claimedAt: integer('claimed_at').notNull(),
    completedAt: integer('completed_at'),
  },
  (t) => [primaryKey({ columns: [t.accountId, t.key] }), index('idempotency_keys_completed_idx').on(t.completedAt)],
);

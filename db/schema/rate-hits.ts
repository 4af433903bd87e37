import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/**
 * On Postgres, the requests each rate limit counted (server/core/rate-limit.ts): one row per request and scope (`k:`
 * a key, `a:` an account, `signin:` a client address of the dashboard's sign-in), taken by one statement, so every node
 * counts the same window. On SQLite the one process counts in memory and this table stays empty.
 */
export const rateHits = sqliteTable(
  'rate_hits',
  {
    scope: text('scope').notNull(),
    /** When the request was counted (the node's wall clock, ms). */
    at: integer('at').notNull(),
  },
  (t) => [index('rate_hits_scope_idx').on(t.scope, t.at)],
);

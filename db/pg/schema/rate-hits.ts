import { index, pgTable, text } from 'drizzle-orm/pg-core';
import { int64 } from './columns.js';

/** The requests each rate limit counted, on Postgres (db/schema/rate-hits.ts). */
export const rateHits = pgTable(
  'rate_hits',
  {
    scope: text('scope').notNull(),
    at: int64('at').notNull(),
  },
  (t) => [index('rate_hits_scope_idx').on(t.scope, t.at)],
);

import { pgTable, text } from 'drizzle-orm/pg-core';
import { int64 } from './columns.js';

/** How many hits each scope holds in rate_hits (db/schema/rate-counts.ts). */
export const rateCounts = pgTable('rate_counts', {
  scope: text('scope').primaryKey(),
  n: int64('n').notNull(),
});

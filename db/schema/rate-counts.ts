import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/**
 * On Postgres, how many hits each scope holds in `rate_hits` (the ones still in its window, and some past it until
 * they are dropped), kept by the statements that insert and delete them, so a take never counts a window's rows.
 */
export const rateCounts = sqliteTable('rate_counts', {
  scope: text('scope').primaryKey(),
  n: integer('n').notNull(),
});

import { pgTable, text } from 'drizzle-orm/pg-core';
import { int64 } from './columns.js';

/**
 * Counters that triggers raise whenever the rows a cache reads change, whoever writes them (db/schema/change-counters.ts
 * says which counter covers what). The rows and the triggers are made by db/pg/migrations/0001_change_counters.sql.
 */
export const changeCounters = pgTable('change_counters', {
  name: text('name').primaryKey(),
  n: int64('n').notNull().default(0),
});

export type ChangeCounterRow = typeof changeCounters.$inferSelect;

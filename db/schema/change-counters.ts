import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/**
 * Counters that triggers (db/migrations/0014_change_counters.sql) raise whenever the rows a cache reads change,
 * whoever writes them (this process, the CLI, an operator's sqlite3). A cache keeps its answers while its counter
 * stands still; reading one counter costs far less than the queries it saves.
 *
 * `recipients`: what decides whether a customer's domain receives mail and where it goes (a domain's name, account
 * and record status; an account's parent; which accounts have a database), read by the inbound RCPT check.
 *
 * `templates` (db/migrations/0018_templates_change_counter.sql): which own template and layout a send renders (a
 * template's name, kind, account and current version; a version's layout; an account's parent), read by each send
 * that names an own template (server/core/own-templates.ts).
 *
 * `suppressions` (db/migrations/0020_suppressions_change_counter.sql) is gone (0026_drop_suppressions_counter.sql; on
 * Postgres 0010): SMTP submission read it until its commit's reading counted the listed recipients itself, and it had
 * no other reader, while every write of a suppression raised it (on Postgres, one row every node's writes took turns on).
 */
export const changeCounters = sqliteTable('change_counters', {
  name: text('name').primaryKey(),
  n: integer('n').notNull().default(0),
});

export type ChangeCounterRow = typeof changeCounters.$inferSelect;

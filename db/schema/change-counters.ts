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
 * `suppressions` (db/migrations/0020_suppressions_change_counter.sql): any account's suppression list, and accounts'
 * parents. No longer read: SMTP submission read it at MAIL FROM and at its commit until its commit's reading counted
 * the recipients on the lists itself, as an API send's does (server/core/submission.ts). The triggers still raise it;
 * dropping them takes a migration on each engine.
 */
export const changeCounters = sqliteTable('change_counters', {
  name: text('name').primaryKey(),
  n: integer('n').notNull().default(0),
});

export type ChangeCounterRow = typeof changeCounters.$inferSelect;

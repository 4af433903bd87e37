import { sqliteTable, text } from 'drizzle-orm/sqlite-core';

/** Server-wide key/value settings, such as the hash of the dashboard admin token. */
export const settings = sqliteTable('settings', {
  key: text('key').primaryKey(),
  value: text('value').notNull(),
});

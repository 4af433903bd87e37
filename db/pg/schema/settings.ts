import { pgTable, text } from 'drizzle-orm/pg-core';

/** Server-wide key/value settings, such as the hash of the dashboard admin token (db/schema/settings.ts). */
export const settings = pgTable('settings', {
  key: text('key').primaryKey(),
  value: text('value').notNull(),
});

import { integer, text } from 'drizzle-orm/sqlite-core';

/** Shared column helpers: UUIDv7 text ids and millisecond epoch timestamps. */
export const idColumn = () => text('id').primaryKey();
export const createdAtColumn = () => integer('created_at').notNull();
export const timestampColumn = (name: string) => integer(name);

import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { type BetterSQLite3Database, drizzle } from 'drizzle-orm/better-sqlite3';
import { migrate } from 'drizzle-orm/better-sqlite3/migrator';
import * as schema from './schema/index.js';

export type Db = BetterSQLite3Database<typeof schema>;

export interface Store {
  db: Db;
  sqlite: Database.Database;
  close(): void;
}

/** The checked-in migrations, beside this file in the source tree and two levels up from dist/db. */
function migrationsFolder(): string {
  const candidates = [fileURLToPath(new URL('./migrations', import.meta.url)), fileURLToPath(new URL('../../db/migrations', import.meta.url))];
  const found = candidates.find((p) => existsSync(join(p, 'meta', '_journal.json')));
  if (!found) throw new Error(`migrations not found (looked in ${candidates.join(', ')})`);
  return found;
}

/**
 * Opens (creating if needed) DATA_DIR/mailstead.db in WAL mode with synchronous=FULL, because a 200 or a 250
 * is only answered after a commit, and applies pending migrations.
 */
export function openDatabase(dataDir: string): Store {
  mkdirSync(dataDir, { recursive: true });
  const sqlite = new Database(join(dataDir, 'mailstead.db'));
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = FULL');
  sqlite.pragma('foreign_keys = ON');
  sqlite.pragma('busy_timeout = 5000');
  const db = drizzle(sqlite, { schema });
  migrate(db, { migrationsFolder: migrationsFolder() });
  return { db, sqlite, close: () => sqlite.close() };
}

import { join } from 'node:path';
import Database from 'better-sqlite3';
import { sqliteDb } from '../../db/client.js';
import { createGroupCommit, walSyncOf } from '../../db/group-commit.js';

/**
 * The floors' store (inbound-floor, bare-hono with BARE_DURABLE=1): one table of rows in a SQLite database in `dir`,
 * set up as the service's (WAL), each row written through the service's own group commit and resolved once the WAL
 * is fdatasynced. Nothing else: no other row, no index, no check.
 */
export function durableRows(dir: string): (value: Buffer | string) => Promise<void> {
  const path = join(dir, 'floor.db');
  const sqlite = new Database(path);
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = FULL');
  sqlite.exec('create table rows (id integer primary key, value blob not null, created_at integer not null)');
  const insert = sqlite.prepare('insert into rows (value, created_at) values (?, ?)');
  const commits = createGroupCommit({ db: sqliteDb(sqlite), sqlite }, walSyncOf(path));
  return (value) => commits.run(() => void insert.run(value, Date.now()));
}

import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import type { SQL } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { SQLiteAsyncDialect } from 'drizzle-orm/sqlite-core';
import { type SqliteRemoteDatabase, drizzle as drizzleProxy } from 'drizzle-orm/sqlite-proxy';
import { migrate } from 'drizzle-orm/better-sqlite3/migrator';
import { createPrivateDir, createPrivateFile } from './data-dir.js';
import { type WalSync, walSyncOf } from './group-commit.js';
import * as schema from './schema/index.js';
import type { LateKind } from './late-writes.js';
import { type PgStore, pgPointReads, pgTakesLateWrites, pgUnitOf, pgWriteLate } from './pg/state.js';
import { type Method, SqliteConnection } from './sqlite-connection.js';
import { connectionDatabase } from './sqlite-session.js';

type RemoteDb = SqliteRemoteDatabase<typeof schema>;

/**
 * The service's state, as every layer above db/ sees it: drizzle's query builders, every statement awaited. A
 * statement runs in the transaction its async work was started in (`db.transaction`, a job of the group commit), and
 * otherwise on its own; the engine under it (SQLite today) decides how.
 */
export interface Db extends Omit<RemoteDb, 'transaction'> {
  /**
   * Runs `fn` in one transaction, committed when it resolves and rolled back when it throws. `tx` is this same handle:
   * every statement of the async work under `fn` runs in the transaction, whatever handle it is given. Inside another
   * transaction it is a savepoint. Never hold one across an SMTP or HTTP call.
   */
  transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T>;
}

/** The state on SQLite in DATA_DIR (openDatabase). */
export interface SqliteStore {
  readonly engine: 'sqlite';
  db: Db;
  sqlite: Database.Database;
  /** Flushes the write-ahead log to disk off the event loop (the group commit's durability: db/group-commit.ts). */
  syncWal: WalSync;
  close(): void;
}

/** Where the service's state lives: SQLite in DATA_DIR (the default), or Postgres (STATE_URL, db/pg/state.ts). */
export type Store = SqliteStore | PgStore;

/** The checked-in migrations, beside this file in the source tree and two levels up from dist/db. */
function migrationsFolder(): string {
  const candidates = [fileURLToPath(new URL('./migrations', import.meta.url)), fileURLToPath(new URL('../../db/migrations', import.meta.url))];
  const found = candidates.find((p) => existsSync(join(p, 'meta', '_journal.json')));
  if (!found) throw new Error(`migrations not found (looked in ${candidates.join(', ')})`);
  return found;
}

export const DATABASE_FILE = 'mailstead.db';

/** DATA_DIR/mailstead.db, absolute, as messages name it. */
export function databasePath(dataDir: string): string {
  return resolve(dataDir, DATABASE_FILE);
}

/** Whether DATA_DIR holds a database (a non-empty mailstead.db): the server creates it on its first start. */
export function hasDatabase(dataDir: string): boolean {
  try {
    const st = statSync(databasePath(dataDir));
    return st.isFile() && st.size > 0;
  } catch {
    return false;
  }
}

/** DATA_DIR holds no database, and the caller (the CLI) must not create one. */
export class DatabaseMissingError extends Error {
  override name = 'DatabaseMissingError';
  constructor(readonly path: string) {
    super(`no database at ${path}: the server creates it on its first start (npm start); point DATA_DIR at the server's data directory`);
  }
}

/** DATA_DIR's database was migrated by a newer Mailstead: this build does not know its tables, and must not write them. */
export class DatabaseTooNewError extends Error {
  override name = 'DatabaseTooNewError';
  constructor(
    readonly path: string,
    newest: Date,
    known: Date,
  ) {
    super(
      `${path} was migrated by a newer Mailstead (its newest migration is from ${newest.toISOString()}, this version knows migrations up to ${known.toISOString()}): ` +
        'start that version or a newer one; a downgrade is not supported (restore the copy of DATA_DIR taken before the upgrade)',
    );
  }
}

/**
 * Refuses a database whose newest applied migration this build does not have. drizzle's migrator only applies the
 * journal's migrations newer than the database's newest, so an older build would otherwise start and write rows
 * without the columns the newer one added (a row it cannot see again once upgraded).
 */
function refuseNewerDatabase(sqlite: Database.Database, path: string, folder: string): void {
  const table = sqlite.prepare("select 1 from sqlite_master where type = 'table' and name = '__drizzle_migrations'").get();
  if (!table) return;
  const row = sqlite.prepare('select max(created_at) as newest from __drizzle_migrations').get() as { newest: number | null };
  if (row.newest === null) return;
  const journal = JSON.parse(readFileSync(join(folder, 'meta', '_journal.json'), 'utf8')) as { entries: { when: number }[] };
  const known = Math.max(...journal.entries.map((e) => e.when));
  if (Number(row.newest) > known) throw new DatabaseTooNewError(path, new Date(Number(row.newest)), new Date(known));
}

/**
 * Opens DATA_DIR/mailstead.db in WAL mode with synchronous=FULL, because a 200 or a 250 is only answered after a
 * commit, and applies pending migrations. A missing directory is created 0700 and a missing database file 0600 (its
 * -wal and -shm follow its mode), unless `mustExist`, which refuses with DatabaseMissingError instead.
 */
export function openDatabase(dataDir: string, opts: { mustExist?: boolean } = {}): SqliteStore {
  const path = databasePath(dataDir);
  if (opts.mustExist && !hasDatabase(dataDir)) throw new DatabaseMissingError(path);
  createPrivateDir(dataDir);
  createPrivateFile(path);
  const sqlite = new Database(path);
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = FULL');
  sqlite.pragma('foreign_keys = ON');
  sqlite.pragma('busy_timeout = 5000');
  const folder = migrationsFolder();
  try {
    refuseNewerDatabase(sqlite, path, folder);
  } catch (err) {
    sqlite.close();
    throw err;
  }
  migrate(drizzle(sqlite), { migrationsFolder: folder });
  const db = sqliteDb(sqlite);
  const syncWal = walSyncOf(path);
  return {
    engine: 'sqlite',
    db,
    sqlite,
    syncWal,
    close: () => {
      sqlite.close();
      void syncWal.close();
    },
  };
}

/**
 * Runs `fn` (its own writes, or one transaction) with synchronous=NORMAL: its commit reaches the write-ahead log
 * without an fsync on the event loop. Only for writes that may be lost in a power failure without harm, because the
 * state they leave behind is recomputed: the delivery queue's leases (a lost lease is claimed again; a lost release
 * runs out) and the idempotency claims (a lost claim went with its request, which the client retries; a lost
 * release lapses). A later synced commit (every acknowledged write: the group commit, synchronous=FULL) makes them
 * durable with it, since an fsync of the log covers every frame written before it. The connection is back at FULL
 * afterwards. Never inside an open transaction.
 */
export async function unsynced<T>(db: Db, fn: () => Promise<T>): Promise<T> {
  // Postgres has no such level for a session's writes that this service uses: they commit as any other.
  if (pgUnitOf(db) !== undefined) return fn();
  const conn = connectionOf(db);
  // Part of a unit already holding the connection (a transaction, a batch): its durability is the unit's.
  if (conn.holds()) return fn();
  return conn.hold(async () => {
    // PRAGMA synchronous takes effect when a statement is compiled, not when a prepared one runs again: exec it.
    conn.sqlite.exec('PRAGMA synchronous = NORMAL');
    try {
      return await fn();
    } finally {
      conn.sqlite.exec('PRAGMA synchronous = FULL');
    }
  });
}

const connections = new WeakMap<object, SqliteConnection>();

/** The proxy driver's callback, which the connection's session (db/sqlite-session.ts) never calls. */
function notCalled(): Promise<never> {
  return Promise.reject(new Error('the SQLite session runs statements on its connection'));
}

/**
 * The async `Db` over one better-sqlite3 connection: drizzle's proxy driver, every statement run by the connection
 * (db/sqlite-connection.ts), so the statements of a transaction or a batch of the group commit are bound to it.
 */
export function sqliteDb(sqlite: Database.Database): Db {
  const conn = new SqliteConnection(sqlite);
  const remote = connectionDatabase(conn, drizzleProxy(notCalled, { schema }));
  const db = remote as unknown as Db;
  db.transaction = (fn) => conn.transaction(() => fn(db));
  connections.set(db, conn);
  return db;
}

/** The connection under a Db made by sqliteDb. */
export function connectionOf(db: Db): SqliteConnection {
  const conn = connections.get(db);
  if (!conn) throw new Error('not a SQLite Db made by sqliteDb');
  return conn;
}

/**
 * The unit of work (a transaction, a batch of the group commit) the caller's async work runs in on `db`, whatever its
 * engine; null outside one.
 */
export function unitOf(db: Db): { afterCommit: (() => void)[] } | null {
  const pgUnit = pgUnitOf(db);
  return pgUnit !== undefined ? pgUnit : connectionOf(db).current();
}

/**
 * Whether the caller's transaction takes late writes (db/late-writes.ts: a batch of the group commit on Postgres): its
 * rows written late are then read unlocked. False on SQLite, where a transaction holds the whole database.
 */
export function takesLateWrites(db: Db): boolean {
  return pgTakesLateWrites(db);
}

/** Asks for `entry` to be written late under `key` (db/late-writes.ts): false when the caller must write it now. */
export function writeLate(db: Db, kind: LateKind, key: string, entry: unknown): boolean {
  return pgWriteLate(db, { kind, key, entry }) === true;
}

/**
 * Runs `fn`, single-row reads by key only (a stamp, a lease still held), on Postgres on the connection such reads
 * share (db/pg/state.ts pgPointReads: the reads of concurrent requests leave in one write); on SQLite as it is.
 */
export function pointReads<T>(db: Db, fn: () => Promise<T>): Promise<T> {
  return pgPointReads(db, fn);
}

/**
 * Runs `fn`, reads only, as one unit: on SQLite one read transaction holding the connection (its statements share
 * one WAL read lock instead of each taking and dropping it, and see one snapshot); on Postgres the statements run on
 * the point reads' shared connection as they come (pointReads), each seeing what is committed when it runs.
 */
export async function readUnit<T>(db: Db, fn: () => Promise<T>): Promise<T> {
  if (pgUnitOf(db) !== undefined) return pgPointReads(db, fn);
  const conn = connectionOf(db);
  if (conn.holds()) return fn();
  return conn.hold(async () => {
    conn.control('BEGIN');
    try {
      return await fn();
    } finally {
      if (conn.sqlite.inTransaction) conn.control('COMMIT');
    }
  });
}

/** Runs plain SQL on `db`'s connection (as a statement of the caller's unit, if any): db/sql.ts. */
export function runSql(db: Db, query: SQL, method: Method): Promise<unknown> {
  const { sql, params } = dialect.sqlToQuery(query);
  return connectionOf(db).run(sql, params, method);
}

const dialect = new SQLiteAsyncDialect();

/** Runs SQL text already compiled for SQLite (db/sql.ts plainStatement). */
export function runPlainSql(db: Db, sql: string, params: unknown[], method: Method): Promise<unknown> {
  return connectionOf(db).run(sql, params, method);
}

/** The better-sqlite3 connection under a Db: drizzle() keeps it as $client (its Db type does not name it). */
export function clientOf(db: Db): Database.Database {
  return connectionOf(db).sqlite;
}

import { createHash, randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import Database from 'better-sqlite3';
import { type SQL, sql } from 'drizzle-orm';
import pg from 'pg';
import { type Store, databasePath, openDatabase } from '../../db/client.js';
import { openPostgres } from '../../db/pg/state.js';
import { pgTargetOf } from '../../server/app/state.js';
import { parseStateUrl } from '../../server/shared/state-url.js';
import { TEMPLATE_DATABASE } from './postgres-state-setup.js';
import { PG_TEST_CA_FILE } from './postgres.js';

/**
 * Where a service a test starts keeps its state: SQLite in its DATA_DIR (`npm test`), or, under `npm run
 * test:postgres`, a fresh database of its own on the run's Postgres (tests/helpers/postgres-state-setup.ts), reached
 * over TLS verified against the test CA. The same tests run either way.
 */

interface RunPostgres {
  port: number;
  user: string;
  password: string;
  /** The run's STARTTLS pair (postgres-state-setup.ts). */
  smtpTlsCert: string;
  smtpTlsKey: string;
}

function runPostgres(): RunPostgres | null {
  const value = process.env.MAILSTEAD_TEST_POSTGRES;
  return value ? (JSON.parse(value) as RunPostgres) : null;
}

/** Whether this run keeps the state on Postgres. */
export function stateOnPostgres(): boolean {
  return runPostgres() !== null;
}

/** A 32-byte key for the services of a Postgres run that set none (STATE_URL requires one). */
const TEST_SECRET_KEY = 'c0ffee'.repeat(11).slice(0, 64);

/**
 * The environment that puts a service's state where this run keeps it: nothing for SQLite; for Postgres a new database
 * made from the migrated template, its STATE_URL, a SECRET_KEY and the run's STARTTLS pair unless `env` gives them
 * (STATE_URL requires both: neither is generated into DATA_DIR then).
 */
export async function stateEnv(env: Record<string, string> = {}): Promise<Record<string, string>> {
  const server = runPostgres();
  if (!server) return {};
  const database = `state_${randomBytes(8).toString('hex')}`;
  await createStateDatabase(server, database);
  return envFor(server, database, env);
}

function envFor(server: RunPostgres, database: string, env: Record<string, string>): Record<string, string> {
  return {
    STATE_URL: `postgresql://${server.user}:${server.password}@localhost:${server.port}/${database}?sslmode=verify-full&sslrootcert=${encodeURIComponent(PG_TEST_CA_FILE)}`,
    ...(env.SECRET_KEY === undefined ? { SECRET_KEY: TEST_SECRET_KEY } : {}),
    ...(env.SMTP_TLS_CERT === undefined && env.SMTP_TLS_KEY === undefined ? { SMTP_TLS_CERT: server.smtpTlsCert, SMTP_TLS_KEY: server.smtpTlsKey } : {}),
  };
}

/** Makes `database` from the migrated template; true if made, false if it was there already. */
async function createStateDatabase(server: RunPostgres, database: string): Promise<boolean> {
  const admin = new pg.Client({ host: '127.0.0.1', port: server.port, user: server.user, password: server.password, database: 'postgres', ssl: false });
  await admin.connect();
  try {
    await admin.query(`create database ${database} template ${TEMPLATE_DATABASE}`);
    return true;
  } catch (err) {
    // 42P04 duplicate_database: a restart on the same DATA_DIR, or its CLI, after the first start made it.
    if ((err as { code?: string }).code === '42P04') return false;
    throw err;
  } finally {
    await admin.end();
  }
}

/** The state database of a DATA_DIR on a Postgres run: named after the directory, so every process on it shares one. */
function databaseOfDataDir(dataDir: string): string {
  return `state_dir_${createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 20)}`;
}

/**
 * As stateEnv, for the processes of one DATA_DIR (a server, its restarts, the CLI beside it), without waiting: the
 * STATE_URL of the database named after `dataDir`, made from the template by ensureState before a process starts on
 * it. Nothing on a SQLite run.
 */
export function stateEnvOfDataDir(dataDir: string, env: Record<string, string> = {}): Record<string, string> {
  const server = runPostgres();
  if (!server) return {};
  return envFor(server, databaseOfDataDir(dataDir), env);
}

/**
 * Makes the state database `env`'s STATE_URL names (one of stateEnvOfDataDir) unless it exists already: call it before
 * a process starts on `env`. Nothing for an environment without STATE_URL, or one naming another server.
 */
export async function ensureState(env: Record<string, string | undefined>): Promise<void> {
  const server = runPostgres();
  if (!server || !env.STATE_URL) return;
  const url = new URL(env.STATE_URL);
  if (Number(url.port) !== server.port) return;
  const database = url.pathname.slice(1);
  if (!database.startsWith('state_dir_')) return;
  await createStateDatabase(server, database);
}

/** A client on the state database `env` names (a Postgres run), or null on a SQLite run: for tests that edit the state directly. */
export async function stateClientOf(env: Record<string, string | undefined>): Promise<pg.Client | null> {
  const server = runPostgres();
  if (!server || !env.STATE_URL) return null;
  const database = new URL(env.STATE_URL).pathname.slice(1);
  const client = new pg.Client({ host: '127.0.0.1', port: server.port, user: server.user, password: server.password, database, ssl: false });
  await client.connect();
  return client;
}

/**
 * The product's store opened in-process on the run's engine, for tests of db/ and the queues without a service:
 * DATA_DIR's SQLite file (`npm test`), or a fresh state database of its own on a Postgres run.
 */
export async function openTestStore(dataDir: string): Promise<Store> {
  const env = await stateEnv();
  if (!env.STATE_URL) return openDatabase(dataDir);
  return openPostgres(pgTargetOf(parseStateUrl(env.STATE_URL)), { poolSize: 4 });
}

/** Plain SQL with `?` for each parameter (as both engines' tests write it), as a drizzle `sql` for db/sql.ts's runners. */
export function plainSql(statement: string, params: readonly unknown[] = []): SQL {
  const parts = statement.split('?');
  if (parts.length !== params.length + 1) throw new Error(`${params.length} parameters for ${parts.length - 1} placeholders: ${statement}`);
  return sql.join(parts.flatMap((part, i) => (i < params.length ? [sql.raw(part), sql.param(params[i])] : [sql.raw(part)])));
}

/** A connection of its own on a store's state, beside the product's handle: what the CLI or an operator's sqlite3/psql is. */
export interface OtherConnection {
  /** Runs plain SQL, `?` for each parameter; its rows (none for a write), a bigint as a number. */
  query<T = unknown>(statement: string, params?: readonly unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

/**
 * Another connection to the state `store` (openTestStore on `dataDir`) keeps: a second better-sqlite3 connection to
 * DATA_DIR's file (foreign keys on, busy_timeout set), or a client of its own on the same Postgres database.
 */
export async function otherConnectionTo(store: Store, dataDir: string): Promise<OtherConnection> {
  if (store.engine === 'postgres') {
    const { host, port, database, user, password, ssl } = store.pool.options;
    const client = new pg.Client({ host, port, database, user, password, ssl });
    await client.connect();
    const types = { getTypeParser: (oid: number, format?: string) => (oid === 20 ? Number : pg.types.getTypeParser(oid, format as 'text')) };
    return {
      query: async <T>(statement: string, params: readonly unknown[] = []) => {
        let n = 0;
        return (await client.query({ text: statement.replace(/\?/g, () => `$${++n}`), values: [...params], types })).rows as T[];
      },
      close: () => client.end(),
    };
  }
  const other = new Database(databasePath(dataDir));
  other.pragma('foreign_keys = ON');
  other.pragma('busy_timeout = 5000');
  return {
    query: async <T>(statement: string, params: readonly unknown[] = []) => {
      const prepared = other.prepare(statement);
      if (prepared.reader) return prepared.all(...params) as T[];
      prepared.run(...params);
      return [];
    },
    close: async () => {
      other.close();
    },
  };
}

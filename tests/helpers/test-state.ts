import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { TEMPLATE_DATABASE } from './postgres-state-setup.js';

/**
 * Where a service a test starts keeps its state: SQLite in its DATA_DIR (`npm test`), or, under `npm run
 * test:postgres`, a fresh database of its own on the run's Postgres (tests/helpers/postgres-state-setup.ts), reached
 * over TLS verified against the test CA. The same tests run either way.
 */

interface RunPostgres {
  port: number;
  user: string;
  password: string;
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
const TEST_SECRET_KEY = 'c0ffee'.repeat(10).slice(0, 64);

/**
 * The environment that puts a service's state where this run keeps it: nothing for SQLite; for Postgres a new database
 * made from the migrated template, its STATE_URL, and a SECRET_KEY unless `env` gives one.
 */
export async function stateEnv(env: Record<string, string> = {}): Promise<Record<string, string>> {
  const server = runPostgres();
  if (!server) return {};
  const database = `state_${randomBytes(8).toString('hex')}`;
  const admin = new pg.Client({ host: '127.0.0.1', port: server.port, user: server.user, password: server.password, database: 'postgres', ssl: false });
  await admin.connect();
  try {
    await admin.query(`create database ${database} template ${TEMPLATE_DATABASE}`);
  } finally {
    await admin.end();
  }
  return {
    STATE_URL: `postgresql://${server.user}:${server.password}@localhost:${server.port}/${database}?sslmode=verify-full`,
    ...(env.SECRET_KEY === undefined ? { SECRET_KEY: TEST_SECRET_KEY } : {}),
  };
}

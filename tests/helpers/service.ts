import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Liveness, startLiveness } from '../../server/app/liveness.js';
import { API_BASE, createApp } from '../../server/app/http-app.js';
import { loadConfig } from '../../server/shared/config.js';
import { createTopLevelAccount } from '../../server/core/accounts.js';
import { insertKey } from '../../server/core/keys.js';
import { SCOPES, type Scope } from '../../server/core/scopes.js';
import type { Deps } from '../../server/core/deps.js';
import { createDeps } from '../../server/app/deps.js';
import type { SqliteStore, Store } from '../../db/client.js';
import { openStore } from '../../server/app/state.js';
import type { Scans } from '../../db/scans.js';
import { type HttpServerOptions, listenHttp } from '../../server/app/http-serve.js';
import { createMemoryLogger } from '../../server/shared/logger.js';
import type { AccountRow } from '../../db/schema/index.js';
import { FakeClock } from './clock.js';
import { stateClientOf, stateEnv } from './test-state.js';
import Database from 'better-sqlite3';
import pg from 'pg';

export interface ApiResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
  /** What was asked, path relative to /api/v1 (so a response can be checked against the API document). */
  request: { method: string; path: string };
}

export interface RequestOptions {
  key?: string | null;
  body?: unknown;
  /** Sent as is, instead of JSON-encoding `body`. */
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
  account?: string;
}

export interface TestService {
  url: string;
  base: string;
  deps: Deps;
  clock: FakeClock;
  logger: ReturnType<typeof createMemoryLogger>;
  dataDir: string;
  /** The state's database on a Postgres run (its STATE_URL), else null: the state is DATA_DIR's SQLite file. */
  stateUrl: string | null;
  /** Calls the API over real HTTP; paths are relative to /api/v1. */
  api<T = any>(method: string, path: string, opts?: RequestOptions): Promise<ApiResponse<T>>;
  /** A new top-level account (as the operator CLI makes it) and a key holding `scopes` (default all). */
  newAccount(opts?: { name?: string; credits?: number; scopes?: readonly Scope[] }): Promise<{ account: AccountRow; key: string }>;
  /** A further key on an existing account, as the operator would mint it. */
  newKey(accountId: string, scopes?: readonly Scope[], name?: string): Promise<string>;
  /** Its liveness, when started as one of several nodes (startService's `liveness`). */
  liveness: Liveness | null;
  close(): Promise<void>;
}

/**
 * The real service (deps, Hono app, node HTTP server) on 127.0.0.1 port 0 with a temporary DATA_DIR and a fake clock.
 * Rate limits and the per-address connection cap are raised unless a test sets them, so suites can make many calls
 * at once from 127.0.0.1 (fetch opens new connections while the server still counts the closing ones). `http` sets
 * the server's connection caps and timeouts (the production defaults otherwise).
 */
export async function startService(
  env: Record<string, string> = {},
  opts: {
    http?: Omit<HttpServerOptions, 'logger'>;
    scans?: (store: Store, logger: ReturnType<typeof createMemoryLogger>) => Scans;
    /** On Postgres: one of several nodes, its liveness lock held under NODE_NAME (server/app/liveness.ts), as serve.ts runs it. */
    liveness?: boolean;
  } = {},
): Promise<TestService> {
  const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-test-'));
  const state = env.STATE_URL === undefined ? await stateEnv(env) : {};
  const config = loadConfig({
    DATA_DIR: dataDir,
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: '0',
    SMTP_PORT: '0',
    SUBMISSION_PORT: '0',
    SUBMISSIONS_PORT: '0',
    MAIL_HOSTNAME: 'mx.mailstead.test',
    RATE_LIMIT_PER_KEY: '100000',
    RATE_LIMIT_PER_ACCOUNT: '100000',
    LOG_LEVEL: 'debug',
    // npm run test:postgres: a fresh state database of its own (nothing on SQLite, or when the test names one).
    ...state,
    ...env,
  });
  const clock = new FakeClock();
  const logger = createMemoryLogger();
  // `scans` puts the reads that walk many rows where a test says, as main puts them on the checkpoint thread (on the
  // run's engine: the store is opened as the server opens it).
  const store = opts.scans || opts.liveness ? await openStore(config) : undefined;
  const liveness =
    opts.liveness && store?.engine === 'postgres' ? await startLiveness({ target: store.target, db: store.db, node: config.nodeName, logger }) : null;
  const deps = await createDeps(config, clock, logger, {
    ...(store ? { store } : {}),
    ...(store && opts.scans ? { scans: opts.scans(store, logger) } : {}),
    ...(liveness ? { nodes: liveness.nodes } : {}),
  });
  const http = await listenHttp(createApp(deps), '127.0.0.1', 0, { maxConnectionsPerAddress: 1024, trustedProxies: config.trustProxy, ...opts.http, logger });
  const url = `http://127.0.0.1:${http.port}`;
  const base = `${url}${API_BASE}`;

  const newKey = async (accountId: string, scopes: readonly Scope[] = SCOPES, name = 'test') => (await insertKey(deps, { accountId, name, scopes })).key;

  return {
    url,
    base,
    deps,
    clock,
    logger,
    dataDir,
    stateUrl: env.STATE_URL ?? state.STATE_URL ?? null,
    async api(method, path, opts = {}) {
      const headers: Record<string, string> = { ...opts.headers };
      if (opts.key) headers.authorization = `Bearer ${opts.key}`;
      if (opts.account !== undefined) headers['x-service-account'] = opts.account;
      let body: string | Buffer | undefined;
      if (opts.rawBody !== undefined) body = opts.rawBody;
      else if (opts.body !== undefined) {
        body = JSON.stringify(opts.body);
        headers['content-type'] = 'application/json';
      }
      const res = await fetch(`${base}${path}`, { method, headers, body });
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = text === '' ? null : JSON.parse(text);
      } catch {
        // not JSON: the test sees the raw text
      }
      return { status: res.status, headers: res.headers, body: parsed as any, request: { method, path } };
    },
    async newAccount(opts = {}) {
      const account = await createTopLevelAccount(deps, { name: opts.name ?? 'Acme', credits: opts.credits });
      return { account, key: await newKey(account.id, opts.scopes ?? SCOPES, 'operator') };
    },
    newKey,
    liveness,
    async close() {
      await http.close();
      await liveness?.stop();
      await deps.store.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** The SQLite store under `deps`, for a test of SQLite's own machinery (its pragmas, triggers, WAL, group commit). */
export function sqliteStoreOf(deps: Pick<Deps, 'store'>): SqliteStore {
  if (deps.store.engine !== 'sqlite') throw new Error('this test is about SQLite itself: it runs on the SQLite state only');
  return deps.store;
}

/**
 * Runs `query` (SQL both engines read alike, `?` for each parameter) on a connection of its own to the service's state,
 * as the operator's CLI, sqlite3 or psql would: a change the service's own connection did not make. The rows it
 * returns, if any (a count as a number on both engines).
 */
export async function onOtherConnection<T = unknown>(service: Pick<TestService, 'dataDir' | 'stateUrl'>, query: string, params: unknown[] = []): Promise<T[]> {
  const client = service.stateUrl ? await stateClientOf({ STATE_URL: service.stateUrl }) : null;
  if (client) {
    let n = 0;
    try {
      const types = { getTypeParser: (oid: number, format?: string) => (oid === 20 ? Number : pg.types.getTypeParser(oid, format as 'text')) };
      return (await client.query({ text: query.replace(/\?/g, () => `$${++n}`), values: params, types })).rows as T[];
    } finally {
      await client.end();
    }
  }
  const db = new Database(join(service.dataDir, 'mailstead.db'));
  try {
    db.pragma('busy_timeout = 5000');
    db.pragma('foreign_keys = ON');
    const statement = db.prepare(query);
    if (statement.reader) return statement.all(...params) as T[];
    statement.run(...params);
    return [];
  } finally {
    db.close();
  }
}

/**
 * Makes every insert into `table` fail from now on, as a constraint would refuse it (a trigger made on a connection of
 * its own, on either engine); the function returned undoes it.
 */
export async function refuseInsertsInto(service: Pick<TestService, 'dataDir' | 'stateUrl'>, table: string): Promise<() => Promise<void>> {
  const name = `refuse_${table}`;
  if (service.stateUrl) {
    await onOtherConnection(service, `create function ${name}() returns trigger language plpgsql as $$ begin raise exception 'refused'; end $$`);
    await onOtherConnection(service, `create trigger ${name} before insert on ${table} for each row execute function ${name}()`);
    return async () => {
      await onOtherConnection(service, `drop trigger ${name} on ${table}`);
      await onOtherConnection(service, `drop function ${name}()`);
    };
  }
  await onOtherConnection(service, `create trigger ${name} before insert on ${table} begin select raise(abort, 'refused'); end`);
  return async () => {
    await onOtherConnection(service, `drop trigger ${name}`);
  };
}

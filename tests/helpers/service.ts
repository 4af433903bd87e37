import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { API_BASE, createApp } from '../../server/app/http-app.js';
import { loadConfig } from '../../server/shared/config.js';
import { createTopLevelAccount } from '../../server/core/accounts.js';
import { insertKey } from '../../server/core/keys.js';
import { SCOPES, type Scope } from '../../server/core/scopes.js';
import type { Deps } from '../../server/core/deps.js';
import { createDeps } from '../../server/app/deps.js';
import { openDatabase, type SqliteStore, type Store } from '../../db/client.js';
import type { Scans } from '../../db/scans.js';
import { type HttpServerOptions, listenHttp } from '../../server/app/http-serve.js';
import { createMemoryLogger } from '../../server/shared/logger.js';
import type { AccountRow } from '../../db/schema/index.js';
import { FakeClock } from './clock.js';
import { stateEnv } from './test-state.js';

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
  /** Calls the API over real HTTP; paths are relative to /api/v1. */
  api<T = any>(method: string, path: string, opts?: RequestOptions): Promise<ApiResponse<T>>;
  /** A new top-level account (as the operator CLI makes it) and a key holding `scopes` (default all). */
  newAccount(opts?: { name?: string; credits?: number; scopes?: readonly Scope[] }): Promise<{ account: AccountRow; key: string }>;
  /** A further key on an existing account, as the operator would mint it. */
  newKey(accountId: string, scopes?: readonly Scope[], name?: string): Promise<string>;
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
  opts: { http?: Omit<HttpServerOptions, 'logger'>; scans?: (store: SqliteStore, logger: ReturnType<typeof createMemoryLogger>) => Scans } = {},
): Promise<TestService> {
  const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-test-'));
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
    ...(env.STATE_URL === undefined ? await stateEnv(env) : {}),
    ...env,
  });
  const clock = new FakeClock();
  const logger = createMemoryLogger();
  // `scans` puts the reads that walk many rows where a test says, as main puts them on the checkpoint thread.
  const store = opts.scans ? openDatabase(config.dataDir) : undefined;
  const deps = await createDeps(config, clock, logger, store && opts.scans ? { store, scans: opts.scans(store, logger) } : {});
  const http = await listenHttp(createApp(deps), '127.0.0.1', 0, { maxConnectionsPerAddress: 1024, ...opts.http, logger });
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
    async close() {
      await http.close();
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

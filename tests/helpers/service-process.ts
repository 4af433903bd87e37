import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import pg from 'pg';
import { expect } from 'vitest';
import { ensureState, stateClientOf, stateEnvOfDataDir } from './test-state.js';

/**
 * The real service as an operator runs it: `node dist/server/app/main.js` (built by the global setup) in a child process
 * on a data directory, and the CLI beside it. For the tests that kill it (-9), stop it, or restart it.
 */

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Every record published: what a verified, sending domain stores after a check. */
export const SENDING_RECORDS = JSON.stringify({ ownership: 'published', spf: 'published', receiving: 'published', signing: 'published' });

export interface ServiceProcess {
  child: ChildProcessWithoutNullStreams;
  port: number;
  /** The API base, `http://127.0.0.1:<port>/api/v1`. */
  base: string;
  /** Its stdout, a JSON log entry a line. */
  logs: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Children still running, so a suite's afterAll can kill what a failed test left behind. */
export const runningProcesses = new Set<ChildProcessWithoutNullStreams>();

/**
 * The environment of a test process: loopback only, fast limits lifted, and the test CAs trusted (Node reads
 * NODE_EXTRA_CA_CERTS only at start: the bundle the global setup wrote, unless a test names another file). On a
 * Postgres run (`npm run test:postgres`) the state of `dataDir` is the database named after it (test-state.ts), the
 * same for every process given this environment: startServiceProcess and the CLI helpers make it on first use.
 */
export function processEnv(dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? tmpdir(),
    DATA_DIR: dataDir,
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: '0',
    SMTP_PORT: '0',
    SUBMISSION_PORT: '0',
    SUBMISSIONS_PORT: '0',
    MAIL_HOSTNAME: 'mx.mailstead.test',
    ALLOW_PRIVATE_TARGETS: 'true',
    RATE_LIMIT_PER_KEY: '100000',
    RATE_LIMIT_PER_ACCOUNT: '100000',
    LOG_LEVEL: 'info',
    // A stop closes at once, as one node's does; a test of the drain (tests/drain.test.ts) sets its own.
    DRAIN_SECONDS: '0',
    ...(process.env.NODE_EXTRA_CA_CERTS ? { NODE_EXTRA_CA_CERTS: process.env.NODE_EXTRA_CA_CERTS } : {}),
    ...stateEnvOfDataDir(dataDir, extra),
    ...extra,
  };
}

/**
 * The process exactly as `npm start` (and the image's CMD) runs it: the node flags of package.json's start script
 * (`--max-semi-space-size=4`: on Node 24 the default young generation is larger, and a test of peak memory measures
 * the process as production runs it), then its entry point.
 */
export const START_ARGS: string[] = (() => {
  const script = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start.split(/\s+/);
  if (script[0] !== 'node' || script.at(-1) !== 'dist/server/app/main.js')
    throw new Error(`npm start is not "node [flags] dist/server/app/main.js": ${script.join(' ')}`);
  return script.slice(1);
})();

/** Starts the service as `npm start` runs it (START_ARGS) with `env` and resolves once it logs http.listening. */
export async function startServiceProcess(
  env: Record<string, string>,
  opts: { deadlineMs?: number; onListening?: (child: ChildProcessWithoutNullStreams) => void } = {},
): Promise<ServiceProcess> {
  await ensureState(env);
  const deadlineMs = opts.deadlineMs ?? 20_000;
  const child = spawn(process.execPath, START_ARGS, { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
  runningProcesses.add(child);
  const logs: string[] = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => {
      runningProcesses.delete(child);
      resolve({ code, signal });
    }),
  );
  return new Promise((resolve, reject) => {
    let buffered = '';
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no http.listening within ${deadlineMs} ms; stderr: ${stderr}`));
    }, deadlineMs);
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.stdout.on('data', (c: Buffer) => {
      buffered += c.toString();
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        logs.push(line);
        let entry: { event?: string; port?: number };
        try {
          entry = JSON.parse(line);
        } catch {
          continue;
        }
        if (entry.event === 'http.listening' && typeof entry.port === 'number') {
          clearTimeout(timer);
          opts.onListening?.(child);
          resolve({ child, port: entry.port, base: `http://127.0.0.1:${entry.port}/api/v1`, logs, exited });
        }
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`the process exited before listening (code ${code}, signal ${signal}); stderr: ${stderr}`));
    });
  });
}

/** `node dist/server/app/cli.js accounts create` on the process's data directory: the operator's account id and key. */
export async function createAccountWithCli(env: Record<string, string>, name: string): Promise<{ accountId: string; key: string }> {
  await ensureState(env);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['dist/server/app/cli.js', 'accounts', 'create', '--name', name, '--credits', '100000'], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`cli exited ${code}: ${stderr}`));
      const out = JSON.parse(stdout) as { account: { id: string }; key: string };
      resolve({ accountId: out.account.id, key: out.key });
    });
  });
}

export async function processApi(
  proc: Pick<ServiceProcess, 'base'>,
  key: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: any }> {
  const res = await fetch(`${proc.base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** A domain connected through the API and marked as DNS would show it once every record is published. */
export async function connectSendingDomain(proc: ServiceProcess, dataDir: string, key: string, name: string): Promise<void> {
  const res = await processApi(proc, key, 'POST', '/domains', { name });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  const client = await stateClientOf(stateEnvOfDataDir(dataDir));
  if (client) {
    try {
      await client.query('UPDATE domains SET record_status = $1 WHERE id = $2', [SENDING_RECORDS, res.body.id]);
    } finally {
      await client.end();
    }
    return;
  }
  const db = new Database(join(dataDir, 'mailstead.db'));
  try {
    db.pragma('busy_timeout = 5000');
    db.prepare('UPDATE domains SET record_status = ? WHERE id = ?').run(SENDING_RECORDS, res.body.id);
  } finally {
    db.close();
  }
}

/**
 * Rows of `query` on the state of the processes of `dataDir`, read directly while or after they run: DATA_DIR's
 * SQLite file, or, on a Postgres run, the database named after `dataDir`. SQL both engines read alike, `?` for each
 * parameter; a count comes back as a number on both.
 */
export async function stateRows<T>(dataDir: string, query: string, params: unknown[] = []): Promise<T[]> {
  const client = await stateClientOf(stateEnvOfDataDir(dataDir));
  if (client) {
    let n = 0;
    try {
      const types = { getTypeParser: (oid: number, format?: string) => (oid === 20 ? Number : pg.types.getTypeParser(oid, format as 'text')) };
      return (await client.query({ text: query.replace(/\?/g, () => `$${++n}`), values: params, types })).rows as T[];
    } finally {
      await client.end();
    }
  }
  const db = new Database(join(dataDir, 'mailstead.db'), { readonly: true });
  try {
    db.pragma('busy_timeout = 5000');
    return db.prepare(query).all(...params) as T[];
  } finally {
    db.close();
  }
}

import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postSignIn } from './helpers/dashboard.js';
import { onOtherConnection } from './helpers/service.js';
import { stateRows } from './helpers/service-process.js';
import { ensureState, stateEnvOfDataDir } from './helpers/test-state.js';

/**
 * The operator contract of docs/api/decisions.md section 1, end to end: the CLI and the server as separate real processes on
 * one temporary DATA_DIR, the CLI's JSON on stdout and errors on stderr, the server's JSON log lines, and the API
 * answering with what the CLI wrote. On the run's engine: the state in DATA_DIR, or on a Postgres run in the state
 * database named after DATA_DIR (every process here is given its STATE_URL), read and edited beside the CLI with
 * stateRows and onOtherConnection. (The CLI refusing a DATA_DIR without a database file: cli.sqlite.test.ts.)
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const KEY = /^ms_[A-Za-z0-9]{32,}$/;

interface AccountBody {
  id: string;
  name: string;
  parentId: string | null;
  createdAt: string;
  sending: { tier: string; totalSent: number; sentToday: number; dailyQuota: number; effectiveQuota: number; suspended: boolean; suspendedReason?: string };
  credits: { balance: number; state: string; totalPurchased: number; totalUsed: number };
}

interface MintBody {
  id: string;
  name: string;
  prefix: string;
  scopes: string[];
  createdAt: string;
  key: string;
}

interface KeyBody extends Omit<MintBody, 'key'> {
  revokedAt: string | null;
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

let dataDir: string;

/** The environment handed to every process: nothing leaks in from the test runner's own but where the run keeps state. */
function env(extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? tmpdir(),
    DATA_DIR: dataDir,
    MAIL_HOSTNAME: 'mx.mailstead.test',
    ...stateEnvOfDataDir(dataDir),
    ...extra,
  };
}

/** Runs a write on the state beside the server and the CLI (DATA_DIR's file, or the state database they share). */
async function stateWrite(query: string, params: unknown[]): Promise<void> {
  await onOtherConnection({ dataDir, stateUrl: env().STATE_URL ?? null }, query, params);
}

function run(command: string, args: string[], timeoutMs = 60_000, extraEnv: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, env: env(extraEnv), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `node dist/server/app/cli.js ...`, what `npm run cli` runs once built. */
const cli = (...args: string[]) => run(process.execPath, ['dist/server/app/cli.js', ...args]);

/** A CLI success: exit 0 and stdout that is one JSON document and nothing else. */
async function cliOk<T>(...args: string[]): Promise<T> {
  const res = await cli(...args);
  expect(res.code, res.stderr).toBe(0);
  return JSON.parse(res.stdout) as T;
}

/** A CLI failure: non-zero exit, a message on stderr, nothing on stdout. */
async function cliFails(...args: string[]): Promise<Run> {
  const res = await cli(...args);
  expect(res.code, res.stdout).not.toBe(0);
  expect(res.code).not.toBeNull();
  expect(res.stdout).toBe('');
  expect(res.stderr.trim().length).toBeGreaterThan(0);
  return res;
}

type LogLine = Record<string, unknown> & { event: string };

/** The server as `npm start` runs it, with its stdout read as JSON log lines. */
class ServerProcess {
  readonly lines: LogLine[] = [];
  /** Stdout lines that were not a JSON log entry with an event name: there should be none. */
  readonly stray: string[] = [];
  stderr = '';
  private waiters: { event: string; resolve: (l: LogLine) => void }[] = [];
  private exited: Promise<number | null>;
  private buffer = '';

  private constructor(readonly child: ChildProcessWithoutNullStreams) {
    child.stdout.on('data', (c: Buffer) => {
      this.buffer += c.toString();
      let nl: number;
      while ((nl = this.buffer.indexOf('\n')) >= 0) {
        const text = this.buffer.slice(0, nl);
        this.buffer = this.buffer.slice(nl + 1);
        if (text.trim() === '') continue;
        let line: LogLine;
        try {
          line = JSON.parse(text) as LogLine;
        } catch {
          this.stray.push(text);
          continue;
        }
        if (typeof line.event !== 'string') this.stray.push(text);
        this.lines.push(line);
        for (const w of this.waiters.filter((w) => w.event === line.event)) w.resolve(line);
        this.waiters = this.waiters.filter((w) => w.event !== line.event);
      }
    });
    child.stderr.on('data', (c: Buffer) => (this.stderr += c.toString()));
    this.exited = new Promise((resolve) => child.on('close', (code) => resolve(code)));
  }

  static start(): ServerProcess {
    const child = spawn(process.execPath, ['dist/server/app/main.js'], {
      cwd: ROOT,
      env: env({ HTTP_PORT: '0', HTTP_HOST: '127.0.0.1', SMTP_PORT: '0', SUBMISSION_PORT: '0', SUBMISSIONS_PORT: '0' }),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    return new ServerProcess(child);
  }

  /** Resolves with the first log line of `event` (past or future); fails if the process exits first. */
  waitFor(event: string, timeoutMs = 30_000): Promise<LogLine> {
    const seen = this.lines.find((l) => l.event === event);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${event} within ${timeoutMs} ms; stderr: ${this.stderr}`)), timeoutMs);
      this.waiters.push({
        event,
        resolve: (l) => {
          clearTimeout(timer);
          resolve(l);
        },
      });
      void this.exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`server exited (${code}) before ${event}; stderr: ${this.stderr}`));
      });
    });
  }

  async listening(): Promise<string> {
    const line = await this.waitFor('http.listening');
    expect(typeof line.port).toBe('number');
    return `http://127.0.0.1:${String(line.port)}`;
  }

  events(event: string): LogLine[] {
    return this.lines.filter((l) => l.event === event);
  }

  stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    return this.exited;
  }
}

interface ApiResult<T> {
  status: number;
  body: T;
}

let origin: string;

async function api<T = AccountBody>(method: string, path: string, key: string, body?: unknown): Promise<ApiResult<T>> {
  const res = await fetch(`${origin}/api/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: (text === '' ? null : JSON.parse(text)) as T };
}

interface Created {
  account: AccountBody;
  key: string;
}

let server: ServerProcess | undefined;
let created: Created;

beforeAll(async () => {
  dataDir = join(mkdtempSync(join(tmpdir(), 'mailstead-cli-')), 'data');
  mkdirSync(dataDir, { mode: 0o700 });
  await ensureState(env());
});
afterAll(async () => {
  await server?.stop('SIGKILL');
  rmSync(join(dataDir, '..'), { recursive: true, force: true });
});

describe('first run', () => {
  it('the server starts on the empty DATA_DIR, creates the database, logs http.listening with its port and the admin token once', async () => {
    server = ServerProcess.start();
    origin = await server.listening();
    const generated = server.events('admin_token.generated');
    expect(generated).toHaveLength(1);
    expect(typeof generated[0]!.token).toBe('string');
    const health = await fetch(`${origin}/healthz`);
    expect(health.status).toBe(200);
  });

  it('npm run -s cli -- accounts create --name Acme --credits 1000, beside the running server, prints only { account, key }', async () => {
    const res = await run('npm', ['run', '-s', 'cli', '--', 'accounts', 'create', '--name', 'Acme', '--credits', '1000'], 120_000);
    expect(res.code, res.stderr).toBe(0);
    created = JSON.parse(res.stdout) as Created;
    expect(Object.keys(created).sort()).toEqual(['account', 'key']);
    expect(created.key).toMatch(KEY);
    const account = created.account;
    expect(account.id).toMatch(UUID);
    expect(account.name).toBe('Acme');
    expect(account.parentId).toBeNull();
    expect(account.createdAt).toMatch(ISO_MS);
    expect(account.credits).toMatchObject({ balance: 1000, state: 'ok', totalPurchased: 1000, totalUsed: 0 });
    expect(account.sending).toMatchObject({ tier: 'healthy', totalSent: 0, sentToday: 0, dailyQuota: 10000, effectiveQuota: 10000, suspended: false });
    expect(account.sending).not.toHaveProperty('suspendedReason');
  }, 120_000);

  it('the printed key works against the server: GET /api/v1/account is that account', async () => {
    const res = await api('GET', '/account', created.key);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ id: created.account.id, name: 'Acme', parentId: null, credits: { balance: 1000, state: 'ok' } });
  });
});

describe('the other commands (node dist/server/app/cli.js)', () => {
  it('accounts list prints { data: [Account] } with the account', async () => {
    const out = await cliOk<{ data: AccountBody[] }>('accounts', 'list');
    expect(Object.keys(out)).toEqual(['data']);
    expect(Array.isArray(out.data)).toBe(true);
    const found = out.data.find((a) => a.id === created.account.id);
    expect(found).toMatchObject({ name: 'Acme', parentId: null, credits: { balance: 1000 } });
  });

  it('accounts set-quota sets dailyQuota, and the API sees it', async () => {
    const out = await cliOk<AccountBody>('accounts', 'set-quota', '--account', created.account.id, '--daily-quota', '50');
    expect(out.id).toBe(created.account.id);
    expect(out.sending).toMatchObject({ dailyQuota: 50, effectiveQuota: 50 });
    const res = await api('GET', '/account', created.key);
    expect(res.body.sending.dailyQuota).toBe(50);
  });

  it('accounts suspend suspends with the reason; the API cannot lift it; unsuspend does', async () => {
    const sub = await api('POST', '/accounts', created.key, { name: 'Customer One' });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    const reason = 'Suspended by the operator after an abuse report.';

    const suspended = await cliOk<AccountBody>('accounts', 'suspend', '--account', sub.body.id, '--reason', reason);
    expect(suspended.id).toBe(sub.body.id);
    expect(suspended.sending).toMatchObject({ suspended: true, suspendedReason: reason });

    const lift = await api<unknown>('POST', `/accounts/${sub.body.id}/suspend`, created.key, { suspended: false });
    expect(lift.status, JSON.stringify(lift.body)).toBe(409);
    expect(lift.body).toEqual({ error: { code: 'conflict', message: expect.any(String) } });
    const still = await api('GET', `/accounts/${sub.body.id}`, created.key);
    expect(still.body.sending).toMatchObject({ suspended: true, suspendedReason: reason });

    const lifted = await cliOk<AccountBody>('accounts', 'unsuspend', '--account', sub.body.id);
    expect(lifted.sending.suspended).toBe(false);
    expect(lifted.sending).not.toHaveProperty('suspendedReason');
    const after = await api('GET', `/accounts/${sub.body.id}`, created.key);
    expect(after.body.sending.suspended).toBe(false);
  });

  it('accounts unsuspend lifts a suspension by the reputation breaker, which the API cannot', async () => {
    const sub = await api('POST', '/accounts', created.key, { name: 'Customer Breaker' });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    const reason =
      'Sending paused automatically by the reputation breaker: bounce rate 12.00% and complaint rate 0.00% over 50 recipients reached the paused tier (10% bounces or 0.5% complaints).';
    await stateWrite("UPDATE accounts SET suspended_by = 'breaker', suspended_reason = ?, suspended_at = ? WHERE id = ?", [reason, Date.now(), sub.body.id]);
    const lift = await api<unknown>('POST', `/accounts/${sub.body.id}/suspend`, created.key, { suspended: false });
    expect(lift.status, JSON.stringify(lift.body)).toBe(409);
    expect(lift.body).toEqual({ error: { code: 'conflict', message: expect.any(String) } });

    const lifted = await cliOk<AccountBody>('accounts', 'unsuspend', '--account', sub.body.id);
    expect(lifted.sending.suspended).toBe(false);
    expect((await api('GET', `/accounts/${sub.body.id}`, created.key)).body.sending.suspended).toBe(false);
  });

  it('accounts suspend on a top-level account shows through the API; unsuspend lifts it', async () => {
    const reason = 'Payment dispute, pending review.';
    const out = await cliOk<AccountBody>('accounts', 'suspend', '--account', created.account.id, '--reason', reason);
    expect(out.sending).toMatchObject({ suspended: true, suspendedReason: reason });
    expect((await api('GET', '/account', created.key)).body.sending).toMatchObject({ suspended: true, suspendedReason: reason });
    const lifted = await cliOk<AccountBody>('accounts', 'unsuspend', '--account', created.account.id);
    expect(lifted.sending.suspended).toBe(false);
  });

  it('accounts unsuspend also lifts a suspension placed through the API', async () => {
    const sub = await api('POST', '/accounts', created.key, { name: 'Customer Two' });
    const reason = 'Paused by the parent for a billing check.';
    const placed = await api('POST', `/accounts/${sub.body.id}/suspend`, created.key, { suspended: true, reason });
    expect(placed.status, JSON.stringify(placed.body)).toBe(200);
    const lifted = await cliOk<AccountBody>('accounts', 'unsuspend', '--account', sub.body.id);
    expect(lifted.sending.suspended).toBe(false);
  });

  it('credits grant adds to balance and totalPurchased', async () => {
    const before = (await api('GET', '/account', created.key)).body.credits;
    const out = await cliOk<AccountBody>('credits', 'grant', '--account', created.account.id, '--amount', '5');
    expect(out.id).toBe(created.account.id);
    expect(out.credits).toMatchObject({ balance: before.balance + 5, totalPurchased: before.totalPurchased + 5, state: 'ok' });
    expect((await api('GET', '/account', created.key)).body.credits.balance).toBe(before.balance + 5);
  });

  it('credits grant past 2^53 - 1 is refused (exit 1) and changes nothing, rather than adding nothing', async () => {
    const acct = await cliOk<{ account: AccountBody }>('accounts', 'create', '--name', 'Big spender');
    const id = acct.account.id;
    const max = Number.MAX_SAFE_INTEGER;
    expect((await cliOk<AccountBody>('credits', 'grant', '--account', id, '--amount', '1000')).credits).toMatchObject({ balance: 1000, totalPurchased: 1000 });
    const over = await cliFails('credits', 'grant', '--account', id, '--amount', String(max - 999));
    expect(over.code).toBe(1);
    expect(over.stderr).toBe(`mailstead: The grant would take the account's credits past ${max}.\n`);
    const exact = await cliOk<AccountBody>('credits', 'grant', '--account', id, '--amount', String(max - 1000));
    expect(exact.credits).toMatchObject({ balance: max, totalPurchased: max });
    expect((await cliFails('credits', 'grant', '--account', id, '--amount', '1')).code).toBe(1);
    const list = await cliOk<{ data: AccountBody[] }>('accounts', 'list');
    expect(list.data.find((a) => a.id === id)!.credits).toMatchObject({ balance: max, totalPurchased: max });
  });

  it('credits grant to a sub-account is refused with exit 1 and one line (well-formed arguments: no usage text)', async () => {
    const sub = await api('POST', '/accounts', created.key, { name: 'Customer Three' });
    const res = await cliFails('credits', 'grant', '--account', sub.body.id, '--amount', '5');
    expect(res.code).toBe(1);
    expect(res.stderr).toBe("mailstead: credits are granted to the top-level account; a sub-account's sends are paid by its parent\n");
  });

  it('keys create prints the mint response, and the key holds only the scopes asked for', async () => {
    const out = await cliOk<MintBody>('keys', 'create', '--account', created.account.id, '--name', 'ci', '--scopes', 'emails:send,emails:read');
    expect(Object.keys(out).sort()).toEqual(['createdAt', 'id', 'key', 'name', 'prefix', 'scopes']);
    expect(out.id).toMatch(UUID);
    expect(out.name).toBe('ci');
    expect(out.key).toMatch(KEY);
    expect(out.prefix).toBe(out.key.slice(0, 11));
    expect([...out.scopes].sort()).toEqual(['emails:read', 'emails:send']);
    expect(out.createdAt).toMatch(ISO_MS);

    const refused = await api<unknown>('GET', '/account', out.key);
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual({ error: { code: 'insufficient_scope', message: expect.any(String) } });
    expect((await api<unknown>('GET', '/emails', out.key)).status).toBe(200);

    const listed = await api<{ data: KeyBody[] }>('GET', '/keys', created.key);
    expect(listed.body.data.find((k) => k.id === out.id)).toMatchObject({ name: 'ci', prefix: out.prefix, revokedAt: null });
  });

  it('keys create names each scope once, however often --scopes repeats it, as POST /keys does', async () => {
    const out = await cliOk<MintBody>('keys', 'create', '--account', created.account.id, '--name', 'twice', '--scopes', 'emails:send,emails:send, emails:send');
    expect(out.scopes).toEqual(['emails:send']);
    const listed = await api<{ data: KeyBody[] }>('GET', '/keys', created.key);
    expect(listed.body.data.find((k) => k.id === out.id)?.scopes).toEqual(['emails:send']);
  });

  it('keys create without --scopes gives all 16 scopes (the contract’s 14 and templates:read, templates:write)', async () => {
    const out = await cliOk<MintBody>('keys', 'create', '--account', created.account.id, '--name', 'everything');
    expect(out.scopes).toHaveLength(16);
    expect(out.scopes).toEqual(expect.arrayContaining(['templates:read', 'templates:write']));
    expect((await api('GET', '/account', out.key)).status).toBe(200);
  });

  it('admin-token reset prints { token }', async () => {
    const out = await cliOk<{ token: string }>('admin-token', 'reset');
    expect(Object.keys(out)).toEqual(['token']);
    expect(typeof out.token).toBe('string');
    expect(out.token.length).toBeGreaterThanOrEqual(16);
    const again = await cliOk<{ token: string }>('admin-token', 'reset');
    expect(again.token).not.toBe(out.token);
  });

  it('admin-token reset is refused while ADMIN_TOKEN is set (each start puts that token back), and changes nothing', async () => {
    const reset = await cliOk<{ token: string }>('admin-token', 'reset');
    const res = await run(process.execPath, ['dist/server/app/cli.js', 'admin-token', 'reset'], 60_000, { ADMIN_TOKEN: 'an-operator-chosen-token' });
    expect(res.code).toBe(1);
    expect(res.stdout).toBe('');
    expect(res.stderr).toMatch(/ADMIN_TOKEN is set/);
    // The token the last reset printed is still the one that signs in.
    expect((await postSignIn(origin, reset.token)).status).toBe(303);
  });
});

describe('webhooks commands', () => {
  interface EndpointBody {
    id: string;
    url: string;
    events: string[];
    active: boolean;
    failureCount: number;
    disabledAt: string | null;
    createdAt: string;
  }
  const SEALED = 'sealed-secret-that-must-never-be-printed';

  /** Endpoints written as POST /webhooks stores them (the CLI reads rows; it never needs the secret). */
  async function insertEndpoint(accountId: string, opts: { id: string; createdAt: number; disabled?: boolean; events?: string[] }): Promise<void> {
    // `active` as text both engines read as a boolean ('1'/'0': SQLite's integer affinity, Postgres's boolean input).
    await stateWrite(
      'INSERT INTO webhook_endpoints (id, account_id, url, events, secret_sealed, active, failure_count, disabled_at, last_ping_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)',
      [
        opts.id,
        accountId,
        `https://hooks.example.com/${opts.id}`,
        JSON.stringify(opts.events ?? ['email.delivered', 'email.bounced']),
        SEALED,
        opts.disabled ? 0 : 1,
        opts.disabled ? 10 : 0,
        opts.disabled ? opts.createdAt + 1000 : null,
        opts.createdAt,
      ],
    );
  }

  /** The endpoint's row as stored, `active` as 1 or 0 on either engine. */
  const readEndpoint = async (id: string) =>
    (
      await stateRows(
        dataDir,
        'SELECT CASE WHEN active THEN 1 ELSE 0 END AS active, failure_count AS "failureCount", disabled_at AS "disabledAt" FROM webhook_endpoints WHERE id = ?',
        [id],
      )
    )[0];

  const older = '01950000-0000-7000-8000-000000000001';
  const newer = '01950000-0001-7000-8000-000000000002';
  const at = Date.parse('2026-03-10T12:00:00.000Z');

  it('webhooks list --account prints { data: [endpoint] } newest first, every field of the spec, never the secret', async () => {
    const sub = await api('POST', '/accounts', created.key, { name: 'Webhook owner' });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    await insertEndpoint(created.account.id, { id: older, createdAt: at });
    await insertEndpoint(created.account.id, { id: newer, createdAt: at + 60_000, disabled: true, events: ['email.bounced', 'ping'] });

    const res = await cli('webhooks', 'list', '--account', created.account.id);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).not.toContain(SEALED);
    expect(res.stdout).not.toMatch(/secret/i);
    const out = JSON.parse(res.stdout) as { data: EndpointBody[] };
    expect(Object.keys(out)).toEqual(['data']);
    expect(out.data).toEqual([
      {
        id: newer,
        url: `https://hooks.example.com/${newer}`,
        events: ['email.bounced', 'ping'],
        active: false,
        failureCount: 10,
        disabledAt: '2026-03-10T12:01:01.000Z',
        createdAt: '2026-03-10T12:01:00.000Z',
      },
      {
        id: older,
        url: `https://hooks.example.com/${older}`,
        events: ['email.delivered', 'email.bounced'],
        active: true,
        failureCount: 0,
        disabledAt: null,
        createdAt: '2026-03-10T12:00:00.000Z',
      },
    ]);
    // Another account's endpoints are not listed; an account without any prints an empty list.
    expect(await cliOk<{ data: EndpointBody[] }>('webhooks', 'list', '--account', sub.body.id)).toEqual({ data: [] });
  });

  it('webhooks enable --webhook switches a disabled endpoint back on (active, disabledAt null, failureCount 0), its waiting deliveries due now, prints it, and the API sees it', async () => {
    expect(await readEndpoint(newer)).toEqual({ active: 0, failureCount: 10, disabledAt: at + 61_000 });
    // A delivery waiting for its 12-hour retry, and one already delivered.
    const later = Date.now() + 12 * 3_600_000;
    const insert = (...values: unknown[]) =>
      stateWrite(
        "INSERT INTO webhook_deliveries (id, endpoint_id, account_id, event_type, data, attempts, delivered_at, next_attempt_at, created_at) VALUES (?, ?, ?, 'email.bounced', '{}', ?, ?, ?, ?)",
        values,
      );
    await insert('01950000-0002-7000-8000-000000000001', newer, created.account.id, 5, null, later, at);
    await insert('01950000-0002-7000-8000-000000000002', newer, created.account.id, 1, at, null, at);
    const before = Date.now();
    const res = await cli('webhooks', 'enable', '--webhook', newer);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).not.toContain(SEALED);
    expect(JSON.parse(res.stdout)).toEqual({
      id: newer,
      url: `https://hooks.example.com/${newer}`,
      events: ['email.bounced', 'ping'],
      active: true,
      failureCount: 0,
      disabledAt: null,
      createdAt: '2026-03-10T12:01:00.000Z',
    });
    expect(await readEndpoint(newer)).toEqual({ active: 1, failureCount: 0, disabledAt: null });
    const rows = await stateRows<{ nextAttemptAt: number | null }>(
      dataDir,
      'SELECT next_attempt_at AS "nextAttemptAt" FROM webhook_deliveries WHERE endpoint_id = ? ORDER BY id',
      [newer],
    );
    expect(rows[0]!.nextAttemptAt).toBeGreaterThanOrEqual(before);
    expect(rows[0]!.nextAttemptAt).toBeLessThanOrEqual(Date.now());
    expect(rows[1]!.nextAttemptAt).toBeNull();
    const seen = await api<EndpointBody>('GET', `/webhooks/${newer}`, created.key);
    expect(seen.status, JSON.stringify(seen.body)).toBe(200);
    expect(seen.body).toMatchObject({ id: newer, active: true, failureCount: 0, disabledAt: null });
    // Enabling an endpoint that is on changes nothing visible.
    expect(await cliOk<EndpointBody>('webhooks', 'enable', '--webhook', older)).toMatchObject({ id: older, active: true, failureCount: 0, disabledAt: null });
  });

  it('an unknown account or webhook exits 1 naming it; a missing option is a usage error (exit 2)', async () => {
    const missing = '01950000-0000-7000-8000-0000000000ff';
    const noWebhook = await cliFails('webhooks', 'enable', '--webhook', missing);
    expect(noWebhook.code).toBe(1);
    expect(noWebhook.stderr).toContain(missing);
    const noAccount = await cliFails('webhooks', 'list', '--account', missing);
    expect(noAccount.code).toBe(1);
    expect(noAccount.stderr).toContain(missing);
    const usage = await cliFails('webhooks', 'enable');
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('--webhook is required');
    expect((await cliFails('webhooks', 'list')).code).toBe(2);
  });

  it('help names both commands', async () => {
    const res = await cli('help');
    expect(res.stdout).toContain('webhooks list --account ID');
    expect(res.stdout).toContain('webhooks enable --webhook ID');
  });
});

describe('database status', () => {
  const PASSWORD = 'pw-that-must-never-be-printed';

  /** A connected database and waiting writes, as POST /database and the writer's outbox store them. */
  async function insertDatabase(accountId: string, at: number): Promise<void> {
    await stateWrite(
      `INSERT INTO customer_databases (account_id, connection_id, url_sealed, host, port, database, "user", ssl_mode, state, schema_version, last_ok_at, last_error, last_error_kind, failures, next_attempt_at, updated_at, created_at)
       VALUES (?, ?, ?, 'db.example.com', 5433, 'mail', 'app', 'verify', 'unreachable', 1, ?, 'could not connect: connection refused', 'connection', 3, ?, ?, ?)`,
      [accountId, '01950000-0000-7000-8000-0000000000c1', `sealed:${PASSWORD}`, at, at + 3_600_000, at + 1000, at],
    );
    const write = (...values: unknown[]) =>
      stateWrite(
        "INSERT INTO customer_db_writes (id, database_account_id, account_id, kind, payload_sealed, attempts, next_attempt_at, set_aside_at, created_at) VALUES (?, ?, ?, 'event', 'sealed', 0, ?, ?, ?)",
        values,
      );
    await write('01950000-0000-7000-8000-0000000000d1', accountId, accountId, at, null, at);
    await write('01950000-0000-7000-8000-0000000000d2', accountId, accountId, at, null, at);
    await write('01950000-0000-7000-8000-0000000000d3', accountId, accountId, at, at, at);
  }

  it("prints the status the API answers for the account (its own database, else its parent's), never the URL", async () => {
    // Recent (older writes would be dropped by the running server's writer), and not due for an hour.
    const at = Math.floor(Date.now() / 1000) * 1000 - 60_000;
    const owner = await cliOk<{ account: { id: string }; key: string }>('accounts', 'create', '--name', 'Database owner');
    const sub = await api('POST', '/accounts', owner.key, { name: 'Uses the parent database' });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    expect(await cliOk('database', 'status', '--account', owner.account.id)).toMatchObject({ connected: false, host: null, pending: 0 });
    await insertDatabase(owner.account.id, at);

    const res = await cli('database', 'status', '--account', owner.account.id);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).not.toContain(PASSWORD);
    const expected = {
      connected: true,
      host: 'db.example.com',
      port: 5433,
      database: 'mail',
      user: 'app',
      sslMode: 'verify',
      state: 'unreachable',
      schemaVersion: 1,
      lastOkAt: new Date(at).toISOString(),
      lastError: 'could not connect: connection refused',
      updatedAt: new Date(at + 1000).toISOString(),
      pending: 2,
    };
    expect(JSON.parse(res.stdout)).toEqual(expected);
    expect((await api('GET', '/database', owner.key)).body).toEqual(expected);
    expect(await cliOk('database', 'status', '--account', sub.body.id)).toEqual(expected);
  });

  it('an unknown account exits 1 naming it; no --account is a usage error', async () => {
    const missing = '01950000-0000-7000-8000-0000000000fe';
    const res = await cliFails('database', 'status', '--account', missing);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain(missing);
    expect((await cliFails('database', 'status')).code).toBe(2);
    expect((await cli('help')).stdout).toContain('database status --account ID');
  });
});

describe('help and version: stdout, exit 0, no database needed', () => {
  const emptyDir = () => join(dataDir, '..', 'no-database');
  // On a Postgres run, the STATE_URL of a state database never made.
  const noDatabase = () => ({ DATA_DIR: emptyDir(), ...stateEnvOfDataDir(emptyDir()) });

  it.each([[['--help']], [['help']], [['-h']], [['accounts', 'list', '--help']]])('%j prints the usage on stdout and exits 0', async (args) => {
    const res = await run(process.execPath, ['dist/server/app/cli.js', ...args], 60_000, noDatabase());
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toBe('');
    expect(res.stdout).toMatch(/^usage: mailstead <command>/);
    for (const command of ['accounts create', 'accounts list', 'credits grant', 'keys create', 'admin-token reset', '--version'])
      expect(res.stdout).toContain(command);
  });

  it('--version prints the version of package.json and exits 0', async () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const res = await run(process.execPath, ['dist/server/app/cli.js', '--version'], 60_000, noDatabase());
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toBe('');
    expect(res.stdout).toBe(`${pkg.version}\n`);
  });
});

describe('CLI errors: non-zero exit, message on stderr, nothing on stdout', () => {
  it('an unknown command', async () => {
    const res = await cliFails('frobnicate', 'everything');
    expect(res.stderr).toContain('frobnicate');
  });

  it('no command at all', async () => {
    await cliFails();
  });

  it('an unknown option', async () => {
    await cliFails('accounts', 'list', '--colour', 'blue');
  });

  it('accounts create without --name', async () => {
    const res = await cliFails('accounts', 'create', '--credits', '10');
    expect(res.stderr).toContain('name');
  });

  it('accounts create with a bad --credits', async () => {
    const res = await cliFails('accounts', 'create', '--name', 'Bad credits', '--credits', 'lots');
    expect(res.stderr).toContain('credits');
  });

  it('a number out of range says the range (too large as well as too small): usage error, exit 2', async () => {
    for (const value of ['0', '99999999999999999999']) {
      const res = await cliFails('accounts', 'create', '--name', 'Range', '--daily-quota', value);
      expect(res.code, res.stderr).toBe(2);
      expect(res.stderr).toContain(`--daily-quota must be an integer from 1 to ${Number.MAX_SAFE_INTEGER}`);
    }
  });

  it.each([
    ['accounts set-quota', ['accounts', 'set-quota', '--daily-quota', '5']],
    ['accounts suspend', ['accounts', 'suspend', '--reason', 'A reason long enough.']],
    ['accounts unsuspend', ['accounts', 'unsuspend']],
    ['credits grant', ['credits', 'grant', '--amount', '5']],
    ['keys create', ['keys', 'create', '--name', 'ci']],
  ])('%s with an unknown account id', async (_label, args) => {
    const unknown = '00000000-0000-7000-8000-000000000000';
    const res = await cliFails(...args, '--account', unknown);
    expect(res.stderr).toContain(unknown);
  });

  it('keys create with a bad --scopes', async () => {
    const res = await cliFails('keys', 'create', '--account', created.account.id, '--name', 'ci', '--scopes', 'emails:send,mail:everything');
    expect(res.stderr).toContain('mail:everything');
  });

  it('a usage error exits 2 whatever the option: an empty or unknown scope, an option the command does not take, a refused value', async () => {
    const id = created.account.id;
    const cases: [string[], string][] = [
      [['keys', 'create', '--account', id, '--name', 'ci', '--scopes', ''], '--scopes names at least one scope'],
      [['keys', 'create', '--account', id, '--name', 'ci', '--scopes', ' , '], '--scopes names at least one scope'],
      [['keys', 'create', '--account', id, '--name', 'ci', '--scopes', 'bogus'], 'unknown scope "bogus"'],
      [['keys', 'create', '--account', id, '--name', 'x'.repeat(500)], 'name'],
      [['accounts', 'list', '--name', 'Acme'], 'accounts list does not take --name'],
      [['accounts', 'unsuspend', '--account', id, '--reason', 'A reason long enough.'], 'accounts unsuspend does not take --reason'],
      [['admin-token', 'reset', '--account', id], 'admin-token reset does not take --account'],
      [['accounts', 'create', '--name', '   '], '--name'],
      [['accounts', 'create', '--name', 'Acme\u202e Shop'], '--name: must not contain control characters'],
      [['accounts', 'suspend', '--account', id, '--reason', 'x'.repeat(5000)], '--reason'],
    ];
    for (const [args, message] of cases) {
      const res = await cliFails(...args);
      expect(res.code, `${args.join(' ')}: ${res.stderr}`).toBe(2);
      expect(res.stderr).toContain(message);
    }
  });

  it('keys create without --name', async () => {
    await cliFails('keys', 'create', '--account', created.account.id);
  });

  it('credits grant with a bad --amount', async () => {
    await cliFails('credits', 'grant', '--account', created.account.id, '--amount', '-5');
  });

  it('a bad configuration value', async () => {
    const res = await new Promise<Run>((resolve) => {
      const child = spawn(process.execPath, ['dist/server/app/cli.js', 'accounts', 'list'], {
        cwd: ROOT,
        env: env({ LOG_LEVEL: 'loud' }),
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    expect(res.code).not.toBe(0);
    expect(res.stdout).toBe('');
    expect(res.stderr).toContain('LOG_LEVEL');
  });
});

describe('stopping and starting again', () => {
  it('SIGTERM stops the server with exit code 0', async () => {
    const code = await server!.stop('SIGTERM');
    expect(code, server!.stderr).toBe(0);
    expect(server!.events('process.stopped')).toHaveLength(1);
    expect(server!.stray).toEqual([]);
  });

  it('a second start on the same DATA_DIR does not generate an admin token, and keeps the data', async () => {
    server = ServerProcess.start();
    origin = await server.listening();
    expect(server.events('admin_token.generated')).toHaveLength(0);
    const res = await api('GET', '/account', created.key);
    expect(res.status).toBe(200);
    expect(res.body.credits.balance).toBe(1005);
    expect(res.body.sending.dailyQuota).toBe(50);
    expect(await server.stop('SIGTERM')).toBe(0);
  });
});

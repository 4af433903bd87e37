import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../scripts/lib/free-port.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { PG_TEST_CA_FILE, type TestPostgres, startPostgres } from './helpers/postgres.js';
import {
  ROOT,
  type ServiceProcess,
  connectSendingDomain,
  createAccountWithCli,
  processApi,
  processEnv,
  runningProcesses,
  startServiceProcess,
  stateRows,
} from './helpers/service-process.js';
import { SmtpSink } from './helpers/smtp-sink.js';

/**
 * The upgrade path from one VPS (docs/operating/upgrading.md, issue 36 point 5): a DATA_DIR made by a server of this
 * version, with mail in its queues (recipients deferred and due again, webhook deliveries waiting), stopped, moved
 * with `mailstead state copy --to postgresql://...`, and a server started on the Postgres with DATA_DIR's secret key
 * carries on: the same key authenticates, the email and its events are there, the idempotency key answers the same
 * id, the suppression holds, and the queued recipients are delivered from the new state.
 */

const RCPT_DOMAIN = 'move-rcpt.example';
const SENDING_DOMAIN = 'move-shop.example';

let dns: TestDnsServer;
let sink: SmtpSink;
let postgres: TestPostgres;
let dataDir: string;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  dns.add(RCPT_DOMAIN, { type: 'MX', priority: 10, exchange: `mx.${RCPT_DOMAIN}` });
  dns.add(`mx.${RCPT_DOMAIN}`, { type: 'A', address: '127.0.0.1' });
  sink = await SmtpSink.start();
  postgres = await startPostgres({ certificate: 'trusted' });
  await postgres.admin('create database moved');
  dataDir = mkdtempSync(join(tmpdir(), 'mailstead-move-'));
}, 120_000);

afterAll(async () => {
  for (const child of runningProcesses) child.kill('SIGKILL');
  await sink?.stop();
  await dns?.stop();
  await postgres?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

/** The server's environment on DATA_DIR's SQLite state (never the run's STATE_URL: the source is the file). */
function sqliteEnv(extra: Record<string, string>): Record<string, string> {
  const env = processEnv(dataDir, { DNS_SERVERS: dns.address, ...extra });
  delete env.STATE_URL;
  delete env.SECRET_KEY;
  return env;
}

/** `node dist/server/app/cli.js ...args` on `env`: its exit code and output. */
function cli(env: Record<string, string>, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['dist/server/app/cli.js', ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function stop(proc: ServiceProcess): Promise<void> {
  proc.child.kill('SIGTERM');
  expect(await proc.exited).toMatchObject({ code: 0 });
}

async function waitFor(what: string, check: () => Promise<boolean> | boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const send = (proc: ServiceProcess, key: string, idempotencyKey: string) =>
  fetch(`${proc.base}/emails`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
    body: JSON.stringify({
      from: `Billing <billing@${SENDING_DOMAIN}>`,
      to: [`ann@${RCPT_DOMAIN}`, `bob@${RCPT_DOMAIN}`],
      template: { name: 'receipt', receiptNumber: 'R-1', total: '$10.00' },
    }),
  });

describe('a DATA_DIR with mail in its queues moved to Postgres with state copy', () => {
  it('carries on from the new state: the key, the email and its events, the idempotency key, the suppression, the webhook deliveries waiting, and the queued recipients delivered', async () => {
    // 1. A server on DATA_DIR whose delivery port refuses connections: each recipient is deferred and stays queued.
    const refused = await freePort();
    const env = sqliteEnv({ SMTP_DELIVERY_PORT: String(refused) });
    const first = await startServiceProcess(env);
    const { key } = await createAccountWithCli(env, 'Moving shop');
    await connectSendingDomain(first, dataDir, key, SENDING_DOMAIN);
    const hook = await processApi(first, key, 'POST', '/webhooks', { url: 'https://127.0.0.1:9/hook', events: ['email.deferred'] });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    const suppression = await processApi(first, key, 'POST', '/suppressions', { address: `gone@${RCPT_DOMAIN}` });
    expect(suppression.status, JSON.stringify(suppression.body)).toBe(201);
    const sent = await send(first, key, 'order-1');
    expect(sent.status).toBe(200);
    const emailId = ((await sent.json()) as { id: string }).id;

    // Both recipients deferred (queued, one attempt made), and their webhook deliveries waiting on the dead endpoint.
    const deferred = async () =>
      (await stateRows<{ n: number }>(dataDir, "select count(*) as n from outbound_recipients where status = 'queued' and attempts >= 1"))[0]!.n;
    const waitingHooks = async () => (await stateRows<{ n: number }>(dataDir, 'select count(*) as n from webhook_deliveries where delivered_at is null'))[0]!.n;
    await waitFor('both recipients deferred', async () => (await deferred()) === 2);
    await waitFor('the webhook deliveries of both deferrals', async () => (await waitingHooks()) === 2);
    await stop(first);

    // 2. The copy, with the server stopped.
    const url = `postgresql://${postgres.user}:${postgres.password}@localhost:${postgres.port}/moved?sslmode=verify-full&sslrootcert=${encodeURIComponent(PG_TEST_CA_FILE)}`;
    const copied = await cli(env, ['state', 'copy', '--to', url]);
    expect(copied.code, copied.stderr).toBe(0);
    const report = JSON.parse(copied.stdout) as { tables: { name: string; source: number; target: number }[] };
    for (const t of report.tables) expect(t.target, t.name).toBe(t.source);
    const counted = Object.fromEntries(report.tables.map((t) => [t.name, t.source]));
    expect(counted).toMatchObject({ outbound_recipients: 2, webhook_deliveries: 2, suppressions: 1, idempotency_keys: 1 });

    // The deferred recipients' retry falls minutes ahead: brought to now, as if that time had come.
    const client = new pg.Client({ host: '127.0.0.1', port: postgres.port, user: postgres.user, password: postgres.password, database: 'moved', ssl: false });
    await client.connect();
    try {
      expect((await client.query("update outbound_recipients set next_attempt_at = 0 where status = 'queued'")).rowCount).toBe(2);
    } finally {
      await client.end();
    }

    // 3. A server on the Postgres, with DATA_DIR's secret key (the secrets copied are sealed with it), delivering.
    const secretKey = readFileSync(join(dataDir, 'secret.key'), 'utf8').trim();
    const second = await startServiceProcess({ ...sqliteEnv({ SMTP_DELIVERY_PORT: String(sink.port) }), STATE_URL: url, SECRET_KEY: secretKey });
    try {
      const health = await fetch(`http://127.0.0.1:${second.port}/healthz`);
      expect(await health.json()).toMatchObject({ status: 'ok', state: 'postgres' });

      await waitFor('both recipients delivered from the new state', () =>
        [`ann@${RCPT_DOMAIN}`, `bob@${RCPT_DOMAIN}`].every((r) => sink.deliveredTo().includes(r)),
      );
      await waitFor('the delivered events', async () => {
        const got = await processApi(second, key, 'GET', `/emails/${emailId}`);
        return got.status === 200 && (got.body.events as { status: string }[]).filter((e) => e.status === 'delivered').length === 2;
      });
      const email = await processApi(second, key, 'GET', `/emails/${emailId}`);
      expect(
        (email.body.events as { recipient: string; status: string }[])
          .filter((e) => e.status === 'deferred')
          .map((e) => e.recipient)
          .sort(),
      ).toEqual([`ann@${RCPT_DOMAIN}`, `bob@${RCPT_DOMAIN}`]);

      // The idempotency key answers the same email, without a second send.
      const again = await send(second, key, 'order-1');
      expect(again.status).toBe(200);
      expect(((await again.json()) as { id: string }).id).toBe(emailId);
      const suppressed = await processApi(second, key, 'GET', `/suppressions?address=${encodeURIComponent(`gone@${RCPT_DOMAIN}`)}`);
      expect(suppressed.body.data).toHaveLength(1);
      const hooks = await processApi(second, key, 'GET', '/webhooks');
      expect((hooks.body.data as { id: string }[]).map((h) => h.id)).toEqual([hook.body.id]);
    } finally {
      await stop(second);
    }
  }, 120_000);
});

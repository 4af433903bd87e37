import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../db/client.js';
import {
  DEV_DATA_DIR,
  DEV_SMTP_PORT,
  DEV_SUBMISSIONS_PORT,
  DEV_SUBMISSION_PORT,
  apiBase,
  devAdminToken,
  devEnvironment,
  queuedForDelivery,
} from '../scripts/dev.js';
import { freePort } from '../scripts/lib/free-port.js';
import { loadConfig } from '../server/shared/config.js';
import { adminTokenHash, ensureAdminToken } from '../server/core/admin-token.js';
import { newSender, receipt, sendEmail } from './helpers/sending.js';
import { startService } from './helpers/service.js';
import { postSignIn } from './helpers/dashboard.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { HttpsReceiver } from './helpers/https-receiver.js';
import { ROOT, processEnv } from './helpers/service-process.js';
import { SmtpSink } from './helpers/smtp-sink.js';

/**
 * The try-it path of docs/getting-started.md, end to end: `npm run dev` spawned as a real process,
 * its printed key used to connect shop.test, verify it, send a receipt to a real-looking recipient and to each
 * simulator address, then read the events, the webhook posts and the captured message, whose DKIM signature mailauth
 * verifies against the domain's stored public key. The recipient's MX is an SMTP sink on loopback (DNS_SERVERS and
 * SMTP_DELIVERY_PORT point at it): capture mode never connects to it.
 */

interface DevRun {
  child: ChildProcessWithoutNullStreams;
  stdout: () => string;
  /** npm's exit, once its whole tree is gone: a code, or the signal it died of (npm re-raises SIGINT and SIGTERM). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const runs = new Set<DevRun>();
const dirs: string[] = [];
let dns: TestDnsServer;
let sink: SmtpSink;
let receiver: HttpsReceiver;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  sink = await SmtpSink.start();
  receiver = await HttpsReceiver.start();
  dns.add('example.com', { type: 'MX', priority: 10, exchange: 'mx.example.com' });
  dns.add('mx.example.com', { type: 'A', address: '127.0.0.1' });
  dns.add('hooks.webhooks.test', { type: 'A', address: '127.0.0.1' });
});

afterAll(async () => {
  // Whatever a failed test left running: its whole process group (npm, the dev script, the server).
  for (const run of runs) stopGroup(run.child, 'SIGKILL');
  await receiver?.close();
  await sink?.stop();
  await dns?.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function stopGroup(child: ChildProcessWithoutNullStreams, signal: NodeJS.Signals): void {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    // already gone
  }
}

/** `npm run dev` in its own process group, as a person runs it (DATA_DIR and HTTP_PORT set, as they may be). */
function startDev(dataDir: string, extra: Record<string, string> = {}, command: string[] = ['run', 'dev']): DevRun {
  const env = processEnv(dataDir, {
    DNS_SERVERS: dns.address,
    SMTP_DELIVERY_PORT: String(sink.port),
    WEBHOOK_INTERVAL_MS: '500',
    ...extra,
  });
  const child = spawn('npm', command, { cwd: ROOT, env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (out += c.toString()));
  // 'close', not 'exit': once every process holding npm's stdout (the dev script, the server) is gone too.
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal })),
  );
  const run = { child, stdout: () => out, exited };
  runs.add(run);
  void exited.then(() => runs.delete(run));
  return run;
}

/** Waits for the printed commands; returns the key and API base they name. */
async function printed(run: DevRun, deadlineMs = 90_000): Promise<{ key: string; api: string; text: string }> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const text = run.stdout();
    const key = /^KEY=(ms_\w+)$/m.exec(text)?.[1];
    const api = /^API=(\S+)$/m.exec(text)?.[1];
    if (key && api && /message\?recipient=/.test(text)) return { key, api, text };
    if (Date.now() > until) throw new Error(`npm run dev printed no commands: ${text}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function client(api: string, key: string) {
  return async (method: string, path: string, body?: unknown): Promise<{ status: number; type: string | null; body: any }> => {
    const res = await fetch(`${api}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    const type = res.headers.get('content-type');
    return { status: res.status, type, body: type?.startsWith('application/json') ? JSON.parse(text) : text };
  };
}

const SIM = 'simulator.mailstead.test';

/** The printed lines to paste: from KEY= to the last command. */
function pasteOf(text: string): string {
  const from = text.indexOf('\nKEY=');
  const to = text.indexOf('\n', text.indexOf('message?recipient=customer@example.com', from));
  return text.slice(from + 1, to);
}

/** Runs pasted lines in a shell as a person would (no `set -e`), answering what it printed, both streams in order. */
function paste(shell: 'bash' | 'sh', lines: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(shell, ['-c', `exec 2>&1\n${lines}`], { env: { PATH: process.env.PATH ?? '' } });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('close', () => resolve(out));
  });
}

describe('npm run dev', () => {
  it('the try-it path: connect shop.test, verify, send to a customer and the simulator, read events, webhooks and the captured, DKIM-signed message', {
    timeout: 180_000,
  }, async () => {
    const root = mkdtempSync(join(tmpdir(), 'mailstead-dev-'));
    dirs.push(root);
    const dataDir = join(root, 'data-dev');
    const run = startDev(dataDir);
    const { key, api, text } = await printed(run);
    expect(api).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/api\/v1$/);
    expect(text).toContain('capture mode');
    expect(text).toContain(`DOMAIN_ID=$(curl -sS -H "$AUTH" "$API/domains?limit=100" | ms_id shop.test)`);
    // MAIL_HOSTNAME (mx.mailstead.test here, the machine's short name by default) is a production concern: no warning.
    expect(text).not.toContain('config.mail_hostname_not_fqdn');
    // The server's own start line came first, saying the mode; the key is kept (0600) for the next run.
    expect(text).toMatch(/"event":"server\.started".*"deliveryMode":"capture"/);
    expect(text.indexOf('"server.started"')).toBeLessThan(text.indexOf('KEY='));
    expect(statSync(join(dataDir, 'dev-key')).mode & 0o777).toBe(0o600);
    const call = client(api, key);
    expect(await (await fetch(api.replace('/api/v1', '/healthz'))).json()).toEqual({ status: 'ok', deliveryMode: 'capture', state: 'sqlite' });
    // The dashboard's address and admin token are printed too (kept 0600 like the key), and the token signs in.
    const dashboard = /^Dashboard: (\S+)\/dashboard \(admin token (msa_\w+)\)/m.exec(text);
    expect(dashboard?.[1]).toBe(api.replace('/api/v1', ''));
    const adminToken = dashboard![2]!;
    expect(statSync(join(dataDir, 'dev-admin-token')).mode & 0o777).toBe(0o600);
    expect((await postSignIn(dashboard![1]!, adminToken)).status).toBe(303);
    expect((await postSignIn(dashboard![1]!, `${adminToken}x`)).status).toBe(401);
    // So is the API reference, served by the dev server itself.
    const reference = /^API reference: (\S+) /m.exec(text)?.[1];
    expect(reference).toBe(api.replace('/api/v1', '/docs'));
    const docs = await fetch(reference!);
    expect(docs.status).toBe(200);
    expect(await docs.text()).toContain('id="sendEmail"');

    // Connect and verify shop.test: no DNS exists for it, and none is needed in capture mode.
    const created = await call('POST', '/domains', { name: 'shop.test' });
    expect(created.status).toBe(201);
    const verified = await call('POST', `/domains/${created.body.id}/verify`);
    expect(verified.body).toMatchObject({
      status: 'verified',
      sending: true,
      checks: { ownership: 'proven', signing: 'published', spf: 'published', receiving: 'published' },
    });

    const hook = await call('POST', '/webhooks', {
      url: `https://hooks.webhooks.test:${receiver.port}/dev`,
      events: ['email.delivered', 'email.bounced', 'email.deferred', 'email.complained'],
    });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);

    // The send the printed commands make (its JSON, the shell's $RUN filled in), plus defer@.
    const printedSend = /\$API\/emails -d '(.+)' \| ms_id\)/.exec(text)?.[1];
    expect(printedSend).toBeDefined();
    const body = JSON.parse(printedSend!.replace(/'\$RUN'/g, '1'));
    expect(body.to).toEqual(['customer@example.com', `delivered@${SIM}`, `bounce+1@${SIM}`, `complaint+1@${SIM}`]);
    body.to.push(`defer@${SIM}`);
    const sent = await call('POST', '/emails', body);
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const refused = await call('POST', '/emails', { ...body, to: [`suppressed@${SIM}`] });
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe('recipient_suppressed');

    // The events, as GET /emails/{id} reads them once the engine has recorded every recipient's first outcome.
    type Event = { recipient: string; status: string; dsn: string; detail: string };
    let events: Event[] = [];
    for (let i = 0; i < 200 && events.length < 6; i++) {
      events = (await call('GET', `/emails/${sent.body.id}`)).body.events;
      if (events.length < 6) await new Promise((r) => setTimeout(r, 100));
    }
    const of = (recipient: string) => events.filter((e) => e.recipient === recipient).map((e) => [e.status, e.dsn, e.detail]);
    expect(of('customer@example.com')).toEqual([['delivered', '2.0.0', 'captured']]);
    expect(of(`delivered@${SIM}`)).toEqual([['delivered', '2.0.0', expect.stringContaining('simulator')]]);
    expect(of(`bounce+1@${SIM}`)).toEqual([['bounced', '5.1.1', expect.stringContaining('simulator')]]);
    expect(of(`complaint+1@${SIM}`)).toEqual([
      ['delivered', '2.0.0', expect.any(String)],
      ['complained', '5.7.1', expect.any(String)],
    ]);
    // defer@ delivers at its third attempt, 15 minutes on (the in-process tests move a clock through it).
    expect(of(`defer@${SIM}`)).toEqual([['deferred', '4.2.1', expect.any(String)]]);

    // Their webhooks, posted to a real HTTPS receiver.
    const posts = (await receiver.waitForRequests(6, 20_000)).map((r) => JSON.parse(r.body.toString('utf8')) as { type: string; data: { recipient: string } });
    expect(posts.map((p) => `${p.type} ${p.data.recipient}`).sort()).toEqual(
      [
        'email.delivered customer@example.com',
        `email.delivered delivered@${SIM}`,
        `email.bounced bounce+1@${SIM}`,
        `email.delivered complaint+1@${SIM}`,
        `email.complained complaint+1@${SIM}`,
        `email.deferred defer@${SIM}`,
      ].sort(),
    );

    // The captured message: raw, signed, and its signature verifies against the public key the service stored.
    const message = await call('GET', `/emails/${sent.body.id}/message?recipient=customer@example.com`);
    expect(message.status).toBe(200);
    expect(message.type).toBe('message/rfc822');
    expect(message.body).toContain('Subject: Your receipt R-1042');
    const db = new Database(join(dataDir, 'mailstead.db'), { readonly: true });
    const stored = db.prepare('SELECT selector, dkim_public_key AS publicKey FROM domain_keys WHERE name = ?').get('shop.test') as {
      selector: string;
      publicKey: string;
    };
    db.close();
    const verdict = await dkimVerify(Buffer.from(message.body), {
      resolver: async (name: string, type: string) => {
        if (type === 'TXT' && name === `${stored.selector}._domainkey.shop.test`) return [[`v=DKIM1; h=sha256; k=rsa; p=${stored.publicKey}`]];
        throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
      },
    });
    expect(verdict.results[0]?.status.result).toBe('pass');
    expect(verdict.results[0]?.signingDomain).toBe('shop.test');

    // Reputation untouched by the simulator: only the customer counts.
    expect((await call('GET', '/account')).body.sending).toMatchObject({ totalSent: 1, totalBounced: 0, totalComplained: 0, sentToday: 5 });
    // Nothing went to the recipient's MX (the sink on SMTP_DELIVERY_PORT), though DNS names one for example.com.
    expect(sink.connections).toBe(0);

    // Ctrl-C: the whole foreground group gets SIGINT; the server stops cleanly and lets go of DATA_DIR.
    stopGroup(run.child, 'SIGINT');
    await run.exited;
    expect(run.stdout()).toMatch(/"event":"process\.stopped","signal":"SIGINT"/);

    // Again on the same DATA_DIR: the same key, printed from DATA_DIR/dev-key, and the same commands (which find
    // shop.test rather than connect it twice).
    const again = startDev(dataDir);
    const second = await printed(again);
    expect(second.key).toBe(key);
    expect(second.text).toContain(`(admin token ${adminToken})`);
    expect(second.text).not.toContain('Created the account');
    const samePaste = (t: string) => pasteOf(t).replace(/^API=.*$/m, 'API=');
    expect(samePaste(second.text)).toBe(samePaste(text));
    expect((await client(second.api, key)('GET', '/domains')).body.data.map((d: { name: string }) => d.name)).toEqual(['shop.test']);
    stopGroup(again.child, 'SIGTERM');
    await again.exited;
    expect(again.stdout()).toMatch(/"event":"process\.stopped","signal":"SIGTERM"/);
  });

  it('the printed commands work on every paste, and print the API’s error when it refuses', { timeout: 180_000 }, async () => {
    const root = mkdtempSync(join(tmpdir(), 'mailstead-dev-'));
    dirs.push(root);
    // SMTP submission on a port of its own (npm run dev's 2587 unless set), for the printed swaks line.
    const run = startDev(join(root, 'data-dev'), { SUBMISSION_PORT: String(await freePort()) });
    const { key, api, text } = await printed(run);
    const lines = pasteOf(text);
    const call = client(api, key);
    // The first paste connects shop.test; the second and third find it (the second used to read `409 domain_exists`
    // as an id, `undefined`, and answer `not_found`), in bash and in a POSIX sh.
    const outputs: string[] = [];
    for (const shell of ['bash', 'bash', 'sh'] as const) {
      const out = await paste(shell, lines);
      outputs.push(out);
      expect(out, out).toContain('"status":"verified"');
      expect(out, out).toMatch(/"status":"sent"/);
      expect(out, out).toContain('Subject: Your receipt R-1042');
      for (const wrong of ['undefined', 'not_found', 'domain_exists', '"error":{']) expect(out, out).not.toContain(wrong);
    }
    const domains = (await call('GET', '/domains')).body.data as { name: string }[];
    expect(domains.map((d) => d.name)).toEqual(['shop.test']);
    const sent = (await call('GET', '/emails')).body.data as { status: string }[];
    expect(sent.map((e) => e.status)).toEqual(['sent', 'sent', 'sent']);

    // A refusal is shown as the API answered it, and nothing after it runs on an id that is not one.
    const refused = await paste('bash', lines.replace(`KEY=${key}`, 'KEY=ms_not_a_key'));
    expect(refused).toContain('"code":"invalid_key"');
    for (const wrong of ['undefined', 'not_found']) expect(refused, refused).not.toContain(wrong);
    expect((await call('GET', '/emails')).body.data).toHaveLength(3);
    // A send the API refuses (a suppressed recipient) prints its error too.
    const suppressed = await paste('bash', lines.replace('"customer@example.com",', `"suppressed@${SIM}",`));
    expect(suppressed).toContain('"code":"recipient_suppressed"');
    expect(suppressed, suppressed).not.toContain('undefined');

    // The printed swaks line sends through SMTP submission (STARTTLS, the key as the password), once shop.test is
    // verified by the lines above: logged with source smtp.
    const swaks = text.split('\n').find((l) => l.startsWith('swaks '));
    expect(swaks, text).toBeDefined();
    const submitted = await paste('bash', `KEY=${key}\n${swaks}`);
    const queuedAs = /250 2\.0\.0 Ok: queued as (\S+)/.exec(submitted)?.[1];
    expect(queuedAs, submitted).toBeDefined();
    const viaSmtp = (await call('GET', '/emails?source=smtp')).body.data as { id: string; source: string; template: string | null }[];
    expect(viaSmtp).toEqual([expect.objectContaining({ id: queuedAs, source: 'smtp', template: null })]);
    stopGroup(run.child, 'SIGTERM');
    await run.exited;
  });

  it('refuses another DELIVERY_MODE: npm run dev is capture mode, production is npm start', { timeout: 60_000 }, async () => {
    const root = mkdtempSync(join(tmpdir(), 'mailstead-dev-'));
    dirs.push(root);
    const run = startDev(join(root, 'data-dev'), { DELIVERY_MODE: 'direct' });
    expect((await run.exited).code).toBe(2);
    expect(run.stdout()).toContain('npm run dev always runs DELIVERY_MODE=capture');
  });

  it('its defaults: ./data-dev, SMTP port 2525 and loopback unless set, capture always; every other variable as given', () => {
    expect(devEnvironment({ HTTP_PORT: '9090' })).toMatchObject({
      DELIVERY_MODE: 'capture',
      DATA_DIR: DEV_DATA_DIR,
      SMTP_PORT: DEV_SMTP_PORT,
      HTTP_PORT: '9090',
    });
    expect(devEnvironment({ DATA_DIR: '/srv/dev', SMTP_PORT: '0' })).toMatchObject({ DATA_DIR: '/srv/dev', SMTP_PORT: '0' });
    // SMTP submission on 2587 (STARTTLS) and 2465 (implicit TLS) unless set: above 1024, no privilege needed.
    expect(devEnvironment({})).toMatchObject({ SUBMISSION_PORT: DEV_SUBMISSION_PORT, SUBMISSIONS_PORT: DEV_SUBMISSIONS_PORT });
    expect([DEV_SUBMISSION_PORT, DEV_SUBMISSIONS_PORT]).toEqual(['2587', '2465']);
    expect(devEnvironment({ SUBMISSION_PORT: '0' })).toMatchObject({ SUBMISSION_PORT: '0', SUBMISSIONS_PORT: '2465' });
    // This machine only, unless told otherwise: it prints a key holding every scope and the dashboard's token.
    expect(devEnvironment({})).toMatchObject({ HTTP_HOST: '127.0.0.1', SMTP_HOST: '127.0.0.1' });
    expect(devEnvironment({ HTTP_HOST: '0.0.0.0', SMTP_HOST: '::' })).toMatchObject({ HTTP_HOST: '0.0.0.0', SMTP_HOST: '::' });
    expect(DEV_DATA_DIR).toBe('./data-dev');
    expect(apiBase('0.0.0.0', 8080)).toBe('http://localhost:8080/api/v1');
    expect(apiBase('::', 8080)).toBe('http://localhost:8080/api/v1');
    expect(apiBase('::1', 8080)).toBe('http://[::1]:8080/api/v1');
    expect(apiBase('127.0.0.1', 1)).toBe('http://127.0.0.1:1/api/v1');
  });
});

describe('npm run dev on a data directory npm start made', () => {
  it('keeps its admin token: none is generated or passed, the stored one stays', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-dev-'));
    dirs.push(dataDir);
    const store = openDatabase(dataDir);
    const { generated } = await ensureAdminToken(store.db, null);
    const before = await adminTokenHash(store.db);
    store.close();
    expect(generated).toMatch(/^msa_/);
    const config = loadConfig({ DATA_DIR: dataDir });
    expect(await devAdminToken(config, {})).toBeNull();
    expect(existsSync(join(dataDir, 'dev-admin-token'))).toBe(false);
    const after = openDatabase(dataDir);
    expect(await adminTokenHash(after.db)).toBe(before);
    after.close();
    // An ADMIN_TOKEN given is still used as given.
    expect(await devAdminToken(config, { ADMIN_TOKEN: 'a-token-of-sixteen-or-more' })).toBe('a-token-of-sixteen-or-more');
  });

  it('a fresh data directory gets a dev token, the same on every run', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-dev-'));
    dirs.push(dataDir);
    const config = loadConfig({ DATA_DIR: dataDir });
    const first = await devAdminToken(config, {});
    expect(first).toMatch(/^msa_\w{40}$/);
    expect(await devAdminToken(config, {})).toBe(first);
  });

  it('refuses one with mail queued for delivery (capture mode would record it delivered unsent), not a dev one', async () => {
    const service = await startService();
    try {
      const sender = await newSender(service);
      expect((await sendEmail(service, sender.key, receipt(sender.from, ['a@example.net', 'b@example.net']))).status).toBe(200);
      const config = loadConfig({ DATA_DIR: service.dataDir });
      expect(await queuedForDelivery(config)).toBe(2);
      writeFileSync(join(service.dataDir, 'dev-key'), 'ms_x\n');
      expect(await queuedForDelivery(config)).toBe(0);
    } finally {
      await service.close();
    }
    const empty = mkdtempSync(join(tmpdir(), 'mailstead-dev-'));
    dirs.push(empty);
    expect(await queuedForDelivery(loadConfig({ DATA_DIR: empty }))).toBe(0);
  });
});

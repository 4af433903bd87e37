import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SMTPServer } from 'smtp-server';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_ENGINE_OPTIONS } from '../mta/delivery-engine.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { HttpsReceiver, TEST_CA_FILE } from './helpers/https-receiver.js';
import {
  type ServiceProcess,
  connectSendingDomain,
  createAccountWithCli,
  processApi,
  processEnv,
  runningProcesses,
  startServiceProcess,
  stateRows,
} from './helpers/service-process.js';

/**
 * Crash safety and shutdown of the real process (docs/api/decisions.md section 3): `node
 * dist/server/app/main.js` delivers to an SMTP sink on loopback; killed with SIGKILL mid-delivery and started again on
 * the same DATA_DIR it delivers every accepted recipient, and the only recipients that arrive twice are ones whose
 * reply the killed process never recorded. On SIGTERM it stops and exits 0, idle or busy.
 */

/** Recipient domains: enough that the engine uses its whole connection budget. */
const DOMAINS = Array.from({ length: 8 }, (_, i) => `d${i}.crash-rcpt.example`);

/** One accepted message at the sink: its recipient and when its data had fully arrived. */
interface Arrival {
  to: string;
  at: number;
}

/**
 * A sink built on smtp-server whose DATA replies the test paces: held until released, then each delayed a few
 * milliseconds; `onArrival` runs when a message's data has fully arrived, before the reply is sent.
 */
class PacedSink {
  arrivals: Arrival[] = [];
  delayMs = 5;
  held = false;
  onArrival: ((count: number) => void) | null = null;
  port = 0;
  private waiting: (() => void)[] = [];
  private server: SMTPServer;

  constructor() {
    this.server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['AUTH'],
      hideSTARTTLS: true,
      logger: false,
      onData: (stream, session, done) => {
        stream.resume();
        stream.on('end', () => {
          for (const r of session.envelope.rcptTo) this.arrivals.push({ to: r.address, at: Date.now() });
          this.onArrival?.(this.arrivals.length);
          const reply = () => setTimeout(() => done(), this.delayMs);
          if (this.held) this.waiting.push(reply);
          else reply();
        });
      },
    });
    this.server.on('error', () => undefined);
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', () => resolve()));
    const address = this.server.server.address();
    this.port = typeof address === 'object' && address ? address.port : 0;
    return this;
  }

  release(): void {
    this.held = false;
    for (const reply of this.waiting.splice(0)) reply();
  }

  /** How many times each recipient arrived. */
  counts(): Map<string, number> {
    const m = new Map<string, number>();
    for (const a of this.arrivals) m.set(a.to, (m.get(a.to) ?? 0) + 1);
    return m;
  }

  stop(): Promise<void> {
    this.release();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

type Proc = ServiceProcess;

let dns: TestDnsServer;
let sink: PacedSink;
const dataDirs: string[] = [];
const running = runningProcesses;

function envFor(dataDir: string): Record<string, string> {
  return processEnv(dataDir, {
    DNS_SERVERS: dns.address,
    SMTP_DELIVERY_PORT: String(sink.port),
    // The webhook receiver's test CA: Node reads it only at start.
    NODE_EXTRA_CA_CERTS: TEST_CA_FILE,
  });
}

const startProcess = (dataDir: string, opts: Parameters<typeof startServiceProcess>[1] = {}) => startServiceProcess(envFor(dataDir), opts);
const createAccount = async (dataDir: string) => (await createAccountWithCli(envFor(dataDir), 'Crash')).key;
const api = processApi;
const sendingDomain = (proc: Proc, dataDir: string, key: string, name: string) => connectSendingDomain(proc, dataDir, key, name);

/** Queues one email per recipient through POST /emails, `parallel` requests at a time; returns id → recipient. */
async function queueAll(proc: Proc, key: string, from: string, recipients: string[], parallel = 16): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < recipients.length) {
        const to = recipients[next++]!;
        const res = await api(proc, key, 'POST', '/emails', { from, to, template: { name: 'receipt', receiptNumber: `R-${to}`, total: '$10.00' } });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        ids.set(res.body.id as string, to);
      }
    }),
  );
  return ids;
}

/** Recipients with a delivered event in the state, read directly (the process is not running). */
async function recordedDeliveries(dataDir: string): Promise<Set<string>> {
  const rows = await stateRows<{ recipient: string }>(dataDir, "SELECT recipient FROM email_events WHERE status = 'delivered'");
  return new Set(rows.map((r) => r.recipient));
}

async function waitFor(what: string, deadlineMs: number, check: () => boolean | Promise<boolean>): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Resolves with the exit, or rejects after `ms`. */
async function exitWithin(proc: Proc, ms: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the process did not exit within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([proc.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function newDataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'mailstead-crash-'));
  dataDirs.push(dir);
  return dir;
}

beforeAll(async () => {
  dns = await TestDnsServer.start();
  sink = await new PacedSink().listen();
  for (const d of DOMAINS) dns.add(d, { type: 'MX', priority: 10, exchange: 'mx.crash-rcpt.example' });
  dns.add('mx.crash-rcpt.example', { type: 'A', address: '127.0.0.1' });
});

afterEach(() => {
  sink.onArrival = null;
  sink.release();
  sink.arrivals = [];
  sink.delayMs = 5;
});

afterAll(async () => {
  for (const child of running) child.kill('SIGKILL');
  await sink?.stop();
  await dns?.stop();
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
});

describe('kill -9 mid-delivery', () => {
  it('delivers every accepted recipient after a restart; only replies the killed process never recorded are sent twice', { timeout: 60_000 }, async () => {
    const TOTAL = 300;
    const KILL_AT = 120;
    const maxInFlight = DEFAULT_ENGINE_OPTIONS.maxConnections;
    const dataDir = newDataDir();
    // The server creates the database on its first start; the CLI works beside it.
    const first = await startProcess(dataDir);
    const key = await createAccount(dataDir);
    await sendingDomain(first, dataDir, key, 'crash-shop.example.com');

    // Replies are held while the messages are queued, so the kill lands mid-delivery rather than after it.
    sink.held = true;
    const recipients = Array.from({ length: TOTAL }, (_, i) => `user${i}@${DOMAINS[i % DOMAINS.length]}`);
    const emails = await queueAll(first, key, 'billing@crash-shop.example.com', recipients);
    expect(emails.size).toBe(TOTAL);

    // SIGKILL the moment the KILL_AT-th message has arrived, before the sink answers it.
    sink.onArrival = (count) => {
      if (count === KILL_AT) first.child.kill('SIGKILL');
    };
    sink.release();
    const died = await exitWithin(first, 20_000);
    expect(died.signal).toBe('SIGKILL');
    sink.onArrival = null;
    // Let data the dead process had already written reach the sink.
    await new Promise((r) => setTimeout(r, 300));

    const arrivedBefore = sink.counts();
    const recorded = await recordedDeliveries(dataDir);
    expect(arrivedBefore.size).toBeGreaterThanOrEqual(KILL_AT);
    expect(arrivedBefore.size, 'some but not all had arrived when the process died').toBeLessThan(TOTAL);
    expect([...arrivedBefore.values()].every((n) => n === 1)).toBe(true);
    // A recorded delivery is one the sink really answered.
    for (const r of recorded) expect(arrivedBefore.has(r), r).toBe(true);
    const unrecorded = [...arrivedBefore.keys()].filter((r) => !recorded.has(r));
    // At most one unanswered transaction per open connection.
    expect(unrecorded.length).toBeLessThanOrEqual(maxInFlight);

    const second = await startProcess(dataDir);
    await waitFor('every recipient to arrive', 40_000, () => sink.counts().size === TOTAL);
    // Every email ends with exactly one delivered event, for its recipient.
    await waitFor('every delivery to be recorded', 20_000, async () => (await recordedDeliveries(dataDir)).size === TOTAL);

    const counts = sink.counts();
    expect([...counts.keys()].sort()).toEqual([...recipients].sort());
    const twice = [...counts].filter(([, n]) => n > 1).map(([r]) => r);
    expect([...counts.values()].every((n) => n <= 2)).toBe(true);
    // The only duplicates are recipients whose reply the killed process had not recorded.
    for (const r of twice) expect(recorded.has(r), `${r} was recorded before the kill and sent again`).toBe(false);
    for (const r of twice) expect(arrivedBefore.has(r)).toBe(true);
    expect(twice.length).toBeLessThanOrEqual(maxInFlight);

    for (const [id, to] of emails) {
      const res = await api(second, key, 'GET', `/emails/${id}`);
      expect(res.status).toBe(200);
      const delivered = (res.body.events as { recipient: string; status: string }[]).filter((e) => e.status === 'delivered');
      expect(
        delivered.map((e) => e.recipient),
        id,
      ).toEqual([to]);
      expect(res.body.deliveredAt).not.toBeNull();
    }

    second.child.kill('SIGTERM');
    expect(await exitWithin(second, 10_000)).toEqual({ code: 0, signal: null });
  });
});

describe('SIGTERM', () => {
  it('exits 0 promptly when idle', async () => {
    const dataDir = newDataDir();
    const proc = await startProcess(dataDir);
    // Idle: listening, nothing queued, the engine polling an empty queue.
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    proc.child.kill('SIGTERM');
    expect(await exitWithin(proc, 5_000)).toEqual({ code: 0, signal: null });
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(proc.logs.some((l) => l.includes('"process.stopped"'))).toBe(true);
  });

  it('exits 0 on a SIGTERM sent the moment it reports http.listening', async () => {
    // A supervisor may stop the process as soon as it says it is ready: the signal must be handled from then on.
    // Several starts at once, each signalled on the very line, so a window between the two shows up reliably.
    const procs = await Promise.all(Array.from({ length: 6 }, () => startProcess(newDataDir(), { onListening: (child) => child.kill('SIGTERM') })));
    const exits = await Promise.all(procs.map((p) => exitWithin(p, 5_000)));
    expect(exits).toEqual(procs.map(() => ({ code: 0, signal: null })));
  });

  it('mid-delivery: exits 0 after finishing or releasing what it held; a restart delivers the rest with no duplicate', { timeout: 60_000 }, async () => {
    const TOTAL = 150;
    const dataDir = newDataDir();
    // The server creates the database on its first start; the CLI works beside it.
    const first = await startProcess(dataDir);
    const key = await createAccount(dataDir);
    await sendingDomain(first, dataDir, key, 'stop-shop.example.com');
    sink.held = true;
    const recipients = Array.from({ length: TOTAL }, (_, i) => `stop${i}@${DOMAINS[i % DOMAINS.length]}`);
    await queueAll(first, key, 'billing@stop-shop.example.com', recipients);

    sink.delayMs = 10;
    sink.onArrival = (count) => {
      if (count === 40) first.child.kill('SIGTERM');
    };
    sink.release();
    expect(await exitWithin(first, 15_000)).toEqual({ code: 0, signal: null });
    sink.onArrival = null;
    const arrivedBefore = sink.counts();
    expect(arrivedBefore.size).toBeLessThan(TOTAL);
    // Whatever arrived was answered and recorded before the exit.
    const recorded = await recordedDeliveries(dataDir);
    expect([...arrivedBefore.keys()].filter((r) => !recorded.has(r))).toEqual([]);

    sink.delayMs = 1;
    const second = await startProcess(dataDir);
    await waitFor('every recipient to arrive', 30_000, () => sink.counts().size === TOTAL);
    await waitFor('every delivery to be recorded', 20_000, async () => (await recordedDeliveries(dataDir)).size === TOTAL);
    expect([...sink.counts().values()].every((n) => n === 1)).toBe(true);
    second.child.kill('SIGTERM');
    expect(await exitWithin(second, 10_000)).toEqual({ code: 0, signal: null });
  });
});

describe('kill -9 between an outcome and its webhook post', () => {
  it('posts the delivery after a restart, and records it delivered once', { timeout: 60_000 }, async () => {
    const receiver = await HttpsReceiver.start();
    try {
      dns.add('hooks.webhooks.test', { type: 'A', address: '127.0.0.1' });
      // The first post is held unanswered: the process dies while it is in flight.
      receiver.respond({ stallMs: 120_000 });
      const dataDir = newDataDir();
      const first = await startProcess(dataDir);
      const key = await createAccount(dataDir);
      await sendingDomain(first, dataDir, key, 'hook-shop.example.com');
      const hook = await api(first, key, 'POST', '/webhooks', { url: `https://hooks.webhooks.test:${receiver.port}/in`, events: ['email.delivered'] });
      expect(hook.status, JSON.stringify(hook.body)).toBe(201);
      await queueAll(first, key, 'billing@hook-shop.example.com', [`hooked@${DOMAINS[0]}`]);

      await waitFor('the webhook post to arrive', 20_000, () => receiver.requests.length >= 1);
      first.child.kill('SIGKILL');
      await exitWithin(first, 5000);
      const deliveryId = String(receiver.requests[0]!.headers['x-service-delivery']);
      const read = (sql: string) => stateRows<{ delivered_at: number | null; attempts: number }>(dataDir, sql, [deliveryId]);
      // The outcome and its delivery row were committed together; the post's answer never was.
      expect(await recordedDeliveries(dataDir)).toEqual(new Set([`hooked@${DOMAINS[0]}`]));
      expect(await read('SELECT delivered_at, attempts FROM webhook_deliveries WHERE id = ?')).toEqual([{ delivered_at: null, attempts: 0 }]);

      receiver.respond({ status: 200 });
      const second = await startProcess(dataDir);
      await waitFor(
        'the delivery to be recorded delivered',
        20_000,
        async () => (await read('SELECT delivered_at, attempts FROM webhook_deliveries WHERE id = ?'))[0]?.delivered_at !== null,
      );
      expect(await read('SELECT delivered_at, attempts FROM webhook_deliveries WHERE id = ?')).toEqual([{ delivered_at: expect.any(Number), attempts: 1 }]);
      // The receiver saw the same delivery id twice (the killed attempt and the retry) and drops the repeat by it.
      expect(receiver.requests.map((r) => r.headers['x-service-delivery'])).toEqual([deliveryId, deliveryId]);
      second.child.kill('SIGTERM');
      expect(await exitWithin(second, 10_000)).toEqual({ code: 0, signal: null });
    } finally {
      await receiver.close();
    }
  });
});

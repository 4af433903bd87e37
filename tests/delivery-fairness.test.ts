import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { emailEvents, outboundRecipients } from '../db/schema/index.js';
import { DEFAULT_ENGINE_OPTIONS, createDeliveryEngine, type DeliveryEngine, type EngineOptions } from '../mta/delivery-engine.js';
import { resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import type { TestDnsServer } from './helpers/dns-server.js';
import { newSender, receipt, recipients, type Sender } from './helpers/sending.js';
import type { TestService } from './helpers/service.js';
import type { SinkAnswer, SmtpSink } from './helpers/smtp-sink.js';
import { one } from '../db/sql.js';

/**
 * Fairness between tenants, measured in real time against a tarpit SMTP sink and a silent DNS
 * server on loopback, with the engine's own loop and its default limits (DEFAULT_ENGINE_OPTIONS: 64 connections, 20
 * per destination, 20 per account): whatever one account sends to slow or broken destinations, another account's message to a healthy MX
 * is delivered within 5 seconds.
 */

const HEALTHY_WITHIN_MS = 5000;
/** The connections one account may hold at most. */
const SHARE = DEFAULT_ENGINE_OPTIONS.perAccount;
/** A tarpit holds its end-of-DATA reply this long (the reproduction used 40 s). */
const TARPIT_MS = 40_000;
/** Long enough that the engine waits out the tarpit rather than timing out of it. */
const PATIENT_TIMEOUTS = { connectTimeoutMs: 2000, greetingTimeoutMs: 2000, socketTimeoutMs: 60_000 };

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;
let engine: DeliveryEngine | null = null;
/** Releases every reply the tarpit still holds (and makes it answer at once from then on). */
let openTarpit: () => void = () => undefined;

beforeAll(async () => {
  ({ dns, sink, service } = await startDeliveryRig());
});

afterAll(() => stopDeliveryRig({ dns, sink, service }));

beforeEach(async () => {
  await service.deps.db.delete(outboundRecipients);
  resetDeliveryRig({ dns, sink });
  sink.resetConnections();
});

afterEach(async () => {
  openTarpit();
  dns.clear();
  await engine?.stop();
  engine = null;
});

async function startEngine(options: Partial<EngineOptions> = {}): Promise<DeliveryEngine> {
  const e = createDeliveryEngine(service.deps, { timeouts: PATIENT_TIMEOUTS, ...options });
  await e.start();
  engine = e;
  return e;
}

/** Mail to recipients at `*.tarpit.example` gets its end-of-DATA reply only after TARPIT_MS (or at the test's end). */
function tarpit(): void {
  let open = false;
  const waiting = new Set<() => void>();
  openTarpit = () => {
    open = true;
    for (const release of waiting) release();
    waiting.clear();
  };
  sink.data = (to) => {
    if (open || !to.some((r) => r.endsWith('.tarpit.example'))) return 'accept';
    return new Promise<SinkAnswer>((resolve) => {
      const release = () => resolve('accept');
      waiting.add(release);
      setTimeout(release, TARPIT_MS).unref();
    });
  };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

async function send(s: Sender, to: string[]): Promise<string> {
  const res = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, to) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

async function delivered(emailId: string): Promise<boolean> {
  return (
    (await one(
      service.deps.db
        .select()
        .from(emailEvents)
        .where(and(eq(emailEvents.emailId, emailId), eq(emailEvents.status, 'delivered'))),
    )) !== undefined
  );
}

/** Milliseconds from a healthy account's POST /emails to its delivered event, with everything else still going on. */
async function healthySendLatency(): Promise<number> {
  const healthy = await newSender(service, { name: 'Healthy tenant' });
  const started = Date.now();
  const id = await send(healthy, ['someone@example.net']);
  await waitFor(() => delivered(id), 60_000, 'the healthy message to be delivered');
  return Date.now() - started;
}

describe('fairness between accounts', () => {
  it('delivers a healthy destination’s mail within 5 s while another account fills four tarpit destinations', { timeout: 90_000 }, async () => {
    tarpit();
    const domains = [1, 2, 3, 4].map((i) => `d${i}.tarpit.example`);
    for (const d of domains) {
      dns.add(d, { type: 'MX', priority: 10, exchange: 'mx.example.net' });
    }
    await startEngine();
    const noisy = await newSender(service, { name: 'Noisy tenant' });
    for (const d of domains) await send(noisy, recipients(SHARE, d));
    // The noisy account's connections are open and each one is stuck in its tarpit, as many as it may hold.
    await waitFor(() => sink.open >= SHARE, 10_000, 'the noisy account to hold its connections');
    await sleep(300);

    const latency = await healthySendLatency();
    process.stdout.write(`fairness (tarpit): healthy message delivered in ${latency} ms; sink peak ${sink.peakOpen} connections\n`);
    expect(latency).toBeLessThan(HEALTHY_WITHIN_MS);
    // One account never held more connections than its share, however much it had queued.
    expect(sink.peakOpen).toBeLessThanOrEqual(SHARE + 1);
  });

  it('delivers a healthy destination’s mail within 5 s while another account’s domains have 20 MX names that never answer', { timeout: 90_000 }, async () => {
    const domains = [1, 2, 3, 4].map((i) => `d${i}.silent.example`);
    for (const d of domains) {
      for (let h = 1; h <= 20; h++) {
        dns.add(d, { type: 'MX', priority: h, exchange: `mx${h}.${d}` });
        dns.silence(`mx${h}.${d}`);
      }
    }
    await startEngine();
    const noisy = await newSender(service, { name: 'Noisy tenant' });
    const ids: string[] = [];
    for (const d of domains) ids.push(await send(noisy, recipients(16, d)));
    await sleep(200);

    const latency = await healthySendLatency();
    process.stdout.write(`fairness (silent DNS): healthy message delivered in ${latency} ms\n`);
    expect(latency).toBeLessThan(HEALTHY_WITHIN_MS);

    // Resolution is bounded (the hosts are looked up at once, not one after another) and shared by the recipients
    // of a domain: all 64 are deferred 4.4.3 within seconds, and each silent host was asked about a few times, not
    // once per recipient.
    const deferred = async () => (await service.deps.db.select().from(emailEvents)).filter((e) => ids.includes(e.emailId) && e.status === 'deferred');
    await waitFor(async () => (await deferred()).length === 64, 15_000, 'the 64 recipients of the silent domains to be deferred');
    expect(new Set((await deferred()).map((e) => e.dsn))).toEqual(new Set(['4.4.3']));
    const asked = dns.queries.filter((q) => q.name === 'mx7.d2.silent.example' && q.type === 'A').length;
    expect(asked).toBeGreaterThan(0);
    expect(asked).toBeLessThanOrEqual(3);
  });

  it('claims another account’s mail at once while one account has a backlog larger than the claim batch', { timeout: 90_000 }, async () => {
    tarpit();
    dns.add('backlog.tarpit.example', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
    await startEngine();
    const noisy = await newSender(service, { name: 'Backlogged tenant' });
    // 300 recipients, more than the 200 the engine holds at once, all for one tarpit destination.
    for (let i = 0; i < 6; i++)
      await send(
        noisy,
        recipients(50, `backlog.tarpit.example`).map((r) => r.replace('user', `u${i}-`)),
      );
    await waitFor(() => sink.open >= 8, 10_000, 'the backlogged account to hold its destination’s connections');
    await sleep(300);

    const latency = await healthySendLatency();
    process.stdout.write(`fairness (backlog): healthy message delivered in ${latency} ms\n`);
    expect(latency).toBeLessThan(HEALTHY_WITHIN_MS);
  });
});

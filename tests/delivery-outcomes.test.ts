import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { outboundRecipients } from '../db/schema/index.js';
import type { DeliveryEngine } from '../mta/delivery-engine.js';
import { DELIVERY_WINDOW_MS } from '../server/core/delivery-schedule.js';
import { parseVerp } from '../mta/verp.js';
import { parsePrometheusText, sampleValueOrZero } from './helpers/prometheus-text.js';
import { resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import type { TestDnsServer } from './helpers/dns-server.js';
import { accountRow, newSender, newSubSender, receipt } from './helpers/sending.js';
import type { TestService } from './helpers/service.js';
import type { SmtpSink } from './helpers/smtp-sink.js';

/**
 * Outcomes of delivery (docs/api/decisions.md sections 2 and 3), against a real SMTP sink on loopback reached through MX
 * records of a test DNS server: one transaction per recipient with its own VERP sender, one event per recipient per
 * attempt carrying the DSN and the server's own reply text, 2xx delivered, 5xx bounced (a 5.x.x bounce suppresses on
 * the acting account and its parent), 4xx and connection failures deferred and retried on the schedule counted from
 * each attempt, and bounced 4.4.7 without suppression 5 days after the send.
 */

interface EmailEvent {
  recipient: string;
  status: string;
  dsn: string;
  detail: string;
  occurredAt: string;
}

interface EmailBody {
  id: string;
  to: string[];
  status: string;
  deliveredAt: string | null;
  bouncedAt: string | null;
  events: EmailEvent[];
}

const MIN = 60_000;
const HOST = 'mx.mailstead.test';

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;
let engine: DeliveryEngine;

beforeAll(async () => {
  ({ dns, sink, service, engine } = await startDeliveryRig());
});

afterAll(() => stopDeliveryRig({ dns, sink, service }));

beforeEach(async () => {
  // Each test counts the recipients a round claims: recipients an earlier test left deferred would be counted too.
  await service.deps.db.delete(outboundRecipients);
  resetDeliveryRig({ dns, sink });
  // A host that refuses: nothing listens on 127.0.0.2.
  dns.add('down.example', { type: 'MX', priority: 10, exchange: 'mx.down.example' });
  dns.add('mx.down.example', { type: 'A', address: '127.0.0.2' });
});

async function send(s: { key: string; from: string }, to: string | string[], opts: { account?: string } = {}): Promise<string> {
  const res = await service.api('POST', '/emails', { key: s.key, account: opts.account, body: receipt(s.from, to) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

async function email(key: string, id: string, account?: string): Promise<EmailBody> {
  const res = await service.api<EmailBody>('GET', `/emails/${id}`, { key, account });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

const iso = (ms: number) => new Date(ms).toISOString();

async function queueRow(id: string, recipient: string) {
  return (await service.deps.db.select().from(outboundRecipients).where(eq(outboundRecipients.messageId, id))).find((r) => r.recipient === recipient);
}

async function suppressed(key: string, address: string, account?: string): Promise<{ address: string; reason: string; detail: string }[]> {
  const res = await service.api('GET', `/suppressions?address=${encodeURIComponent(address)}`, { key, account });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.data;
}

/** Runs the engine at each due time of the recipient until it has a final outcome; returns the attempt times. */
async function runToFinal(id: string, recipient: string, limit = 200): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < limit; i++) {
    times.push(service.clock.now());
    expect(await engine.runOnce()).toBeGreaterThan(0);
    const row = await queueRow(id, recipient);
    if (row?.status !== 'queued') return times;
    service.clock.set(row.nextAttemptAt);
  }
  throw new Error(`${recipient} never reached a final outcome`);
}

describe('one SMTP transaction per recipient', () => {
  it('sends each recipient its own transaction with a VERP sender naming the email and the recipient index in to', async () => {
    const s = await newSender(service);
    const to = ['first@example.net', 'second@example.net', 'third@example.net'];
    const id = await send(s, to);
    await engine.runOnce();

    expect(sink.received).toHaveLength(3);
    for (const r of sink.received) {
      expect(r.to).toHaveLength(1);
      expect(r.from).toMatch(/^bounce\+[0-9a-f]{32}\.\d+\.[0-9a-f]{10}@mx\.mailstead\.test$/);
      expect(parseVerp(r.from, HOST, service.deps.secretKey)).toEqual({ emailId: id, recipientIndex: to.indexOf(r.to[0]!), signed: true });
    }
    expect(sink.received.map((r) => r.to[0]).sort()).toEqual([...to].sort());

    const body = await email(s.key, id);
    expect(body.events.map((e) => [e.recipient, e.status, e.dsn]).sort()).toEqual(to.map((r) => [r, 'delivered', '2.0.0']).sort());
    for (const e of body.events) {
      expect(e.detail.length).toBeGreaterThan(0);
      expect(e.occurredAt).toBe(iso(service.clock.now()));
    }
  });
});

describe('the outcome of each recipient, from its own reply', () => {
  it('records delivered, bounced and deferred per recipient with the DSN and the reply text', async () => {
    const s = await newSender(service);
    sink.rcpt = (address) => {
      switch (address) {
        case 'unknown@example.net':
          return { code: 550, message: '5.1.1 <unknown@example.net>: Recipient address rejected: User unknown' };
        case 'plain@example.net':
          return { code: 550, message: 'Requested action not taken: mailbox unavailable' };
        case 'mixed@example.net':
          return { code: 550, message: '4.2.2 Mailbox over quota' };
        case 'grey@example.net':
          return { code: 451, message: '4.7.1 Greylisted, please try again later' };
        case 'busy@example.net':
          return { code: 452, message: 'Too busy right now' };
        default:
          return 'accept';
      }
    };
    sink.data = (rcpts) => (rcpts.includes('policy@example.net') ? { code: 554, message: '5.7.1 Message rejected by content policy' } : 'accept');
    const to = [
      'ok@example.net',
      'unknown@example.net',
      'plain@example.net',
      'mixed@example.net',
      'grey@example.net',
      'busy@example.net',
      'policy@example.net',
    ];
    const id = await send(s, to);
    await engine.runOnce();

    const body = await email(s.key, id);
    expect(body.events).toHaveLength(to.length);
    const by = Object.fromEntries(body.events.map((e) => [e.recipient, e]));
    expect(by['ok@example.net']).toMatchObject({ status: 'delivered', dsn: '2.0.0' });
    expect(by['unknown@example.net']).toMatchObject({
      status: 'bounced',
      dsn: '5.1.1',
      detail: expect.stringContaining('Recipient address rejected: User unknown'),
    });
    expect(by['plain@example.net']).toMatchObject({
      status: 'bounced',
      dsn: '5.0.0',
      detail: expect.stringContaining('Requested action not taken: mailbox unavailable'),
    });
    expect(by['mixed@example.net']).toMatchObject({ status: 'bounced', dsn: '5.0.0', detail: expect.stringContaining('Mailbox over quota') });
    expect(by['grey@example.net']).toMatchObject({ status: 'deferred', dsn: '4.7.1', detail: expect.stringContaining('Greylisted, please try again later') });
    expect(by['busy@example.net']).toMatchObject({ status: 'deferred', dsn: '4.0.0', detail: expect.stringContaining('Too busy right now') });
    expect(by['policy@example.net']).toMatchObject({ status: 'bounced', dsn: '5.7.1', detail: expect.stringContaining('Message rejected by content policy') });
    expect(sink.deliveredTo()).toEqual(['ok@example.net']);

    // Only the 5.x.x bounces are suppressed, with the reply as the detail.
    for (const address of ['unknown@example.net', 'plain@example.net', 'mixed@example.net', 'policy@example.net']) {
      expect(await suppressed(s.key, address)).toEqual([expect.objectContaining({ address, reason: 'bounce', detail: by[address]!.detail })]);
    }
    for (const address of ['ok@example.net', 'grey@example.net', 'busy@example.net']) expect(await suppressed(s.key, address)).toEqual([]);
    expect((await accountRow(service, s.account.id)).totalBounced).toBe(4);

    // The deferred ones are due again after the first gap, not before.
    expect(await queueRow(id, 'grey@example.net')).toMatchObject({ status: 'queued', nextAttemptAt: service.clock.now() + 5 * MIN });
    expect(await queueRow(id, 'busy@example.net')).toMatchObject({ status: 'queued', nextAttemptAt: service.clock.now() + 5 * MIN });
  });

  it('sets deliveredAt and bouncedAt to the time of the first such event of any recipient', async () => {
    const s = await newSender(service);
    const t0 = service.clock.now();
    sink.rcpt = (address, attempt) => {
      if (address === 'late@example.net' && attempt === 1) return { code: 450, message: '4.2.1 try later' };
      if (address === 'gone@example.net') return { code: 550, message: '5.1.1 gone' };
      if (address === 'gone-later@example.net') return attempt === 1 ? { code: 450, message: '4.2.1 try later' } : { code: 550, message: '5.1.1 gone too' };
      return 'accept';
    };
    const id = await send(s, ['now@example.net', 'late@example.net', 'gone@example.net', 'gone-later@example.net']);
    await engine.runOnce();
    let body = await email(s.key, id);
    expect(body.deliveredAt).toBe(iso(t0));
    expect(body.bouncedAt).toBe(iso(t0));

    service.clock.advance(5 * MIN);
    expect(await engine.runOnce()).toBe(2);
    body = await email(s.key, id);
    // Later events of the same kind leave the first time as it was.
    expect(body.deliveredAt).toBe(iso(t0));
    expect(body.bouncedAt).toBe(iso(t0));
    expect(body.events.filter((e) => e.recipient === 'late@example.net').map((e) => [e.status, e.occurredAt])).toEqual([
      ['deferred', iso(t0)],
      ['delivered', iso(t0 + 5 * MIN)],
    ]);
    expect(body.events.filter((e) => e.recipient === 'gone-later@example.net').map((e) => [e.status, e.dsn, e.occurredAt])).toEqual([
      ['deferred', '4.2.1', iso(t0)],
      ['bounced', '5.1.1', iso(t0 + 5 * MIN)],
    ]);
    // In the order they happened.
    const times = body.events.map((e) => Date.parse(e.occurredAt));
    expect(times).toEqual([...times].sort((a, b) => a - b));
  });

  it('keeps deliveredAt null when nothing was delivered, and bouncedAt null when nothing bounced', async () => {
    const s = await newSender(service);
    sink.rcpt = () => ({ code: 550, message: '5.1.1 nobody' });
    const bounced = await send(s, 'nobody@example.net');
    await engine.runOnce();
    expect(await email(s.key, bounced)).toMatchObject({ deliveredAt: null, bouncedAt: iso(service.clock.now()) });

    sink.rcpt = () => 'accept';
    const delivered = await send(s, 'somebody@example.net');
    await engine.runOnce();
    expect(await email(s.key, delivered)).toMatchObject({ deliveredAt: iso(service.clock.now()), bouncedAt: null });
  });
});

describe('suppression after a 5.x.x bounce', () => {
  it('puts the address on the sub-account list and on its parent list, with the reply as the detail', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    sink.rcpt = (address) =>
      address === 'hard@example.net' ? { code: 550, message: '5.1.1 The email account that you tried to reach does not exist' } : 'accept';
    const id = await send({ key: parent.key, from: sub.from }, ['hard@example.net', 'fine@example.net'], { account: sub.id });
    await engine.runOnce();

    const body = await email(parent.key, id, sub.id);
    const event = body.events.find((e) => e.recipient === 'hard@example.net')!;
    expect(event).toMatchObject({ status: 'bounced', dsn: '5.1.1' });
    const entry = { address: 'hard@example.net', reason: 'bounce', detail: event.detail };
    expect(event.detail).toContain('The email account that you tried to reach does not exist');
    expect(await suppressed(parent.key, 'hard@example.net', sub.id)).toEqual([expect.objectContaining(entry)]);
    expect(await suppressed(parent.key, 'hard@example.net')).toEqual([expect.objectContaining(entry)]);
    expect(await suppressed(parent.key, 'fine@example.net', sub.id)).toEqual([]);
    expect(await suppressed(parent.key, 'fine@example.net')).toEqual([]);

    // Now listed: a further send to it, from either account, is refused.
    const again = await service.api('POST', '/emails', { key: parent.key, account: sub.id, body: receipt(sub.from, 'hard@example.net') });
    expect(again.status).toBe(422);
    expect(again.body.error.code).toBe('recipient_suppressed');
    const fromParent = await service.api('POST', '/emails', { key: parent.key, body: receipt(parent.from, 'HARD@example.net') });
    expect(fromParent.status).toBe(422);
    expect(fromParent.body.error.code).toBe('recipient_suppressed');
  });

  it('does not suppress on a deferral', async () => {
    const s = await newSender(service);
    sink.rcpt = () => ({ code: 450, message: '4.2.1 Mailbox busy' });
    await send(s, 'busy@example.net');
    await engine.runOnce();
    expect(await suppressed(s.key, 'busy@example.net')).toEqual([]);
  });
});

describe('deferrals and retries', () => {
  it('retries after 5, 10, 20, 40 and 80 minutes, then every 2 hours, counted from each attempt', async () => {
    const s = await newSender(service);
    sink.rcpt = (_address, attempt) => (attempt <= 8 ? { code: 451, message: `4.7.1 Greylisted, attempt ${attempt}` } : 'accept');
    const id = await send(s, 'patient@example.net');
    const t0 = service.clock.now();
    await engine.runOnce();
    const gaps = [5, 10, 20, 40, 80, 120, 120, 120].map((m) => m * MIN);
    let at = t0;
    for (const gap of gaps) {
      // Not due a moment before the gap has passed.
      service.clock.set(at + gap - 1);
      expect(await engine.runOnce()).toBe(0);
      service.clock.set(at + gap);
      expect(await engine.runOnce()).toBe(1);
      at += gap;
    }
    const body = await email(s.key, id);
    expect(body.events.map((e) => [e.status, e.dsn, e.occurredAt])).toEqual([
      ...[0, 5, 15, 35, 75, 155, 275, 395].map((m) => ['deferred', '4.7.1', iso(t0 + m * MIN)]),
      ['delivered', '2.0.0', iso(t0 + 515 * MIN)],
    ]);
    expect(body.events[3]!.detail).toContain('Greylisted, attempt 4');
    expect(body.deliveredAt).toBe(iso(t0 + 515 * MIN));
    expect(sink.deliveredTo()).toEqual(['patient@example.net']);
  });

  it('counts the next gap from when the attempt actually ran, not from when it was due', async () => {
    const s = await newSender(service);
    sink.rcpt = (_, attempt) => (attempt <= 2 ? { code: 450, message: '4.2.1 later' } : 'accept');
    const id = await send(s, 'late@example.net');
    const t0 = service.clock.now();
    await engine.runOnce();
    // The worker ran 7 minutes late for the first retry.
    service.clock.set(t0 + 12 * MIN);
    expect(await engine.runOnce()).toBe(1);
    expect((await queueRow(id, 'late@example.net'))!.nextAttemptAt).toBe(t0 + 12 * MIN + 10 * MIN);
    service.clock.set(t0 + 22 * MIN - 1);
    expect(await engine.runOnce()).toBe(0);
    service.clock.set(t0 + 22 * MIN);
    expect(await engine.runOnce()).toBe(1);
    expect((await email(s.key, id)).events.map((e) => e.status)).toEqual(['deferred', 'deferred', 'delivered']);
  });

  it('defers a refused connection with 4.4.1 and a dropped connection with 4.4.2, then delivers on the retry', async () => {
    const s = await newSender(service);
    const refused = await send(s, 'someone@down.example');
    await engine.runOnce();
    expect((await email(s.key, refused)).events).toEqual([expect.objectContaining({ recipient: 'someone@down.example', status: 'deferred', dsn: '4.4.1' })]);
    expect(await queueRow(refused, 'someone@down.example')).toMatchObject({ status: 'queued', nextAttemptAt: service.clock.now() + 5 * MIN });

    // The MX comes back.
    dns.drop('mx.down.example');
    dns.add('mx.down.example', { type: 'A', address: '127.0.0.1' });
    sink.rcpt = (address, attempt) => (address === 'dropped@example.net' && attempt === 1 ? 'drop' : 'accept');
    const dropped = await send(s, 'dropped@example.net');
    await engine.runOnce();
    const first = (await email(s.key, dropped)).events;
    expect(first).toEqual([expect.objectContaining({ recipient: 'dropped@example.net', status: 'deferred', dsn: '4.4.2' })]);
    expect(first[0]!.detail.length).toBeGreaterThan(0);
    expect(sink.deliveredTo()).toEqual([]);

    service.clock.advance(5 * MIN);
    expect(await engine.runOnce()).toBe(2);
    expect((await email(s.key, dropped)).events.map((e) => [e.status, e.dsn])).toEqual([
      ['deferred', '4.4.2'],
      ['delivered', '2.0.0'],
    ]);
    expect((await email(s.key, refused)).events.map((e) => [e.status, e.dsn])).toEqual([
      ['deferred', '4.4.1'],
      ['delivered', '2.0.0'],
    ]);
    expect(sink.deliveredTo().sort()).toEqual(['dropped@example.net', 'someone@down.example']);
  });

  it('bounces 4.4.7 exactly 5 days after the send, without suppression or a reputation bounce', async () => {
    const s = await newSender(service);
    sink.rcpt = (address) => (address === 'full@example.net' ? { code: 452, message: '4.2.2 Mailbox full' } : 'accept');
    const id = await send(s, ['full@example.net', 'fine@example.net']);
    const t0 = service.clock.now();
    const times = await runToFinal(id, 'full@example.net');

    // 0, 5, 15, 35, 75, 155 minutes, then every 2 hours, the last try at the window's end.
    const expected = [0, 5, 15, 35, 75, 155];
    while (expected.at(-1)! + 120 < 7200) expected.push(expected.at(-1)! + 120);
    expected.push(7200);
    expect(times.map((t) => (t - t0) / MIN)).toEqual(expected);

    const body = await email(s.key, id);
    const mine = body.events.filter((e) => e.recipient === 'full@example.net');
    expect(mine).toHaveLength(expected.length);
    expect(mine.slice(0, -1).every((e) => e.status === 'deferred' && e.dsn === '4.2.2')).toBe(true);
    expect(mine.at(-1)).toMatchObject({ status: 'bounced', dsn: '4.4.7', occurredAt: iso(t0 + DELIVERY_WINDOW_MS) });
    expect(body.bouncedAt).toBe(iso(t0 + DELIVERY_WINDOW_MS));
    expect(body.deliveredAt).toBe(iso(t0));
    expect(await suppressed(s.key, 'full@example.net')).toEqual([]);
    expect((await accountRow(service, s.account.id)).totalBounced).toBe(0);
    // Nothing is left to try.
    service.clock.advance(7 * 24 * 60 * MIN);
    expect(await engine.runOnce()).toBe(0);
  });

  it('a recipient that uses up its retries adds exactly one latency sample, under bounced: the five days from send to give-up', async () => {
    const latency = async () => {
      const families = parsePrometheusText(await service.deps.metrics.registry.metrics());
      const of = (status: string, suffix: string, labels: Record<string, string> = {}) =>
        sampleValueOrZero(families, `mailstead_delivery_latency_seconds_${suffix}`, { status, ...labels });
      return {
        bounced: of('bounced', 'count'),
        bouncedSum: of('bounced', 'sum'),
        bouncedWithinFiveDays: of('bounced', 'bucket', { le: String(DELIVERY_WINDOW_MS / 1000) }),
        bouncedWithinADay: of('bounced', 'bucket', { le: '86400' }),
        delivered: of('delivered', 'count'),
      };
    };
    const s = await newSender(service);
    sink.rcpt = () => ({ code: 452, message: '4.2.2 Mailbox full' });
    const before = await latency();
    const id = await send(s, 'full@example.net');
    // A deferral is no final outcome: no sample.
    expect(await engine.runOnce()).toBe(1);
    expect(await latency()).toEqual(before);
    service.clock.set((await queueRow(id, 'full@example.net'))!.nextAttemptAt);
    await runToFinal(id, 'full@example.net');
    expect((await email(s.key, id)).events.at(-1)).toMatchObject({ status: 'bounced', dsn: '4.4.7' });
    const after = await latency();
    expect(after.bounced - before.bounced).toBe(1);
    expect(after.bouncedSum - before.bouncedSum).toBe(DELIVERY_WINDOW_MS / 1000);
    expect(after.bouncedWithinFiveDays - before.bouncedWithinFiveDays).toBe(1);
    expect(after.bouncedWithinADay - before.bouncedWithinADay).toBe(0);
    expect(after.delivered).toBe(before.delivered);
    // Nothing is left to try, and nothing more is counted.
    service.clock.advance(7 * 24 * 60 * MIN);
    expect(await engine.runOnce()).toBe(0);
    expect(await latency()).toEqual(after);
  });

  it('bounces 4.4.7 after 5 days of refused connections', async () => {
    const s = await newSender(service);
    const id = await send(s, 'x@down.example');
    const t0 = service.clock.now();
    await runToFinal(id, 'x@down.example');
    const body = await email(s.key, id);
    expect(body.events[0]).toMatchObject({ status: 'deferred', dsn: '4.4.1' });
    expect(body.events.slice(0, -1).every((e) => e.status === 'deferred')).toBe(true);
    expect(body.events.at(-1)).toMatchObject({ status: 'bounced', dsn: '4.4.7', occurredAt: iso(t0 + DELIVERY_WINDOW_MS) });
    expect(await suppressed(s.key, 'x@down.example')).toEqual([]);
  });

  it('defers a DNS failure with 4.4.3 and delivers once the name answers again', async () => {
    const s = await newSender(service);
    dns.add('flaky.example', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
    dns.fail('flaky.example');
    const id = await send(s, 'r@flaky.example');
    await engine.runOnce();
    expect((await email(s.key, id)).events).toEqual([expect.objectContaining({ status: 'deferred', dsn: '4.4.3' })]);
    dns.fail('flaky.example', false);
    service.clock.advance(5 * MIN);
    expect(await engine.runOnce()).toBe(1);
    expect((await email(s.key, id)).events.map((e) => [e.status, e.dsn])).toEqual([
      ['deferred', '4.4.3'],
      ['delivered', '2.0.0'],
    ]);
  });
});

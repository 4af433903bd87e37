import { and, eq } from 'drizzle-orm';
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { customerDbWrites, domainKeys, outboundRecipients, suppressions, webhookDeliveries } from '../db/schema/index.js';
import { readCapture } from '../server/core/capture-store.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { RETRY_GAPS_MS } from '../server/core/delivery-schedule.js';
import { SIMULATOR_ADDRESSES, SIMULATOR_DOMAIN, isAlwaysSuppressed, isSimulatorAddress, simulateAttempt } from '../server/core/simulator.js';
import { storeDatabaseRow } from './helpers/customer-db.js';
import { FAST_TIMEOUTS, resetDeliveryRig } from './helpers/delivery-rig.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { seedEndpoint } from './helpers/outcomes.js';
import { accountRow, expectError, getAccount, newSender, receipt, useQuota } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';
import { SmtpSink } from './helpers/smtp-sink.js';
import { one } from '../db/sql.js';

/**
 * The mailbox simulator: recipients at simulator.mailstead.test never touch the network, in either
 * DELIVERY_MODE, and take the whole pipeline: events, webhooks, the customer database, suppressions, quota and
 * credits, but never reputation. What each address does is the table SIMULATOR_ADDRESSES; the deferral retries on the
 * retry schedule, moved by the fake clock.
 */

let dns: TestDnsServer;
let sink: SmtpSink;
let direct: TestService;
let capture: TestService;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  sink = await SmtpSink.start();
  const toSink = { DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port), ALLOW_PRIVATE_TARGETS: 'true' };
  direct = await startService(toSink);
  capture = await startService({ ...toSink, DELIVERY_MODE: 'capture' });
});

afterAll(async () => {
  await direct?.close();
  await capture?.close();
  await sink?.stop();
  await dns?.stop();
});

beforeEach(() => {
  resetDeliveryRig({ dns, sink });
  sink.resetConnections();
  dns.queries = [];
});

const at = (local: string) => `${local}@${SIMULATOR_DOMAIN}`;

async function send(service: TestService, key: string, to: string | string[]): Promise<string> {
  const s = await service.api('POST', '/emails', { key, body: receipt(`billing@${await domainOf(service, key)}`, to) });
  expect(s.status, JSON.stringify(s.body)).toBe(200);
  return s.body.id as string;
}

async function domainOf(service: TestService, key: string): Promise<string> {
  const res = await service.api('GET', '/domains', { key });
  return res.body.data[0].name as string;
}

type Event = { recipient: string; status: string; dsn: string; detail: string };

async function eventsOf(service: TestService, key: string, id: string): Promise<Event[]> {
  const res = await service.api('GET', `/emails/${id}`, { key });
  expect(res.status).toBe(200);
  return res.body.events;
}

const byRecipient = (events: Event[], recipient: string) => events.filter((e) => e.recipient === recipient).map((e) => [e.status, e.dsn]);

describe('the policy table', () => {
  it.each([
    ['delivered', 0, 'delivered', '2.0.0', false],
    ['bounce', 0, 'bounced', '5.1.1', false],
    ['defer', 0, 'deferred', '4.2.1', false],
    ['defer', 1, 'deferred', '4.2.1', false],
    ['defer', 2, 'delivered', '2.0.0', false],
    ['defer', 3, 'delivered', '2.0.0', false],
    ['complaint', 0, 'delivered', '2.0.0', true],
    ['Bounce+run-7', 0, 'bounced', '5.1.1', false],
    ['DELIVERED+a', 0, 'delivered', '2.0.0', false],
    ['nobody', 0, 'bounced', '5.1.1', false],
  ])('%s@, after %i attempts: %s %s (complaint after: %s)', (local, attempts, status, dsn, complains) => {
    const reply = simulateAttempt(at(local), attempts);
    expect(reply.outcome).toMatchObject({ status, dsn });
    expect(reply.complains).toBe(complains);
  });

  it('suppressed@ (and with a label) is always suppressed; no other address is', () => {
    expect(isAlwaysSuppressed(at('suppressed'))).toBe(true);
    expect(isAlwaysSuppressed(at('Suppressed+x'))).toBe(true);
    for (const local of Object.keys(SIMULATOR_ADDRESSES).filter((l) => l !== 'suppressed')) expect(isAlwaysSuppressed(at(local)), local).toBe(false);
    expect(isAlwaysSuppressed('suppressed@example.com')).toBe(false);
  });

  it('only the simulator domain itself is the simulator', () => {
    expect(isSimulatorAddress(at('delivered'))).toBe(true);
    expect(isSimulatorAddress(`delivered@${SIMULATOR_DOMAIN.toUpperCase()}`)).toBe(true);
    for (const address of [
      'delivered@mailstead.test',
      `delivered@x.${SIMULATOR_DOMAIN}`,
      `delivered@${SIMULATOR_DOMAIN}.example.com`,
      'delivered@example.com',
    ]) {
      expect(isSimulatorAddress(address), address).toBe(false);
    }
  });
});

describe('in direct mode, through the whole pipeline without the network', () => {
  it('delivered@, bounce@, defer@ and complaint@: their outcomes, events, suppressions, webhooks and database writes; no connection, no DNS', async () => {
    const s = await newSender(direct);
    const endpoint = await seedEndpoint(direct, s.account.id, ['email.delivered', 'email.bounced', 'email.deferred', 'email.complained']);
    await storeDatabaseRow(direct, s.account.id, 'postgresql://app:secret@db.example.com:5432/app');
    const engine = createDeliveryEngine(direct.deps, { timeouts: FAST_TIMEOUTS });
    const to = ['delivered', 'bounce', 'defer', 'complaint'].map(at);
    const id = await send(direct, s.key, to);
    const sentAt = direct.clock.now();
    expect(await engine.runOnce()).toBe(4);

    let events = await eventsOf(direct, s.key, id);
    expect(byRecipient(events, at('delivered'))).toEqual([['delivered', '2.0.0']]);
    expect(byRecipient(events, at('bounce'))).toEqual([['bounced', '5.1.1']]);
    expect(byRecipient(events, at('defer'))).toEqual([['deferred', '4.2.1']]);
    expect(byRecipient(events, at('complaint'))).toEqual([
      ['delivered', '2.0.0'],
      ['complained', '5.7.1'],
    ]);
    const email = (await direct.api('GET', `/emails/${id}`, { key: s.key })).body;
    expect(email).toMatchObject({ deliveredAt: expect.any(String), bouncedAt: expect.any(String), complainedAt: expect.any(String) });

    const listed = await direct.deps.db.select().from(suppressions).where(eq(suppressions.accountId, s.account.id));
    expect(listed.map((r) => [r.address, r.reason]).sort()).toEqual([
      [at('bounce'), 'bounce'],
      [at('complaint'), 'complaint'],
    ]);

    // defer@: again at the first gap of the retry schedule (not before), deferred; delivered at the second gap.
    direct.clock.advance(RETRY_GAPS_MS[0]! - 1);
    expect(await engine.runOnce()).toBe(0);
    direct.clock.advance(1);
    expect(await engine.runOnce()).toBe(1);
    const deferred = await one(
      direct.deps.db
        .select()
        .from(outboundRecipients)
        .where(and(eq(outboundRecipients.messageId, id), eq(outboundRecipients.recipient, at('defer')))),
    );
    expect(deferred).toMatchObject({ status: 'queued', attempts: 2, nextAttemptAt: sentAt + RETRY_GAPS_MS[0]! + RETRY_GAPS_MS[1]! });
    direct.clock.advance(RETRY_GAPS_MS[1]!);
    expect(await engine.runOnce()).toBe(1);
    events = await eventsOf(direct, s.key, id);
    expect(byRecipient(events, at('defer'))).toEqual([
      ['deferred', '4.2.1'],
      ['deferred', '4.2.1'],
      ['delivered', '2.0.0'],
    ]);
    expect(await direct.deps.db.select().from(outboundRecipients).where(eq(outboundRecipients.messageId, id))).toEqual([]);

    const posts = await direct.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, endpoint));
    const postsOf = (type: string) =>
      posts
        .filter((p) => p.eventType === type)
        .map((p) => JSON.parse(p.data).recipient as string)
        .sort();
    expect(postsOf('email.delivered')).toEqual([at('complaint'), at('defer'), at('delivered')]);
    expect(postsOf('email.bounced')).toEqual([at('bounce')]);
    expect(postsOf('email.deferred')).toEqual([at('defer'), at('defer')]);
    expect(postsOf('email.complained')).toEqual([at('complaint')]);
    const writes = await direct.deps.db
      .select()
      .from(customerDbWrites)
      .where(and(eq(customerDbWrites.accountId, s.account.id), eq(customerDbWrites.kind, 'event')));
    expect(writes).toHaveLength(events.length);

    expect(sink.connections).toBe(0);
    expect(dns.queries).toEqual([]);
  });

  it('a second send to bounce@ is refused as suppressed; bounce+label@ is a new address and bounces again', async () => {
    const s = await newSender(direct);
    const engine = createDeliveryEngine(direct.deps, { timeouts: FAST_TIMEOUTS });
    await send(direct, s.key, at('bounce'));
    await engine.runOnce();
    expectError(
      await direct.api('POST', '/emails', { key: s.key, body: receipt(s.from, at('bounce')) }),
      422,
      'recipient_suppressed',
      new RegExp(at('bounce')),
    );
    const again = await send(direct, s.key, at('bounce+2'));
    await engine.runOnce();
    expect(byRecipient(await eventsOf(direct, s.key, again), at('bounce+2'))).toEqual([['bounced', '5.1.1']]);
  });

  it('suppressed@ is always on the suppression list: 422 recipient_suppressed naming it, nothing queued, sandbox too', async () => {
    const s = await newSender(direct);
    for (const body of [
      receipt(s.from, ['ok@example.net', at('suppressed')]),
      receipt(s.from, at('suppressed+7')),
      receipt(s.from, at('suppressed'), { sandbox: true }),
    ]) {
      const res = await direct.api('POST', '/emails', { key: s.key, body });
      expectError(res, 422, 'recipient_suppressed', /suppressed(\+7)?@simulator\.mailstead\.test/);
      expect(res.body.error.message).not.toContain('ok@example.net');
    }
    expect(await direct.deps.db.select().from(outboundRecipients).where(eq(outboundRecipients.accountId, s.account.id))).toEqual([]);
    // It is not a row of the account's list: nothing to remove, and still refused.
    expectError(await direct.api('DELETE', `/suppressions/${encodeURIComponent(at('suppressed'))}`, { key: s.key }), 404, 'not_found');
    expectError(await direct.api('POST', '/emails', { key: s.key, body: receipt(s.from, at('suppressed')) }), 422, 'recipient_suppressed');
  });
});

describe('quota and credits count; reputation does not', () => {
  it('60 simulator bounces and complaints leave totalSent, totalBounced, totalComplained at zero and the account healthy; quota and credits are used', async () => {
    const s = await newSender(direct, { credits: 10 });
    const engine = createDeliveryEngine(direct.deps, { timeouts: FAST_TIMEOUTS });
    await send(
      direct,
      s.key,
      Array.from({ length: 30 }, (_, i) => at(`bounce+${i}`)),
    );
    await send(direct, s.key, [...Array.from({ length: 29 }, (_, i) => at(`bounce+${30 + i}`)), at('complaint')]);
    await engine.runOnce();
    const account = await getAccount(direct, s.key);
    expect(account.sending).toMatchObject({ tier: 'healthy', totalSent: 0, totalBounced: 0, totalComplained: 0, sentToday: 60, suspended: false });
    expect((await accountRow(direct, s.account.id)).creditsBalance).toBe(8);
    expect(await direct.deps.db.select().from(suppressions).where(eq(suppressions.accountId, s.account.id))).toHaveLength(60);

    // A real recipient beside them counts as usual.
    await send(direct, s.key, ['real@example.net', at('delivered')]);
    expect((await getAccount(direct, s.key)).sending).toMatchObject({ totalSent: 1, sentToday: 62 });
  });

  it('a send to the simulator beyond the quota left is 429 quota_exceeded', async () => {
    const s = await newSender(direct);
    await useQuota(direct, s.account.id, 1);
    expectError(await direct.api('POST', '/emails', { key: s.key, body: receipt(s.from, [at('delivered'), at('delivered+2')]) }), 429, 'quota_exceeded');
    await send(direct, s.key, at('delivered'));
  });
});

describe('in capture mode', () => {
  it('the simulator still answers from its table (not `captured`), and each message is captured, DKIM-signed', async () => {
    const s = await newSender(capture);
    const engine = createDeliveryEngine(capture.deps, { timeouts: FAST_TIMEOUTS });
    const id = await send(capture, s.key, [at('delivered'), at('bounce'), at('complaint')]);
    await engine.runOnce();
    const events = await eventsOf(capture, s.key, id);
    expect(byRecipient(events, at('delivered'))).toEqual([['delivered', '2.0.0']]);
    expect(byRecipient(events, at('bounce'))).toEqual([['bounced', '5.1.1']]);
    expect(byRecipient(events, at('complaint'))).toEqual([
      ['delivered', '2.0.0'],
      ['complained', '5.7.1'],
    ]);
    expect(events.map((e) => e.detail)).not.toContain('captured');
    expect(sink.connections).toBe(0);

    const key = (await one(capture.deps.db.select().from(domainKeys).where(eq(domainKeys.accountId, s.account.id))))!;
    for (const recipient of [at('delivered'), at('bounce'), at('complaint')]) {
      const raw = await readCapture(capture.deps.db, capture.deps.secretKey, { accountId: s.account.id, emailId: id, recipient });
      expect(raw, recipient).not.toBeNull();
      const verdict = await dkimVerify(raw!, { resolver: async () => [[`v=DKIM1; h=sha256; k=rsa; p=${key.dkimPublicKey}`]] });
      expect(verdict.results[0]?.status.result).toBe('pass');
    }
  });
});

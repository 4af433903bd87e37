import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { outboundRecipients } from '../db/schema/index.js';
import type { DeliveryEngine } from '../mta/delivery-engine.js';
import { suspendByOperator, unsuspendByOperator } from '../server/core/accounts.js';
import { resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import type { TestDnsServer } from './helpers/dns-server.js';
import { accountRow, expectError, getAccount, newSender, newSubSender, receipt, updateAccount } from './helpers/sending.js';
import type { TestService } from './helpers/service.js';
import type { SmtpSink } from './helpers/smtp-sink.js';

/**
 * Reputation (docs/api/decisions.md section 4): totalSent counts the recipients of the account's own sends,
 * totalBounced its 5.x.x bounces; once 50 have been sent the tier is graded from the lifetime rates (paused at 10%
 * bounces, throttled at 5%, warning at 2%, each with a minimum count: 10 bounces to pause, 5 for the others); throttled cuts effectiveQuota to a tenth; reaching paused suspends the
 * account by the reputation breaker, with a reason naming the rates, which the API cannot lift. The counters are
 * moved close to each threshold in the database and the last steps made by real bounces from an SMTP sink.
 */

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;
let engine: DeliveryEngine;

beforeAll(async () => {
  ({ dns, sink, service, engine } = await startDeliveryRig());
});

afterAll(() => stopDeliveryRig({ dns, sink, service }));

beforeEach(async () => {
  await service.deps.db.delete(outboundRecipients);
  resetDeliveryRig({ dns, sink });
  // Every address at bounce.example is unknown there; everything else is accepted, except busy.example for now.
  sink.rcpt = (address) => {
    if (address.endsWith('@bounce.example')) return { code: 550, message: '5.1.1 No such user' };
    if (address.endsWith('@busy.example')) return { code: 451, message: '4.3.2 Try again later' };
    return 'accept';
  };
  for (const domain of ['bounce.example', 'busy.example']) dns.add(domain, { type: 'MX', priority: 10, exchange: 'mx.example.net' });
});

let counter = 0;
/** `n` fresh addresses at `domain`. */
const addresses = (n: number, domain: string) => Array.from({ length: n }, () => `r${++counter}@${domain}`);

interface Actor {
  key: string;
  from: string;
  account?: string;
}

async function sendAndDeliver(actor: Actor, to: string[]): Promise<void> {
  const res = await service.api('POST', '/emails', { key: actor.key, account: actor.account, body: receipt(actor.from, to) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await engine.runOnce();
}

/** Sets totalSent so that after `bounces` more bouncing recipients the account has sent `total`, then sends them. */
async function bounceUpTo(actor: Actor, accountId: string, bounces: number, total = 100): Promise<void> {
  await updateAccount(service, accountId, { totalSent: total - bounces });
  await sendAndDeliver(actor, addresses(bounces, 'bounce.example'));
}

describe('reputation counters', () => {
  it("counts every recipient of the account's own sends in totalSent and only 5.x.x bounces in totalBounced", async () => {
    const s = await newSender(service);
    await sendAndDeliver({ key: s.key, from: s.from }, [...addresses(2, 'example.net'), ...addresses(1, 'bounce.example'), ...addresses(1, 'busy.example')]);
    let view = await getAccount(service, s.key);
    expect(view.sending).toMatchObject({ totalSent: 4, totalBounced: 1, totalComplained: 0, tier: 'healthy' });

    // A sandbox send is not counted.
    const sandbox = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, addresses(3, 'bounce.example'), { sandbox: true }) });
    expect(sandbox.status).toBe(200);
    await engine.runOnce();
    view = await getAccount(service, s.key);
    expect(view.sending).toMatchObject({ totalSent: 4, totalBounced: 1 });
  });

  it("keeps a sub-account's sends and bounces on the sub-account, not on its parent", async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await sendAndDeliver({ key: parent.key, from: sub.from, account: sub.id }, [...addresses(2, 'bounce.example'), ...addresses(3, 'example.net')]);
    expect((await getAccount(service, parent.key, sub.id)).sending).toMatchObject({ totalSent: 5, totalBounced: 2 });
    expect((await getAccount(service, parent.key)).sending).toMatchObject({ totalSent: 0, totalBounced: 0 });
  });
});

describe('tiers', () => {
  it('grades nothing before 50 recipients have been sent, then grades at once', async () => {
    const s = await newSender(service);
    const actor = { key: s.key, from: s.from };
    // 9 bounces of 49: 18%, but not yet graded.
    await bounceUpTo(actor, s.account.id, 9, 49);
    expect((await getAccount(service, s.key)).sending).toMatchObject({ totalSent: 49, totalBounced: 9, tier: 'healthy', suspended: false });
    // The 50th recipient, another bounce: 10 of 50 (20%, and the 10 bounces paused needs), paused.
    await sendAndDeliver(actor, addresses(1, 'bounce.example'));
    expect((await getAccount(service, s.key)).sending).toMatchObject({ totalSent: 50, totalBounced: 10, tier: 'paused', suspended: true });
  });

  it('needs 10 bounces to pause and 5 to throttle (docs/api/decisions.md section 13): 5 bounced of 50 is throttled, not suspended', async () => {
    const s = await newSender(service);
    await bounceUpTo({ key: s.key, from: s.from }, s.account.id, 5, 50);
    expect((await getAccount(service, s.key)).sending).toMatchObject({ totalSent: 50, totalBounced: 5, tier: 'throttled', suspended: false });
    expect((await accountRow(service, s.account.id)).suspendedBy).toBeNull();
  });

  it('moves healthy → warning at 2% → throttled at 5% (a tenth of the quota) → paused at 10% (suspended by the breaker)', async () => {
    const s = await newSender(service);
    const actor = { key: s.key, from: s.from };
    await updateAccount(service, s.account.id, { dailyQuota: 1234 });

    await bounceUpTo(actor, s.account.id, 4, 250);
    expect((await getAccount(service, s.key)).sending).toMatchObject({
      totalSent: 250,
      totalBounced: 4,
      tier: 'healthy',
      dailyQuota: 1234,
      effectiveQuota: 1234,
    });

    await bounceUpTo(actor, s.account.id, 1, 250);
    expect((await getAccount(service, s.key)).sending).toMatchObject({
      totalSent: 250,
      totalBounced: 5,
      tier: 'warning',
      effectiveQuota: 1234,
      suspended: false,
    });

    await bounceUpTo(actor, s.account.id, 8, 250);
    let sending = (await getAccount(service, s.key)).sending;
    expect(sending).toMatchObject({ totalSent: 250, totalBounced: 13, tier: 'throttled', dailyQuota: 1234, effectiveQuota: 123, suspended: false });
    // The cut quota is the one enforced.
    const day = new Date(service.clock.now()).toISOString().slice(0, 10);
    await updateAccount(service, s.account.id, { sentTodayDay: day, sentTodayCount: 123 });
    expectError(await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'one-more@example.net') }), 429, 'quota_exceeded');
    await updateAccount(service, s.account.id, { sentTodayCount: 0 });

    await bounceUpTo(actor, s.account.id, 12, 250);
    sending = (await getAccount(service, s.key)).sending;
    expect(sending).toMatchObject({ totalSent: 250, totalBounced: 25, tier: 'paused', suspended: true });
    const reason: string = sending.suspendedReason;
    expect(reason).toMatch(/bounce/i);
    expect(reason).toMatch(/complaint/i);
    expect(reason).toMatch(/\b10(\.0+)?\s?%/);
    expect((await accountRow(service, s.account.id)).suspendedBy).toBe('breaker');

    // Every send is refused with the reason as the message.
    expectError(await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'after@example.net') }), 403, 'suspended', reason);
  });

  it('names the rates at the moment the breaker trips on a bounce', async () => {
    const s = await newSender(service);
    // 13 bounced of 139; one more recipient (140, 9.29%: not yet paused at the send), which bounces: 14 of 140, 10%.
    await updateAccount(service, s.account.id, { totalBounced: 13 });
    await bounceUpTo({ key: s.key, from: s.from }, s.account.id, 1, 140);
    const sending = (await getAccount(service, s.key)).sending;
    expect(sending).toMatchObject({ totalSent: 140, totalBounced: 14, tier: 'paused', suspended: true });
    expect(sending.suspendedReason).toContain('bounce rate 10.00%');
    expect(sending.suspendedReason).toContain('complaint rate 0.00%');
    expect(sending.suspendedReason).toContain('over 140 recipients');
  });

  it('trips on the send that starts grading: 10 bounced of 40 is not graded, the 50th recipient makes it paused', async () => {
    const s = await newSender(service);
    await updateAccount(service, s.account.id, { totalSent: 40, totalBounced: 10 });
    expect((await getAccount(service, s.key)).sending).toMatchObject({ tier: 'healthy', suspended: false });
    // Ten recipients that are all delivered: the send itself brings the account to 50 sent, 20% bounced.
    await sendAndDeliver({ key: s.key, from: s.from }, addresses(10, 'example.net'));
    const sending = (await getAccount(service, s.key)).sending;
    expect(sending).toMatchObject({ totalSent: 50, totalBounced: 10, tier: 'paused', suspended: true });
    expect(sending.suspendedReason).toContain('bounce rate 20.00%');
    expect((await accountRow(service, s.account.id)).suspendedBy).toBe('breaker');
    expectError(await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'next@example.net') }), 403, 'suspended', sending.suspendedReason);
  });

  it('of sends at the same moment, the one that trips the breaker is sent and every one after it is 403 suspended', async () => {
    const s = await newSender(service);
    await updateAccount(service, s.account.id, { totalSent: 40, totalBounced: 10 });
    // Each send brings ten recipients: whichever commits first reaches 50 sent, 20% bounced.
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => service.api('POST', '/emails', { key: s.key, body: receipt(s.from, addresses(10, 'example.net')) })),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, 403, 403, 403, 403]);
    for (const refused of answers.filter((a) => a.status === 403)) expect((refused.body as { error: { code: string } }).error.code).toBe('suspended');
    expect((await getAccount(service, s.key)).sending).toMatchObject({ totalSent: 50, totalBounced: 10, tier: 'paused', suspended: true });
    expect((await accountRow(service, s.account.id)).suspendedBy).toBe('breaker');
  });

  it('once the operator lifts it, a send does not trip it again (sends only lower the rates); a new bounce does', async () => {
    const s = await newSender(service);
    await bounceUpTo({ key: s.key, from: s.from }, s.account.id, 11);
    expect((await accountRow(service, s.account.id)).suspendedBy).toBe('breaker');
    await unsuspendByOperator(service.deps, s.account.id);
    // Still graded paused (11 of 101 after this send), and sending, as the operator decided.
    await sendAndDeliver({ key: s.key, from: s.from }, addresses(1, 'example.net'));
    expect((await getAccount(service, s.key)).sending).toMatchObject({ totalSent: 101, tier: 'paused', suspended: false });
    await sendAndDeliver({ key: s.key, from: s.from }, addresses(1, 'example.net'));
    expect((await getAccount(service, s.key)).sending).toMatchObject({ totalSent: 102, tier: 'paused', suspended: false });
    // New evidence while paused: the breaker trips again.
    await sendAndDeliver({ key: s.key, from: s.from }, addresses(1, 'bounce.example'));
    expect((await getAccount(service, s.key)).sending).toMatchObject({ totalSent: 103, totalBounced: 12, suspended: true });
    expect((await accountRow(service, s.account.id)).suspendedBy).toBe('breaker');
  });

  it('does not trip the breaker on deferrals', async () => {
    const s = await newSender(service);
    await updateAccount(service, s.account.id, { totalSent: 80 });
    await sendAndDeliver({ key: s.key, from: s.from }, addresses(20, 'busy.example'));
    expect((await getAccount(service, s.key)).sending).toMatchObject({ totalSent: 100, totalBounced: 0, tier: 'healthy', suspended: false });
  });
});

describe('the breaker on a sub-account', () => {
  it('suspends the sub-account alone, refuses its sends with the reason, and the API cannot lift it', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await bounceUpTo({ key: parent.key, from: sub.from, account: sub.id }, sub.id, 10);

    const view = await service.api('GET', `/accounts/${sub.id}`, { key: parent.key });
    expect(view.status).toBe(200);
    expect(view.body.sending).toMatchObject({ tier: 'paused', suspended: true, totalSent: 100, totalBounced: 10 });
    const reason: string = view.body.sending.suspendedReason;
    expect(reason).toMatch(/bounce/i);
    expect(reason).toMatch(/\b10(\.0+)?\s?%/);

    expectError(
      await service.api('POST', '/emails', { key: parent.key, account: sub.id, body: receipt(sub.from, 'later@example.net') }),
      403,
      'suspended',
      reason,
    );
    expectError(await service.api('POST', `/accounts/${sub.id}/suspend`, { key: parent.key, body: { suspended: false } }), 409, 'conflict');
    expect((await getAccount(service, parent.key, sub.id)).sending).toMatchObject({ suspended: true, suspendedReason: reason });

    // The parent is neither suspended nor charged with the sub-account's bounces, and still sends.
    expect((await getAccount(service, parent.key)).sending).toMatchObject({ suspended: false, totalBounced: 0, tier: 'healthy' });
    const own = await service.api('POST', '/emails', { key: parent.key, body: receipt(parent.from, 'fine@example.net') });
    expect(own.status, JSON.stringify(own.body)).toBe(200);

    // The operator can lift it.
    await unsuspendByOperator(service.deps, sub.id);
    expect((await getAccount(service, parent.key, sub.id)).sending.suspended).toBe(false);
  });
});

describe('mail queued by an account whose sending is paused', () => {
  const delivered = (to: string[]) => sink.received.flatMap((m) => m.to).filter((a) => to.includes(a));

  it('waits while the account (or its parent) is suspended, and goes out once the suspension is lifted; other accounts are not held up', async () => {
    const paused = await newSender(service);
    const sub = await newSubSender(service, paused.key);
    const other = await newSender(service);
    const own = addresses(2, 'example.net');
    const subs = addresses(1, 'example.net');
    const others = addresses(1, 'example.net');
    for (const [actor, to] of [
      [{ key: paused.key, from: paused.from }, own],
      [{ key: paused.key, from: sub.from, account: sub.id }, subs],
      [{ key: other.key, from: other.from }, others],
    ] as const) {
      const res = await service.api('POST', '/emails', {
        key: actor.key,
        account: 'account' in actor ? actor.account : undefined,
        body: receipt(actor.from, [...to]),
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    // Suspended after these were queued (the operator here; the breaker and the API suspend the same way).
    await suspendByOperator(service.deps, paused.account.id, 'Complaints under review');
    await engine.runOnce();
    expect(delivered(others)).toEqual(others);
    expect(delivered([...own, ...subs])).toEqual([]);
    expect((await queuedCount(paused.account.id)) + (await queuedCount(sub.id))).toBe(3);

    await unsuspendByOperator(service.deps, paused.account.id);
    await engine.runOnce();
    expect(delivered([...own, ...subs]).sort()).toEqual([...own, ...subs].sort());
  });
});

const queuedCount = async (accountId: string) =>
  (
    await service.deps.db
      .select()
      .from(outboundRecipients)
      .where(and(eq(outboundRecipients.accountId, accountId), eq(outboundRecipients.status, 'queued')))
  ).length;

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { outboundRecipients } from '../db/schema/index.js';
import { eq } from 'drizzle-orm';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { DEFAULT_CLIENT_TIMEOUTS } from '../mta/smtp-client.js';
import { type DeliveryRig, FAST_TIMEOUTS, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { newSender, newSubSender, receipt } from './helpers/sending.js';
import { one } from '../db/sql.js';

/**
 * Transactions in flight while the world changes: a sub-account deleted (docs/api/contract.md, DELETE /accounts/{id}: everything
 * under it, no undo) has its recipients the engine had already claimed left unsent, each checked just before its
 * transaction, so at most the one in flight goes out; a stop waits for a slow server's reply only so long. And the
 * client's timeouts are RFC 5321's, so a slow content scanner is not given up on (and its mail sent twice).
 */

let rig: DeliveryRig;

beforeAll(async () => {
  rig = await startDeliveryRig();
});
afterAll(() => stopDeliveryRig(rig));
beforeEach(async () => {
  await rig.service.deps.db.delete(outboundRecipients);
  resetDeliveryRig(rig);
});

describe('a sub-account deleted while its mail is claimed', () => {
  it('nothing more is sent for it after the one in flight, and no outcome is written for the rest', async () => {
    const parent = await newSender(rig.service);
    const sub = await newSubSender(rig.service, parent.key);
    const res = await rig.service.api('POST', '/emails', {
      key: parent.key,
      account: sub.id,
      body: receipt(sub.from, ['d1@example.net', 'd2@example.net', 'd3@example.net']),
    });
    expect(res.status).toBe(200);
    // The first message's reply is held until the sub-account is deleted.
    let release!: () => void;
    const held = new Promise<'accept'>((resolve) => (release = () => resolve('accept')));
    let first = true;
    let arrived!: () => void;
    const firstArrived = new Promise<void>((resolve) => (arrived = resolve));
    rig.sink.data = () => {
      if (!first) return 'accept';
      first = false;
      arrived();
      return held;
    };
    const engine = createDeliveryEngine(rig.service.deps, { timeouts: { ...FAST_TIMEOUTS, socketTimeoutMs: 10_000 }, perDomain: 1 });
    const run = engine.runOnce();
    await firstArrived;
    expect((await rig.service.api('DELETE', `/accounts/${sub.id}`, { key: parent.key })).status).toBe(204);
    release();
    await run;
    expect(rig.sink.received).toHaveLength(1);
    expect(rig.service.logger.entries.filter((e) => e.event === 'delivery.recipient_gone')).toHaveLength(2);
  });
});

describe('waiting for replies', () => {
  it('the client waits as long as RFC 5321 4.5.3.2 says: 5 minutes for the greeting, 10 for the end of data', () => {
    expect(DEFAULT_CLIENT_TIMEOUTS.greetingTimeoutMs).toBeGreaterThanOrEqual(5 * 60_000);
    expect(DEFAULT_CLIENT_TIMEOUTS.socketTimeoutMs).toBeGreaterThanOrEqual(10 * 60_000);
    expect(DEFAULT_CLIENT_TIMEOUTS.connectTimeoutMs).toBeLessThanOrEqual(60_000);
  });

  it('stop() waits for a reply in flight at most stopGraceMs; the recipient stays queued for the next start', async () => {
    const sender = await newSender(rig.service);
    const res = await rig.service.api('POST', '/emails', { key: sender.key, body: receipt(sender.from, 'slow@example.net') });
    expect(res.status).toBe(200);
    let release!: () => void;
    let arrived!: () => void;
    const firstArrived = new Promise<void>((resolve) => (arrived = resolve));
    rig.sink.data = () => {
      arrived();
      return new Promise<'accept'>((resolve) => (release = () => resolve('accept')));
    };
    const engine = createDeliveryEngine(rig.service.deps, { timeouts: { ...FAST_TIMEOUTS, socketTimeoutMs: 3_000 }, pollMs: 50, stopGraceMs: 300 });
    await engine.start();
    await firstArrived;
    const started = performance.now();
    await engine.stop();
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(rig.service.logger.entries).toContainEqual(expect.objectContaining({ event: 'delivery.stop_abandoned', recipients: 1 }));
    const row = async () => await one(rig.service.deps.db.select().from(outboundRecipients).where(eq(outboundRecipients.recipient, 'slow@example.net')));
    expect(await row()).toMatchObject({ status: 'queued' });
    // The reply arrives after all: the abandoned transaction still records it while the store is open.
    release();
    const events = async () =>
      (await rig.service.api('GET', `/emails/${res.body.id}`, { key: sender.key })).body.events.map((e: { status: string }) => e.status);
    await expect.poll(events, { timeout: 5_000 }).toEqual(['delivered']);
  });
});

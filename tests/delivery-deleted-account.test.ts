import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { outboundRecipients } from '../db/schema/index.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { type DeliveryRig, FAST_TIMEOUTS, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { newSender, newSubSender, receipt } from './helpers/sending.js';

/**
 * api.md, DELETE /accounts/{id}: the sub-account and everything under it is deleted, with no undo. Its recipients the
 * engine had already claimed (their messages in memory) are not sent once it is gone: each is checked just before
 * its transaction, so at most the one already in flight goes out.
 */

let rig: DeliveryRig;

beforeAll(async () => {
  rig = await startDeliveryRig();
});
afterAll(() => stopDeliveryRig(rig));
beforeEach(() => {
  rig.service.deps.db.delete(outboundRecipients).run();
  resetDeliveryRig(rig);
});

describe('a sub-account deleted while its mail is claimed', () => {
  it('nothing more is sent for it after the one in flight, and no outcome is written for the rest', async () => {
    const parent = await newSender(rig.service);
    const sub = await newSubSender(rig.service, parent.key);
    const res = await rig.service.api('POST', '/emails', { key: parent.key, account: sub.id, body: receipt(sub.from, ['d1@example.net', 'd2@example.net', 'd3@example.net']) });
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

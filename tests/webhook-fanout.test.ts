import { refuseInsertsInto } from './helpers/service.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { onQueueMarked } from '../db/queue-wake.js';
import { eq } from 'drizzle-orm';
import { emailEvents, outboundRecipients, webhookDeliveries, webhookEndpoints, type WebhookEventType } from '../db/schema/index.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { newId } from '../server/shared/ids.js';
import { FAST_TIMEOUTS, type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { newSender, newSubSender, receipt } from './helpers/sending.js';

/**
 * The fan-out: an outcome's webhook deliveries are written in the transaction that records it,
 * one per endpoint of the sending account subscribed to its type, active or switched off; none for other types,
 * other accounts or a sub-account's parent; and an outcome whose deliveries cannot be written is not recorded either.
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

async function endpoint(accountId: string, events: WebhookEventType[], active = true): Promise<string> {
  const now = rig.service.clock.now();
  const id = newId(now);
  await rig.service.deps.db.insert(webhookEndpoints).values({
    id,
    accountId,
    url: `https://hooks.webhooks.test/${id}`,
    events,
    secretSealed: 'unused-here',
    active,
    disabledAt: active ? null : now,
    createdAt: now,
  });
  return id;
}

const deliveriesOf = async (endpointId: string) =>
  await rig.service.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, endpointId));

async function sendAndDeliver(key: string, from: string, to: string, extra: Record<string, unknown> = {}, account?: string): Promise<string> {
  const res = await rig.service.api('POST', '/emails', { key, body: receipt(from, to, extra), ...(account ? { account } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await createDeliveryEngine(rig.service.deps, { timeouts: FAST_TIMEOUTS }).runOnce();
  return res.body.id as string;
}

describe('webhook fan-out of recorded outcomes', () => {
  it('writes one delivery per subscribed endpoint, active or switched off, with the event’s data and tags', async () => {
    const s = await newSender(rig.service);
    const other = await newSender(rig.service, { name: 'Another account' });
    const active = await endpoint(s.account.id, ['email.delivered', 'email.bounced']);
    const disabled = await endpoint(s.account.id, ['email.delivered'], false);
    const bouncesOnly = await endpoint(s.account.id, ['email.bounced']);
    const foreign = await endpoint(other.account.id, ['email.delivered']);
    let queued = 0;
    onQueueMarked(rig.service.deps.db, 'webhooks', () => queued++);

    const id = await sendAndDeliver(s.key, s.from, 'ann@example.net', { tags: { order: 'A-7' } });

    const [event] = await rig.service.deps.db.select().from(emailEvents).where(eq(emailEvents.emailId, id));
    expect(event?.status).toBe('delivered');
    for (const ep of [active, disabled]) {
      const rows = await deliveriesOf(ep);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({
        accountId: s.account.id,
        eventType: 'email.delivered',
        attempts: 0,
        nextAttemptAt: event!.occurredAt,
        deliveredAt: null,
      });
      expect(JSON.parse(rows[0]!.data)).toEqual({
        messageId: id,
        recipient: 'ann@example.net',
        status: 'delivered',
        dsn: event!.dsn,
        detail: event!.detail,
        occurredAt: new Date(event!.occurredAt).toISOString(),
        from: s.from,
        tags: { order: 'A-7' },
      });
    }
    expect(await deliveriesOf(bouncesOnly)).toEqual([]);
    expect(await deliveriesOf(foreign)).toEqual([]);
    expect(queued).toBe(1);
  });

  it('carries no tags when the send had none, and writes a bounce to the endpoints subscribed to bounces', async () => {
    const s = await newSender(rig.service);
    const bounces = await endpoint(s.account.id, ['email.bounced']);
    rig.sink.rcpt = () => ({ code: 550, message: '5.1.1 no such user' });
    await sendAndDeliver(s.key, s.from, 'gone@example.net');
    const rows = await deliveriesOf(bounces);
    expect(rows.map((r) => r.eventType)).toEqual(['email.bounced']);
    expect(JSON.parse(rows[0]!.data)).not.toHaveProperty('tags');
    expect(JSON.parse(rows[0]!.data)).toMatchObject({ status: 'bounced', dsn: '5.1.1' });
  });

  it('sends a sub-account’s outcomes to the sub-account’s endpoints, not its parent’s', async () => {
    const parent = await newSender(rig.service);
    const sub = await newSubSender(rig.service, parent.key);
    const parentEndpoint = await endpoint(parent.account.id, ['email.delivered']);
    const subEndpoint = await endpoint(sub.id, ['email.delivered']);
    await sendAndDeliver(parent.key, sub.from, 'bob@example.net', {}, sub.id);
    expect(await deliveriesOf(subEndpoint)).toHaveLength(1);
    expect(await deliveriesOf(parentEndpoint)).toEqual([]);
  });

  it('records neither the outcome nor any delivery when the deliveries cannot be written', async () => {
    const s = await newSender(rig.service);
    const ep = await endpoint(s.account.id, ['email.delivered']);
    const allow = await refuseInsertsInto(rig.service, 'webhook_deliveries');
    try {
      const res = await rig.service.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'cy@example.net') });
      expect(res.status).toBe(200);
      await createDeliveryEngine(rig.service.deps, { timeouts: FAST_TIMEOUTS }).runOnce();
      expect(
        await rig.service.deps.db
          .select()
          .from(emailEvents)
          .where(eq(emailEvents.emailId, res.body.id as string)),
      ).toEqual([]);
      expect(await deliveriesOf(ep)).toEqual([]);
      // The recipient is still queued (its lease runs out and it is tried again), not lost.
      const [recipient] = await rig.service.deps.db
        .select()
        .from(outboundRecipients)
        .where(eq(outboundRecipients.messageId, res.body.id as string));
      expect(recipient?.status).toBe('queued');
    } finally {
      await allow();
    }
  });
});

import { createHmac, timingSafeEqual } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { outboundRecipients, webhookDeliveries, webhookEndpoints } from '../db/schema/index.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { createWebhookDispatcher } from '../server/webhooks/dispatcher.js';
import { FAST_TIMEOUTS, type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { HttpsReceiver, type ReceivedRequest } from './helpers/https-receiver.js';
import { apiDocument, expectDocumented, expectDocumentedWebhook } from './helpers/openapi.js';
import { expectError, newSender, receipt } from './helpers/sending.js';

/**
 * The whole path: a real delivery to the SMTP sink records an outcome, the dispatcher posts it
 * to a real HTTPS receiver (trusted through NODE_EXTRA_CA_CERTS, reached by its name through the test DNS server), and
 * both signatures verify with code that is not the service's: an HMAC written here with timingSafeEqual, and the
 * `standardwebhooks` package unchanged. Then POST /webhooks/{id}/test: the ping, its cooldown, and re-enabling.
 */

let rig: DeliveryRig;
let receiver: HttpsReceiver;

beforeAll(async () => {
  rig = await startDeliveryRig();
  receiver = await HttpsReceiver.start();
});

afterAll(async () => {
  await receiver.close();
  await stopDeliveryRig(rig);
});

beforeEach(async () => {
  await rig.service.deps.db.delete(outboundRecipients);
  resetDeliveryRig(rig);
  rig.dns.add('hooks.webhooks.test', { type: 'A', address: '127.0.0.1' });
  receiver.respond({ status: 200 });
});

/** The spec's signature, checked as a receiver would: over the raw bytes, compared in constant time. */
function verifyServiceSignature(req: ReceivedRequest, secret: string): boolean {
  const header = String(req.headers['x-service-signature'] ?? '');
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
  if (!m) return false;
  const expected = createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${m[1]}.`).update(req.body).digest();
  return timingSafeEqual(expected, Buffer.from(m[2]!, 'hex'));
}

async function newEndpoint(key: string, events: string[]) {
  const res = await rig.service.api('POST', '/webhooks', { key, body: { url: `https://hooks.webhooks.test:${receiver.port}/mailstead`, events } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body as { id: string; secret: string };
}

describe('an outcome of a real delivery reaches a real HTTPS receiver', () => {
  it('posts { id, type, createdAt, data } with both signatures valid, and records the delivery', async () => {
    const { service } = rig;
    // Signatures carry the (injected) clock's time; standardwebhooks refuses one more than 5 minutes from real time.
    service.clock.set(Date.now());
    const s = await newSender(service);
    const endpoint = await newEndpoint(s.key, ['email.delivered']);
    const sent = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'dana@example.net', { tags: { order: 'R-9' } }) });
    expect(sent.status).toBe(200);
    await createDeliveryEngine(service.deps, { timeouts: FAST_TIMEOUTS }).runOnce();

    const before = receiver.requests.length;
    expect(await createWebhookDispatcher(service.deps).runOnce()).toBe(1);
    const [post] = receiver.requests.slice(before);
    expect(post).toBeDefined();
    const req = post!;
    expect(req.method).toBe('POST');
    expect(req.path).toBe('/mailstead');
    expect(req.servername).toBe('hooks.webhooks.test');
    expect(req.headers.host).toBe(`hooks.webhooks.test:${receiver.port}`);
    expect(req.headers['content-type']).toMatch(/^application\/json/);

    expect(verifyServiceSignature(req, endpoint.secret)).toBe(true);
    const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
    const verified = new Webhook(endpoint.secret.slice('whsec_'.length)).verify(req.body.toString('utf8'), headers);
    const body = JSON.parse(req.body.toString('utf8'));
    expect(verified).toEqual(body);
    // A tampered body fails both.
    const tampered = { ...req, body: Buffer.from(req.body.toString('utf8').replace('dana@', 'eve@')) };
    expect(verifyServiceSignature(tampered, endpoint.secret)).toBe(false);
    expect(() => new Webhook(endpoint.secret.slice('whsec_'.length)).verify(tampered.body.toString('utf8'), headers)).toThrow();

    const [row] = await service.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, endpoint.id));
    expect(body).toEqual({
      id: row!.id,
      type: 'email.delivered',
      createdAt: new Date(row!.createdAt).toISOString(),
      data: {
        messageId: sent.body.id,
        recipient: 'dana@example.net',
        status: 'delivered',
        dsn: '2.0.0',
        detail: expect.stringMatching(/^250/),
        occurredAt: expect.any(String),
        from: s.from,
        tags: { order: 'R-9' },
      },
    });
    expect(req.headers['x-service-delivery']).toBe(row!.id);
    expect(req.headers['x-service-event']).toBe('email.delivered');
    expect(req.headers['webhook-id']).toBe(row!.id);
    // The post is the API document's `webhooks` entry for its type: its body, and every header it lists.
    expectDocumentedWebhook(body);
    for (const { name } of apiDocument.webhooks['email.delivered'].post.parameters) expect(req.headers[name.toLowerCase()], name).toEqual(expect.any(String));
    expect(row).toMatchObject({ attempts: 1, lastStatus: 200, lastError: null, nextAttemptAt: null, deliveredAt: expect.any(Number) });

    const listed = await service.api('GET', `/webhooks/${endpoint.id}/deliveries`, { key: s.key });
    expectDocumented(listed);
    expect(listed.body.data).toEqual([
      expect.objectContaining({ id: row!.id, eventType: 'email.delivered', attempts: 1, lastStatus: 200, lastError: null, nextAttemptAt: null }),
    ]);
  });
});

describe('POST /webhooks/{id}/test', () => {
  it('posts a signed ping now and answers the receiver’s status; a second within 10 s is 429 ping_cooldown', async () => {
    const { service } = rig;
    const s = await newSender(service);
    const endpoint = await newEndpoint(s.key, ['ping']);
    const before = receiver.requests.length;
    const res = await service.api('POST', `/webhooks/${endpoint.id}/test`, { key: s.key });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({ id: expect.any(String), status: 200, delivered: true, error: null });
    expectDocumented(res);
    const ping = receiver.requests[before]!;
    expect(verifyServiceSignature(ping, endpoint.secret)).toBe(true);
    expect(JSON.parse(ping.body.toString('utf8'))).toEqual({ id: res.body.id, type: 'ping', createdAt: expect.any(String), data: { endpointId: endpoint.id } });
    expectDocumentedWebhook(JSON.parse(ping.body.toString('utf8')));

    const again = await service.api('POST', `/webhooks/${endpoint.id}/test`, { key: s.key });
    expectError(again, 429, 'ping_cooldown');
    expectDocumented(again);
    expect(Number(again.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(receiver.requests.length).toBe(before + 1);
    service.clock.advance(10_001);
    expect((await service.api('POST', `/webhooks/${endpoint.id}/test`, { key: s.key })).status).toBe(200);
  });

  it('answers delivered false with the failure, and switches a disabled endpoint back on only when the ping succeeds', async () => {
    const { service } = rig;
    const s = await newSender(service);
    const endpoint = await newEndpoint(s.key, ['email.delivered']);
    await service.deps.db
      .update(webhookEndpoints)
      .set({ active: false, disabledAt: service.clock.now(), failureCount: 10 })
      .where(eq(webhookEndpoints.id, endpoint.id));

    receiver.enqueue({ status: 503 });
    const failed = await service.api('POST', `/webhooks/${endpoint.id}/test`, { key: s.key });
    expect(failed.body).toEqual({ id: expect.any(String), status: 503, delivered: false, error: 'HTTP 503' });
    expect((await service.api('GET', `/webhooks/${endpoint.id}`, { key: s.key })).body).toMatchObject({ active: false, failureCount: 10 });

    service.clock.advance(10_001);
    const ok = await service.api('POST', `/webhooks/${endpoint.id}/test`, { key: s.key });
    expect(ok.body).toMatchObject({ status: 200, delivered: true, error: null });
    expect((await service.api('GET', `/webhooks/${endpoint.id}`, { key: s.key })).body).toMatchObject({ active: true, failureCount: 0, disabledAt: null });
  });

  it('a delivered ping ends the failure run of an endpoint that is still on (docs/api/behaviour.md: any delivered post resets failureCount)', async () => {
    const { service } = rig;
    const s = await newSender(service);
    const endpoint = await newEndpoint(s.key, ['email.delivered']);
    await service.deps.db.update(webhookEndpoints).set({ failureCount: 9 }).where(eq(webhookEndpoints.id, endpoint.id));
    receiver.enqueue({ status: 503 });
    expect((await service.api('POST', `/webhooks/${endpoint.id}/test`, { key: s.key })).body).toMatchObject({ delivered: false });
    // A failed ping is never counted...
    expect((await service.api('GET', `/webhooks/${endpoint.id}`, { key: s.key })).body).toMatchObject({ active: true, failureCount: 9 });
    service.clock.advance(10_001);
    expect((await service.api('POST', `/webhooks/${endpoint.id}/test`, { key: s.key })).body).toMatchObject({ delivered: true });
    // ...and a delivered one shows the endpoint answering: one more failed post must not switch it off.
    expect((await service.api('GET', `/webhooks/${endpoint.id}`, { key: s.key })).body).toMatchObject({ active: true, failureCount: 0 });
  });

  it('answers 404 webhook_not_found for another account’s endpoint', async () => {
    const a = await newSender(rig.service);
    const b = await newSender(rig.service);
    const theirs = await newEndpoint(b.key, ['ping']);
    expectError(await rig.service.api('POST', `/webhooks/${theirs.id}/test`, { key: a.key }), 404, 'webhook_not_found');
  });
});

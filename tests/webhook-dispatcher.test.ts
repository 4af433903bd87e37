import { spawnSync } from 'node:child_process';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { hostname } from 'node:os';
import { asc, eq } from 'drizzle-orm';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { onQueueMarked } from '../db/queue-wake.js';
import {
  type WebhookDeliveryRow,
  type WebhookEndpointRow,
  type WebhookEventType,
  webhookAttempts,
  webhookDeliveries,
  webhookEndpoints,
} from '../db/schema/index.js';
import { leaseNow } from '../server/shared/clock.js';
import { newId } from '../server/shared/ids.js';
import { encryptSecret } from '../server/shared/secrets.js';
import { type PostWebhook, createWebhookDispatcher, pingEndpoint, webhookPostBody } from '../server/webhooks/dispatcher.js';
import { postWebhook } from '../server/webhooks/http-client.js';
import { newWebhookSecret } from '../server/core/webhook-signing.js';
import { HttpsReceiver, type ReceivedRequest } from './helpers/https-receiver.js';
import { type TestService, startService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * The webhook dispatcher against a real HTTPS receiver on loopback (trusted through NODE_EXTRA_CA_CERTS), with the
 * service's fake clock for the schedules: signed posts, the retry schedule, auto-disable after 10 consecutive
 * failures, pings, event order per endpoint, leases, and fairness between accounts. Endpoints and deliveries are
 * written straight to the database, as the API and the fan-out write them.
 */

const MIN = 60_000;
const HOUR = 60 * MIN;

let service: TestService;
let receiver: HttpsReceiver;

beforeAll(async () => {
  service = await startService({ ALLOW_PRIVATE_TARGETS: 'true' });
  receiver = await HttpsReceiver.start();
});

afterAll(async () => {
  await receiver?.close();
  await service?.close();
});

afterEach(async () => {
  // Each test starts from an empty queue (deliveries go with their endpoints).
  await service.deps.db.delete(webhookEndpoints);
  receiver.reset();
});

async function addEndpoint(
  accountId: string,
  url: string,
  fields: Partial<WebhookEndpointRow> = {},
): Promise<{ endpoint: WebhookEndpointRow; secret: string }> {
  const { deps, clock } = service;
  const id = newId(clock.now());
  const secret = newWebhookSecret();
  const endpoint: WebhookEndpointRow = {
    id,
    accountId,
    url,
    events: ['email.delivered', 'email.bounced', 'email.deferred'],
    secretSealed: encryptSecret(deps.secretKey!, secret, `webhook:${id}`),
    active: true,
    failureCount: 0,
    disabledAt: null,
    lastPingAt: null,
    createdAt: clock.now(),
    ...fields,
  };
  await deps.db.insert(webhookEndpoints).values(endpoint);
  return { endpoint, secret };
}

function newDelivery(endpoint: WebhookEndpointRow, fields: Partial<WebhookDeliveryRow> = {}): WebhookDeliveryRow {
  const now = service.clock.now();
  const id = newId(now);
  return {
    id,
    endpointId: endpoint.id,
    accountId: endpoint.accountId,
    eventType: 'email.delivered' satisfies WebhookEventType,
    data: JSON.stringify({
      messageId: `m-${id}`,
      recipient: 'ana@example.com',
      status: 'delivered',
      dsn: '2.0.0',
      detail: '250 ok',
      occurredAt: new Date(now).toISOString(),
      from: 'Shop <shop@example.com>',
    }),
    attempts: 0,
    lastStatus: null,
    lastError: null,
    deliveredAt: null,
    nextAttemptAt: now,
    lockedBy: null,
    lockedUntil: null,
    createdAt: now,
    ...fields,
  };
}

async function insert(...rows: WebhookDeliveryRow[]): Promise<void> {
  for (const row of rows) await service.deps.db.insert(webhookDeliveries).values(row);
}

const delivery = async (id: string) => (await one(service.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.id, id))))!;
const history = async (id: string) =>
  await service.deps.db
    .select({
      attempt: webhookAttempts.attempt,
      attemptedAt: webhookAttempts.attemptedAt,
      status: webhookAttempts.status,
      error: webhookAttempts.error,
      delivered: webhookAttempts.delivered,
    })
    .from(webhookAttempts)
    .where(eq(webhookAttempts.deliveryId, id))
    .orderBy(asc(webhookAttempts.attempt));
const endpointRow = async (id: string) => (await one(service.deps.db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id))))!;
const deliveriesOf = async (endpointId: string) =>
  await service.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, endpointId)).orderBy(asc(webhookDeliveries.id));
const deliveryIds = (requests: ReceivedRequest[]) => requests.map((r) => r.headers['x-service-delivery']);

/** A receiver's own check of X-Service-Signature: HMAC-SHA256 of `<t>.<raw body>`, compared in constant time. */
function verifyServiceSignature(secret: string, header: string, rawBody: Buffer): boolean {
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
  if (!m) return false;
  const expected = createHmac('sha256', secret).update(`${m[1]}.`).update(rawBody).digest();
  return timingSafeEqual(Buffer.from(m[2]!, 'hex'), expected);
}

describe('webhook dispatcher', () => {
  it('posts a due delivery as { id, type, createdAt, data } with both signatures, and records it delivered once', async () => {
    const { clock, deps } = service;
    clock.set(Date.now()); // standardwebhooks checks the timestamp against the real clock
    const { account } = await service.newAccount();
    const { endpoint, secret } = await addEndpoint(account.id, receiver.url('/signed'));
    const row = newDelivery(endpoint);
    await insert(row);
    const dispatcher = createWebhookDispatcher(deps);

    expect(await dispatcher.runOnce()).toBe(1);
    expect(receiver.requests).toHaveLength(1);
    const req = receiver.requests[0]!;
    expect(req.method).toBe('POST');
    expect(req.path).toBe('/signed');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['x-service-delivery']).toBe(row.id);
    expect(req.headers['x-service-event']).toBe('email.delivered');
    expect(req.headers['webhook-id']).toBe(row.id);
    expect(req.headers['webhook-timestamp']).toBe(String(Math.floor(clock.now() / 1000)));
    expect(JSON.parse(req.body.toString('utf8'))).toEqual({
      id: row.id,
      type: 'email.delivered',
      createdAt: new Date(row.createdAt).toISOString(),
      data: JSON.parse(row.data),
    });
    expect(req.body.toString('utf8')).toBe(webhookPostBody(row));
    expect(verifyServiceSignature(secret, String(req.headers['x-service-signature']), req.body)).toBe(true);
    expect(new Webhook(secret).verify(req.body.toString('utf8'), req.headers as Record<string, string>)).toEqual(JSON.parse(req.body.toString('utf8')));

    expect(await delivery(row.id)).toMatchObject({
      attempts: 1,
      lastStatus: 200,
      lastError: null,
      deliveredAt: clock.now(),
      nextAttemptAt: null,
      lockedBy: null,
      lockedUntil: null,
    });
    clock.advance(HOUR);
    expect(await dispatcher.runOnce()).toBe(0);
    expect(receiver.requests).toHaveLength(1);
  });

  it('sends the X-Service headers spelled as docs/api/contract.md writes them, as a case-sensitive receiver (PHP getallheaders()) reads them', async () => {
    const { deps } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/spelling'));
    const row = newDelivery(endpoint);
    await insert(row);
    expect(await createWebhookDispatcher(deps).runOnce()).toBe(1);
    const req = receiver.requests[0]!;
    // The names exactly as they came on the wire (rawHeaders keeps the sender's case; headers lower-cases them).
    const names = req.rawHeaders.filter((_, i) => i % 2 === 0);
    const onTheWire = (name: string) => names.filter((n) => n.toLowerCase() === name.toLowerCase());
    expect(onTheWire('X-Service-Delivery')).toEqual(['X-Service-Delivery']);
    expect(onTheWire('X-Service-Event')).toEqual(['X-Service-Event']);
    expect(onTheWire('X-Service-Signature')).toEqual(['X-Service-Signature']);
    // What getallheaders() returns under Apache: each name as sent, looked up case-sensitively.
    const all = new Map<string, string>();
    for (let i = 0; i < req.rawHeaders.length; i += 2) all.set(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
    expect(all.get('X-Service-Delivery')).toBe(row.id);
    expect(all.get('X-Service-Event')).toBe('email.delivered');
    expect(all.get('X-Service-Signature')).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    // The Standard Webhooks headers keep that specification's spelling.
    expect(onTheWire('webhook-id')).toEqual(['webhook-id']);
  });

  it('retries on the schedule (1 min, 5 min, 30 min, 2 h, 12 h from the previous attempt), then the delivery is final', async () => {
    const { clock, deps } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/retry'));
    const row = newDelivery(endpoint);
    await insert(row);
    const dispatcher = createWebhookDispatcher(deps);
    // Each attempt fails its own way; the third comes 15 minutes late (the service was down), and the gap after it
    // counts from when it was made.
    const steps = [
      { answer: { status: 503 }, status: 503, error: 'HTTP 503', late: 0, gap: 1 * MIN },
      { answer: { status: 500 }, status: 500, error: 'HTTP 500', late: 0, gap: 5 * MIN },
      { answer: { status: 410 }, status: 410, error: 'HTTP 410', late: 15 * MIN, gap: 30 * MIN },
      { answer: { redirect: 'https://127.0.0.1:1/elsewhere' }, status: 302, error: 'HTTP 302', late: 0, gap: 2 * HOUR },
      { answer: { close: true as const }, status: null, error: 'connection_error', late: 0, gap: 12 * HOUR },
      { answer: { status: 503 }, status: 503, error: 'HTTP 503', late: 0, gap: null },
    ];
    let due = clock.now();
    const attemptTimes: number[] = [];
    for (const [i, step] of steps.entries()) {
      if (i > 0) {
        clock.set(due - 1000);
        expect(await dispatcher.runOnce()).toBe(0); // not yet due
        clock.set(due + step.late);
      }
      receiver.enqueue(step.answer);
      expect(await dispatcher.runOnce()).toBe(1);
      const attemptAt = clock.now();
      attemptTimes.push(attemptAt);
      due = step.gap === null ? Number.NaN : attemptAt + step.gap;
      expect(await delivery(row.id)).toMatchObject({
        attempts: i + 1,
        lastStatus: step.status,
        lastError: step.error,
        deliveredAt: null,
        nextAttemptAt: step.gap === null ? null : attemptAt + step.gap,
        lockedBy: null,
      });
    }
    expect(receiver.requests).toHaveLength(6);
    // Every attempt is kept in the delivery's history (the row itself holds only the last answer).
    expect(await history(row.id)).toEqual(
      steps.map((step, i) => ({ attempt: i + 1, attemptedAt: attemptTimes[i], status: step.status, error: step.error, delivered: false })),
    );
    clock.advance(30 * 24 * HOUR);
    expect(await dispatcher.runOnce()).toBe(0);
    expect(receiver.requests).toHaveLength(6);
    // Six failures in a row: counted, not yet enough to switch the endpoint off.
    expect(await endpointRow(endpoint.id)).toMatchObject({ active: true, failureCount: 6, disabledAt: null });
  });

  it('a delivered post resets the failure count', async () => {
    const { deps } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/reset'), { failureCount: 7 });
    await insert(newDelivery(endpoint));
    expect(await createWebhookDispatcher(deps).runOnce()).toBe(1);
    expect(await endpointRow(endpoint.id)).toMatchObject({ active: true, failureCount: 0 });
  });

  it('10 consecutive failures switch the endpoint off; its deliveries wait; a failed ping changes nothing; a good one switches it on and they go out in event order', async () => {
    const { clock, deps, logger } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/flaky'));
    const rows = Array.from({ length: 12 }, () => newDelivery(endpoint));
    // Written in reverse: the order that counts is the id (event) order.
    await insert(...[...rows].reverse());
    const ids = rows.map((r) => r.id);
    receiver.respond({ status: 500 });
    const dispatcher = createWebhookDispatcher(deps);
    const t0 = clock.now();

    expect(await dispatcher.runOnce()).toBe(10);
    expect(deliveryIds(receiver.requests)).toEqual(ids.slice(0, 10));
    expect(await endpointRow(endpoint.id)).toMatchObject({ active: false, failureCount: 10, disabledAt: t0 });
    expect(logger.entries).toContainEqual(expect.objectContaining({ event: 'webhook.endpoint_disabled', endpointId: endpoint.id, failureCount: 10 }));
    expect((await deliveriesOf(endpoint.id)).map((d) => d.attempts)).toEqual([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]);

    // The two never tried are due, and wait while the endpoint is off.
    clock.advance(30_000);
    expect(await dispatcher.runOnce()).toBe(0);
    expect(receiver.requests).toHaveLength(10);

    // A ping that fails: recorded once, final, not counted; the endpoint stays off.
    const failed = await pingEndpoint(deps, await endpointRow(endpoint.id));
    expect(failed).toMatchObject({ delivered: false, status: 500, error: 'HTTP 500' });
    const pingReq = receiver.requests[10]!;
    expect(pingReq.headers['x-service-event']).toBe('ping');
    expect(JSON.parse(pingReq.body.toString('utf8'))).toMatchObject({ id: failed.id, type: 'ping', data: { endpointId: endpoint.id } });
    expect(await delivery(failed.id)).toMatchObject({
      eventType: 'ping',
      attempts: 1,
      lastStatus: 500,
      lastError: 'HTTP 500',
      deliveredAt: null,
      nextAttemptAt: null,
    });
    expect(await history(failed.id)).toEqual([{ attempt: 1, attemptedAt: clock.now(), status: 500, error: 'HTTP 500', delivered: false }]);
    expect(await endpointRow(endpoint.id)).toMatchObject({ active: false, failureCount: 10, disabledAt: t0 });
    clock.advance(HOUR);
    expect(await dispatcher.runOnce()).toBe(0); // a ping is never retried, and the endpoint is still off
    expect(receiver.requests).toHaveLength(11);

    // A ping that succeeds switches it back on; every waiting delivery then goes out, in event order.
    receiver.respond({ status: 204 });
    clock.set(t0 + 40_000); // before the first ten's retry time: they resume at once all the same
    let pokes = 0;
    const unsubscribe = onQueueMarked(deps.db, 'webhooks', () => pokes++);
    const ok = await pingEndpoint(deps, await endpointRow(endpoint.id)).finally(unsubscribe);
    expect(ok).toMatchObject({ delivered: true, status: 204, error: null });
    expect(pokes).toBe(1); // the dispatcher looks at once instead of at its next interval
    expect(await endpointRow(endpoint.id)).toMatchObject({ active: true, failureCount: 0, disabledAt: null });
    expect(await dispatcher.runOnce()).toBe(12);
    expect(deliveryIds(receiver.requests.slice(12))).toEqual(ids);
    for (const id of ids) expect(await delivery(id)).toMatchObject({ lastStatus: 204, deliveredAt: clock.now(), nextAttemptAt: null });
    expect((await history(ids[0]!)).map((a) => [a.status, a.error, a.delivered])).toEqual([
      [500, 'HTTP 500', false],
      [204, null, true],
    ]);
    expect(await history(ok.id)).toEqual([{ attempt: 1, attemptedAt: clock.now(), status: 204, error: null, delivered: true }]);
  });

  it('posts one delivery of an endpoint at a time, in event order, while other endpoints go out beside it', async () => {
    const { deps } = service;
    const { account } = await service.newAccount();
    const a = (await addEndpoint(account.id, receiver.url('/order-a'))).endpoint;
    const b = (await addEndpoint(account.id, receiver.url('/order-b'))).endpoint;
    const rows = Array.from({ length: 8 }, (_, i) => newDelivery(i % 2 === 0 ? a : b));
    await insert(...[...rows].reverse());
    receiver.respond({ stallMs: 60 });
    const inFlight = new Map<string, number>();
    let maxPerEndpoint = 0;
    let maxOverall = 0;
    const counting: PostWebhook = async (d, url, headers, body, options) => {
      inFlight.set(url, (inFlight.get(url) ?? 0) + 1);
      maxPerEndpoint = Math.max(maxPerEndpoint, inFlight.get(url)!);
      maxOverall = Math.max(
        maxOverall,
        [...inFlight.values()].reduce((x, y) => x + y, 0),
      );
      try {
        return await postWebhook(d, url, headers, body, options);
      } finally {
        inFlight.set(url, inFlight.get(url)! - 1);
      }
    };
    expect(await createWebhookDispatcher(deps, { post: counting }).runOnce()).toBe(8);
    expect(maxPerEndpoint).toBe(1);
    expect(maxOverall).toBe(2);
    expect(deliveryIds(receiver.requests.filter((r) => r.path === '/order-a'))).toEqual(rows.filter((r) => r.endpointId === a.id).map((r) => r.id));
    expect(deliveryIds(receiver.requests.filter((r) => r.path === '/order-b'))).toEqual(rows.filter((r) => r.endpointId === b.id).map((r) => r.id));
  });

  it('holds an endpoint whose later delivery is in flight: an earlier one committed after it waits (several nodes commit out of id order)', async () => {
    const { clock, deps } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/late-commit'));
    const earlier = newDelivery(endpoint);
    const later = newDelivery(endpoint, { lockedBy: 'node-b:1:abcdef01', lockedUntil: clock.now() + 2 * MIN });
    // The later one was leased (posting on another node) before the earlier one's transaction committed.
    await insert(later);
    await insert(earlier);
    expect(earlier.id < later.id).toBe(true);
    const dispatcher = createWebhookDispatcher(deps);
    expect(await dispatcher.runOnce()).toBe(0);
    expect(receiver.requests).toHaveLength(0);
    clock.advance(2 * MIN);
    expect(await dispatcher.runOnce()).toBe(2);
  });

  it("respects another worker's live lease (and the endpoint's later deliveries wait behind it); an expired lease is claimed", async () => {
    const { clock, deps } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/leased'));
    const first = newDelivery(endpoint, { lockedBy: 'elsewhere:1:abcdef01', lockedUntil: clock.now() + 2 * MIN });
    const second = newDelivery(endpoint);
    await insert(first, second);
    const dispatcher = createWebhookDispatcher(deps);
    expect(await dispatcher.runOnce()).toBe(0);
    clock.advance(2 * MIN);
    expect(await dispatcher.runOnce()).toBe(2);
    expect(deliveryIds(receiver.requests)).toEqual([first.id, second.id]);
  });

  it('judges leases on its steady timeline: a wall clock stepped an hour either way neither ends a live lease nor holds it an hour longer', async () => {
    const { clock, deps } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/stepped'));
    // Due whatever the wall clock says; leased by another worker for 2 minutes on this process's timeline.
    const row = newDelivery(endpoint, { nextAttemptAt: 0, lockedBy: 'elsewhere:1:abcdef02', lockedUntil: leaseNow(clock) + 2 * MIN });
    await insert(row);
    const dispatcher = createWebhookDispatcher(deps);
    try {
      clock.stepWall(3_600_000);
      expect(await dispatcher.runOnce()).toBe(0);
      clock.stepWall(-2 * 3_600_000);
      clock.advance(2 * MIN - 1);
      expect(await dispatcher.runOnce()).toBe(0);
      clock.advance(1);
      expect(await dispatcher.runOnce()).toBe(1);
      expect(deliveryIds(receiver.requests)).toEqual([row.id]);
    } finally {
      clock.stepWall(3_600_000);
    }
  });

  it('at start, cuts another worker’s lease that reaches an hour ahead (written before the clock stepped back) to one term', async () => {
    const { clock, deps, logger } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/ahead'));
    const row = newDelivery(endpoint, { lockedBy: 'elsewhere:1:abcdef03', lockedUntil: clock.now() + 3_600_000 + 2 * MIN });
    await insert(row);
    const dispatcher = createWebhookDispatcher(deps);
    await dispatcher.start();
    await dispatcher.stop();
    expect(logger.entries).toContainEqual(expect.objectContaining({ event: 'webhook.leases_capped', capped: 1 }));
    expect((await delivery(row.id)).lockedUntil).toBeLessThanOrEqual(leaseNow(clock) + 2 * MIN);
    clock.advance(2 * MIN);
    expect(await createWebhookDispatcher(deps).runOnce()).toBe(1);
    expect(deliveryIds(receiver.requests)).toEqual([row.id]);
  });

  it('at start, releases the leases of a dead process of this host at once', async () => {
    const { clock, deps, logger } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/dead'));
    const deadPid = spawnSync(process.execPath, ['-e', '']).pid;
    const row = newDelivery(endpoint, { lockedBy: `${hostname()}:${deadPid}:deadbeef`, lockedUntil: clock.now() + 2 * MIN });
    await insert(row);
    const dispatcher = createWebhookDispatcher(deps);
    await dispatcher.start();
    try {
      await receiver.waitForRequests(1, 5000);
    } finally {
      await dispatcher.stop();
    }
    expect(deliveryIds(receiver.requests)).toEqual([row.id]);
    expect(await delivery(row.id)).toMatchObject({ attempts: 1, lastStatus: 200, lockedBy: null });
    expect(logger.entries).toContainEqual(expect.objectContaining({ event: 'webhook.leases_released', released: 1 }));
  });

  it('stop() lets a post in flight finish and record its attempt, and leaves no lease', async () => {
    const { deps } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/stopping'));
    const rows = [newDelivery(endpoint), newDelivery(endpoint)];
    await insert(...rows);
    receiver.respond({ stallMs: 300 });
    const dispatcher = createWebhookDispatcher(deps);
    await dispatcher.start();
    await receiver.waitForRequests(1, 5000);
    await dispatcher.stop();
    expect(await delivery(rows[0]!.id)).toMatchObject({ attempts: 1, lastStatus: 200, nextAttemptAt: null, lockedBy: null });
    // The second may have gone out too, or not at all; never half-way, never left leased.
    expect((await deliveriesOf(endpoint.id)).every((d) => d.lockedBy === null && d.lockedUntil === null)).toBe(true);
    const second = await delivery(rows[1]!.id);
    expect(second.attempts === 0 ? second.nextAttemptAt : second.lastStatus).toBe(second.attempts === 0 ? rows[1]!.nextAttemptAt : 200);
  });

  it('an endpoint deleted while its post is in flight: the attempt is dropped, nothing is written back', async () => {
    const { deps, logger } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/deleted'));
    await insert(newDelivery(endpoint));
    receiver.respond({ stallMs: 200 });
    const dispatcher = createWebhookDispatcher(deps);
    const run = dispatcher.runOnce();
    await receiver.waitForRequests(1, 5000);
    await deps.db.delete(webhookEndpoints).where(eq(webhookEndpoints.id, endpoint.id));
    expect(await run).toBe(1);
    expect(await deliveriesOf(endpoint.id)).toEqual([]);
    expect(logger.entries).toContainEqual(expect.objectContaining({ event: 'webhook.attempt_dropped', endpointId: endpoint.id }));
  });

  it('an endpoint deleted while its test ping is in flight: 404 webhook_not_found, nothing written back', async () => {
    const { deps, logger } = service;
    const { account } = await service.newAccount();
    const { endpoint } = await addEndpoint(account.id, receiver.url('/ping-deleted'));
    // The receiver answers 200, after the endpoint (and its deliveries) were deleted.
    const post: PostWebhook = async () => {
      await deps.db.delete(webhookEndpoints).where(eq(webhookEndpoints.id, endpoint.id));
      return { delivered: true, status: 200, error: null };
    };
    await expect(pingEndpoint(deps, await endpointRow(endpoint.id), { post })).rejects.toMatchObject({ code: 'webhook_not_found', status: 404 });
    expect(await deliveriesOf(endpoint.id)).toEqual([]);
    const orphans = [];
    for (const a of await deps.db.select().from(webhookAttempts)) if (!(await delivery(a.deliveryId))) orphans.push(a);
    expect(orphans).toEqual([]);
    expect(logger.entries).toContainEqual(expect.objectContaining({ event: 'webhook.attempt_dropped', endpointId: endpoint.id, type: 'ping' }));
  });

  it("an account whose endpoints stall 10 s per post never delays another account's delivery", { timeout: 40_000 }, async () => {
    const { deps } = service;
    const slow = await HttpsReceiver.start();
    slow.respond({ stallMs: 10_000 });
    const dispatcher = createWebhookDispatcher(deps, { intervalMs: 60_000 });
    try {
      // Account A: 16 endpoints (as many as the dispatcher's slots in all), two deliveries each, all stalling.
      const a = (await service.newAccount({ name: 'Stalling' })).account;
      for (let i = 0; i < 16; i++) {
        const { endpoint } = await addEndpoint(a.id, slow.url(`/stall-${i}`));
        await insert(newDelivery(endpoint), newDelivery(endpoint));
      }
      await dispatcher.start();
      await slow.waitForRequests(4, 5000);
      await new Promise((resolve) => setTimeout(resolve, 200));
      // A holds its share (4 endpoints in flight), no more.
      expect(slow.requests).toHaveLength(4);

      // Account B's delivery arrives while A's posts stall.
      const b = (await service.newAccount({ name: 'Healthy' })).account;
      const { endpoint } = await addEndpoint(b.id, receiver.url('/healthy'));
      const row = newDelivery(endpoint);
      await insert(row);
      const queuedAt = Date.now();
      dispatcher.poke();
      const [req] = await receiver.waitForRequests(1, 5000);
      expect(req!.at - queuedAt).toBeLessThan(2000);
      expect(req!.headers['x-service-delivery']).toBe(row.id);
      for (let i = 0; i < 50 && (await delivery(row.id)).deliveredAt === null; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(await delivery(row.id)).toMatchObject({ attempts: 1, lastStatus: 200 });
    } finally {
      // Ends A's stalled posts at once (connection_error), so stop() need not wait out the 10 s.
      await slow.close();
      await dispatcher.stop();
    }
  });
});

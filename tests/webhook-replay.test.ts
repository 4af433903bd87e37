import { createHmac, timingSafeEqual } from 'node:crypto';
import { and, asc, count, eq, isNotNull } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onQueueMarked } from '../db/queue-wake.js';
import { emailEvents, emails, webhookDeliveries, webhookEndpoints } from '../db/schema/index.js';
import { MAX_PENDING_PER_ENDPOINT, MAX_REPLAY_EVENTS, REPLAY_CHUNK_ROWS } from '../server/core/webhook-replay.js';
import { newId } from '../server/shared/ids.js';
import { createWebhookDispatcher, type PostWebhook } from '../server/webhooks/dispatcher.js';
import { fanOutOutcome } from '../server/core/webhook-fanout.js';
import { newWebhookSecret } from '../server/core/webhook-signing.js';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { watchLoopStalls } from './helpers/loop-stall.js';
import { seedEmail, seedEndpoint, seedEvent, seedManyEvents, type SeededEvent } from './helpers/outcomes.js';
import { processApi, runningProcesses, startServiceProcess } from './helpers/service-process.js';
import { killMidRequest, processWithEndpoint } from './helpers/webhook-process.js';
import { startService, type TestService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * POST /webhooks/{id}/replay: fresh deliveries of the account's recorded outcomes in a window,
 * oldest first, their data exactly as the fan-out builds it, at most 10,000 (a larger window is refused whole).
 * Bounded (docs/api/decisions.md section 13): at most 10,000 deliveries pending per endpoint (409 limit_reached past it), written in
 * chunks that never hold the event loop past 50 ms, and what a process killed mid-replay leaves.
 */

let service: TestService;
let pokes = 0;

beforeAll(async () => {
  service = await startService();
  onQueueMarked(service.deps.db, 'webhooks', () => {
    pokes += 1;
  });
});
afterAll(async () => {
  for (const child of runningProcesses) child.kill('SIGKILL');
  await service.close();
});

const TYPE = { delivered: 'email.delivered', bounced: 'email.bounced', deferred: 'email.deferred', complained: 'email.complained' } as const;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const MINUTE = 60_000;

const expectError = (res: { status: number; body: unknown }, status: number, code: string) => {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body).toEqual({ error: { code, message: expect.any(String) } });
};

const deliveriesOf = async (endpointId: string) =>
  await service.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, endpointId)).orderBy(asc(webhookDeliveries.id));

const isoAt = (ms: number) => new Date(ms).toISOString();

/** An account with two emails (one tagged) and five outcomes a minute apart, starting a minute after t0 (ten minutes ago). */
async function accountWithHistory() {
  const { account, key } = await service.newAccount({ name: 'Replay' });
  const t0 = service.clock.now() - 10 * MINUTE;
  const plain = await seedEmail(service, account.id, { from: 'billing@example.com' });
  const tagged = await seedEmail(service, account.id, { from: 'alerts@example.com', tags: { plan: 'pro', campaign: 'march' } });
  const seeded = [
    await seedEvent(service, plain, 'deferred', t0 + 1 * MINUTE, 'x@example.net'),
    await seedEvent(service, plain, 'delivered', t0 + 2 * MINUTE, 'x@example.net'),
    await seedEvent(service, tagged, 'bounced', t0 + 3 * MINUTE, 'z@example.net'),
    await seedEvent(service, tagged, 'delivered', t0 + 4 * MINUTE, 'y@example.net'),
    await seedEvent(service, plain, 'complained', t0 + 5 * MINUTE, 'x@example.net'),
  ];
  const from = (e: SeededEvent) => (e.emailId === plain ? 'billing@example.com' : 'alerts@example.com');
  const tags = (e: SeededEvent) => (e.emailId === tagged ? { tags: { plan: 'pro', campaign: 'march' } } : {});
  /** The post's data the fan-out would have written for this outcome (docs/api/contract.md Events; docs/api/decisions.md section 7 for tags). */
  const data = (e: SeededEvent) => ({
    messageId: e.emailId,
    recipient: e.recipient,
    status: e.status,
    dsn: e.dsn,
    detail: e.detail,
    occurredAt: isoAt(e.occurredAt),
    from: from(e),
    ...tags(e),
  });
  return { account, key, t0, seeded, data };
}

describe('POST /webhooks/{id}/replay', () => {
  it("queues the window's outcomes oldest first as fresh deliveries due now, data as the fan-out builds it, answering { queued }", async () => {
    const { account, key, t0, seeded, data } = await accountWithHistory();
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered', 'email.bounced', 'email.deferred', 'email.complained']);
    service.clock.advance(10 * MINUTE);
    const now = service.clock.now();
    const before = pokes;
    const res = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(t0) } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({ queued: 5 });
    expect(pokes).toBe(before + 1);

    const rows = await deliveriesOf(endpoint);
    expect(rows.map((r) => ({ eventType: r.eventType, data: JSON.parse(r.data) as unknown }))).toEqual(
      seeded.map((e) => ({ eventType: TYPE[e.status], data: data(e) })),
    );
    for (const r of rows) {
      expect(r.id).toMatch(UUID);
      expect(r).toMatchObject({
        accountId: account.id,
        attempts: 0,
        lastStatus: null,
        lastError: null,
        deliveredAt: null,
        nextAttemptAt: now,
        createdAt: now,
        lockedBy: null,
      });
    }
    // Fresh ids, not the events' own; id order (the dispatcher's event order) is oldest outcome first.
    expect(rows.map((r) => r.id)).toEqual([...rows.map((r) => r.id)].sort());
    expect(rows.map((r) => r.id).some((id) => seeded.some((e) => e.id === id))).toBe(false);

    // A second replay queues them again: it is the receiver's way to get them once more.
    const again = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(t0) } });
    expect(again.body).toEqual({ queued: 5 });
    expect(await deliveriesOf(endpoint)).toHaveLength(10);
  });

  it('the window is [since, until): an outcome at since is in, one at until is out', async () => {
    const { account, key, seeded, data } = await accountWithHistory();
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered', 'email.bounced', 'email.deferred', 'email.complained']);
    const res = await service.api('POST', `/webhooks/${endpoint}/replay`, {
      key,
      body: { since: isoAt(seeded[1]!.occurredAt), until: isoAt(seeded[3]!.occurredAt) },
    });
    expect(res.body).toEqual({ queued: 2 });
    expect((await deliveriesOf(endpoint)).map((r) => JSON.parse(r.data) as unknown)).toEqual([data(seeded[1]!), data(seeded[2]!)]);
    // With an offset instead of Z, the same instants.
    const shifted = (ms: number) => new Date(ms - 5 * 3_600_000).toISOString().replace('Z', '-05:00');
    const same = await service.api('POST', `/webhooks/${endpoint}/replay`, {
      key,
      body: { since: shifted(seeded[1]!.occurredAt), until: shifted(seeded[3]!.occurredAt) },
    });
    expect(same.body).toEqual({ queued: 2 });
  });

  it('events defaults to the email types the endpoint subscribes to; an explicit list wins, repeats dropped', async () => {
    const { account, key, t0, seeded, data } = await accountWithHistory();
    const endpoint = await seedEndpoint(service, account.id, ['email.bounced', 'ping', 'email.complained']);
    const byDefault = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(t0) } });
    expect(byDefault.body).toEqual({ queued: 2 });
    expect((await deliveriesOf(endpoint)).map((r) => JSON.parse(r.data) as unknown)).toEqual([data(seeded[2]!), data(seeded[4]!)]);

    const other = await seedEndpoint(service, account.id, ['email.bounced']);
    const explicit = await service.api('POST', `/webhooks/${other}/replay`, {
      key,
      body: { since: isoAt(t0), events: ['email.delivered', 'email.delivered'] },
    });
    expect(explicit.body).toEqual({ queued: 2 });
    expect((await deliveriesOf(other)).map((r) => [r.eventType, JSON.parse(r.data) as unknown])).toEqual([
      ['email.delivered', data(seeded[1]!)],
      ['email.delivered', data(seeded[3]!)],
    ]);
  });

  it('an endpoint subscribed to ping only, or an empty window, queues nothing: { queued: 0 }, no poke', async () => {
    const { account, key, t0 } = await accountWithHistory();
    const pingOnly = await seedEndpoint(service, account.id, ['ping']);
    const before = pokes;
    expect((await service.api('POST', `/webhooks/${pingOnly}/replay`, { key, body: { since: isoAt(t0) } })).body).toEqual({ queued: 0 });
    const all = await seedEndpoint(service, account.id, ['email.delivered']);
    const empty = await service.api('POST', `/webhooks/${all}/replay`, { key, body: { since: isoAt(t0 - 60 * MINUTE), until: isoAt(t0) } });
    expect(empty.status).toBe(200);
    expect(empty.body).toEqual({ queued: 0 });
    expect(await deliveriesOf(pingOnly)).toHaveLength(0);
    expect(await deliveriesOf(all)).toHaveLength(0);
    expect(pokes).toBe(before);
  });

  it("only the acting account's outcomes: never another account's, a sub-account's endpoint replays the sub-account's own", async () => {
    const mine = await accountWithHistory();
    const other = await accountWithHistory();
    const sub = await service.api('POST', '/accounts', { key: mine.key, body: { name: 'Sub' } });
    expect(sub.status).toBe(201);
    const subEvent = await seedEvent(service, await seedEmail(service, sub.body.id), 'delivered', mine.t0 + 6 * MINUTE);
    const endpoint = await seedEndpoint(service, mine.account.id, ['email.delivered']);
    const subEndpoint = await seedEndpoint(service, sub.body.id, ['email.delivered']);

    expect((await service.api('POST', `/webhooks/${endpoint}/replay`, { key: mine.key, body: { since: isoAt(mine.t0) } })).body).toEqual({ queued: 2 });
    expect((await deliveriesOf(endpoint)).map((r) => (JSON.parse(r.data) as { messageId: string }).messageId)).toEqual([
      mine.seeded[1]!.emailId,
      mine.seeded[3]!.emailId,
    ]);
    const viaHeader = await service.api('POST', `/webhooks/${subEndpoint}/replay`, { key: mine.key, account: sub.body.id, body: { since: isoAt(mine.t0) } });
    expect(viaHeader.body).toEqual({ queued: 1 });
    expect((JSON.parse((await deliveriesOf(subEndpoint))[0]!.data) as { messageId: string }).messageId).toBe(subEvent.emailId);
    expect(other.seeded).toHaveLength(5);
  });

  it('a switched-off endpoint gets its replay queued; the rows wait like the rest of its queue', async () => {
    const { account, key, t0 } = await accountWithHistory();
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered'], { active: false });
    expect((await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(t0) } })).body).toEqual({ queued: 2 });
    expect(await deliveriesOf(endpoint)).toHaveLength(2);
  });

  it(`queues exactly ${MAX_REPLAY_EVENTS}; one more is 422 invalid_request telling to narrow the window, and nothing is queued`, async () => {
    const { account, key } = await service.newAccount({ name: 'Busy' });
    const start = service.clock.now() + 1000;
    const email = await seedEmail(service, account.id);
    await seedManyEvents(service, email, MAX_REPLAY_EVENTS + 1, start);
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered']);
    const tooMany = await service.api('POST', `/webhooks/${endpoint}/replay`, {
      key,
      body: { since: isoAt(start), until: isoAt(start + MAX_REPLAY_EVENTS + 1) },
    });
    expectError(tooMany, 422, 'invalid_request');
    expect(tooMany.body.error.message).toContain('narrow');
    expect(await deliveriesOf(endpoint)).toHaveLength(0);

    const exactly = await service.api('POST', `/webhooks/${endpoint}/replay`, {
      key,
      body: { since: isoAt(start + 1), until: isoAt(start + MAX_REPLAY_EVENTS + 1) },
    });
    expect(exactly.status, JSON.stringify(exactly.body)).toBe(200);
    expect(exactly.body).toEqual({ queued: MAX_REPLAY_EVENTS });
    const rows = await deliveriesOf(endpoint);
    expect(rows).toHaveLength(MAX_REPLAY_EVENTS);
    expect((JSON.parse(rows[0]!.data) as { recipient: string }).recipient).toBe('r1@example.net');
    expect((JSON.parse(rows[rows.length - 1]!.data) as { recipient: string }).recipient).toBe(`r${MAX_REPLAY_EVENTS}@example.net`);
  }, 60_000);

  it("an unknown id, another account's endpoint, or a parent's endpoint asked through a sub-account is 404 webhook_not_found", async () => {
    const mine = await accountWithHistory();
    const other = await accountWithHistory();
    const theirs = await seedEndpoint(service, other.account.id, ['email.delivered']);
    const body = { since: isoAt(mine.t0) };
    expectError(await service.api('POST', `/webhooks/${theirs}/replay`, { key: mine.key, body }), 404, 'webhook_not_found');
    expectError(await service.api('POST', '/webhooks/01a00000-0000-7000-8000-000000000000/replay', { key: mine.key, body }), 404, 'webhook_not_found');
    expectError(await service.api('POST', '/webhooks/nope/replay', { key: mine.key, body }), 404, 'webhook_not_found');
    const parents = await seedEndpoint(service, mine.account.id, ['email.delivered']);
    const sub = await service.api('POST', '/accounts', { key: mine.key, body: { name: 'Sub' } });
    expectError(await service.api('POST', `/webhooks/${parents}/replay`, { key: mine.key, account: sub.body.id, body }), 404, 'webhook_not_found');
    expect(await deliveriesOf(theirs)).toHaveLength(0);
  });

  it('a body that is not JSON is 400 invalid_json', async () => {
    const { account, key } = await accountWithHistory();
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered']);
    for (const raw of ['{"since":', 'since=2026-03-10T12:00:00Z', '']) {
      expectError(
        await service.api('POST', `/webhooks/${endpoint}/replay`, { key, rawBody: raw, headers: { 'content-type': 'application/json' } }),
        400,
        'invalid_json',
      );
    }
  });

  it.each([
    ['since missing', {}, 'since'],
    ['since without a zone', { since: '2026-03-10T12:00:00' }, 'since'],
    ['since as a number', { since: 1773144000000 }, 'since'],
    ['until not a date', { since: '2026-03-10T12:00:00Z', until: 'later' }, 'until'],
    ['until equal to since', { since: '2026-03-10T12:00:00Z', until: '2026-03-10T12:00:00Z' }, 'until'],
    ['until before since', { since: '2026-03-10T12:00:00Z', until: '2026-03-10T11:00:00Z' }, 'until'],
    ['events empty', { since: '2026-03-10T12:00:00Z', events: [] }, 'events'],
    ['events naming ping', { since: '2026-03-10T12:00:00Z', events: ['ping'] }, 'events'],
    ['events naming an unknown type', { since: '2026-03-10T12:00:00Z', events: ['email.opened'] }, 'events'],
    ['events not an array', { since: '2026-03-10T12:00:00Z', events: 'email.delivered' }, 'events'],
    ['an unknown field', { since: '2026-03-10T12:00:00Z', from: 'x' }, 'from'],
    ['a body that is not an object', ['2026-03-10T12:00:00Z'], 'body'],
  ])('%s is 422 invalid_request naming the field', async (_name, body, field) => {
    const { account, key } = await accountWithHistory();
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered']);
    const res = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body });
    expectError(res, 422, 'invalid_request');
    expect(res.body.error.message).toContain(field);
    expect(await deliveriesOf(endpoint)).toHaveLength(0);
  });
});

describe('the standard failures', () => {
  runCommonAuthTests(() => service, {
    method: 'POST',
    path: async ({ service: s, accountId }) => `/webhooks/${await seedEndpoint(s, accountId, ['email.delivered'])}/replay`,
    scope: 'webhooks:write',
    body: { since: '2026-03-10T12:00:00Z' },
  });
});

describe('recovery: a receiver that lost every attempt gets the outcome again by replay, and finds it in GET /events', () => {
  it("the replayed post carries the original data under a new id, signed with the endpoint's secret", async () => {
    const { account, key } = await service.newAccount({ name: 'Recovering' });
    const secret = newWebhookSecret();
    const endpoint = await seedEndpoint(service, account.id, ['email.bounced'], { secret });
    const email = await seedEmail(service, account.id, { from: 'alerts@example.com', tags: { plan: 'pro' } });
    const occurredAt = service.clock.now();
    // The outcome and its fan-out in one transaction, as server/core/outcomes.ts records them.
    const event = await service.deps.db.transaction(async () => {
      const e = await seedEvent(service, email, 'bounced', occurredAt, 'gone@example.net');
      await fanOutOutcome(service.deps.db, {
        accountId: account.id,
        emailId: email,
        recipient: e.recipient,
        status: e.status,
        dsn: e.dsn,
        detail: e.detail,
        occurredAt,
      });
      return e;
    });

    const posts: { headers: Record<string, string>; body: string }[] = [];
    let receiverUp = false;
    const post: PostWebhook = async (_deps, _url, headers, body) => {
      // Only this endpoint's posts are looked at (deliveries queued by the tests above share the service).
      if ((await deliveriesOf(endpoint)).some((r) => r.id === headers['X-Service-Delivery'])) posts.push({ headers, body });
      return receiverUp ? { delivered: true, status: 200, error: null } : { delivered: false, status: 503, error: 'HTTP 503' };
    };
    const dispatcher = createWebhookDispatcher(service.deps, { post });
    // Six attempts over the whole schedule, all refused: the delivery is final.
    for (const gap of [0, 60_000, 300_000, 1_800_000, 7_200_000, 43_200_000]) {
      service.clock.advance(gap);
      await dispatcher.runOnce();
    }
    expect(posts).toHaveLength(6);
    const [original] = await deliveriesOf(endpoint);
    expect(original).toMatchObject({ attempts: 6, nextAttemptAt: null, deliveredAt: null, lastError: 'HTTP 503' });

    // The receiver is back; the consumer reconciles with the event feed and asks for a replay.
    receiverUp = true;
    const feed = await service.api('GET', `/events?since=${encodeURIComponent(isoAt(occurredAt))}`, { key });
    expect(feed.body.data).toEqual([expect.objectContaining({ id: event.id, type: 'email.bounced', emailId: email, recipient: 'gone@example.net' })]);
    const replay = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(occurredAt) } });
    expect(replay.body).toEqual({ queued: 1 });
    expect(await dispatcher.runOnce()).toBe(1);
    await dispatcher.stop();

    const first = JSON.parse(posts[0]!.body) as { id: string; type: string; data: unknown };
    const replayed = posts[6]!;
    const parsed = JSON.parse(replayed.body) as { id: string; type: string; createdAt: string; data: unknown };
    expect(parsed.id).not.toBe(first.id);
    expect(parsed.type).toBe('email.bounced');
    expect(parsed.data).toEqual(first.data);
    expect(parsed.data).toEqual({
      messageId: email,
      recipient: 'gone@example.net',
      status: 'bounced',
      dsn: '5.1.1',
      detail: event.detail,
      occurredAt: isoAt(occurredAt),
      from: 'alerts@example.com',
      tags: { plan: 'pro' },
    });
    expect(replayed.headers['X-Service-Delivery']).toBe(parsed.id);
    // The spec's signature, checked with independent code.
    const sig = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(replayed.headers['X-Service-Signature']!);
    expect(sig).not.toBeNull();
    const expected = createHmac('sha256', secret).update(`${sig![1]}.${replayed.body}`).digest();
    expect(timingSafeEqual(expected, Buffer.from(sig![2]!, 'hex'))).toBe(true);
    const rows = await deliveriesOf(endpoint);
    expect(rows).toHaveLength(2);
    expect(rows[1]).toMatchObject({ id: parsed.id, attempts: 1, lastStatus: 200, nextAttemptAt: null });
    expect(rows[1]!.deliveredAt).not.toBeNull();
  });
});

/**
 * Lets the event loop turn once a seed has held it for long: the service's keep-alive timeout then closes the test
 * client's idle connection before the next request is written to it (which would meet ECONNRESET, "fetch failed").
 */
const afterLongSeed = () => new Promise((resolve) => setTimeout(resolve, 20));

/** `n` deliveries of an endpoint as the fan-out writes them: pending (their retry an hour away) unless `delivered`. */
async function seedDeliveries(endpointId: string, accountId: string, n: number, opts: { delivered?: boolean } = {}): Promise<void> {
  const now = service.clock.now();
  const rows = Array.from({ length: n }, () => ({
    id: newId(now),
    endpointId,
    accountId,
    eventType: 'email.delivered' as const,
    data: '{}',
    attempts: 1,
    deliveredAt: opts.delivered ? now : null,
    nextAttemptAt: opts.delivered ? null : now + 3_600_000,
    createdAt: now,
  }));
  await service.deps.db.transaction(async (tx) => {
    for (let i = 0; i < rows.length; i += 500) await tx.insert(webhookDeliveries).values(rows.slice(i, i + 500));
  });
}

const pendingOf = async (endpointId: string) =>
  (await one(
    service.deps.db
      .select({ n: count() })
      .from(webhookDeliveries)
      .where(and(eq(webhookDeliveries.endpointId, endpointId), isNotNull(webhookDeliveries.nextAttemptAt))),
  ))!.n;

const ALL_TYPES = ['email.delivered', 'email.bounced', 'email.deferred', 'email.complained'] as const;

describe(`at most ${MAX_PENDING_PER_ENDPOINT} deliveries pending per endpoint (docs/api/decisions.md section 13)`, () => {
  it('a replay that would leave more pending is 409 limit_reached saying how many are, and queues nothing; up to the cap exactly is queued', async () => {
    const { account, key, t0 } = await accountWithHistory();
    const endpoint = await seedEndpoint(service, account.id, [...ALL_TYPES]);
    await seedDeliveries(endpoint, account.id, MAX_PENDING_PER_ENDPOINT - 5);
    // Delivered (and final) deliveries are history, not pending: they do not count.
    await seedDeliveries(endpoint, account.id, 100, { delivered: true });
    await afterLongSeed();

    const upTo = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(t0) } });
    expect(upTo.status, JSON.stringify(upTo.body)).toBe(200);
    expect(upTo.body).toEqual({ queued: 5 });
    expect(await pendingOf(endpoint)).toBe(MAX_PENDING_PER_ENDPOINT);

    const before = pokes;
    const over = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(t0) } });
    expectError(over, 409, 'limit_reached');
    expect(over.body.error.message).toContain(
      `${MAX_PENDING_PER_ENDPOINT} deliveries are pending for this endpoint and this replay would add 5; at most ${MAX_PENDING_PER_ENDPOINT} may be pending`,
    );
    expect(await pendingOf(endpoint)).toBe(MAX_PENDING_PER_ENDPOINT);
    expect(await deliveriesOf(endpoint)).toHaveLength(MAX_PENDING_PER_ENDPOINT + 100);
    expect(pokes).toBe(before);

    // Once the receiver has taken five, the same replay fits again.
    const taken = (await deliveriesOf(endpoint)).slice(100, 105).map((r) => r.id);
    for (const id of taken)
      await service.deps.db.update(webhookDeliveries).set({ nextAttemptAt: null, deliveredAt: service.clock.now() }).where(eq(webhookDeliveries.id, id));
    expect((await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(t0) } })).body).toEqual({ queued: 5 });
  }, 30_000);

  it('a switched-off endpoint’s waiting deliveries count as pending', async () => {
    const { account, key, t0 } = await accountWithHistory();
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered'], { active: false });
    await seedDeliveries(endpoint, account.id, MAX_PENDING_PER_ENDPOINT - 1);
    await afterLongSeed();
    const res = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(t0) } });
    expectError(res, 409, 'limit_reached');
    expect(res.body.error.message).toContain(`${MAX_PENDING_PER_ENDPOINT - 1} deliveries are pending for this endpoint and this replay would add 2`);
    expect(await pendingOf(endpoint)).toBe(MAX_PENDING_PER_ENDPOINT - 1);
  }, 30_000);

  it('new outcomes are never refused: the fan-out queues past the cap, and a replay is then told more than 10,000 are pending', async () => {
    const { account, key, t0 } = await accountWithHistory();
    const endpoint = await seedEndpoint(service, account.id, ['email.bounced']);
    await seedDeliveries(endpoint, account.id, MAX_PENDING_PER_ENDPOINT);
    await afterLongSeed();
    const email = await seedEmail(service, account.id);
    const occurredAt = service.clock.now();
    const written = await service.deps.db.transaction(async () => {
      const e = await seedEvent(service, email, 'bounced', occurredAt, 'late@example.net');
      return fanOutOutcome(service.deps.db, {
        accountId: account.id,
        emailId: email,
        recipient: e.recipient,
        status: e.status,
        dsn: e.dsn,
        detail: e.detail,
        occurredAt,
      });
    });
    expect(written).toBe(1);
    expect(await pendingOf(endpoint)).toBe(MAX_PENDING_PER_ENDPOINT + 1);
    const res = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(t0) } });
    expectError(res, 409, 'limit_reached');
    expect(res.body.error.message).toContain(`More than ${MAX_PENDING_PER_ENDPOINT} deliveries are pending for this endpoint and this replay would add 1`);
  }, 30_000);

  it('two replays at once cannot pass it together: one is queued, the other refused', async () => {
    const { account, key } = await service.newAccount({ name: 'Twice at once' });
    const start = service.clock.now() + 1000;
    await seedManyEvents(service, await seedEmail(service, account.id), 6000, start);
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered']);
    await afterLongSeed();
    const body = { since: isoAt(start), until: isoAt(start + 6000) };
    const answers = await Promise.all([1, 2].map(() => service.api('POST', `/webhooks/${endpoint}/replay`, { key, body })));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 409]);
    const refused = answers.find((a) => a.status === 409)!;
    expectError(refused, 409, 'limit_reached');
    // The first one's rows count from the moment it was accepted, before they are written.
    expect(refused.body.error.message).toContain('6000 deliveries are pending for this endpoint and this replay would add 6000');
    expect(await pendingOf(endpoint)).toBe(6000);
  }, 30_000);
});

const HISTORY = 200_000;

describe('a replay is written in chunks: the event loop is never held past 50 ms (docs/api/decisions.md section 13)', () => {
  it(`a replay of ${MAX_REPLAY_EVENTS} from an account with ${HISTORY.toLocaleString('en-US')} more outcomes leaves the loop free between chunks of ${REPLAY_CHUNK_ROWS}, each on disk before the dispatcher is told`, async () => {
    const { account, key } = await service.newAccount({ name: 'Big replay' });
    const start = service.clock.now() + 1000;
    await seedManyEvents(service, await seedEmail(service, account.id), MAX_REPLAY_EVENTS, start);
    // Later outcomes of the account, outside the window: counting the window walks them too (in steps).
    const later = await seedEmail(service, account.id);
    const history = Array.from({ length: HISTORY }, (_, i) => ({
      id: newId(start + MAX_REPLAY_EVENTS + i),
      emailId: later,
      accountId: account.id,
      recipient: `later${i}@example.net`,
      status: 'delivered' as const,
      dsn: '2.0.0',
      detail: '250 ok',
      occurredAt: start + MAX_REPLAY_EVENTS + i,
    }));
    await service.deps.db.transaction(async (tx) => {
      for (let i = 0; i < history.length; i += 500) await tx.insert(emailEvents).values(history.slice(i, i + 500));
    });
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered']);
    const before = pokes;
    await afterLongSeed();

    // The longest the loop was held, not counting time the machine's other processes had the CPU (see loop-stall.ts):
    // one transaction for the 10,000 held it 0.4 to 0.65 s; one count over the history alone, about 0.1 s.
    const stalls = watchLoopStalls();
    const res = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(start), until: isoAt(start + MAX_REPLAY_EVENTS) } });
    const seen = stalls.stop();
    expect(res.body).toEqual({ queued: MAX_REPLAY_EVENTS });
    expect(seen.longestMs, JSON.stringify(seen)).toBeLessThan(50);

    // The dispatcher heard of each chunk once it was on disk, so the first go out while the rest are written.
    expect(pokes - before).toBe(MAX_REPLAY_EVENTS / REPLAY_CHUNK_ROWS);
    const rows = await deliveriesOf(endpoint);
    expect(rows.map((r) => (JSON.parse(r.data) as { recipient: string }).recipient)).toEqual(
      Array.from({ length: MAX_REPLAY_EVENTS }, (_, i) => `r${i}@example.net`),
    );
  }, 120_000);
});

describe('an endpoint deleted while its replay is written', () => {
  it('ends the replay with 404 webhook_not_found; its deliveries went with it', async () => {
    const { account, key } = await service.newAccount({ name: 'Deleted meanwhile' });
    const start = service.clock.now() + 1000;
    await seedManyEvents(service, await seedEmail(service, account.id), 3 * REPLAY_CHUNK_ROWS, start);
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered']);
    await afterLongSeed();
    let chunks = 0;
    const unsubscribe = onQueueMarked(service.deps.db, 'webhooks', async () => {
      chunks += 1;
      // The first chunk is on disk: the endpoint goes, as DELETE /webhooks/{id} ends, its deliveries with it.
      await service.deps.db.delete(webhookEndpoints).where(eq(webhookEndpoints.id, endpoint));
    });
    let res;
    try {
      res = await service.api('POST', `/webhooks/${endpoint}/replay`, { key, body: { since: isoAt(start), until: isoAt(start + 3 * REPLAY_CHUNK_ROWS) } });
    } finally {
      unsubscribe();
    }
    expectError(res, 404, 'webhook_not_found');
    expect(res.body.error.message).toContain('deleted while its replay was being queued');
    // On SQLite the deletion runs before the next chunk's batch; on Postgres it waits for a chunk already reading the
    // endpoint (held FOR UPDATE) and takes that chunk's rows along. Either way the replay ends before its last chunk.
    if (service.deps.store.engine === 'sqlite') expect(chunks).toBe(1);
    else expect(chunks).toBeLessThan(3);
    expect(await deliveriesOf(endpoint)).toEqual([]);
  });
});

describe('a process killed mid-replay', () => {
  it('keeps the chunks already on disk (the window’s oldest outcomes, due, counted by the cap after a restart); the replay was never answered', async () => {
    const started = await processWithEndpoint('Killed mid-replay');
    const { env, accountId, key, endpointId, db } = started;
    let proc = started.proc;
    try {
      // The outcomes, written beside the running server as the mail engine writes them.
      const start = Date.now() - 3_600_000;
      const emailId = newId(start);
      await db.insert(emails).values({
        id: emailId,
        accountId,
        fromAddress: 'billing@example.com',
        to: ['a@example.net'],
        subject: 's',
        template: 'notification',
        status: 'sent',
        sandbox: false,
        createdAt: start,
      });
      const events = Array.from({ length: MAX_REPLAY_EVENTS }, (_, i) => ({
        id: newId(start + i),
        emailId,
        accountId,
        recipient: `r${i}@example.net`,
        status: 'delivered' as const,
        dsn: '2.0.0',
        detail: '250 ok',
        occurredAt: start + i,
      }));
      await db.transaction(async (tx) => {
        for (let i = 0; i < events.length; i += 500) await tx.insert(emailEvents).values(events.slice(i, i + 500));
      });
      const written = async () => (await db.select({ n: count() }).from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, endpointId)))[0]!.n;

      const body = { since: new Date(start).toISOString(), until: new Date(start + MAX_REPLAY_EVENTS).toISOString() };
      expect(await killMidRequest(proc, processApi(proc, key, 'POST', `/webhooks/${endpointId}/replay`, body), async () => (await written()) > 0)).toBe(
        'no answer',
      );

      const rows = await db
        .select({ data: webhookDeliveries.data, nextAttemptAt: webhookDeliveries.nextAttemptAt })
        .from(webhookDeliveries)
        .where(eq(webhookDeliveries.endpointId, endpointId))
        .orderBy(asc(webhookDeliveries.id));
      expect(rows.length).toBeGreaterThan(0);
      expect(rows.length).toBeLessThan(MAX_REPLAY_EVENTS);
      // Whole chunks, the oldest outcomes of the window in order, every one still to be posted.
      expect(rows.length % REPLAY_CHUNK_ROWS).toBe(0);
      expect(rows.map((r) => (JSON.parse(r.data) as { recipient: string }).recipient)).toEqual(events.slice(0, rows.length).map((e) => e.recipient));
      expect(rows.every((r) => r.nextAttemptAt !== null)).toBe(true);

      // After a restart they are pending like any other delivery: the whole window again would pass the cap.
      proc = await startServiceProcess(env);
      const again = await processApi(proc, key, 'POST', `/webhooks/${endpointId}/replay`, body);
      expect(again.status, JSON.stringify(again.body)).toBe(409);
      expect(again.body.error.code).toBe('limit_reached');
      expect(again.body.error.message).toContain(`${rows.length} deliveries are pending for this endpoint and this replay would add ${MAX_REPLAY_EVENTS}`);
      proc.child.kill('SIGKILL');
      await proc.exited;
    } finally {
      await started.close();
    }
  }, 90_000);
});

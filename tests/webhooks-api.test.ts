import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { count, eq } from 'drizzle-orm';
import { webhookAttempts, webhookDeliveries, webhookEndpoints } from '../db/schema/index.js';
import { DELETE_CHUNK_ROWS } from '../server/core/webhooks.js';
import { newId } from '../server/shared/ids.js';
import { decryptSecret } from '../server/shared/secrets.js';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { expectDocumented } from './helpers/openapi.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { watchLoopStalls } from './helpers/loop-stall.js';
import { expectError } from './helpers/sending.js';
import { processApi, runningProcesses, startServiceProcess } from './helpers/service-process.js';
import { killMidRequest, processWithEndpoint } from './helpers/webhook-process.js';
import { startService, type TestService } from './helpers/service.js';
import { replaceDep } from './helpers/replace-dep.js';
import { one } from '../db/sql.js';

/**
 * The Webhooks endpoints of docs/api/contract.md: create (the secret once, sealed at rest), list, get, delete with its deliveries,
 * the deliveries list, and every error the spec names for them, status and code.
 */

let dns: TestDnsServer;
let service: TestService;

/** A name that resolves to a public address (nothing is contacted at creation) and one that resolves to loopback. */
const PUBLIC = 'https://hooks.webhooks.test/mailstead';

beforeAll(async () => {
  dns = await TestDnsServer.start();
  service = await startService({ DNS_SERVERS: dns.address });
});

afterAll(async () => {
  for (const child of runningProcesses) child.kill('SIGKILL');
  await service.close();
  await dns.stop();
});

beforeEach(() => {
  dns.clear();
  dns.add('hooks.webhooks.test', { type: 'A', address: '93.184.216.34' });
  dns.add('inside.webhooks.test', { type: 'A', address: '127.0.0.1' });
  dns.add('mixed.webhooks.test', { type: 'A', address: '93.184.216.34' });
  dns.add('mixed.webhooks.test', { type: 'AAAA', address: 'fd00::1' });
});

const create = (key: string, body: unknown, account?: string) => service.api('POST', '/webhooks', { key, body, ...(account ? { account } : {}) });

describe('POST /webhooks', () => {
  it('answers 201 with the endpoint and its secret once; repeated events are dropped; the secret is stored sealed', async () => {
    const { key } = await service.newAccount();
    const res = await create(key, { url: PUBLIC, events: ['email.delivered', 'email.bounced', 'email.delivered'] });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expectDocumented(res);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      url: PUBLIC,
      events: ['email.delivered', 'email.bounced'],
      active: true,
      failureCount: 0,
      disabledAt: null,
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]{43}=$/),
    });
    const row = (await one(service.deps.db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, res.body.id))))!;
    expect(row.secretSealed).not.toContain(res.body.secret.slice(6));
    expect(decryptSecret(service.deps.secretKey!, row.secretSealed, `webhook:${row.id}`).toString('utf8')).toBe(res.body.secret);

    // Never read back.
    const got = await service.api('GET', `/webhooks/${res.body.id}`, { key });
    expect(got.status).toBe(200);
    expectDocumented(got);
    const { secret: _secret, ...endpoint } = res.body;
    expect(got.body).toEqual(endpoint);
    const list = await service.api('GET', '/webhooks', { key });
    expect(list.body).toEqual({ data: [endpoint], nextCursor: null });
    expectDocumented(list);
  });

  it.each([
    ['not https', 'http://hooks.webhooks.test/x'],
    ['a user name', 'https://user@hooks.webhooks.test/x'],
    ['credentials', 'https://user:pass@hooks.webhooks.test/x'],
    ['a password alone', 'https://:pass@hooks.webhooks.test/x'],
    ['a host that resolves to loopback', 'https://inside.webhooks.test/x'],
    ['a host with one private address among public ones', 'https://mixed.webhooks.test/x'],
    ['a host that does not resolve', 'https://nowhere.webhooks.test/x'],
    ['localhost.', 'https://localhost./x'],
    ['loopback in hex', 'https://0x7f000001/x'],
    ['loopback as one number', 'https://2130706433/x'],
    ['IPv4-mapped loopback', 'https://[::ffff:7f00:1]/x'],
    ['IPv4-compatible loopback', 'https://[::127.0.0.1]/x'],
    ['the metadata address', 'https://169.254.169.254/latest'],
  ])('refuses %s with 422 invalid_url', async (_, url) => {
    const { key } = await service.newAccount();
    const res = await create(key, { url, events: ['email.delivered'] });
    expectError(res, 422, 'invalid_url');
    expectDocumented(res);
  });

  // The body's schema (format uri, 1 to 2000 characters) before the service's rules: 422 invalid_request naming url.
  it.each([
    ['2001 characters', `https://hooks.webhooks.test/${'a'.repeat(2001 - 'https://hooks.webhooks.test/'.length)}`],
    ['not a URI', 'hooks.webhooks.test'],
    ['empty', ''],
    ['a space in the path', 'https://hooks.webhooks.test/a b'],
    ['a non-ASCII path (an IRI, not a URI)', `https://hooks.webhooks.test/${'é'.repeat(1900)}`],
    ['a control character', 'https://hooks.webhooks.test/a\tb'],
    // RFC 3986 (and the API document's `format uri`): % only as %HH, [ ] only around an IP literal host, one #.
    ['a % not followed by two hex digits', 'https://hooks.webhooks.test/%zz'],
    ['a % at the end', 'https://hooks.webhooks.test/a%'],
    ['brackets in the path', 'https://hooks.webhooks.test/a[b]'],
    ['two fragments', 'https://hooks.webhooks.test/x#a#b'],
  ])('refuses %s with 422 invalid_request', async (_, url) => {
    const { key } = await service.newAccount();
    const res = await create(key, { url, events: ['email.delivered'] });
    expectError(res, 422, 'invalid_request');
    expect(res.body.error.message).toMatch(/^url: /);
    expectDocumented(res);
  });

  it('repeated events are dropped, however many: 51 of one type is one', async () => {
    const { key } = await service.newAccount();
    const res = await create(key, { url: `${PUBLIC}/repeats`, events: [...Array(51).fill('email.delivered'), 'ping', 'ping'] });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(res.body.events).toEqual(['email.delivered', 'ping']);
  });

  it('accepts exactly 2000 characters', async () => {
    const { key } = await service.newAccount();
    const url = `${PUBLIC}/${'a'.repeat(2000 - PUBLIC.length - 1)}`;
    expect(url).toHaveLength(2000);
    expect((await create(key, { url, events: ['ping'] })).status).toBe(201);
  });

  it.each([
    ['no url', { events: ['email.delivered'] }],
    ['no events', { url: PUBLIC }],
    ['no event at all', { url: PUBLIC, events: [] }],
    ['an unknown event', { url: PUBLIC, events: ['email.opened'] }],
    ['a url that is not a string', { url: 42, events: ['ping'] }],
    ['an unknown field', { url: PUBLIC, events: ['ping'], secret: 'mine' }],
  ])('refuses %s with 422 invalid_request', async (_, body) => {
    const { key } = await service.newAccount();
    expectError(await create(key, body), 422, 'invalid_request');
  });

  it('refuses a body that is not JSON with 400 invalid_json', async () => {
    const { key } = await service.newAccount();
    expectError(await service.api('POST', '/webhooks', { key, rawBody: '{"url":' }), 400, 'invalid_json');
  });

  it('refuses the 21st endpoint with 422 too_many_endpoints, per account', async () => {
    const { key } = await service.newAccount();
    for (let i = 0; i < 20; i++) expect((await create(key, { url: `${PUBLIC}/${i}`, events: ['ping'] })).status).toBe(201);
    expectError(await create(key, { url: `${PUBLIC}/21`, events: ['ping'] }), 422, 'too_many_endpoints');
    const other = await service.newAccount();
    expect((await create(other.key, { url: PUBLIC, events: ['ping'] })).status).toBe(201);
  });

  it('answers 503 not_configured when the server cannot store secrets', async () => {
    const off = await startService({ DNS_SERVERS: dns.address, SECRET_KEY: 'off' });
    try {
      const { key } = await off.newAccount();
      expectError(await off.api('POST', '/webhooks', { key, body: { url: PUBLIC, events: ['ping'] } }), 503, 'not_configured');
    } finally {
      await off.close();
    }
  });

  it('creates a sub-account’s endpoint with the account header; the parent does not see it', async () => {
    const { key } = await service.newAccount();
    const sub = await service.api('POST', '/accounts', { key, body: { name: 'Sub with hooks' } });
    const res = await create(key, { url: PUBLIC, events: ['email.bounced'] }, sub.body.id);
    expect(res.status).toBe(201);
    expect((await service.api('GET', `/webhooks/${res.body.id}`, { key, account: sub.body.id })).status).toBe(200);
    expectError(await service.api('GET', `/webhooks/${res.body.id}`, { key }), 404, 'webhook_not_found');
  });
});

describe('GET, DELETE /webhooks/{id} and the lists', () => {
  it('answers 404 webhook_not_found for an unknown id, another account’s endpoint, and after delete', async () => {
    const a = await service.newAccount();
    const b = await service.newAccount();
    const theirs = (await create(b.key, { url: PUBLIC, events: ['ping'] })).body.id as string;
    for (const method of ['GET', 'DELETE']) {
      expectError(await service.api(method, `/webhooks/${theirs}`, { key: a.key }), 404, 'webhook_not_found');
      expectError(await service.api(method, '/webhooks/01a00000-0000-7000-8000-000000000000', { key: a.key }), 404, 'webhook_not_found');
      expectError(await service.api(method, '/webhooks/not-an-id', { key: a.key }), 404, 'webhook_not_found');
    }
    const deliveries = await service.api('GET', `/webhooks/${theirs}/deliveries`, { key: a.key });
    expectError(deliveries, 404, 'webhook_not_found');
    expectDocumented(deliveries);
  });

  it('deletes an endpoint and every delivery queued or kept for it, at once', async () => {
    const { key, account } = await service.newAccount();
    const id = (await create(key, { url: PUBLIC, events: ['email.delivered'] })).body.id as string;
    const now = service.clock.now();
    for (const delivered of [null, now]) {
      await service.deps.db.insert(webhookDeliveries).values({
        id: newId(now),
        endpointId: id,
        accountId: account.id,
        eventType: 'email.delivered',
        data: '{}',
        deliveredAt: delivered,
        nextAttemptAt: delivered ? null : now,
        createdAt: now,
      });
    }
    expect((await service.api('GET', `/webhooks/${id}/deliveries`, { key })).body.data).toHaveLength(2);
    expect((await service.api('DELETE', `/webhooks/${id}`, { key })).status).toBe(204);
    expect(await service.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, id))).toEqual([]);
    expectError(await service.api('GET', `/webhooks/${id}`, { key }), 404, 'webhook_not_found');
  });

  it('deletes an endpoint with 30,000 deliveries without holding the event loop past 50 ms: switched off first, then its deliveries in chunks', async () => {
    const { key, account } = await service.newAccount();
    const id = (await create(key, { url: PUBLIC, events: ['email.delivered'] })).body.id as string;
    // 10,000 pending and 20,000 delivered, each of those with its attempt: history is kept until the endpoint goes.
    const now = service.clock.now();
    const deliveryRows: (typeof webhookDeliveries.$inferInsert)[] = [];
    const attemptRows: (typeof webhookAttempts.$inferInsert)[] = [];
    for (let i = 0; i < 30_000; i++) {
      const deliveryId = newId(now);
      const delivered = i >= 10_000;
      deliveryRows.push({
        id: deliveryId,
        endpointId: id,
        accountId: account.id,
        eventType: 'email.delivered',
        data: '{}',
        attempts: delivered ? 1 : 0,
        deliveredAt: delivered ? now : null,
        nextAttemptAt: delivered ? null : now,
        createdAt: now,
      });
      if (delivered) attemptRows.push({ deliveryId, attempt: 1, attemptedAt: now, status: 200, delivered: true });
    }
    await service.deps.db.transaction(async (tx) => {
      for (let i = 0; i < deliveryRows.length; i += 500) await tx.insert(webhookDeliveries).values(deliveryRows.slice(i, i + 500));
      for (let i = 0; i < attemptRows.length; i += 500) await tx.insert(webhookAttempts).values(attemptRows.slice(i, i + 500));
    });
    const deliveries = async () => (await one(service.deps.db.select({ n: count() }).from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, id))))!.n;
    expect(await deliveries()).toBe(30_000);
    const attemptsBefore = (await one(service.deps.db.select({ n: count() }).from(webhookAttempts)))!.n;

    // Whether the endpoint was still on as each of the deletion's transactions began.
    const commits = service.deps.commits;
    const onAtEachStep: boolean[] = [];
    replaceDep(service.deps, 'commits', {
      run: (fn) =>
        commits.run(async (db) => {
          onAtEachStep.push(
            (await one(db.select({ active: webhookEndpoints.active }).from(webhookEndpoints).where(eq(webhookEndpoints.id, id))))?.active ?? false,
          );
          return fn(db);
        }),
    });
    // The longest the loop was held, not counting time the machine's other processes had the CPU (see loop-stall.ts).
    const stalls = watchLoopStalls();
    let res;
    try {
      res = await service.api('DELETE', `/webhooks/${id}`, { key });
    } finally {
      replaceDep(service.deps, 'commits', commits);
    }
    const seen = stalls.stop();
    expect(res.status).toBe(204);
    expect(seen.longestMs, JSON.stringify(seen)).toBeLessThan(50);

    expect(await deliveries()).toBe(0);
    expect((await one(service.deps.db.select({ n: count() }).from(webhookAttempts)))!.n).toBe(attemptsBefore - 20_000);
    expectError(await service.api('GET', `/webhooks/${id}`, { key }), 404, 'webhook_not_found');
    // Switched off (nothing more is claimed for it) before any of its deliveries went; then one chunk per transaction.
    expect(onAtEachStep[0]).toBe(true);
    expect(onAtEachStep.slice(1).every((on) => !on)).toBe(true);
    expect(onAtEachStep.length).toBeGreaterThan(30_000 / DELETE_CHUNK_ROWS);
  }, 60_000);

  it('lists endpoints and deliveries newest first, keyset-paged', async () => {
    const { key, account } = await service.newAccount();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await create(key, { url: `${PUBLIC}/${i}`, events: ['ping'] })).body.id);
    const first = await service.api('GET', '/webhooks?limit=3', { key });
    expect(first.body.data.map((e: { id: string }) => e.id)).toEqual(ids.slice(2).reverse());
    const second = await service.api('GET', `/webhooks?limit=3&cursor=${encodeURIComponent(first.body.nextCursor)}`, { key });
    expect(second.body).toEqual({ data: expect.any(Array), nextCursor: null });
    expect(second.body.data.map((e: { id: string }) => e.id)).toEqual(ids.slice(0, 2).reverse());

    const now = service.clock.now();
    const deliveries: string[] = [];
    for (const i of [1, 2, 3]) {
      const id = newId(now + i);
      await service.deps.db.insert(webhookDeliveries).values({
        id,
        endpointId: ids[0]!,
        accountId: account.id,
        eventType: 'email.deferred',
        data: '{}',
        attempts: i,
        lastStatus: 503,
        lastError: 'HTTP 503',
        nextAttemptAt: now + 60_000,
        createdAt: now + i,
      });
      deliveries.push(id);
    }
    const page = await service.api('GET', `/webhooks/${ids[0]}/deliveries?limit=2`, { key });
    expect(page.status).toBe(200);
    expectDocumented(page);
    expect(page.body.data).toEqual(
      [3, 2].map((i) => ({
        id: deliveries[i - 1],
        eventType: 'email.deferred',
        attempts: i,
        lastStatus: 503,
        lastError: 'HTTP 503',
        deliveredAt: null,
        nextAttemptAt: new Date(now + 60_000).toISOString(),
        createdAt: new Date(now + i).toISOString(),
      })),
    );
    const rest = await service.api('GET', `/webhooks/${ids[0]}/deliveries?limit=2&cursor=${encodeURIComponent(page.body.nextCursor)}`, { key });
    expect(rest.body.data.map((d: { id: string }) => d.id)).toEqual([deliveries[0]]);
    // That cursor belongs to the first endpoint's list: on another endpoint's, 400 invalid_request.
    const other = await service.api('GET', `/webhooks/${ids[1]}/deliveries?cursor=${encodeURIComponent(page.body.nextCursor)}`, { key });
    expectError(other, 400, 'invalid_request');
    expectDocumented(other);
  });

  it.each(['limit=0', 'limit=101', 'limit=abc', 'cursor=nope'])('answers 400 invalid_request (not 422) for %s on both lists', async (query) => {
    const { key } = await service.newAccount();
    const id = (await create(key, { url: PUBLIC, events: ['ping'] })).body.id as string;
    for (const path of [`/webhooks?${query}`, `/webhooks/${id}/deliveries?${query}`]) {
      const res = await service.api('GET', path, { key });
      expectError(res, 400, 'invalid_request');
      expectDocumented(res);
    }
  });

  it('refuses another list’s cursor with 400 invalid_request', async () => {
    const { key } = await service.newAccount();
    for (let i = 0; i < 2; i++) await service.api('POST', '/domains', { key, body: { name: `d${i}-${Date.now()}.example.com` } });
    const domains = await service.api('GET', '/domains?limit=1', { key });
    expect(domains.body.nextCursor).toEqual(expect.any(String));
    expectError(await service.api('GET', `/webhooks?cursor=${encodeURIComponent(domains.body.nextCursor)}`, { key }), 400, 'invalid_request');
  });
});

describe('a process killed while it deletes an endpoint', () => {
  it('leaves the endpoint switched off with part of its deliveries (the DELETE unanswered); repeating the DELETE finishes it', async () => {
    const started = await processWithEndpoint('Killed mid-delete');
    const { env, accountId, key, endpointId: id, db } = started;
    let proc = started.proc;
    try {
      // 30,000 delivered deliveries, written beside the running server (none is due, so none is posted meanwhile).
      const now = Date.now();
      const delivered = Array.from({ length: 30_000 }, () => ({
        id: newId(now),
        endpointId: id,
        accountId,
        eventType: 'email.delivered' as const,
        data: '{}',
        attempts: 1,
        deliveredAt: now,
        createdAt: now,
      }));
      await db.transaction(async (tx) => {
        for (let i = 0; i < delivered.length; i += 500) await tx.insert(webhookDeliveries).values(delivered.slice(i, i + 500));
      });
      const deliveries = async () => (await db.select({ n: count() }).from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, id)))[0]!.n;
      const endpointRow = async () =>
        (
          await db
            .select({ active: webhookEndpoints.active, disabledAt: webhookEndpoints.disabledAt })
            .from(webhookEndpoints)
            .where(eq(webhookEndpoints.id, id))
        )[0];

      expect(await killMidRequest(proc, processApi(proc, key, 'DELETE', `/webhooks/${id}`), async () => (await deliveries()) < 30_000)).toBe('no answer');

      // Switched off before the first delivery went: nothing more is posted to it, even across the restart.
      expect(await endpointRow()).toEqual({ active: false, disabledAt: expect.any(Number) });
      const remaining = await deliveries();
      expect(remaining).toBeGreaterThan(0);
      expect(remaining % DELETE_CHUNK_ROWS).toBe(0);

      proc = await startServiceProcess(env);
      const got = await processApi(proc, key, 'GET', `/webhooks/${id}`);
      expect(got.body).toMatchObject({ id, active: false });
      expect((await processApi(proc, key, 'DELETE', `/webhooks/${id}`)).status).toBe(204);
      expect(await deliveries()).toBe(0);
      expect(await endpointRow()).toBeUndefined();
      expect((await processApi(proc, key, 'GET', `/webhooks/${id}`)).status).toBe(404);
      proc.child.kill('SIGKILL');
      await proc.exited;
    } finally {
      await started.close();
    }
  }, 90_000);
});

describe('auth on the Webhooks endpoints', () => {
  const someEndpoint = async ({ service: svc, key }: { service: TestService; key: string }) =>
    `/webhooks/${(await svc.api('POST', '/webhooks', { key, body: { url: PUBLIC, events: ['ping'] } })).body.id}`;
  runCommonAuthTests(() => service, { method: 'GET', path: '/webhooks', scope: 'webhooks:read' });
  runCommonAuthTests(() => service, { method: 'POST', path: '/webhooks', scope: 'webhooks:write', body: { url: PUBLIC, events: ['ping'] } });
  runCommonAuthTests(() => service, { method: 'GET', path: someEndpoint, scope: 'webhooks:read' });
  runCommonAuthTests(() => service, { method: 'DELETE', path: someEndpoint, scope: 'webhooks:write' });
  runCommonAuthTests(() => service, { method: 'GET', path: async (ctx) => `${await someEndpoint(ctx)}/deliveries`, scope: 'webhooks:read' });
  runCommonAuthTests(() => service, { method: 'POST', path: async (ctx) => `${await someEndpoint(ctx)}/test`, scope: 'webhooks:write' });
});

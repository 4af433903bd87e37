import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_BASE, createApp } from '../server/app/http-app.js';
import { loadConfig } from '../server/shared/config.js';
import { createRateLimiter } from '../server/core/rate-limit.js';
import { SCOPES, type Scope } from '../server/core/scopes.js';
import { FakeClock } from './helpers/clock.js';
import { startService, type ApiResponse, type TestService } from './helpers/service.js';

/**
 * Rate limits against docs/api/contract.md (Limits, Errors: "Over 60 requests a minute from the key, or 600 a minute from all the
 * account's keys", on all endpoints together) with the fake clock: no test waits for a window to pass.
 */

const MINUTE = 60_000;

function expectRateLimited(res: ApiResponse, maxSeconds = 60): number {
  expect(res.status, JSON.stringify(res.body)).toBe(429);
  expect(res.body).toEqual({ error: { code: 'rate_limited', message: expect.any(String) } });
  const header = res.headers.get('retry-after');
  expect(header).toMatch(/^\d+$/);
  const seconds = Number(header);
  expect(seconds).toBeGreaterThan(0);
  expect(seconds).toBeLessThanOrEqual(maxSeconds);
  return seconds;
}

function expectOk(res: ApiResponse): void {
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

/** `n` calls in a row, each expected to pass. */
async function spend(service: TestService, key: string, n: number, path = '/account'): Promise<void> {
  for (let i = 0; i < n; i++) expectOk(await service.api('GET', path, { key }));
}

describe('defaults', () => {
  it('loadConfig({}) gives 60 a minute per key and 600 per account', () => {
    const config = loadConfig({});
    expect(config.rateLimitPerKey).toBe(60);
    expect(config.rateLimitPerAccount).toBe(600);
  });
});

describe('the API with the default limits (60 per key, 600 per account)', () => {
  let service: TestService;

  beforeAll(async () => {
    service = await startService({ RATE_LIMIT_PER_KEY: '60', RATE_LIMIT_PER_ACCOUNT: '600' });
  });
  afterAll(async () => {
    await service?.close();
  });

  it('60 requests from one key pass; the 61st is 429 rate_limited with Retry-After', async () => {
    const { key } = await service.newAccount({ name: 'Per key' });
    await spend(service, key, 60);
    const refused = await service.api('GET', '/account', { key });
    expect(expectRateLimited(refused)).toBe(60);
  });

  it('Retry-After counts down to when the oldest request leaves the window', async () => {
    const { key } = await service.newAccount({ name: 'Countdown' });
    await spend(service, key, 1);
    service.clock.advance(20_000);
    await spend(service, key, 59);
    expect(expectRateLimited(await service.api('GET', '/account', { key }))).toBe(40);
    service.clock.advance(15_500);
    // 24.5 s left: rounded up to whole seconds.
    expect(expectRateLimited(await service.api('GET', '/account', { key }))).toBe(25);
    service.clock.advance(24_500);
    // The first request has left the window; the other 59 are still in it, so exactly one more passes.
    await spend(service, key, 1);
    expectRateLimited(await service.api('GET', '/account', { key }));
  });

  it('after 60 seconds the key works again, for a full 60 more', async () => {
    const { key } = await service.newAccount({ name: 'Window' });
    await spend(service, key, 60);
    expectRateLimited(await service.api('GET', '/account', { key }));
    service.clock.advance(MINUTE - 1);
    expectRateLimited(await service.api('GET', '/account', { key }));
    service.clock.advance(1);
    await spend(service, key, 60);
    expectRateLimited(await service.api('GET', '/account', { key }));
  });

  it('measures the window on the monotonic clock: a wall clock stepped back an hour does not shut the key out for an hour', async () => {
    const { key } = await service.newAccount({ name: 'Clock step back' });
    await spend(service, key, 60);
    service.clock.stepWall(-3_600_000);
    // The refusal still counts down from the requests' own minute, not from an hour and a minute.
    expect(expectRateLimited(await service.api('GET', '/account', { key }))).toBe(60);
    service.clock.advance(MINUTE);
    await spend(service, key, 60);
    expectRateLimited(await service.api('GET', '/account', { key }));
  });

  it('and a wall clock stepped forward an hour does not end the window early', async () => {
    const { key } = await service.newAccount({ name: 'Clock step forward' });
    await spend(service, key, 60);
    service.clock.stepWall(3_600_000);
    expect(expectRateLimited(await service.api('GET', '/account', { key }))).toBe(60);
    service.clock.advance(MINUTE - 1);
    expectRateLimited(await service.api('GET', '/account', { key }));
    service.clock.advance(1);
    await spend(service, key, 60);
  });

  it('all endpoints count together', async () => {
    const { key } = await service.newAccount({ name: 'Mixed' });
    for (let i = 0; i < 30; i++) {
      expectOk(await service.api('GET', '/account', { key }));
      expectOk(await service.api('GET', '/keys', { key }));
    }
    expectRateLimited(await service.api('GET', '/keys', { key }));
    expectRateLimited(await service.api('GET', '/account', { key }));
    expectRateLimited(await service.api('GET', '/accounts', { key }));
    expectRateLimited(await service.api('POST', '/keys', { key, body: { name: 'more' } }));
  });

  it('a refused request does not extend the window', async () => {
    const { key } = await service.newAccount({ name: 'No extension' });
    await spend(service, key, 60);
    for (let t = 0; t < 5; t++) {
      service.clock.advance(10_000);
      expectRateLimited(await service.api('GET', '/account', { key }));
    }
    // Sixty seconds after the 60 that counted, not after the refused ones.
    service.clock.advance(10_000);
    await spend(service, key, 60);
  });

  it('one key at its limit leaves the other keys of the account working', async () => {
    const { account, key } = await service.newAccount({ name: 'Two keys' });
    const other = await service.newKey(account.id);
    await spend(service, key, 60);
    expectRateLimited(await service.api('GET', '/account', { key }));
    await spend(service, other, 60);
    expectRateLimited(await service.api('GET', '/account', { key: other }));
  });

  it('600 a minute across the account: the 601st is refused even from a fresh key, another account is unaffected', async () => {
    const { account, key: first } = await service.newAccount({ name: 'Busy account' });
    const keys = [first];
    for (let i = 0; i < 10; i++) keys.push(await service.newKey(account.id));
    expect(keys).toHaveLength(11);
    // 600 spread over all 11 keys, none of them at its own limit of 60.
    for (let i = 0; i < 600; i++) expectOk(await service.api('GET', i % 2 ? '/account' : '/keys', { key: keys[i % 11]! }));
    for (const k of keys) expectRateLimited(await service.api('GET', '/account', { key: k }));
    const fresh = await service.newKey(account.id);
    expect(expectRateLimited(await service.api('GET', '/account', { key: fresh }))).toBe(60);

    const other = await service.newAccount({ name: 'Quiet neighbour' });
    await spend(service, other.key, 60);

    service.clock.advance(MINUTE);
    await spend(service, fresh, 60);
  });

  it('a sub-account acting through the header counts against the key and its account', async () => {
    const { key } = await service.newAccount({ name: 'Parent' });
    const sub = await service.api('POST', '/accounts', { key, body: { name: 'Child' } });
    expect(sub.status).toBe(201);
    for (let i = 0; i < 59; i++) expectOk(await service.api('GET', '/account', { key, account: sub.body.id }));
    expectRateLimited(await service.api('GET', '/account', { key, account: sub.body.id }));
    expectRateLimited(await service.api('GET', '/account', { key }));
  });
});

describe('a configured limit', () => {
  let service: TestService;

  beforeAll(async () => {
    service = await startService({ RATE_LIMIT_PER_KEY: '5', RATE_LIMIT_PER_ACCOUNT: '8' });
  });
  afterAll(async () => {
    await service?.close();
  });

  it('RATE_LIMIT_PER_KEY=5: five pass, the sixth is refused', async () => {
    const { key } = await service.newAccount({ name: 'Small key limit' });
    await spend(service, key, 5);
    expectRateLimited(await service.api('GET', '/account', { key }));
    service.clock.advance(MINUTE);
    await spend(service, key, 5);
  });

  it('RATE_LIMIT_PER_ACCOUNT=8: eight across two keys pass, the ninth is refused', async () => {
    const { account, key } = await service.newAccount({ name: 'Small account limit' });
    const other = await service.newKey(account.id);
    await spend(service, key, 4);
    await spend(service, other, 4);
    expectRateLimited(await service.api('GET', '/account', { key: await service.newKey(account.id) }));
  });
});

/** Every endpoint of the API, each with its one scope; ids need not exist, since every check here comes first. */
interface Endpoint {
  method: string;
  /** The route as the app declares it, to hold the table against the app. */
  route: string;
  path: string;
  scope: Scope;
  /** The second scope that opens the endpoint (the template catalog: decisions.md section 9). */
  alsoScope?: Scope;
  body?: unknown;
}

const SOME_ID = '01a00000-0000-7000-8000-000000000000';
const ENDPOINTS: Endpoint[] = [
  { method: 'GET', route: '/account', path: '/account', scope: 'accounts:read' },
  { method: 'GET', route: '/accounts', path: '/accounts', scope: 'accounts:read' },
  { method: 'POST', route: '/accounts', path: '/accounts', scope: 'accounts:write', body: { name: 'Shop EU' } },
  { method: 'GET', route: '/accounts/:id', path: `/accounts/${SOME_ID}`, scope: 'accounts:read' },
  { method: 'DELETE', route: '/accounts/:id', path: `/accounts/${SOME_ID}`, scope: 'accounts:write' },
  { method: 'POST', route: '/accounts/:id/suspend', path: `/accounts/${SOME_ID}/suspend`, scope: 'accounts:write', body: { suspended: false } },
  { method: 'GET', route: '/keys', path: '/keys', scope: 'keys:read' },
  { method: 'POST', route: '/keys', path: '/keys', scope: 'keys:write', body: { name: 'ci' } },
  { method: 'DELETE', route: '/keys/:id', path: `/keys/${SOME_ID}`, scope: 'keys:write' },
  { method: 'GET', route: '/domains', path: '/domains', scope: 'domains:read' },
  { method: 'POST', route: '/domains', path: '/domains', scope: 'domains:write', body: { name: 'shop.example.com' } },
  { method: 'GET', route: '/domains/:id', path: `/domains/${SOME_ID}`, scope: 'domains:read' },
  { method: 'DELETE', route: '/domains/:id', path: `/domains/${SOME_ID}`, scope: 'domains:write' },
  { method: 'POST', route: '/domains/:id/verify', path: `/domains/${SOME_ID}/verify`, scope: 'domains:write' },
  { method: 'GET', route: '/emails', path: '/emails', scope: 'emails:read' },
  {
    method: 'POST',
    route: '/emails',
    path: '/emails',
    scope: 'emails:send',
    body: { from: 'shop@shop.example.com', to: 'ann@example.net', subject: 'Hi', text: 'Hello' },
  },
  { method: 'GET', route: '/emails/:id', path: `/emails/${SOME_ID}`, scope: 'emails:read' },
  { method: 'GET', route: '/emails/:id/message', path: `/emails/${SOME_ID}/message?recipient=ann%40example.net`, scope: 'emails:read' },
  { method: 'GET', route: '/suppressions', path: '/suppressions', scope: 'suppressions:read' },
  { method: 'POST', route: '/suppressions', path: '/suppressions', scope: 'suppressions:write', body: { address: 'ann@example.net' } },
  { method: 'DELETE', route: '/suppressions/:address', path: '/suppressions/ann%40example.net', scope: 'suppressions:write' },
  { method: 'GET', route: '/webhooks', path: '/webhooks', scope: 'webhooks:read' },
  // An IP literal: creating it asks no DNS server (the test machine has no network).
  { method: 'POST', route: '/webhooks', path: '/webhooks', scope: 'webhooks:write', body: { url: 'https://93.184.216.34/hooks', events: ['ping'] } },
  { method: 'GET', route: '/webhooks/:id', path: `/webhooks/${SOME_ID}`, scope: 'webhooks:read' },
  { method: 'DELETE', route: '/webhooks/:id', path: `/webhooks/${SOME_ID}`, scope: 'webhooks:write' },
  { method: 'POST', route: '/webhooks/:id/test', path: `/webhooks/${SOME_ID}/test`, scope: 'webhooks:write' },
  { method: 'GET', route: '/webhooks/:id/deliveries', path: `/webhooks/${SOME_ID}/deliveries`, scope: 'webhooks:read' },
  { method: 'POST', route: '/webhooks/:id/replay', path: `/webhooks/${SOME_ID}/replay`, scope: 'webhooks:write', body: { since: '2026-01-01T00:00:00Z' } },
  { method: 'GET', route: '/events', path: '/events', scope: 'emails:read' },
  { method: 'GET', route: '/database', path: '/database', scope: 'database:read' },
  // A loopback host: refused (blocked_host) before any connection; no test here reaches a database.
  { method: 'POST', route: '/database', path: '/database', scope: 'database:write', body: { url: 'postgresql://app@127.0.0.1/app' } },
  { method: 'POST', route: '/database/test', path: '/database/test', scope: 'database:write' },
  { method: 'DELETE', route: '/database', path: '/database', scope: 'database:write' },
  { method: 'GET', route: '/templates', path: '/templates', scope: 'templates:read', alsoScope: 'emails:send' },
  { method: 'POST', route: '/templates', path: '/templates', scope: 'templates:write', body: { name: 'mine', subject: 'Hi', text: 'Hello' } },
  { method: 'GET', route: '/templates/:name', path: '/templates/receipt', scope: 'templates:read' },
  { method: 'PUT', route: '/templates/:name', path: '/templates/mine', scope: 'templates:write', body: { subject: 'Hi', text: 'Hello' } },
  { method: 'DELETE', route: '/templates/:name', path: '/templates/mine', scope: 'templates:write' },
  { method: 'GET', route: '/templates/:name/versions', path: '/templates/receipt/versions', scope: 'templates:read' },
  {
    method: 'POST',
    route: '/templates/:name/render',
    path: '/templates/receipt/render',
    scope: 'templates:read',
    alsoScope: 'emails:send',
    body: { total: '$1' },
  },
];

const label = (ep: Endpoint) => `${ep.method} ${ep.route}`;

describe('every endpoint, with RATE_LIMIT_PER_KEY=3', () => {
  const LIMIT = 3;
  let service: TestService;

  beforeAll(async () => {
    service = await startService({ RATE_LIMIT_PER_KEY: String(LIMIT), RATE_LIMIT_PER_ACCOUNT: '100000' });
  });
  afterAll(async () => {
    await service?.close();
  });

  const call = (ep: Endpoint, key: string, account?: string) => service.api(ep.method, ep.path, { key, account, body: ep.body });
  /** A GET the key may make (200) that is not of the endpoint's scope, to spend requests with. */
  const spendPath = (ep: Endpoint) => (ep.scope === 'accounts:read' ? '/keys' : '/account');

  it('the table lists every endpoint the app serves', () => {
    // The index and the API document are served without a key: no key's limit applies to them.
    const withoutKey = new Set([`${API_BASE}/`, `${API_BASE}/openapi.json`]);
    const served = createApp(service.deps)
      .routes.filter((r) => r.method !== 'ALL' && r.path.startsWith(`${API_BASE}/`) && !withoutKey.has(r.path))
      .map((r) => `${r.method} ${r.path.slice(API_BASE.length)}`);
    expect([...new Set(served)].sort()).toEqual(ENDPOINTS.map(label).sort());
  });

  it.each(ENDPOINTS.map((ep) => [label(ep), ep] as const))('%s: a key over its limit is 429 rate_limited with Retry-After', async (_label, ep) => {
    const { key } = await service.newAccount({ name: 'Over the limit' });
    await spend(service, key, LIMIT - 1);
    // The last request within the limit reaches the endpoint itself, whatever it answers there.
    expect((await call(ep, key)).status).not.toBe(429);
    expectRateLimited(await call(ep, key));
    expectRateLimited(await call(ep, key));
  });

  describe('when two checks fail at once, the earlier one answers (key 401, rate 429, scope 403, account header 404)', () => {
    it.each(ENDPOINTS.map((ep) => [label(ep), ep] as const))('%s', async (_label, ep) => {
      const { account } = await service.newAccount({ name: 'Check order' });
      const other = await service.newAccount({ name: 'Someone else' });
      const foreignSub = await service.api('POST', '/accounts', { key: other.key, body: { name: 'Their sub' } });
      expect(foreignSub.status).toBe(201);

      // An unknown key with a foreign account header: the key answers.
      const unknownKey = await call(ep, `ms_${'A'.repeat(40)}`, foreignSub.body.id);
      expect(unknownKey.status, JSON.stringify(unknownKey.body)).toBe(401);
      expect(unknownKey.body.error.code).toBe('invalid_key');

      // A key without the scope and an unknown or foreign account header: the scope answers.
      const lacking = await service.newKey(
        account.id,
        SCOPES.filter((s) => s !== ep.scope && s !== ep.alsoScope),
      );
      for (const header of [SOME_ID, foreignSub.body.id as string]) {
        const res = await call(ep, lacking, header);
        expect(res.status, JSON.stringify(res.body)).toBe(403);
        expect(res.body.error.code).toBe('insufficient_scope');
      }

      // The same key at its limit: the rate limit answers, before the scope and the header.
      const spent = await service.newKey(
        account.id,
        SCOPES.filter((s) => s !== ep.scope && s !== ep.alsoScope),
      );
      for (let i = 0; i < LIMIT; i++) expectOk(await service.api('GET', spendPath(ep), { key: spent }));
      expectRateLimited(await call(ep, spent));
      expectRateLimited(await call(ep, spent, SOME_ID));
    });
  });
});

describe('createRateLimiter', () => {
  const setup = (perKey = 3, perAccount = 5) => {
    const clock = new FakeClock();
    return { clock, limiter: createRateLimiter(clock, { perKey, perAccount }) };
  };

  it('passes perKey requests from a key and refuses the next, naming the key', () => {
    const { limiter } = setup();
    for (let i = 0; i < 3; i++) expect(limiter.take('k1', 'a1')).toEqual({ ok: true });
    expect(limiter.take('k1', 'a1')).toEqual({ ok: false, scope: 'key', retryAfterSeconds: 60 });
  });

  it('refuses on the account once perAccount requests came from all its keys', () => {
    const { limiter } = setup();
    expect(limiter.take('k1', 'a1').ok).toBe(true);
    expect(limiter.take('k1', 'a1').ok).toBe(true);
    expect(limiter.take('k2', 'a1').ok).toBe(true);
    expect(limiter.take('k2', 'a1').ok).toBe(true);
    expect(limiter.take('k3', 'a1').ok).toBe(true);
    expect(limiter.take('k4', 'a1')).toEqual({ ok: false, scope: 'account', retryAfterSeconds: 60 });
    expect(limiter.take('k5', 'a2')).toEqual({ ok: true });
  });

  it('is a sliding window: each request leaves it exactly 60 s after it was made', () => {
    const { clock, limiter } = setup();
    limiter.take('k', 'a');
    clock.advance(10_000);
    limiter.take('k', 'a');
    clock.advance(10_000);
    limiter.take('k', 'a');
    expect(limiter.take('k', 'a')).toEqual({ ok: false, scope: 'key', retryAfterSeconds: 40 });
    clock.advance(39_999);
    expect(limiter.take('k', 'a')).toMatchObject({ ok: false, retryAfterSeconds: 1 });
    clock.advance(1);
    expect(limiter.take('k', 'a')).toEqual({ ok: true });
    expect(limiter.take('k', 'a')).toMatchObject({ ok: false, retryAfterSeconds: 10 });
  });

  it('retryAfterSeconds is whole seconds rounded up, never 0', () => {
    const { clock, limiter } = setup(1, 100);
    limiter.take('k', 'a');
    clock.advance(1_500);
    expect(limiter.take('k', 'a')).toEqual({ ok: false, scope: 'key', retryAfterSeconds: 59 });
    clock.advance(58_499);
    expect(limiter.take('k', 'a')).toEqual({ ok: false, scope: 'key', retryAfterSeconds: 1 });
  });

  it('a refused request is not counted, on the key or on the account', () => {
    const { clock, limiter } = setup(2, 3);
    limiter.take('k1', 'a');
    limiter.take('k1', 'a');
    for (let i = 0; i < 10; i++) expect(limiter.take('k1', 'a').ok).toBe(false);
    // The account has 2 of 3 used: the refusals of k1 did not eat its last slot.
    expect(limiter.take('k2', 'a')).toEqual({ ok: true });
    expect(limiter.take('k2', 'a')).toMatchObject({ ok: false, scope: 'account' });
    clock.advance(MINUTE);
    expect(limiter.take('k1', 'a')).toEqual({ ok: true });
    expect(limiter.take('k1', 'a')).toEqual({ ok: true });
  });

  it('keeps working over many keys and windows', () => {
    const { clock, limiter } = setup(2, 1_000_000);
    for (let round = 0; round < 3; round++) {
      for (let k = 0; k < 6000; k++) {
        expect(limiter.take(`k${k}`, 'a').ok).toBe(true);
        expect(limiter.take(`k${k}`, 'a').ok).toBe(true);
      }
      expect(limiter.take('k0', 'a').ok).toBe(false);
      clock.advance(MINUTE);
    }
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../server/config.js';
import { createRateLimiter } from '../server/core/rate-limit.js';
import { FakeClock } from './helpers/clock.js';
import { startService, type ApiResponse, type TestService } from './helpers/service.js';

/**
 * Rate limits against api.md (Limits, Errors: "Over 60 requests a minute from the key, or 600 a minute from all the
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
    const { key } = service.newAccount({ name: 'Per key' });
    await spend(service, key, 60);
    const refused = await service.api('GET', '/account', { key });
    expect(expectRateLimited(refused)).toBe(60);
  });

  it('Retry-After counts down to when the oldest request leaves the window', async () => {
    const { key } = service.newAccount({ name: 'Countdown' });
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
    const { key } = service.newAccount({ name: 'Window' });
    await spend(service, key, 60);
    expectRateLimited(await service.api('GET', '/account', { key }));
    service.clock.advance(MINUTE - 1);
    expectRateLimited(await service.api('GET', '/account', { key }));
    service.clock.advance(1);
    await spend(service, key, 60);
    expectRateLimited(await service.api('GET', '/account', { key }));
  });

  it('all endpoints count together', async () => {
    const { key } = service.newAccount({ name: 'Mixed' });
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
    const { key } = service.newAccount({ name: 'No extension' });
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
    const { account, key } = service.newAccount({ name: 'Two keys' });
    const other = service.newKey(account.id);
    await spend(service, key, 60);
    expectRateLimited(await service.api('GET', '/account', { key }));
    await spend(service, other, 60);
    expectRateLimited(await service.api('GET', '/account', { key: other }));
  });

  it('600 a minute across the account: the 601st is refused even from a fresh key, another account is unaffected', async () => {
    const { account, key: first } = service.newAccount({ name: 'Busy account' });
    const keys = [first, ...Array.from({ length: 10 }, () => service.newKey(account.id))];
    expect(keys).toHaveLength(11);
    // 600 spread over all 11 keys, none of them at its own limit of 60.
    for (let i = 0; i < 600; i++) expectOk(await service.api('GET', i % 2 ? '/account' : '/keys', { key: keys[i % 11]! }));
    for (const k of keys) expectRateLimited(await service.api('GET', '/account', { key: k }));
    const fresh = service.newKey(account.id);
    expect(expectRateLimited(await service.api('GET', '/account', { key: fresh }))).toBe(60);

    const other = service.newAccount({ name: 'Quiet neighbour' });
    await spend(service, other.key, 60);

    service.clock.advance(MINUTE);
    await spend(service, fresh, 60);
  });

  it('a sub-account acting through the header counts against the key and its account', async () => {
    const { key } = service.newAccount({ name: 'Parent' });
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
    const { key } = service.newAccount({ name: 'Small key limit' });
    await spend(service, key, 5);
    expectRateLimited(await service.api('GET', '/account', { key }));
    service.clock.advance(MINUTE);
    await spend(service, key, 5);
  });

  it('RATE_LIMIT_PER_ACCOUNT=8: eight across two keys pass, the ninth is refused', async () => {
    const { account, key } = service.newAccount({ name: 'Small account limit' });
    const other = service.newKey(account.id);
    await spend(service, key, 4);
    await spend(service, other, 4);
    expectRateLimited(await service.api('GET', '/account', { key: service.newKey(account.id) }));
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
    clock.advance(59_999);
    expect(limiter.take('k', 'a')).toEqual({ ok: false, scope: 'key', retryAfterSeconds: 1 });
    clock.advance(-58_500);
    expect(limiter.take('k', 'a')).toEqual({ ok: false, scope: 'key', retryAfterSeconds: 59 });
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

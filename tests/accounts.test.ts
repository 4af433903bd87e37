import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accounts, apiKeys, domains, suppressions } from '../db/schema/index.js';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { expectDocumented } from './helpers/openapi.js';
import { startService, type ApiResponse, type TestService } from './helpers/service.js';

/**
 * Accounts and sub-accounts against docs/api/contract.md (Account resource, Sub-account suspension, Accounts endpoints, Errors,
 * Limits, paging) and docs/api/decisions.md sections 1 and 4 (default quota, credit policy).
 */

interface AccountBody {
  id: string;
  name: string;
  parentId: string | null;
  createdAt: string;
  sending: {
    tier: string;
    totalSent: number;
    totalBounced: number;
    totalComplained: number;
    sentToday: number;
    dailyQuota: number;
    effectiveQuota: number;
    suspended: boolean;
    suspendedReason?: string;
  };
  credits: {
    balance: number;
    state: string;
    freeUntil: string | null;
    graceDaysLeft: number;
    graceEmailsLeft: number;
    totalPurchased: number;
    totalUsed: number;
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const DAY = 86_400_000;
/** docs/api/decisions.md section 1 defaults. */
const DEFAULT_DAILY_QUOTA = 10_000;
const TRIAL_DAYS = 14;
const GRACE_DAYS = 3;
const GRACE_EMAILS = 100;
const iso = (ms: number) => new Date(ms).toISOString();
const REASON = 'Paused while we review the bounce spike from Tuesday.';

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(async () => {
  await service?.close();
});

function expectError(res: ApiResponse, status: number, code: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body).toEqual({ error: { code, message: expect.any(String) } });
  // The API document lists this code at this status for the endpoint.
  expectDocumented(res);
}

/** Every field of the Account resource, with its type from docs/api/contract.md. */
function expectAccountShape(a: AccountBody): void {
  expect(Object.keys(a).sort()).toEqual(['createdAt', 'credits', 'id', 'name', 'parentId', 'sending']);
  expect(a.id).toMatch(UUID);
  expect(typeof a.name).toBe('string');
  expect(a.parentId === null || UUID.test(a.parentId)).toBe(true);
  expect(a.createdAt).toMatch(ISO_MS);
  const s = a.sending;
  expect(['healthy', 'warning', 'throttled', 'paused']).toContain(s.tier);
  for (const n of [s.totalSent, s.totalBounced, s.totalComplained, s.sentToday, s.dailyQuota, s.effectiveQuota]) {
    expect(Number.isInteger(n)).toBe(true);
  }
  expect(typeof s.suspended).toBe('boolean');
  if (s.suspended) expect(typeof s.suspendedReason).toBe('string');
  else expect(s).not.toHaveProperty('suspendedReason');
  const c = a.credits;
  expect(Object.keys(c).sort()).toEqual(['balance', 'freeUntil', 'graceDaysLeft', 'graceEmailsLeft', 'state', 'totalPurchased', 'totalUsed']);
  for (const n of [c.balance, c.graceDaysLeft, c.graceEmailsLeft, c.totalPurchased, c.totalUsed]) {
    expect(Number.isInteger(n)).toBe(true);
  }
  expect(typeof c.state).toBe('string');
  expect(c.freeUntil === null || ISO_MS.test(c.freeUntil)).toBe(true);
}

async function createSub(key: string, name = 'Shop EU'): Promise<AccountBody> {
  const res = await service.api('POST', '/accounts', { key, body: { name } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  expectDocumented(res);
  return res.body;
}

async function getSub(key: string, id: string): Promise<AccountBody> {
  const res = await service.api('GET', `/accounts/${id}`, { key });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expectDocumented(res);
  return res.body;
}

async function ownAccount(key: string, account?: string): Promise<AccountBody> {
  const res = await service.api('GET', '/account', { key, ...(account ? { account } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expectDocumented(res);
  return res.body;
}

async function suspend(key: string, id: string, body: unknown): Promise<ApiResponse> {
  return service.api('POST', `/accounts/${id}/suspend`, { key, body });
}

/** Sets an account's stored state directly: counters, or a suspension the API did not place. */
async function setAccountRow(id: string, values: Partial<typeof accounts.$inferInsert>): Promise<void> {
  await service.deps.db.update(accounts).set(values).where(eq(accounts.id, id));
}

/** Counters whose lifetime bounce rate (10%) grades as `paused` (docs/api/decisions.md section 4). */
const PAUSED_COUNTERS = { totalSent: 100, totalBounced: 10, totalComplained: 0 };

const subPath = async ({ service: svc, key }: { service: TestService; key: string }) => {
  const res = await svc.api('POST', '/accounts', { key, body: { name: 'Auth case sub' } });
  expect(res.status).toBe(201);
  return `/accounts/${res.body.id as string}`;
};

describe('auth on every accounts endpoint', () => {
  runCommonAuthTests(() => service, { method: 'GET', path: '/account', scope: 'accounts:read' });
  runCommonAuthTests(() => service, { method: 'GET', path: '/accounts', scope: 'accounts:read' });
  runCommonAuthTests(() => service, { method: 'POST', path: '/accounts', scope: 'accounts:write', body: { name: 'Auth case' } });
  runCommonAuthTests(() => service, { method: 'GET', path: subPath, scope: 'accounts:read' });
  runCommonAuthTests(() => service, { method: 'DELETE', path: subPath, scope: 'accounts:write' });
  runCommonAuthTests(() => service, {
    method: 'POST',
    path: async (ctx) => `${await subPath(ctx)}/suspend`,
    scope: 'accounts:write',
    body: { suspended: false },
  });
});

describe('(no account header): a valid sub-account header is 422 invalid_request', () => {
  it('GET /accounts/{id}', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    expectError(await service.api('GET', `/accounts/${sub.id}`, { key, account: sub.id }), 422, 'invalid_request');
  });

  it('DELETE /accounts/{id}, and the sub-account stays', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    expectError(await service.api('DELETE', `/accounts/${sub.id}`, { key, account: sub.id }), 422, 'invalid_request');
    await getSub(key, sub.id);
  });

  it('POST /accounts/{id}/suspend, and nothing is suspended', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const res = await service.api('POST', `/accounts/${sub.id}/suspend`, { key, account: sub.id, body: { suspended: true, reason: REASON } });
    expectError(res, 422, 'invalid_request');
    expect((await getSub(key, sub.id)).sending.suspended).toBe(false);
  });
});

describe('GET /account', () => {
  it('200: the key’s own top-level account, every field', async () => {
    const { account, key } = await service.newAccount({ name: 'Acme Ltd' });
    const a = await ownAccount(key);
    expectAccountShape(a);
    expect(a).toMatchObject({ id: account.id, name: 'Acme Ltd', parentId: null, createdAt: iso(service.clock.now()) });
    expect(a.sending).toEqual({
      tier: 'healthy',
      totalSent: 0,
      totalBounced: 0,
      totalComplained: 0,
      sentToday: 0,
      dailyQuota: DEFAULT_DAILY_QUOTA,
      effectiveQuota: DEFAULT_DAILY_QUOTA,
      suspended: false,
    });
  });

  it('200: with X-Service-Account, the sub-account named in the header', async () => {
    const { account, key } = await service.newAccount();
    const sub = await createSub(key, 'Shop FR');
    const a = await ownAccount(key, sub.id);
    expectAccountShape(a);
    expect(a).toEqual(sub);
    expect(a.parentId).toBe(account.id);
  });

  it('200: a sub-account’s own key gets the sub-account, without the header', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    expect(await ownAccount(await service.newKey(sub.id))).toEqual(sub);
  });
});

describe('credits of an account (docs/api/decisions.md section 4)', () => {
  it('a new top-level account without credits is on trial until createdAt + 14 days, nothing bought or used', async () => {
    const { key } = await service.newAccount();
    const a = await ownAccount(key);
    expect(a.credits).toMatchObject({
      balance: 0,
      state: 'trial',
      freeUntil: iso(Date.parse(a.createdAt) + TRIAL_DAYS * DAY),
      totalPurchased: 0,
      totalUsed: 0,
    });
  });

  it('a new top-level account with credits is ok, with its balance and purchase', async () => {
    const { key } = await service.newAccount({ credits: 500 });
    const a = await ownAccount(key);
    expect(a.credits).toMatchObject({ balance: 500, state: 'ok', totalPurchased: 500, totalUsed: 0 });
  });

  it('the trial ends at freeUntil with nothing purchased: grace (3 days, 100 emails left), then exhausted 3 days later', async () => {
    const { key } = await service.newAccount();
    const freeUntil = Date.parse((await ownAccount(key)).credits.freeUntil!);

    service.clock.set(freeUntil - 1);
    expect((await ownAccount(key)).credits.state).toBe('trial');

    service.clock.set(freeUntil + 1);
    expect((await ownAccount(key)).credits).toMatchObject({ state: 'grace', balance: 0, graceDaysLeft: GRACE_DAYS, graceEmailsLeft: GRACE_EMAILS });

    service.clock.set(freeUntil + GRACE_DAYS * DAY - 1);
    expect((await ownAccount(key)).credits.state).toBe('grace');

    service.clock.set(freeUntil + GRACE_DAYS * DAY + 1);
    expect((await ownAccount(key)).credits).toMatchObject({ state: 'exhausted', balance: 0 });
  });

  it('an account with purchased credits stays ok after the trial period', async () => {
    const { key } = await service.newAccount({ credits: 10 });
    service.clock.advance((TRIAL_DAYS + GRACE_DAYS + 1) * DAY);
    expect((await ownAccount(key)).credits).toMatchObject({ state: 'ok', balance: 10 });
  });

  it('a sub-account’s credits stay at zero balance and mirror the state of the parent that pays', async () => {
    const onTrial = await service.newAccount();
    const trialSub = await createSub(onTrial.key);
    expect(trialSub.credits).toMatchObject({ balance: 0, state: 'trial', totalPurchased: 0, totalUsed: 0 });

    const paying = await service.newAccount({ credits: 250 });
    const paidSub = await createSub(paying.key);
    expect(paidSub.credits).toMatchObject({ balance: 0, state: 'ok', totalPurchased: 0, totalUsed: 0 });

    const freeUntil = Date.parse((await ownAccount(onTrial.key)).credits.freeUntil!);
    service.clock.set(freeUntil + 1);
    expect((await getSub(onTrial.key, trialSub.id)).credits).toMatchObject({ balance: 0, state: 'grace' });
    expect((await ownAccount(onTrial.key, trialSub.id)).credits).toMatchObject({ balance: 0, state: 'grace' });

    service.clock.set(freeUntil + GRACE_DAYS * DAY + 1);
    expect((await getSub(onTrial.key, trialSub.id)).credits).toMatchObject({ balance: 0, state: 'exhausted' });
    expect((await getSub(paying.key, paidSub.id)).credits).toMatchObject({ balance: 0, state: 'ok' });
  });
});

describe('POST /accounts', () => {
  it('201: the sub-account with parentId set, nothing sent yet, every Account field with its type', async () => {
    const { account, key } = await service.newAccount();
    const res = await service.api('POST', '/accounts', { key, body: { name: 'Shop EU' } });
    expect(res.status).toBe(201);
    const sub: AccountBody = res.body;
    expectAccountShape(sub);
    expect(sub).toMatchObject({ id: expect.stringMatching(UUID), name: 'Shop EU', parentId: account.id, createdAt: iso(service.clock.now()) });
    expect(sub.id).not.toBe(account.id);
    expect(sub.sending).toEqual({
      tier: 'healthy',
      totalSent: 0,
      totalBounced: 0,
      totalComplained: 0,
      sentToday: 0,
      dailyQuota: DEFAULT_DAILY_QUOTA,
      effectiveQuota: DEFAULT_DAILY_QUOTA,
      suspended: false,
    });
    expect(sub.sending).not.toHaveProperty('suspendedReason');
    expect(sub.credits).toMatchObject({ balance: 0, state: 'trial', totalPurchased: 0, totalUsed: 0 });

    expect(await getSub(key, sub.id)).toEqual(sub);
  });

  it('accepts names of 2 and of 80 characters', async () => {
    const { key } = await service.newAccount();
    expect((await createSub(key, 'EU')).name).toBe('EU');
    expect((await createSub(key, 'n'.repeat(80))).name).toBe('n'.repeat(80));
  });

  it('counts the name in characters: 80 emoji are accepted, a single emoji is refused', async () => {
    const { key } = await service.newAccount();
    const eighty = '📬'.repeat(80);
    const ok = await service.api('POST', '/accounts', { key, body: { name: eighty } });
    expect(ok.status, JSON.stringify(ok.body)).toBe(201);
    expect(ok.body.name).toBe(eighty);
    expectError(await service.api('POST', '/accounts', { key, body: { name: '📬' } }), 422, 'invalid_request');
  });

  it('400 invalid_json when the body is not JSON', async () => {
    const { key } = await service.newAccount();
    const headers = { 'content-type': 'application/json' };
    expectError(await service.api('POST', '/accounts', { key, rawBody: '{"name": "Shop"', headers }), 400, 'invalid_json');
    expectError(await service.api('POST', '/accounts', { key, rawBody: 'name=Shop', headers }), 400, 'invalid_json');
    expectError(await service.api('POST', '/accounts', { key }), 400, 'invalid_json');
  });

  it('422 invalid_request when the body fails validation, the message naming the field', async () => {
    const { key } = await service.newAccount();
    const cases: [unknown, string][] = [
      [{ name: 'E' }, 'name'],
      [{ name: 'n'.repeat(81) }, 'name'],
      [{}, 'name'],
      [{ name: 42 }, 'name'],
      [{ name: null }, 'name'],
      [{ name: 'Shop EU', plan: 'pro' }, 'plan'],
    ];
    for (const [body, field] of cases) {
      const res = await service.api('POST', '/accounts', { key, body });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message, JSON.stringify(body)).toMatch(new RegExp(`\\b${field}\\b`));
    }
    expectError(await service.api('POST', '/accounts', { key, body: ['Shop EU'] }), 422, 'invalid_request');
    expect((await service.api('GET', '/accounts', { key })).body.data).toEqual([]);
  });

  it('422 messages tell a wrong type from a missing field and a body that is not an object, without echoing the input', async () => {
    const { key } = await service.newAccount();
    const cases: [unknown, string][] = [
      [{ name: 42 }, 'name: must be a string'],
      [{ name: null }, 'name: must be a string'],
      [{}, 'name: is required'],
      ['hello', 'body: must be a JSON object'],
      [['Shop EU'], 'body: must be a JSON object'],
      [{ name: 'E' }, 'name: must be 2 to 80 characters'],
    ];
    for (const [body, message] of cases) {
      const res = await service.api('POST', '/accounts', { key, body });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message, JSON.stringify(body)).toBe(message);
    }
    const suspendRes = await suspend(key, (await createSub(key)).id, { suspended: 'yes', reason: REASON });
    expectError(suspendRes, 422, 'invalid_request');
    expect(suspendRes.body.error.message).toBe('suspended: must be a boolean');
  });

  it('409 conflict when a sub-account’s own key tries to open a sub-account', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const subKey = await service.newKey(sub.id);
    expectError(await service.api('POST', '/accounts', { key: subKey, body: { name: 'Grandchild' } }), 409, 'conflict');
    expect((await service.api('GET', '/accounts', { key: subKey })).body.data).toEqual([]);
  });

  it('409 conflict when the request carries X-Service-Account (the header must not be sent)', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    expectError(await service.api('POST', '/accounts', { key, account: sub.id, body: { name: 'Grandchild' } }), 409, 'conflict');
    expect((await service.api('GET', '/accounts', { key, account: sub.id })).body.data).toEqual([]);
    expect((await service.api('GET', '/accounts', { key })).body.data.map((a: AccountBody) => a.id)).toEqual([sub.id]);
  });

  it('409 limit_reached at 200 sub-accounts; deleting one makes room', async () => {
    const { key } = await service.newAccount();
    for (let batch = 0; batch < 10; batch++) {
      const made = await Promise.all(Array.from({ length: 20 }, (_, i) => service.api('POST', '/accounts', { key, body: { name: `Sub ${batch * 20 + i}` } })));
      expect(made.map((r) => r.status)).toEqual(Array(20).fill(201));
    }
    expectError(await service.api('POST', '/accounts', { key, body: { name: 'One too many' } }), 409, 'limit_reached');

    const first = (await service.api('GET', '/accounts?limit=1', { key })).body.data[0] as AccountBody;
    expect((await service.api('DELETE', `/accounts/${first.id}`, { key })).status).toBe(204);
    await createSub(key, 'Fits again');
    expectError(await service.api('POST', '/accounts', { key, body: { name: 'One too many' } }), 409, 'limit_reached');
  });

  it('the limit is per account: another account can still open sub-accounts', async () => {
    const { key } = await service.newAccount();
    await createSub(key);
    await createSub((await service.newAccount()).key);
  });
});

describe('GET /accounts', () => {
  it('an account without sub-accounts gets an empty page', async () => {
    const { key } = await service.newAccount();
    const res = await service.api('GET', '/accounts', { key });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [], nextCursor: null });
  });

  it('200: the account’s own sub-accounts, newest first, each a full Account', async () => {
    const { key } = await service.newAccount();
    const a = await createSub(key, 'First');
    service.clock.advance(1000);
    const b = await createSub(key, 'Second');
    service.clock.advance(1000);
    const c = await createSub(key, 'Third');
    await createSub((await service.newAccount()).key, 'Someone else’s');

    const res = await service.api('GET', '/accounts', { key });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [c, b, a], nextCursor: null });
    for (const item of res.body.data as AccountBody[]) expectAccountShape(item);
  });

  it('pages with nextCursor; passing it back as cursor gives the next page; null on the last page', async () => {
    const { key } = await service.newAccount();
    const made: AccountBody[] = [];
    for (let i = 0; i < 5; i++) made.push(await createSub(key, `Sub ${i}`));
    const newestFirst = made.map((a) => a.id).reverse();

    const p1 = await service.api('GET', '/accounts?limit=2', { key });
    expect(p1.status).toBe(200);
    expect(p1.body.data.map((a: AccountBody) => a.id)).toEqual(newestFirst.slice(0, 2));
    expect(typeof p1.body.nextCursor).toBe('string');
    const p2 = await service.api('GET', `/accounts?limit=2&cursor=${encodeURIComponent(p1.body.nextCursor)}`, { key });
    expect(p2.body.data.map((a: AccountBody) => a.id)).toEqual(newestFirst.slice(2, 4));
    const p3 = await service.api('GET', `/accounts?limit=2&cursor=${encodeURIComponent(p2.body.nextCursor)}`, { key });
    expect(p3.body).toEqual({ data: [expect.objectContaining({ id: newestFirst[4] })], nextCursor: null });
  });

  it('with X-Service-Account, the sub-account’s own list, which is empty (one level only)', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    await createSub(key, 'Sibling');
    const res = await service.api('GET', '/accounts', { key, account: sub.id });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [], nextCursor: null });
  });

  it('422 invalid_request for a bad limit: 0, 101, abc, -1, 2.5, empty', async () => {
    const { key } = await service.newAccount();
    for (const limit of ['0', '101', 'abc', '-1', '2.5', '']) {
      const res = await service.api('GET', `/accounts?limit=${limit}`, { key });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message, limit).toMatch(/\blimit\b/);
    }
    expect((await service.api('GET', '/accounts?limit=1', { key })).status).toBe(200);
    expect((await service.api('GET', '/accounts?limit=100', { key })).status).toBe(200);
  });

  it('422 invalid_request for a cursor that is not one of this account’s sub-accounts', async () => {
    const { account, key } = await service.newAccount();
    await createSub(key, 'Sub A');
    await createSub(key, 'Sub B');
    const other = await service.newAccount();
    await createSub(other.key, 'Sub C');
    await createSub(other.key, 'Sub D');
    const otherAccountsCursor = (await service.api('GET', '/accounts?limit=1', { key: other.key })).body.nextCursor as string;
    await service.newKey(account.id);
    const ownKeysCursor = (await service.api('GET', '/keys?limit=1', { key })).body.nextCursor as string;
    expect(typeof otherAccountsCursor).toBe('string');
    expect(typeof ownKeysCursor).toBe('string');

    for (const cursor of [otherAccountsCursor, ownKeysCursor, 'not-a-cursor', '']) {
      const res = await service.api('GET', `/accounts?cursor=${encodeURIComponent(cursor)}`, { key });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message).toMatch(/\bcursor\b/);
    }
  });

  it('422 invalid_request for the parent’s cursor while acting for its sub-account (another account’s list)', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    await createSub(key, 'Second');
    const parentCursor = (await service.api('GET', '/accounts?limit=1', { key })).body.nextCursor as string;
    expect(typeof parentCursor).toBe('string');
    expectError(await service.api('GET', `/accounts?cursor=${encodeURIComponent(parentCursor)}`, { key, account: sub.id }), 422, 'invalid_request');
  });
});

describe('GET /accounts/{id}', () => {
  it('200: the sub-account', async () => {
    const { account, key } = await service.newAccount();
    const sub = await createSub(key, 'Shop DE');
    const res = await service.api('GET', `/accounts/${sub.id}`, { key });
    expect(res.status).toBe(200);
    expectAccountShape(res.body);
    expect(res.body).toEqual(sub);
    expect(res.body.parentId).toBe(account.id);
  });

  it('404 not_found for an unknown id, a malformed id, the key’s own account and another account’s sub-account', async () => {
    const { account, key } = await service.newAccount();
    const theirs = await createSub((await service.newAccount()).key);
    for (const id of ['01a00000-0000-7000-8000-000000000000', 'nope', account.id, theirs.id]) {
      expectError(await service.api('GET', `/accounts/${id}`, { key }), 404, 'not_found');
    }
  });

  it('404 not_found for a sub-account asking about itself or a sibling with its own key', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const sibling = await createSub(key, 'Sibling');
    const subKey = await service.newKey(sub.id);
    expectError(await service.api('GET', `/accounts/${sub.id}`, { key: subKey }), 404, 'not_found');
    expectError(await service.api('GET', `/accounts/${sibling.id}`, { key: subKey }), 404, 'not_found');
  });
});

describe('DELETE /accounts/{id}', () => {
  it('204, then the sub-account is gone: GET, DELETE and suspend answer 404 not_found, the list no longer has it', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const keep = await createSub(key, 'Keep');
    const res = await service.api('DELETE', `/accounts/${sub.id}`, { key });
    expect(res.status).toBe(204);
    expect(res.body).toBeNull();
    expectError(await service.api('GET', `/accounts/${sub.id}`, { key }), 404, 'not_found');
    expectError(await service.api('DELETE', `/accounts/${sub.id}`, { key }), 404, 'not_found');
    expectError(await suspend(key, sub.id, { suspended: true, reason: REASON }), 404, 'not_found');
    expect((await service.api('GET', '/accounts', { key })).body.data.map((a: AccountBody) => a.id)).toEqual([keep.id]);
    expectError(await service.api('GET', '/account', { key, account: sub.id }), 404, 'account_not_found');
  });

  it('deletes everything under it: its keys stop working (401 invalid_key) and its rows are gone', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const minted = await service.api('POST', '/keys', { key, account: sub.id, body: { name: 'sub key' } });
    expect(minted.status).toBe(201);
    const subKey = minted.body.key as string;
    expect((await service.api('GET', '/account', { key: subKey })).status).toBe(200);
    expect((await service.api('POST', '/domains', { key: subKey, body: { name: 'sub-cascade.example.com' } })).status).toBe(201);
    expect((await service.api('POST', '/suppressions', { key: subKey, body: { address: 'gone@example.com' } })).status).toBe(201);

    expect((await service.api('DELETE', `/accounts/${sub.id}`, { key })).status).toBe(204);

    expectError(await service.api('GET', '/account', { key: subKey }), 401, 'invalid_key');
    const db = service.deps.db;
    expect(await db.select().from(accounts).where(eq(accounts.id, sub.id))).toEqual([]);
    expect(await db.select().from(apiKeys).where(eq(apiKeys.accountId, sub.id))).toEqual([]);
    expect(await db.select().from(domains).where(eq(domains.accountId, sub.id))).toEqual([]);
    expect(await db.select().from(suppressions).where(eq(suppressions.accountId, sub.id))).toEqual([]);
    // The parent and its own key are untouched.
    expect((await service.api('GET', '/account', { key })).status).toBe(200);
  });

  it('404 not_found for an unknown id, the key’s own account and another account’s sub-account, which stays', async () => {
    const { account, key } = await service.newAccount();
    const other = await service.newAccount();
    const theirs = await createSub(other.key);
    for (const id of ['01a00000-0000-7000-8000-000000000000', 'nope', account.id, theirs.id]) {
      expectError(await service.api('DELETE', `/accounts/${id}`, { key }), 404, 'not_found');
    }
    await getSub(other.key, theirs.id);
    expect((await service.api('GET', '/account', { key })).status).toBe(200);
  });
});

describe('POST /accounts/{id}/suspend', () => {
  it('200: suspended with a reason, returned exactly in sending.suspendedReason, also to the sub-account itself', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const res = await suspend(key, sub.id, { suspended: true, reason: REASON });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectAccountShape(res.body);
    expect(res.body).toEqual({ ...sub, sending: { ...sub.sending, suspended: true, suspendedReason: REASON } });
    expect((await getSub(key, sub.id)).sending).toMatchObject({ suspended: true, suspendedReason: REASON });
    expect((await ownAccount(await service.newKey(sub.id))).sending).toMatchObject({ suspended: true, suspendedReason: REASON });
  });

  it('accepts a reason of exactly 15 and of exactly 500 characters', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    for (const reason of ['r'.repeat(15), 'r'.repeat(500)]) {
      const res = await suspend(key, sub.id, { suspended: true, reason });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.sending.suspendedReason).toBe(reason);
    }
  });

  it('keeps the reason verbatim, line breaks and surrounding spaces included', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const reason = '  Paused: invoice 2291 is overdue.\nWrite to billing@example.com.\n';
    const res = await suspend(key, sub.id, { suspended: true, reason });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.sending.suspendedReason).toBe(reason);
    expect((await getSub(key, sub.id)).sending.suspendedReason).toBe(reason);
  });

  it('lift: 200 with suspended false and no suspendedReason', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    expect((await suspend(key, sub.id, { suspended: true, reason: REASON })).status).toBe(200);
    const res = await suspend(key, sub.id, { suspended: false });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual(sub);
    expect(res.body.sending).not.toHaveProperty('suspendedReason');
    expect(await getSub(key, sub.id)).toEqual(sub);
  });

  it('400 invalid_json when the body is not JSON', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const headers = { 'content-type': 'application/json' };
    const path = `/accounts/${sub.id}/suspend`;
    expectError(await service.api('POST', path, { key, rawBody: '{"suspended": true', headers }), 400, 'invalid_json');
    expectError(await service.api('POST', path, { key, rawBody: 'suspended=true', headers }), 400, 'invalid_json');
    expectError(await service.api('POST', path, { key }), 400, 'invalid_json');
    expect((await getSub(key, sub.id)).sending.suspended).toBe(false);
  });

  it('422 invalid_request when the body fails validation, the message naming the field; nothing changes', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const cases: [unknown, string][] = [
      [{ suspended: true, reason: 'r'.repeat(14) }, 'reason'],
      [{ suspended: true, reason: 'r'.repeat(501) }, 'reason'],
      [{ suspended: true }, 'reason'],
      [{ suspended: true, reason: 42 }, 'reason'],
      [{ reason: REASON }, 'suspended'],
      [{ suspended: 'yes', reason: REASON }, 'suspended'],
      [{ suspended: true, reason: REASON, until: '2030-01-01' }, 'until'],
    ];
    for (const [body, field] of cases) {
      const res = await suspend(key, sub.id, body);
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message, JSON.stringify(body)).toMatch(new RegExp(`\\b${field}\\b`));
    }
    expect((await getSub(key, sub.id)).sending.suspended).toBe(false);
  });

  it('counts the reason in characters: 15 emoji are accepted, 14 are refused', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    const res = await suspend(key, sub.id, { suspended: true, reason: '⛔'.repeat(7) + '📭'.repeat(8) });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectError(await suspend(key, sub.id, { suspended: true, reason: '📭'.repeat(14) }), 422, 'invalid_request');
  });

  it('404 not_found for an unknown id, the key’s own account and another account’s sub-account, which stays unsuspended', async () => {
    const { account, key } = await service.newAccount();
    const other = await service.newAccount();
    const theirs = await createSub(other.key);
    for (const id of ['01a00000-0000-7000-8000-000000000000', 'nope', account.id, theirs.id]) {
      expectError(await suspend(key, id, { suspended: true, reason: REASON }), 404, 'not_found');
    }
    expect((await getSub(other.key, theirs.id)).sending.suspended).toBe(false);
  });

  for (const by of ['operator', 'breaker'] as const) {
    it(`409 conflict lifting a suspension placed by the ${by}; it stays`, async () => {
      const { key } = await service.newAccount();
      const sub = await createSub(key);
      const reason = `Suspended by the ${by} pending a support review.`;
      await setAccountRow(sub.id, { suspendedBy: by, suspendedReason: reason, suspendedAt: service.clock.now() });
      expectError(await suspend(key, sub.id, { suspended: false }), 409, 'conflict');
      expect((await getSub(key, sub.id)).sending).toMatchObject({ suspended: true, suspendedReason: reason });
    });
  }

  it('409 conflict lifting an API suspension while the sub-account’s own rates grade as paused; lifts once they do not', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    expect((await suspend(key, sub.id, { suspended: true, reason: REASON })).status).toBe(200);
    await setAccountRow(sub.id, PAUSED_COUNTERS);
    expect((await getSub(key, sub.id)).sending.tier).toBe('paused');

    expectError(await suspend(key, sub.id, { suspended: false }), 409, 'conflict');
    expect((await getSub(key, sub.id)).sending).toMatchObject({ suspended: true, suspendedReason: REASON });

    await setAccountRow(sub.id, { totalSent: 1000, totalBounced: 10, totalComplained: 0 });
    const lifted = await suspend(key, sub.id, { suspended: false });
    expect(lifted.status, JSON.stringify(lifted.body)).toBe(200);
    expect(lifted.body.sending.suspended).toBe(false);
    expect(lifted.body.sending).not.toHaveProperty('suspendedReason');
  });

  it('409 conflict for a lift in any state while the own rates still grade as paused', async () => {
    const { key } = await service.newAccount();
    const sub = await createSub(key);
    await setAccountRow(sub.id, PAUSED_COUNTERS);
    expectError(await suspend(key, sub.id, { suspended: false }), 409, 'conflict');
  });

  it('the parent’s own counters do not decide: a sub-account with healthy rates lifts while the parent grades as paused', async () => {
    const { account, key } = await service.newAccount();
    const sub = await createSub(key);
    expect((await suspend(key, sub.id, { suspended: true, reason: REASON })).status).toBe(200);
    await setAccountRow(account.id, PAUSED_COUNTERS);
    const res = await suspend(key, sub.id, { suspended: false });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.sending.suspended).toBe(false);
  });
});

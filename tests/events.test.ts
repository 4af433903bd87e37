import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { expectDocumented } from './helpers/openapi.js';
import { seedEmail, seedEvent, type SeededEvent } from './helpers/outcomes.js';
import { startService, type ApiResponse, type TestService } from './helpers/service.js';

/**
 * GET /events: every recorded outcome of the acting account, newest first, keyset-paged, with
 * `since` and `type`, so a consumer can reconcile after an outage without webhooks.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(async () => {
  await service.close();
});

const TYPE = { delivered: 'email.delivered', bounced: 'email.bounced', deferred: 'email.deferred', complained: 'email.complained' } as const;

/** The item GET /events must show for a seeded outcome. */
const item = (e: SeededEvent) => ({
  id: e.id,
  type: TYPE[e.status],
  emailId: e.emailId,
  recipient: e.recipient,
  status: e.status,
  dsn: e.dsn,
  detail: e.detail,
  occurredAt: new Date(e.occurredAt).toISOString(),
});

const expectError = (res: ApiResponse, status: number, code: string) => {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body).toEqual({ error: { code, message: expect.any(String) } });
  // The API document lists this code at this status for GET /events.
  expectDocumented(res);
};

/** An account with outcomes of two emails at one-minute steps, oldest first as seeded. */
async function accountWithHistory() {
  const { account, key } = await service.newAccount({ name: 'Events' });
  const t0 = service.clock.now();
  const a = await seedEmail(service, account.id);
  const b = await seedEmail(service, account.id);
  const minute = 60_000;
  const seeded = [
    await seedEvent(service, a, 'deferred', t0 + 1 * minute, 'x@example.net'),
    await seedEvent(service, a, 'delivered', t0 + 2 * minute, 'y@example.net'),
    await seedEvent(service, b, 'bounced', t0 + 3 * minute, 'z@example.net'),
    await seedEvent(service, a, 'delivered', t0 + 4 * minute, 'x@example.net'),
    await seedEvent(service, b, 'complained', t0 + 5 * minute, 'w@example.net'),
  ];
  return { account, key, seeded, t0, minute };
}

describe('GET /events', () => {
  it('lists every outcome of the account newest first, each { id, type, emailId, recipient, status, dsn, detail, occurredAt }', async () => {
    const { key, seeded } = await accountWithHistory();
    const res = await service.api('GET', '/events', { key });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectDocumented(res);
    expect(res.body).toEqual({ data: [...seeded].reverse().map(item), nextCursor: null });
  });

  it('shows only the acting account: not another account, not a sub-account to its parent, a sub-account its own through the header', async () => {
    const mine = await accountWithHistory();
    const other = await accountWithHistory();
    const sub = await service.api('POST', '/accounts', { key: mine.key, body: { name: 'Sub' } });
    expect(sub.status).toBe(201);
    const subEvent = await seedEvent(service, await seedEmail(service, sub.body.id), 'delivered', mine.t0 + 6 * mine.minute);

    const own = await service.api('GET', '/events', { key: mine.key });
    expect(own.body.data.map((e: { id: string }) => e.id)).toEqual([...mine.seeded].reverse().map((e) => e.id));
    const theirs = await service.api('GET', '/events', { key: other.key });
    expect(theirs.body.data.map((e: { id: string }) => e.id)).toEqual([...other.seeded].reverse().map((e) => e.id));
    const viaHeader = await service.api('GET', '/events', { key: mine.key, account: sub.body.id });
    expect(viaHeader.status).toBe(200);
    expect(viaHeader.body).toEqual({ data: [item(subEvent)], nextCursor: null });
  });

  it('an account with no outcomes gets an empty page', async () => {
    const { key } = await service.newAccount({ name: 'Quiet' });
    const res = await service.api('GET', '/events', { key });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [], nextCursor: null });
  });

  it('is keyset-paged: limit 2 walks every outcome once, nextCursor null on the last page; outcomes recorded during the walk do not shift it', async () => {
    const { account, key, seeded, t0, minute } = await accountWithHistory();
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query: string = `/events?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const res = await service.api('GET', query, { key });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expectDocumented(res);
      expect(res.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.data.map((e: { id: string }) => e.id));
      cursor = res.body.nextCursor;
      if (pages === 0) await seedEvent(service, await seedEmail(service, account.id), 'delivered', t0 + 9 * minute);
      pages += 1;
    } while (cursor !== null);
    expect(pages).toBe(3);
    expect(seen).toEqual([...seeded].reverse().map((e) => e.id));
  });

  it('type keeps one event type; since keeps outcomes at or after it; both together', async () => {
    const { key, seeded, t0, minute } = await accountWithHistory();
    const delivered = await service.api('GET', '/events?type=email.delivered', { key });
    expect(delivered.body.data).toEqual([seeded[3]!, seeded[1]!].map(item));
    const bounced = await service.api('GET', '/events?type=email.bounced', { key });
    expect(bounced.body.data).toEqual([item(seeded[2]!)]);

    const since = new Date(t0 + 3 * minute).toISOString();
    const recent = await service.api('GET', `/events?since=${encodeURIComponent(since)}`, { key });
    expect(recent.body.data).toEqual([seeded[4]!, seeded[3]!, seeded[2]!].map(item));
    // The same instant written with an offset.
    const offset = new Date(t0 + 3 * minute + 2 * 3_600_000).toISOString().replace('Z', '+02:00');
    const same = await service.api('GET', `/events?since=${encodeURIComponent(offset)}`, { key });
    expect(same.body.data).toEqual(recent.body.data);

    const both = await service.api('GET', `/events?since=${encodeURIComponent(since)}&type=email.delivered`, { key });
    expect(both.body).toEqual({ data: [item(seeded[3]!)], nextCursor: null });
  });

  it('a filtered walk pages within the filter', async () => {
    const { key, seeded } = await accountWithHistory();
    const first = await service.api('GET', '/events?type=email.delivered&limit=1', { key });
    expect(first.body.data).toEqual([item(seeded[3]!)]);
    expect(first.body.nextCursor).toEqual(expect.any(String));
    const second = await service.api('GET', `/events?type=email.delivered&limit=1&cursor=${encodeURIComponent(first.body.nextCursor)}`, { key });
    expect(second.body).toEqual({ data: [item(seeded[1]!)], nextCursor: null });
  });

  it.each(['0', '101', '-1', '2.5', 'ten', ''])('limit=%j is 422 invalid_request', async (limit) => {
    const { key } = await accountWithHistory();
    expectError(await service.api('GET', `/events?limit=${limit}`, { key }), 422, 'invalid_request');
  });

  it('a cursor not issued by this list for this account is 422 invalid_request: garbage, a tampered one, one of GET /emails, one of another account', async () => {
    const mine = await accountWithHistory();
    const other = await accountWithHistory();
    const page = await service.api('GET', '/events?limit=1', { key: mine.key });
    const cursor = page.body.nextCursor as string;
    expect(cursor).toEqual(expect.any(String));
    for (const bad of ['nope', `${cursor}x`, `x${cursor}`]) {
      expectError(await service.api('GET', `/events?cursor=${encodeURIComponent(bad)}`, { key: mine.key }), 422, 'invalid_request');
    }
    expectError(await service.api('GET', `/events?cursor=${encodeURIComponent(cursor)}`, { key: other.key }), 422, 'invalid_request');
    const emailsPage = await service.api('GET', '/emails?limit=1', { key: mine.key });
    expect(emailsPage.body.nextCursor).toEqual(expect.any(String));
    expectError(await service.api('GET', `/events?cursor=${encodeURIComponent(emailsPage.body.nextCursor)}`, { key: mine.key }), 422, 'invalid_request');
    // The cursor still works where it belongs.
    expect((await service.api('GET', `/events?cursor=${encodeURIComponent(cursor)}`, { key: mine.key })).status).toBe(200);
  });

  it.each([
    ['since without a zone', 'since=2026-03-10T12:00:00'],
    ['since as a date only', 'since=2026-03-10'],
    ['since not a date', 'since=yesterday'],
    ['an unknown type', 'type=email.opened'],
    ['ping, which is no recorded outcome', 'type=ping'],
    ['a type without its prefix', 'type=delivered'],
    ['an unknown parameter', 'status=delivered'],
  ])('%s is 422 invalid_request naming the field', async (_name, query) => {
    const { key } = await accountWithHistory();
    const res = await service.api('GET', `/events?${query}`, { key });
    expectError(res, 422, 'invalid_request');
    expect(res.body.error.message).toContain(query.split('=')[0]);
  });
});

describe('the standard failures', () => {
  runCommonAuthTests(() => service, { method: 'GET', path: '/events', scope: 'emails:read' });
});

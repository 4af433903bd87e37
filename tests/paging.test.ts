import { openPostgres } from '../db/pg/state.js';
import { pgTargetOf } from '../server/app/state.js';
import { parseStateUrl } from '../server/shared/state-url.js';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../db/client.js';
import { settings } from '../db/schema/index.js';
import { ApiError } from '../server/shared/errors.js';
import { LISTS, readPage, toPage, type ListDef } from '../server/api/http/paging.js';
import { startService, type TestService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * Keyset paging against docs/api/contract.md (Endpoints, list conventions): `limit` 1 to 100, default 25; `nextCursor` passed back
 * as `cursor`, null on the last page; rows added during a walk do not shift pages. Walked on GET /accounts and
 * GET /keys.
 */

interface Page<T> {
  data: T[];
  nextCursor: string | null;
}

interface Row {
  id: string;
  name: string;
  revokedAt?: string | null;
}

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(async () => {
  await service?.close();
});

async function fetchPage(path: string, key: string, limit: number | null, cursor: string | null): Promise<Page<Row>> {
  const query = new URLSearchParams();
  if (limit !== null) query.set('limit', String(limit));
  if (cursor !== null) query.set('cursor', cursor);
  const qs = query.toString();
  const res = await service.api('GET', `${path}${qs ? `?${qs}` : ''}`, { key });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

/**
 * Walks a list from its first page to the page whose nextCursor is null, calling `between` after each page that
 * has a next one. Returns the pages as fetched.
 */
async function walk(path: string, key: string, limit: number, between: (pageIndex: number) => Promise<void> = async () => {}): Promise<Page<Row>[]> {
  const pages: Page<Row>[] = [];
  let cursor: string | null = null;
  for (;;) {
    const page = await fetchPage(path, key, limit, cursor);
    pages.push(page);
    expect(pages.length, 'the walk does not end').toBeLessThan(1000);
    if (page.nextCursor === null) return pages;
    await between(pages.length - 1);
    cursor = page.nextCursor;
  }
}

async function createSub(key: string, name: string): Promise<string> {
  const res = await service.api('POST', '/accounts', { key, body: { name } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.id as string;
}

async function createSubs(key: string, n: number, label: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    ids.push(await createSub(key, `${label} ${i}`));
    if (i % 5 === 0) service.clock.advance(1);
  }
  return ids;
}

async function mintKey(key: string, name: string): Promise<string> {
  const res = await service.api('POST', '/keys', { key, body: { name } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.id as string;
}

const chunk = <T>(xs: T[], size: number): T[][] => Array.from({ length: Math.ceil(xs.length / size) }, (_, i) => xs.slice(i * size, i * size + size));

describe('GET /accounts: a keyset walk', () => {
  it('over 60 sub-accounts with limit 7 while more are created between fetches: each of the 60 once, in place, none of the new ones', async () => {
    const { key } = await service.newAccount();
    const originals = await createSubs(key, 60, 'Original');
    const newestFirst = [...originals].reverse();
    const added: string[] = [];

    const pages = await walk('/accounts', key, 7, async (i) => {
      added.push(await createSub(key, `Added after page ${i} a`));
      service.clock.advance(1);
      added.push(await createSub(key, `Added after page ${i} b`));
    });

    expect(pages.map((p) => p.data.map((a) => a.id))).toEqual(chunk(newestFirst, 7));
    expect(pages).toHaveLength(9);
    expect(pages.at(-1)!.data).toHaveLength(4);
    expect(pages.at(-1)!.nextCursor).toBeNull();
    for (const p of pages.slice(0, -1)) expect(typeof p.nextCursor).toBe('string');

    const seen = pages.flatMap((p) => p.data.map((a) => a.id));
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.filter((id) => added.includes(id))).toEqual([]);
    expect(added).toHaveLength(16);

    // A fresh walk starts from the newest: the added ones first, then the originals.
    const fresh = (await walk('/accounts', key, 100)).flatMap((p) => p.data.map((a) => a.id));
    expect(fresh).toEqual([...[...added].reverse(), ...newestFirst]);
  });

  it('a list of exactly two full pages: the second page is the last, with nextCursor null, and no empty third page', async () => {
    const { key } = await service.newAccount();
    const ids = (await createSubs(key, 14, 'Sub')).reverse();
    const pages = await walk('/accounts', key, 7);
    expect(pages.map((p) => p.data.map((a) => a.id))).toEqual([ids.slice(0, 7), ids.slice(7)]);
    expect(pages[1]!.nextCursor).toBeNull();
  });

  it('keeps going when the row under the cursor is deleted mid-walk: the rest follows, nothing repeated', async () => {
    const { key } = await service.newAccount();
    const ids = (await createSubs(key, 12, 'Sub')).reverse();
    const first = await fetchPage('/accounts', key, 5, null);
    expect(first.data.map((a) => a.id)).toEqual(ids.slice(0, 5));
    expect((await service.api('DELETE', `/accounts/${ids[4]}`, { key })).status).toBe(204);
    const second = await fetchPage('/accounts', key, 5, first.nextCursor);
    expect(second.data.map((a) => a.id)).toEqual(ids.slice(5, 10));
    const third = await fetchPage('/accounts', key, 5, second.nextCursor);
    expect(third).toEqual({ data: ids.slice(10).map((id) => expect.objectContaining({ id })), nextCursor: null });
  });

  it('the default page is 25; limit 100 takes up to 100', async () => {
    const { key } = await service.newAccount();
    const ids = (await createSubs(key, 30, 'Sub')).reverse();
    const byDefault = await fetchPage('/accounts', key, null, null);
    expect(byDefault.data.map((a) => a.id)).toEqual(ids.slice(0, 25));
    expect(typeof byDefault.nextCursor).toBe('string');
    const rest = await fetchPage('/accounts', key, null, byDefault.nextCursor);
    expect(rest).toEqual({ data: ids.slice(25).map((id) => expect.objectContaining({ id })), nextCursor: null });
    const all = await fetchPage('/accounts', key, 100, null);
    expect(all.data.map((a) => a.id)).toEqual(ids);
    expect(all.nextCursor).toBeNull();
  });

  it('limit 1 walks one row at a time', async () => {
    const { key } = await service.newAccount();
    const ids = (await createSubs(key, 3, 'Sub')).reverse();
    const pages = await walk('/accounts', key, 1);
    expect(pages.map((p) => p.data.map((a) => a.id))).toEqual(ids.map((id) => [id]));
  });
});

describe('GET /keys: a keyset walk', () => {
  it('over 41 keys with limit 7 while keys are minted and revoked between fetches: each once, in place, revoked ones included', async () => {
    const { key } = await service.newAccount();
    const operatorKeyId = (await fetchPage('/keys', key, 1, null)).data[0]!.id;
    const minted: string[] = [];
    for (let i = 0; i < 40; i++) {
      minted.push(await mintKey(key, `original ${i}`));
      if (i % 4 === 0) service.clock.advance(1);
    }
    const newestFirst = [operatorKeyId, ...minted].reverse();
    expect(newestFirst).toHaveLength(41);
    const added: string[] = [];
    const revoked: string[] = [];

    const pages = await walk('/keys', key, 7, async (i) => {
      added.push(await mintKey(key, `added after page ${i}`));
      // Revoke one original on a page not yet fetched: it stays in the list, with revokedAt.
      const ahead = newestFirst[(i + 1) * 7 + 1]!;
      expect((await service.api('DELETE', `/keys/${ahead}`, { key })).status).toBe(204);
      revoked.push(ahead);
    });

    expect(pages.map((p) => p.data.map((k) => k.id))).toEqual(chunk(newestFirst, 7));
    expect(pages.at(-1)!.nextCursor).toBeNull();
    const seen = pages.flatMap((p) => p.data);
    expect(new Set(seen.map((k) => k.id)).size).toBe(41);
    expect(seen.filter((k) => added.includes(k.id))).toEqual([]);
    expect(revoked.length).toBeGreaterThan(0);
    for (const k of seen) {
      if (revoked.includes(k.id)) expect(k.revokedAt, k.name).toEqual(expect.any(String));
      else expect(k.revokedAt, k.name).toBeNull();
    }
  });
});

/** The cursor with its key (the row it continues after) replaced, the rest of it (list, account, any signature) kept. */
function withForgedKey(cursor: string, k: string): string {
  const [body, ...rest] = cursor.split('.');
  const payload = JSON.parse(Buffer.from(body!, 'base64url').toString('utf8')) as Record<string, unknown>;
  expect(Object.keys(payload).sort()).toEqual(['a', 'k', 'l']);
  return [Buffer.from(JSON.stringify({ ...payload, k })).toString('base64url'), ...rest].join('.');
}

/** A cursor as the service used to issue them: base64url JSON of list, account and row id, unsigned. */
const unsigned = (l: string, a: string, k: string) => Buffer.from(JSON.stringify({ l, a, k })).toString('base64url');

describe("cursors are signed by the server: a made-up or altered one is refused with the list's own error", () => {
  it("GET /accounts: a cursor of this list and account pointing at another account's sub-account is 422 invalid_request", async () => {
    const { account, key } = await service.newAccount();
    const mine = (await createSubs(key, 3, 'Mine')).reverse();
    const other = await service.newAccount();
    const theirs = await createSub(other.key, 'Theirs');

    const first = await fetchPage('/accounts', key, 1, null);
    const cursor = first.nextCursor!;
    // The genuine cursor works, and keeps working when used again.
    for (let i = 0; i < 2; i++) expect((await fetchPage('/accounts', key, 5, cursor)).data.map((a) => a.id)).toEqual(mine.slice(1));

    for (const forged of [
      withForgedKey(cursor, theirs),
      withForgedKey(cursor, mine[2]!),
      unsigned('accounts', account.id, theirs),
      `${cursor}x`,
      `${cursor}.extra`,
    ]) {
      const res = await service.api('GET', `/accounts?cursor=${encodeURIComponent(forged)}`, { key });
      expect(res.status, forged).toBe(422);
      expect(res.body).toEqual({ error: { code: 'invalid_request', message: expect.stringMatching(/\bcursor\b/) } });
    }
  });

  it('GET /suppressions: an altered cursor is 422 invalid_cursor', async () => {
    const { key } = await service.newAccount();
    for (const address of ['a@example.net', 'b@example.net', 'c@example.net']) {
      expect((await service.api('POST', '/suppressions', { key, body: { address } })).status).toBe(201);
      service.clock.advance(1);
    }
    const first = await service.api('GET', '/suppressions?limit=1', { key });
    const cursor = first.body.nextCursor as string;
    expect((await service.api('GET', `/suppressions?cursor=${encodeURIComponent(cursor)}`, { key })).status).toBe(200);
    const forged = withForgedKey(cursor, '01a00000-0000-7000-8000-000000000000');
    const res = await service.api('GET', `/suppressions?cursor=${encodeURIComponent(forged)}`, { key });
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe('invalid_cursor');
  });

  it('the key is made once, kept in settings, and signs alike for another connection to the same database', async () => {
    const accountId = '01a00000-0000-7000-8000-0000000000aa';
    const rows = [{ id: '01a00000-0000-7000-8000-000000000002' }, { id: '01a00000-0000-7000-8000-000000000001' }];
    const { nextCursor } = await toPage(service.deps.db, LISTS.keys, accountId, { limit: 1, after: null }, rows);
    expect(nextCursor).toEqual(expect.any(String));
    const stored = await one(service.deps.db.select().from(settings).where(eq(settings.key, 'cursor_hmac_key')));
    expect(stored?.value).toMatch(/^[0-9a-f]{64}$/);
    // A second connection to the state, whichever engine holds it (a second pool on Postgres).
    const second = service.stateUrl ? await openPostgres(pgTargetOf(parseStateUrl(service.stateUrl))) : openDatabase(service.dataDir);
    try {
      expect(await readPage(second.db, LISTS.keys, accountId, { cursor: nextCursor! })).toEqual({ limit: 25, after: rows[0]!.id });
      expect(await one(second.db.select().from(settings).where(eq(settings.key, 'cursor_hmac_key')))).toEqual(stored);
    } finally {
      await second.close();
    }
  });
});

describe('readPage on the webhook lists: a bad limit or cursor is 400 invalid_request (docs/api/contract.md, not 422)', () => {
  const accountId = '01a00000-0000-7000-8000-0000000000bb';
  const lastId = '01a00000-0000-7000-8000-000000000003';
  const rows = [{ id: lastId }, { id: '01a00000-0000-7000-8000-000000000004' }];

  async function refusal(list: ListDef, query: { limit?: string; cursor?: string }): Promise<ApiError> {
    try {
      await readPage(service.deps.db, list, accountId, query);
    } catch (err) {
      expect(err).toBeInstanceOf(ApiError);
      return err as ApiError;
    }
    throw new Error(`readPage accepted ${JSON.stringify(query)} on ${list.name}`);
  }

  it.each([
    ['webhooks', LISTS.webhooks],
    ['webhook deliveries', LISTS.webhookDeliveries],
  ])('%s', async (_label, list) => {
    for (const limit of ['0', '101', 'abc', '-1', '2.5', '']) {
      const err = await refusal(list, { limit });
      expect([err.status, err.code], limit).toEqual([400, 'invalid_request']);
      expect(err.message).toMatch(/\blimit\b/);
    }
    const own = (await toPage(service.deps.db, list, accountId, { limit: 1, after: null }, rows)).nextCursor!;
    expect(await readPage(service.deps.db, list, accountId, { limit: '10', cursor: own })).toEqual({ limit: 10, after: lastId });
    const otherList = list === LISTS.webhooks ? LISTS.webhookDeliveries : LISTS.webhooks;
    const cursors = [
      'not-a-cursor',
      '',
      unsigned(list.name, accountId, lastId),
      withForgedKey(own, '01a00000-0000-7000-8000-000000000009'),
      (await toPage(service.deps.db, otherList, accountId, { limit: 1, after: null }, rows)).nextCursor!,
      (await toPage(service.deps.db, list, '01a00000-0000-7000-8000-0000000000cc', { limit: 1, after: null }, rows)).nextCursor!,
    ];
    for (const cursor of cursors) {
      const err = await refusal(list, { cursor });
      expect([err.status, err.code], cursor).toEqual([400, 'invalid_request']);
      expect(err.message).toMatch(/\bcursor\b/);
    }
  });
});

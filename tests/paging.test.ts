import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService } from './helpers/service.js';

/**
 * Keyset paging against api.md (Endpoints, list conventions): `limit` 1 to 100, default 25; `nextCursor` passed back
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
    const { key } = service.newAccount();
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
    const { key } = service.newAccount();
    const ids = (await createSubs(key, 14, 'Sub')).reverse();
    const pages = await walk('/accounts', key, 7);
    expect(pages.map((p) => p.data.map((a) => a.id))).toEqual([ids.slice(0, 7), ids.slice(7)]);
    expect(pages[1]!.nextCursor).toBeNull();
  });

  it('keeps going when the row under the cursor is deleted mid-walk: the rest follows, nothing repeated', async () => {
    const { key } = service.newAccount();
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
    const { key } = service.newAccount();
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
    const { key } = service.newAccount();
    const ids = (await createSubs(key, 3, 'Sub')).reverse();
    const pages = await walk('/accounts', key, 1);
    expect(pages.map((p) => p.data.map((a) => a.id))).toEqual(ids.map((id) => [id]));
  });
});

describe('GET /keys: a keyset walk', () => {
  it('over 41 keys with limit 7 while keys are minted and revoked between fetches: each once, in place, revoked ones included', async () => {
    const { key } = service.newAccount();
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

import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accounts, apiKeys } from '../db/schema/index.js';
import type { Scope } from '../server/core/scopes.js';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { expectDocumented } from './helpers/openapi.js';
import { onOtherConnection, startService, type ApiResponse, type TestService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * API keys against docs/api/contract.md (Key resource, Keys endpoints, Authentication, Errors, Limits, paging) and docs/api/decisions.md
 * section 1 (key format and prefix).
 */

interface KeyBody {
  id: string;
  name: string;
  prefix: string;
  scopes: string[];
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
}

interface MintedBody {
  id: string;
  name: string;
  prefix: string;
  scopes: string[];
  createdAt: string;
  key: string;
}

/**
 * The 14 scopes of docs/api/contract.md, Authentication 3, and the two of docs/api/decisions.md section 9 (own
 * templates), written out from the spec rather than imported.
 */
const ALL_SCOPES = [
  'emails:send',
  'emails:read',
  'domains:read',
  'domains:write',
  'keys:read',
  'keys:write',
  'accounts:read',
  'accounts:write',
  'webhooks:read',
  'webhooks:write',
  'suppressions:read',
  'suppressions:write',
  'database:read',
  'database:write',
  'templates:read',
  'templates:write',
] as const satisfies readonly Scope[];

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const KEY_FORMAT = /^ms_[A-Za-z0-9]{32,}$/;
const iso = (ms: number) => new Date(ms).toISOString();
const sha256Hex = (s: string) => createHash('sha256').update(s).digest('hex');
const sorted = (a: readonly string[]) => [...a].sort();

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

async function mint(key: string, body: unknown = { name: 'ci deploys' }, account?: string): Promise<MintedBody> {
  const res = await service.api('POST', '/keys', { key, body, ...(account ? { account } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  expectDocumented(res);
  return res.body;
}

async function listKeys(key: string, query = '', account?: string): Promise<{ data: KeyBody[]; nextCursor: string | null }> {
  const res = await service.api('GET', `/keys${query}`, { key, ...(account ? { account } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expectDocumented(res);
  return res.body;
}

/** Every key of the account, walking all pages. */
async function allKeys(key: string, account?: string): Promise<KeyBody[]> {
  const out: KeyBody[] = [];
  let cursor: string | null = null;
  do {
    const page: { data: KeyBody[]; nextCursor: string | null } = await listKeys(
      key,
      `?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      account,
    );
    out.push(...page.data);
    cursor = page.nextCursor;
  } while (cursor);
  return out;
}

async function keyIdOf(key: string): Promise<string> {
  const found = (await allKeys(key)).find((k) => key.startsWith(k.prefix) && k.revokedAt === null);
  // A prefix is not unique in principle; the one live key of a fresh account is.
  if (!found) throw new Error('key not in its own list');
  return found.id;
}

async function subAccountOf(key: string, name = 'Shop EU'): Promise<string> {
  const res = await service.api('POST', '/accounts', { key, body: { name } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.id as string;
}

describe('auth on every keys endpoint', () => {
  runCommonAuthTests(() => service, { method: 'GET', path: '/keys', scope: 'keys:read' });
  runCommonAuthTests(() => service, { method: 'POST', path: '/keys', scope: 'keys:write', body: { name: 'auth case' } });
  runCommonAuthTests(() => service, {
    method: 'DELETE',
    path: async ({ service: svc, key }) => {
      const res = await svc.api('POST', '/keys', { key, body: { name: 'to revoke' } });
      expect(res.status).toBe(201);
      return `/keys/${res.body.id as string}`;
    },
    scope: 'keys:write',
  });
});

describe('POST /keys', () => {
  it('201: id, name, prefix, scopes, createdAt and the full key, which works at once', async () => {
    const { account, key } = await service.newAccount();
    const res = await service.api('POST', '/keys', { key, body: { name: 'ci deploys', scopes: ['accounts:read', 'keys:read'] } });
    expect(res.status).toBe(201);
    const minted: MintedBody = res.body;
    expect(minted).toEqual({
      id: expect.stringMatching(UUID),
      name: 'ci deploys',
      prefix: minted.key.slice(0, 11),
      scopes: expect.any(Array),
      createdAt: iso(service.clock.now()),
      key: expect.stringMatching(KEY_FORMAT),
    });
    expect(minted.prefix).toMatch(/^ms_[A-Za-z0-9]{8}$/);
    expect(sorted(minted.scopes)).toEqual(['accounts:read', 'keys:read']);

    const me = await service.api('GET', '/account', { key: minted.key });
    expect(me.status).toBe(200);
    expect(me.body.id).toBe(account.id);
  });

  it('every key is different', async () => {
    const { key } = await service.newAccount();
    const keys = await Promise.all(Array.from({ length: 10 }, (_, i) => mint(key, { name: `k${i}` })));
    expect(new Set(keys.map((k) => k.key)).size).toBe(10);
    expect(new Set(keys.map((k) => k.id)).size).toBe(10);
  });

  it('scopes omitted: the new key holds all scopes of the minting key, and only those', async () => {
    const { account } = await service.newAccount();
    const held: Scope[] = ['keys:write', 'accounts:read', 'domains:read'];
    const minting = await service.newKey(account.id, held);
    const minted = await mint(minting, { name: 'inherits' });
    expect(sorted(minted.scopes)).toEqual(sorted(held));
    expect((await service.api('GET', '/account', { key: minted.key })).status).toBe(200);
    expect((await service.api('GET', '/domains', { key: minted.key })).status).toBe(200);
    expectError(await service.api('GET', '/keys', { key: minted.key }), 403, 'insufficient_scope');

    const fromFull = await mint((await service.newAccount()).key, { name: 'everything' });
    expect(sorted(fromFull.scopes)).toEqual(sorted(ALL_SCOPES));
  });

  it('a key made before own templates keeps the 14 scopes it had: the template catalog still answers it, writing a template does not', async () => {
    const { account } = await service.newAccount();
    const older = await service.newKey(
      account.id,
      ALL_SCOPES.filter((s) => !s.startsWith('templates:')),
    );
    expect((await service.api('GET', '/templates', { key: older })).status).toBe(200);
    expectError(await service.api('POST', '/templates', { key: older, body: { name: 'mine', subject: 'Hi', text: 'Hello' } }), 403, 'insufficient_scope');
    const minted = await mint(older, { name: 'from the older key' });
    expect(minted.scopes).toHaveLength(14);
    expect(minted.scopes).not.toContain('templates:write');
  });

  it('a key minted with a subset of scopes holds exactly that subset', async () => {
    const { key } = await service.newAccount();
    const minted = await mint(key, { name: 'read only', scopes: ['accounts:read'] });
    expect(minted.scopes).toEqual(['accounts:read']);
    expect((await service.api('GET', '/account', { key: minted.key })).status).toBe(200);
    expectError(await service.api('GET', '/keys', { key: minted.key }), 403, 'insufficient_scope');
    expectError(await service.api('POST', '/keys', { key: minted.key, body: { name: 'x' } }), 403, 'insufficient_scope');
  });

  it('403 insufficient_scope for a scope the minting key does not hold; no key is made', async () => {
    const { account, key } = await service.newAccount();
    const minting = await service.newKey(account.id, ['keys:write', 'keys:read', 'accounts:read']);
    const before = (await allKeys(key)).length;
    for (const scopes of [['emails:send'], ['accounts:read', 'accounts:write'], [...ALL_SCOPES]]) {
      expectError(await service.api('POST', '/keys', { key: minting, body: { name: 'escalate', scopes } }), 403, 'insufficient_scope');
    }
    expect((await allKeys(key)).length).toBe(before);
  });

  it('accepts names of 1 and of 60 characters', async () => {
    const { key } = await service.newAccount();
    expect((await mint(key, { name: 'k' })).name).toBe('k');
    expect((await mint(key, { name: 'k'.repeat(60) })).name).toBe('k'.repeat(60));
    expect((await mint(key, { name: '🔑'.repeat(60) })).name).toBe('🔑'.repeat(60));
  });

  it('400 invalid_json when the body is not JSON', async () => {
    const { key } = await service.newAccount();
    const headers = { 'content-type': 'application/json' };
    expectError(await service.api('POST', '/keys', { key, rawBody: '{"name": "ci"', headers }), 400, 'invalid_json');
    expectError(await service.api('POST', '/keys', { key, rawBody: 'name=ci', headers }), 400, 'invalid_json');
    expectError(await service.api('POST', '/keys', { key }), 400, 'invalid_json');
  });

  it('422 invalid_request when the body fails validation, the message naming the field; no key is made', async () => {
    const { key } = await service.newAccount();
    const cases: [unknown, string][] = [
      [{ name: '' }, 'name'],
      [{ name: 'k'.repeat(61) }, 'name'],
      [{}, 'name'],
      [{ name: 7 }, 'name'],
      [{ name: 'ci', scopes: [] }, 'scopes'],
      [{ name: 'ci', scopes: ['emails:sendall'] }, 'scopes'],
      [{ name: 'ci', scopes: ['accounts:read', 'admin'] }, 'scopes'],
      [{ name: 'ci', scopes: 'accounts:read' }, 'scopes'],
      [{ name: 'ci', scopes: [1] }, 'scopes'],
      [{ name: 'ci', expiresAt: '2030-01-01T00:00:00Z' }, 'expiresAt'],
    ];
    for (const [body, field] of cases) {
      const res = await service.api('POST', '/keys', { key, body });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message, JSON.stringify(body)).toMatch(new RegExp(`\\b${field}\\b`));
    }
    expect((await allKeys(key)).length).toBe(1);
  });

  it('409 limit_reached at 50 live keys; revoked keys do not count, revoking one frees a slot', async () => {
    const { key } = await service.newAccount();
    // The operator's key is the first live key: 49 more make 50.
    const made = await Promise.all(Array.from({ length: 49 }, (_, i) => mint(key, { name: `k${i}` })));
    expectError(await service.api('POST', '/keys', { key, body: { name: 'fifty-first' } }), 409, 'limit_reached');

    expect((await service.api('DELETE', `/keys/${made[0]!.id}`, { key })).status).toBe(204);
    await mint(key, { name: 'fits again' });
    expectError(await service.api('POST', '/keys', { key, body: { name: 'fifty-first' } }), 409, 'limit_reached');
    expect((await allKeys(key)).length).toBe(51);
  });

  it('the 50 live keys are per account: a sub-account has its own 50', async () => {
    const { key } = await service.newAccount();
    await Promise.all(Array.from({ length: 49 }, (_, i) => mint(key, { name: `k${i}` })));
    const sub = await subAccountOf(key);
    await mint(key, { name: 'for the sub-account' }, sub);
  });

  it('with X-Service-Account the key belongs to the sub-account and is used without the header', async () => {
    const { key } = await service.newAccount();
    const sub = await subAccountOf(key);
    const minted = await mint(key, { name: 'shop eu key' }, sub);
    expect(sorted(minted.scopes)).toEqual(sorted(ALL_SCOPES));

    const me = await service.api('GET', '/account', { key: minted.key });
    expect(me.status).toBe(200);
    expect(me.body.id).toBe(sub);

    expect((await allKeys(key, sub)).map((k) => k.id)).toEqual([minted.id]);
    expect((await allKeys(minted.key)).map((k) => k.id)).toEqual([minted.id]);
    expect((await allKeys(key)).map((k) => k.id)).not.toContain(minted.id);
  });

  it('401 invalid_key when the minting key is revoked while the request is in flight; no key is made', async () => {
    const { account, key: other } = await service.newAccount();
    const minting = await service.newKey(account.id, ['keys:write', 'keys:read'], 'minting');
    const mintingId = (await allKeys(other)).find((k) => k.name === 'minting')!.id;

    const url = new URL(`${service.base}/keys`);
    const req = request({
      host: url.hostname,
      port: url.port,
      path: url.pathname,
      method: 'POST',
      headers: { authorization: `Bearer ${minting}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    });
    const answer = new Promise<{ status: number; body: unknown }>((resolve, reject) => {
      req.on('error', reject);
      req.on('response', (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
        res.on('error', reject);
      });
    });
    const body = JSON.stringify({ name: 'minted mid-flight' });
    const half = Math.floor(body.length / 2);
    await new Promise<void>((resolve, reject) => req.write(body.slice(0, half), (err) => (err ? reject(err) : resolve())));

    expect((await service.api('DELETE', `/keys/${mintingId}`, { key: other })).status).toBe(204);

    req.end(body.slice(half));
    const res = await answer;
    expect(res).toEqual({ status: 401, body: { error: { code: 'invalid_key', message: expect.any(String) } } });
    expect((await allKeys(other)).map((k) => k.name)).not.toContain('minted mid-flight');
  });

  it('the full key is returned only once: never in the list', async () => {
    const { key } = await service.newAccount();
    const minted = await mint(key, { name: 'secret once' });
    const list = await service.api('GET', '/keys', { key });
    const listed = (list.body.data as KeyBody[]).find((k) => k.id === minted.id)!;
    expect(Object.keys(listed).sort()).toEqual(['createdAt', 'id', 'lastUsedAt', 'name', 'prefix', 'revokedAt', 'scopes']);
    const raw = JSON.stringify(list.body);
    expect(raw).not.toContain(minted.key);
    expect(raw).not.toContain(minted.key.slice(11));
    expect(raw).not.toContain(key.slice(11));
  });

  it('only a SHA-256 hash of the key is stored: key_hash is its hex digest and nothing in the database holds the key', async () => {
    const { key } = await service.newAccount();
    const minted = await mint(key, { name: 'hashed' });
    const row = (await one(service.deps.db.select().from(apiKeys).where(eq(apiKeys.id, minted.id))))!;
    expect(row.keyHash).toBe(sha256Hex(minted.key));
    const secretPart = minted.key.slice(11);
    for (const value of Object.values(row)) expect(JSON.stringify(value)).not.toContain(secretPart);

    if (service.deps.store.engine === 'sqlite') {
      // Nor anywhere else in the database files (main file and write-ahead log).
      const files = readdirSync(service.dataDir).filter((f) => f.startsWith('mailstead.db'));
      expect(files).toContain('mailstead.db');
      for (const f of files) expect(readFileSync(join(service.dataDir, f)).includes(secretPart)).toBe(false);
    } else {
      // Nor in any column of any table of the state database, read as text.
      const tables = await onOtherConnection<{ name: string }>(service, "select tablename as name from pg_tables where schemaname = 'public'");
      expect(tables.length).toBeGreaterThan(10);
      for (const { name } of tables) {
        const found = await onOtherConnection(service, `select 1 from "${name}" t where t::text like ?`, [`%${secretPart}%`]);
        expect(found, name).toEqual([]);
      }
    }
  });
});

describe('GET /keys', () => {
  it('200: every key of the account, newest first, each with its fields; other accounts’ keys are not listed', async () => {
    const { key } = await service.newAccount();
    const operatorId = await keyIdOf(key);
    service.clock.advance(1000);
    const a = await mint(key, { name: 'first', scopes: ['emails:send'] });
    service.clock.advance(1000);
    const b = await mint(key, { name: 'second', scopes: ['emails:read', 'domains:read'] });
    await mint((await service.newAccount()).key, { name: 'not mine' });

    const page = await listKeys(key);
    expect(page.nextCursor).toBeNull();
    expect(page.data.map((k) => k.id)).toEqual([b.id, a.id, operatorId]);
    expect(page.data[0]).toEqual({ id: b.id, name: 'second', prefix: b.prefix, scopes: b.scopes, createdAt: b.createdAt, lastUsedAt: null, revokedAt: null });
    expect(page.data[1]).toEqual({
      id: a.id,
      name: 'first',
      prefix: a.prefix,
      scopes: ['emails:send'],
      createdAt: a.createdAt,
      lastUsedAt: null,
      revokedAt: null,
    });
  });

  it('revoked keys are included, with revokedAt set to the time of revocation', async () => {
    const { key } = await service.newAccount();
    const doomed = await mint(key, { name: 'doomed' });
    service.clock.advance(5000);
    const revokedAt = iso(service.clock.now());
    expect((await service.api('DELETE', `/keys/${doomed.id}`, { key })).status).toBe(204);
    service.clock.advance(5000);
    const listed = (await listKeys(key)).data.find((k) => k.id === doomed.id);
    expect(listed).toMatchObject({ id: doomed.id, name: 'doomed', revokedAt });
  });

  it('lastUsedAt is the time of the key’s last use, in the list at once (before any flush) and after it; null when never used', async () => {
    const { key } = await service.newAccount();
    const used = await mint(key, { name: 'used' });
    const unused = await mint(key, { name: 'unused' });
    service.clock.advance(60_000);
    const firstUse = iso(service.clock.now());
    expect((await service.api('GET', '/account', { key: used.key })).status).toBe(200);
    service.clock.advance(60_000);

    const before = (await listKeys(key)).data;
    expect(before.find((k) => k.id === used.id)!.lastUsedAt).toBe(firstUse);
    expect(before.find((k) => k.id === unused.id)!.lastUsedAt).toBeNull();

    await service.deps.keyUsage.flush(service.deps.db);
    const after = (await listKeys(key)).data;
    expect(after.find((k) => k.id === used.id)!.lastUsedAt).toBe(firstUse);
    expect(after.find((k) => k.id === unused.id)!.lastUsedAt).toBeNull();

    service.clock.advance(60_000);
    const secondUse = iso(service.clock.now());
    expect((await service.api('GET', '/account', { key: used.key })).status).toBe(200);
    expect((await listKeys(key)).data.find((k) => k.id === used.id)!.lastUsedAt).toBe(secondUse);
  });

  it('with X-Service-Account, the sub-account’s keys', async () => {
    const { key } = await service.newAccount();
    const sub = await subAccountOf(key);
    const a = await mint(key, { name: 'sub one' }, sub);
    const b = await mint(key, { name: 'sub two' }, sub);
    const page = await listKeys(key, '', sub);
    expect(page.data.map((k) => k.id)).toEqual([b.id, a.id]);
  });

  it('pages with nextCursor; null on the last page', async () => {
    const { key } = await service.newAccount();
    const operatorId = await keyIdOf(key);
    const made = [];
    for (let i = 0; i < 4; i++) made.push(await mint(key, { name: `k${i}` }));
    const newestFirst = [...made.map((k) => k.id).reverse(), operatorId];

    const p1 = await listKeys(key, '?limit=2');
    expect(p1.data.map((k) => k.id)).toEqual(newestFirst.slice(0, 2));
    expect(typeof p1.nextCursor).toBe('string');
    const p2 = await listKeys(key, `?limit=2&cursor=${encodeURIComponent(p1.nextCursor!)}`);
    expect(p2.data.map((k) => k.id)).toEqual(newestFirst.slice(2, 4));
    const p3 = await listKeys(key, `?limit=2&cursor=${encodeURIComponent(p2.nextCursor!)}`);
    expect(p3).toEqual({ data: [expect.objectContaining({ id: newestFirst[4] })], nextCursor: null });
  });

  it('422 invalid_request for a bad limit: 0, 101, abc, -1, 2.5, empty', async () => {
    const { key } = await service.newAccount();
    for (const limit of ['0', '101', 'abc', '-1', '2.5', '']) {
      const res = await service.api('GET', `/keys?limit=${limit}`, { key });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message, limit).toMatch(/\blimit\b/);
    }
    expect((await service.api('GET', '/keys?limit=1', { key })).status).toBe(200);
    expect((await service.api('GET', '/keys?limit=100', { key })).status).toBe(200);
  });

  it('422 invalid_request for a cursor not of this account’s keys: another account’s, the accounts list’s, garbage', async () => {
    const { key } = await service.newAccount();
    await mint(key, { name: 'second' });
    const other = await service.newAccount();
    await mint(other.key, { name: 'theirs' });
    const otherKeysCursor = (await listKeys(other.key, '?limit=1')).nextCursor;
    await subAccountOf(key, 'Sub one');
    await subAccountOf(key, 'Sub two');
    const accountsCursor = (await service.api('GET', '/accounts?limit=1', { key })).body.nextCursor as string | null;
    expect(typeof otherKeysCursor).toBe('string');
    expect(typeof accountsCursor).toBe('string');

    for (const cursor of [otherKeysCursor!, accountsCursor!, 'not-a-cursor', '']) {
      const res = await service.api('GET', `/keys?cursor=${encodeURIComponent(cursor)}`, { key });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message).toMatch(/\bcursor\b/);
    }
  });

  it('422 invalid_request for the parent’s key cursor while acting for a sub-account, and the reverse', async () => {
    const { key } = await service.newAccount();
    await mint(key, { name: 'second' });
    const sub = await subAccountOf(key);
    await mint(key, { name: 'sub one' }, sub);
    await mint(key, { name: 'sub two' }, sub);
    const parentCursor = (await listKeys(key, '?limit=1')).nextCursor!;
    const subCursor = (await listKeys(key, '?limit=1', sub)).nextCursor!;
    expectError(await service.api('GET', `/keys?cursor=${encodeURIComponent(parentCursor)}`, { key, account: sub }), 422, 'invalid_request');
    expectError(await service.api('GET', `/keys?cursor=${encodeURIComponent(subCursor)}`, { key }), 422, 'invalid_request');
  });
});

describe('DELETE /keys/{id}', () => {
  it('204: the key stops working at once and stays in the list with revokedAt set', async () => {
    const { key } = await service.newAccount();
    const doomed = await mint(key, { name: 'doomed' });
    expect((await service.api('GET', '/account', { key: doomed.key })).status).toBe(200);
    const res = await service.api('DELETE', `/keys/${doomed.id}`, { key });
    expect(res.status).toBe(204);
    expect(res.body).toBeNull();
    expectError(await service.api('GET', '/account', { key: doomed.key }), 401, 'invalid_key');
    expect((await listKeys(key)).data.find((k) => k.id === doomed.id)!.revokedAt).toBe(iso(service.clock.now()));
  });

  // The guard skips the lookup of a key it has found before while no key can have stopped working (core/keys.ts);
  // a change made by another connection to the database (the operator's CLI, sqlite3) must end that at once.
  it.each([
    ['revokes the key', (keyId: string, _accountId: string) => ['update api_keys set revoked_at = ? where id = ?', [Date.now(), keyId]] as const],
    ['deletes the key', (keyId: string) => ['delete from api_keys where id = ?', [keyId]] as const],
    ['deletes the account', (_keyId: string, accountId: string) => ['delete from accounts where id = ?', [accountId]] as const],
  ])('another connection that %s: the key used a moment ago is 401 invalid_key on its next request', async (_what, change) => {
    const { key, account } = await service.newAccount();
    const used = await mint(key, { name: 'used' });
    for (let i = 0; i < 3; i++) expect((await service.api('GET', '/account', { key: used.key })).status).toBe(200);
    const [query, params] = change(used.id, account.id);
    await onOtherConnection(service, query, [...params]);
    expectError(await service.api('GET', '/account', { key: used.key }), 401, 'invalid_key');
  });

  it('a key in use keeps working while other keys are minted and revoked, and its account is read afresh', async () => {
    const { key, account } = await service.newAccount();
    const before = await service.api('GET', '/account', { key });
    const other = await mint(key, { name: 'other' });
    expect((await service.api('DELETE', `/keys/${other.id}`, { key })).status).toBe(204);
    expect((await service.api('GET', '/account', { key })).status).toBe(200);
    // Changed on the service's own connection, which does not move SQLite's data_version.
    await service.deps.db.update(accounts).set({ name: 'Renamed' }).where(eq(accounts.id, account.id));
    const after = await service.api('GET', '/account', { key });
    expect(after.status).toBe(200);
    expect((before.body as { name: string }).name).not.toBe('Renamed');
    expect((after.body as { name: string }).name).toBe('Renamed');
  });

  it('204 also when already revoked; revokedAt keeps the first revocation’s time', async () => {
    const { key } = await service.newAccount();
    const doomed = await mint(key, { name: 'doomed' });
    expect((await service.api('DELETE', `/keys/${doomed.id}`, { key })).status).toBe(204);
    const first = iso(service.clock.now());
    service.clock.advance(60_000);
    const again = await service.api('DELETE', `/keys/${doomed.id}`, { key });
    expect(again.status).toBe(204);
    expect((await listKeys(key)).data.find((k) => k.id === doomed.id)!.revokedAt).toBe(first);
  });

  it('a key may revoke itself, and then gets 401 invalid_key', async () => {
    const { key } = await service.newAccount();
    const self = await mint(key, { name: 'self' });
    expect((await service.api('DELETE', `/keys/${self.id}`, { key: self.key })).status).toBe(204);
    expectError(await service.api('GET', '/keys', { key: self.key }), 401, 'invalid_key');
    expectError(await service.api('DELETE', `/keys/${self.id}`, { key: self.key }), 401, 'invalid_key');
    expect((await listKeys(key)).data.find((k) => k.id === self.id)!.revokedAt).not.toBeNull();
  });

  it('with X-Service-Account, revokes a key of the sub-account', async () => {
    const { key } = await service.newAccount();
    const sub = await subAccountOf(key);
    const subKey = await mint(key, { name: 'sub key' }, sub);
    expect((await service.api('DELETE', `/keys/${subKey.id}`, { key, account: sub })).status).toBe(204);
    expectError(await service.api('GET', '/account', { key: subKey.key }), 401, 'invalid_key');
  });

  it('404 not_found for an unknown id, a malformed id, another account’s key (which keeps working) and a sub-account’s key without the header', async () => {
    const { key } = await service.newAccount();
    const theirs = await mint((await service.newAccount()).key, { name: 'theirs' });
    const sub = await subAccountOf(key);
    const subKey = await mint(key, { name: 'sub key' }, sub);
    for (const id of ['01a00000-0000-7000-8000-000000000000', 'nope', theirs.id, subKey.id]) {
      expectError(await service.api('DELETE', `/keys/${id}`, { key }), 404, 'not_found');
    }
    expect((await service.api('GET', '/account', { key: theirs.key })).status).toBe(200);
    expect((await service.api('GET', '/account', { key: subKey.key })).status).toBe(200);
  });
});

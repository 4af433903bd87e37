import { createPublicKey } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { domainKeys, domains, emails, outboundMessages } from '../db/schema/index.js';
import { DAY_MS } from '../server/shared/clock.js';
import { KEPT_DOMAIN_KEYS } from '../server/core/domains.js';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { expectDocumented } from './helpers/openapi.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { startService, type ApiResponse, type RequestOptions, type TestService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * Domains against docs/api/contract.md (Domain resource, Domain transitions, Domains endpoints, Errors, Limits) and docs/api/decisions.md
 * section 5, with a real DNS server on loopback that the service reads through DNS_SERVERS.
 */

type Kind = 'Ownership' | 'SPF' | 'Receiving' | 'Signing';
const KINDS: Kind[] = ['Ownership', 'SPF', 'Receiving', 'Signing'];

interface DnsRecordBody {
  record: Kind;
  type: 'TXT' | 'MX';
  name: string;
  value: string;
  status: string;
}

interface DomainBody {
  id: string;
  name: string;
  status: string;
  ownershipVerified: boolean;
  sending: boolean;
  receiving: boolean;
  direct: boolean;
  records: DnsRecordBody[];
  createdAt: string;
  lastCheckedAt: string;
  checks?: Record<string, string>;
}

const MAIL_HOST = 'mx.mailstead.test';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const iso = (ms: number) => new Date(ms).toISOString();

let dns: TestDnsServer;
let service: TestService;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  service = await startService({ DNS_SERVERS: dns.address });
});
afterAll(async () => {
  await service?.close();
  await dns?.stop();
});
beforeEach(() => dns.clear());

let seq = 0;
/** A name no other test of this file uses: claims on a name span accounts, so each test brings its own. */
const freshName = (label = 'd') => `${label}${++seq}.example.com`;

/** Calls the API and checks, on every answer, that no private key travels in it and that the API document describes it. */
async function call(svc: TestService, method: string, path: string, opts: RequestOptions = {}): Promise<ApiResponse> {
  const res = await svc.api(method, path, opts);
  expect(JSON.stringify(res.body ?? null)).not.toContain('PRIVATE');
  expectDocumented(res);
  return res;
}

async function createDomain(svc: TestService, key: string, name = freshName(), account?: string): Promise<DomainBody> {
  const res = await call(svc, 'POST', '/domains', { key, body: { name }, ...(account ? { account } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

async function verify(svc: TestService, key: string, id: string, account?: string): Promise<DomainBody> {
  const res = await call(svc, 'POST', `/domains/${id}/verify`, { key, ...(account ? { account } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

function recordOf(domain: DomainBody, kind: Kind): DnsRecordBody {
  const found = domain.records.find((r) => r.record === kind);
  if (!found) throw new Error(`no ${kind} record in ${JSON.stringify(domain.records)}`);
  return found;
}

/** Splits a TXT value into character-strings of at most 255 octets, as every DNS provider serves a DKIM key. */
const chunks = (value: string): string[] => value.match(/[^]{1,255}/g) ?? [''];

/** Publishes the records the service returned, as the customer would copy them into their zone. */
function publish(domain: DomainBody, kinds: Kind[] = KINDS): void {
  for (const kind of kinds) {
    const r = recordOf(domain, kind);
    if (r.type === 'MX') {
      const [priority, exchange] = r.value.split(' ');
      dns.add(r.name, { type: 'MX', priority: Number(priority), exchange: exchange! });
    } else {
      dns.add(r.name, { type: 'TXT', data: chunks(r.value) });
    }
  }
}

function unpublish(domain: DomainBody, kind: Kind): void {
  const r = recordOf(domain, kind);
  dns.drop(r.name, r.type);
}

/** The state a test reads: status, flags and each record's status by kind. */
function stateOf(d: DomainBody) {
  return {
    status: d.status,
    ownershipVerified: d.ownershipVerified,
    sending: d.sending,
    receiving: d.receiving,
    direct: d.direct,
    records: Object.fromEntries(d.records.map((r) => [r.record, r.status])),
  };
}

const PENDING_RECORDS = { Ownership: 'pending', SPF: 'pending', Receiving: 'pending', Signing: 'pending' };
const PUBLISHED_RECORDS = { Ownership: 'published', SPF: 'published', Receiving: 'published', Signing: 'published' };
const FULL = { status: 'verified', ownershipVerified: true, sending: true, receiving: true, direct: true, records: PUBLISHED_RECORDS };
const ALL_FOUND = { ownership: 'proven', receiving: 'published', signing: 'published', spf: 'published' };
const ALL_MISSING = { ownership: 'missing', receiving: 'missing', signing: 'missing', spf: 'missing' };
const ALL_UNKNOWN = { ownership: 'unknown', receiving: 'unknown', signing: 'unknown', spf: 'unknown' };

function expectError(res: ApiResponse, status: number, code: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body).toEqual({ error: { code, message: expect.any(String) } });
}

/** Bits of randomness a token of this alphabet and length can carry. */
function tokenBits(token: string): number {
  if (/^[0-9a-f]+$/i.test(token)) return token.length * 4;
  if (/^[A-Za-z0-9_-]+$/.test(token)) return token.length * 6;
  return 0;
}

describe('auth on every domains endpoint', () => {
  const domainPath = async ({ service: svc, key }: { service: TestService; key: string }) => `/domains/${(await createDomain(svc, key)).id}`;
  runCommonAuthTests(() => service, { method: 'GET', path: '/domains', scope: 'domains:read' });
  runCommonAuthTests(() => service, { method: 'POST', path: '/domains', scope: 'domains:write', body: { name: 'auth-cases.example.com' } });
  runCommonAuthTests(() => service, { method: 'GET', path: domainPath, scope: 'domains:read' });
  runCommonAuthTests(() => service, { method: 'DELETE', path: domainPath, scope: 'domains:write' });
  runCommonAuthTests(() => service, {
    method: 'POST',
    path: async (ctx) => `${await domainPath(ctx)}/verify`,
    scope: 'domains:write',
  });
});

describe('POST /domains', () => {
  it('201: the domain with every field, pending, and the four records to publish', async () => {
    const { key } = await service.newAccount();
    const name = freshName();
    const res = await call(service, 'POST', '/domains', { key, body: { name } });
    expect(res.status).toBe(201);
    const d: DomainBody = res.body;
    const now = iso(service.clock.now());
    expect(d).toEqual({
      id: expect.stringMatching(UUID),
      name,
      status: 'pending',
      ownershipVerified: false,
      sending: false,
      receiving: false,
      direct: false,
      records: expect.any(Array),
      createdAt: now,
      lastCheckedAt: now,
    });
    expect(d.records.map((r) => r.record).sort()).toEqual([...KINDS].sort());

    const ownership = recordOf(d, 'Ownership');
    expect(ownership).toEqual({
      record: 'Ownership',
      type: 'TXT',
      name: `_service-verify.${name}`,
      value: expect.stringMatching(/^service-verify=\S+$/),
      status: 'pending',
    });
    expect(tokenBits(ownership.value.slice('service-verify='.length))).toBeGreaterThanOrEqual(128);

    expect(recordOf(d, 'SPF')).toEqual({ record: 'SPF', type: 'TXT', name, value: `v=spf1 include:${MAIL_HOST} ~all`, status: 'pending' });
    expect(recordOf(d, 'Receiving')).toEqual({ record: 'Receiving', type: 'MX', name, value: `10 ${MAIL_HOST}`, status: 'pending' });

    const signing = recordOf(d, 'Signing');
    expect(signing).toEqual({
      record: 'Signing',
      type: 'TXT',
      name: expect.stringMatching(new RegExp(`^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\\._domainkey\\.${name.replace(/\./g, '\\.')}$`)),
      value: expect.stringMatching(/^v=DKIM1; h=sha256; k=rsa; p=[A-Za-z0-9+/]+={0,2}$/),
      status: 'pending',
    });
    const publicKey = createPublicKey({ key: Buffer.from(signing.value.split('p=')[1]!, 'base64'), format: 'der', type: 'spki' });
    expect(publicKey.asymmetricKeyType).toBe('rsa');
    expect(publicKey.asymmetricKeyDetails?.modulusLength).toBe(2048);

    const got = await call(service, 'GET', `/domains/${d.id}`, { key });
    expect(got.status).toBe(200);
    expect(got.body).toEqual(d);
  });

  it('gives every domain its own token, selector and key', async () => {
    const { key } = await service.newAccount();
    const a = await createDomain(service, key);
    const b = await createDomain(service, key);
    const other = await createDomain(service, (await service.newAccount()).key);
    const parts = (d: DomainBody) => [recordOf(d, 'Ownership').value, recordOf(d, 'Signing').name.split('.')[0], recordOf(d, 'Signing').value];
    const [pa, pb, po] = [parts(a), parts(b), parts(other)];
    for (let i = 0; i < 3; i++) {
      expect(new Set([pa[i], pb[i], po[i]]).size).toBe(3);
    }
  });

  it('400 invalid_json when the body is not JSON', async () => {
    const { key } = await service.newAccount();
    expectError(
      await call(service, 'POST', '/domains', { key, rawBody: '{"name": "x.example.com"', headers: { 'content-type': 'application/json' } }),
      400,
      'invalid_json',
    );
    expectError(
      await call(service, 'POST', '/domains', { key, rawBody: 'name=x.example.com', headers: { 'content-type': 'application/json' } }),
      400,
      'invalid_json',
    );
    expectError(await call(service, 'POST', '/domains', { key }), 400, 'invalid_json');
  });

  it('422 invalid_request when the body fails validation, naming the field', async () => {
    const { key } = await service.newAccount();
    const missing = await call(service, 'POST', '/domains', { key, body: {} });
    expectError(missing, 422, 'invalid_request');
    expect(missing.body.error.message).toMatch(/\bname\b/);
    const wrongType = await call(service, 'POST', '/domains', { key, body: { name: 7 } });
    expectError(wrongType, 422, 'invalid_request');
    expect(wrongType.body.error.message).toMatch(/\bname\b/);
    const bad = await call(service, 'POST', '/domains', { key, body: { name: 'https://example.com/' } });
    expectError(bad, 422, 'invalid_request');
    expect(bad.body.error.message).toMatch(/\bname\b/);
    expectError(await call(service, 'POST', '/domains', { key, body: ['x.example.com'] }), 422, 'invalid_request');
    expectError(await call(service, 'POST', '/domains', { key, body: 'x.example.com' }), 422, 'invalid_request');
    expectError(await call(service, 'POST', '/domains', { key, body: null }), 422, 'invalid_request');
    expect((await call(service, 'GET', '/domains', { key })).body).toEqual({ data: [], nextCursor: null });
  });

  it('409 domain_exists when the name is already on this account, however it is written', async () => {
    const { key } = await service.newAccount();
    const name = freshName();
    const first = await createDomain(service, key, name);
    expectError(await call(service, 'POST', '/domains', { key, body: { name } }), 409, 'domain_exists');
    expectError(await call(service, 'POST', '/domains', { key, body: { name: ` ${name.toUpperCase()}. ` } }), 409, 'domain_exists');
    const list = await call(service, 'GET', '/domains', { key });
    expect(list.body.data.map((d: DomainBody) => d.id)).toEqual([first.id]);
  });

  it('409 domain_exists for one account posting the same new name twice at once: one domain', async () => {
    const { key } = await service.newAccount();
    const name = freshName();
    const results = await Promise.all([0, 1].map(() => call(service, 'POST', '/domains', { key, body: { name } })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 409]);
    expectError(results.find((r) => r.status === 409)!, 409, 'domain_exists');
    expect((await call(service, 'GET', '/domains', { key })).body.data).toHaveLength(1);
  });

  describe('409 domain_unavailable: the name is claimed elsewhere', () => {
    it('while another account holds it verified, however old the claim', async () => {
      const holder = await service.newAccount({ name: 'Holder Verified Ltd' });
      const name = freshName();
      const held = await createDomain(service, holder.key, name);
      publish(held, ['Ownership']);
      expect((await verify(service, holder.key, held.id)).status).toBe('verified');
      service.clock.advance(30 * DAY_MS);
      const { key } = await service.newAccount();
      const res = await call(service, 'POST', '/domains', { key, body: { name } });
      expectError(res, 409, 'domain_unavailable');
      expect(res.body.error.message).not.toContain(holder.account.id);
      expect(res.body.error.message).not.toContain('Holder');
      expect((await call(service, 'GET', `/domains/${held.id}`, { key: holder.key })).status).toBe(200);
    });

    it('while another account’s unverified claim is younger than 7 days', async () => {
      const holder = await service.newAccount({ name: 'Holder Pending Ltd' });
      const name = freshName();
      const held = await createDomain(service, holder.key, name);
      const { key } = await service.newAccount();
      const res = await call(service, 'POST', '/domains', { key, body: { name } });
      expectError(res, 409, 'domain_unavailable');
      expect(res.body.error.message).not.toContain(holder.account.id);
      expect(res.body.error.message).not.toContain('Holder');
      service.clock.advance(7 * DAY_MS - 1);
      expectError(await call(service, 'POST', '/domains', { key, body: { name: ` ${name.toUpperCase()}.` } }), 409, 'domain_unavailable');
      expect((await call(service, 'GET', `/domains/${held.id}`, { key: holder.key })).status).toBe(200);
    });

    it('answers the same message whether the holder verified the name or not', async () => {
      const verifiedName = freshName('same');
      const pendingName = freshName('same');
      const holder = await service.newAccount({ name: 'Holder Same Ltd' });
      const v = await createDomain(service, holder.key, verifiedName);
      publish(v, ['Ownership']);
      await verify(service, holder.key, v.id);
      await createDomain(service, holder.key, pendingName);
      const { key } = await service.newAccount();
      const a = await call(service, 'POST', '/domains', { key, body: { name: verifiedName } });
      const b = await call(service, 'POST', '/domains', { key, body: { name: pendingName } });
      expectError(a, 409, 'domain_unavailable');
      expectError(b, 409, 'domain_unavailable');
      expect(a.body.error.message.replace(verifiedName, 'NAME')).toBe(b.body.error.message.replace(pendingName, 'NAME'));
    });

    it('for two accounts posting the same new name at once: exactly one gets it', async () => {
      const name = freshName();
      const [x, y] = [await service.newAccount(), await service.newAccount()];
      const results = await Promise.all([x, y].map(({ key }) => call(service, 'POST', '/domains', { key, body: { name } })));
      expect(results.map((r) => r.status).sort()).toEqual([201, 409]);
      expectError(results.find((r) => r.status === 409)!, 409, 'domain_unavailable');
    });
  });

  describe('the 7-day rule: an unverified claim older than 7 days is cleared when another account claims the name', () => {
    it('still holds at exactly 7 days (“more than 7 days”, docs/api/contract.md Limits)', async () => {
      const old = await service.newAccount();
      const name = freshName();
      const held = await createDomain(service, old.key, name);
      service.clock.advance(7 * DAY_MS);
      const { key } = await service.newAccount();
      expectError(await call(service, 'POST', '/domains', { key, body: { name } }), 409, 'domain_unavailable');
      expect((await call(service, 'GET', `/domains/${held.id}`, { key: old.key })).status).toBe(200);
    });

    it('clears the old claim at 7 days + 1 ms: the new account gets the name with its own records, the old one loses it', async () => {
      const old = await service.newAccount();
      const name = freshName();
      const stale = await createDomain(service, old.key, name);
      service.clock.advance(7 * DAY_MS + 1);
      const fresh = await service.newAccount();
      const res = await call(service, 'POST', '/domains', { key: fresh.key, body: { name } });
      expect(res.status).toBe(201);
      const claimed: DomainBody = res.body;
      expect(claimed.name).toBe(name);
      expect(claimed.createdAt).toBe(iso(service.clock.now()));
      expect(recordOf(claimed, 'Ownership').value).not.toBe(recordOf(stale, 'Ownership').value);
      expect(recordOf(claimed, 'Signing').value).not.toBe(recordOf(stale, 'Signing').value);

      expectError(await call(service, 'GET', `/domains/${stale.id}`, { key: old.key }), 404, 'not_found');
      expectError(await call(service, 'POST', `/domains/${stale.id}/verify`, { key: old.key }), 404, 'not_found');
      expect((await call(service, 'GET', '/domains', { key: old.key })).body.data).toEqual([]);
      // The name is now the new account's young claim: the old account cannot take it back.
      expectError(await call(service, 'POST', '/domains', { key: old.key, body: { name } }), 409, 'domain_unavailable');
    });

    it('dates a claim from the first time the account connected the name: deleting and reconnecting does not restart the 7 days', async () => {
      const squatter = await service.newAccount();
      const name = freshName();
      let held = await createDomain(service, squatter.key, name);
      for (let day = 0; day < 3; day++) {
        service.clock.advance(3 * DAY_MS);
        expect((await call(service, 'DELETE', `/domains/${held.id}`, { key: squatter.key })).status).toBe(204);
        held = await createDomain(service, squatter.key, name);
      }
      // 9 days after the first claim, though the current domain row is only minutes old.
      const { key } = await service.newAccount();
      expect((await call(service, 'POST', '/domains', { key, body: { name } })).status).toBe(201);
      expectError(await call(service, 'GET', `/domains/${held.id}`, { key: squatter.key }), 404, 'not_found');
    });

    it('a refused claim clears nothing: the expired claim stays until a claim succeeds', async () => {
      const old = await service.newAccount();
      const name = freshName();
      const stale = await createDomain(service, old.key, name);
      service.clock.advance(7 * DAY_MS + 1);
      // An account at its domain limit is refused with 409 domain_limit, and the old claim is untouched.
      const full = await service.newAccount();
      for (let i = 0; i < 20; i++) await createDomain(service, full.key, freshName('full'));
      expectError(await call(service, 'POST', '/domains', { key: full.key, body: { name } }), 409, 'domain_limit');
      expect((await call(service, 'GET', `/domains/${stale.id}`, { key: old.key })).status).toBe(200);
      // Behind SECRET_KEY=off, a new key cannot be made: 503, and again nothing is cleared.
      // A second service on the same database, its clock as far on.
      const off = await startService({ DNS_SERVERS: dns.address, SECRET_KEY: 'off', DATA_DIR: service.deps.config.dataDir });
      off.clock.set(service.clock.now());
      try {
        const stranger = await off.newAccount();
        expectError(await call(off, 'POST', '/domains', { key: stranger.key, body: { name } }), 503, 'not_configured');
      } finally {
        await off.close();
      }
      expect((await call(service, 'GET', `/domains/${stale.id}`, { key: old.key })).status).toBe(200);
    });

    it('a claim that lost its ownership record is unverified again, and clears after 7 days', async () => {
      const old = await service.newAccount();
      const name = freshName();
      const held = await createDomain(service, old.key, name);
      publish(held, ['Ownership']);
      expect((await verify(service, old.key, held.id)).status).toBe('verified');
      unpublish(held, 'Ownership');
      expect((await verify(service, old.key, held.id)).status).toBe('pending');
      service.clock.advance(7 * DAY_MS + 1);
      const { key } = await service.newAccount();
      expect((await call(service, 'POST', '/domains', { key, body: { name } })).status).toBe(201);
      expectError(await call(service, 'GET', `/domains/${held.id}`, { key: old.key }), 404, 'not_found');
    });
  });

  it('409 domain_limit for the 21st domain; deleting one makes room', async () => {
    const { key } = await service.newAccount();
    const created: DomainBody[] = [];
    for (let i = 0; i < 18; i++) created.push(await createDomain(service, key, freshName('limit')));
    // The last two places, raced by three requests: the limit holds under concurrency.
    const racing = await Promise.all([0, 1, 2].map(() => call(service, 'POST', '/domains', { key, body: { name: freshName('limit') } })));
    expect(racing.map((r) => r.status).sort()).toEqual([201, 201, 409]);
    expectError(racing.find((r) => r.status === 409)!, 409, 'domain_limit');
    const all = await call(service, 'GET', '/domains?limit=100', { key });
    expect(all.body.data).toHaveLength(20);

    const twentyFirst = await call(service, 'POST', '/domains', { key, body: { name: freshName('limit') } });
    expectError(twentyFirst, 409, 'domain_limit');
    expect(twentyFirst.body.error.message).toContain('20');
    // A name already on the account is still domain_exists, not domain_limit.
    expectError(await call(service, 'POST', '/domains', { key, body: { name: created[0]!.name } }), 409, 'domain_exists');

    expect((await call(service, 'DELETE', `/domains/${created[5]!.id}`, { key })).status).toBe(204);
    expect((await call(service, 'POST', '/domains', { key, body: { name: freshName('limit') } })).status).toBe(201);
    expectError(await call(service, 'POST', '/domains', { key, body: { name: freshName('limit') } }), 409, 'domain_limit');
    // The limit is per account.
    await createDomain(service, (await service.newAccount()).key, freshName('limit'));
  });
});

describe('GET /domains', () => {
  it('an account without domains gets an empty page', async () => {
    const { key } = await service.newAccount();
    const res = await call(service, 'GET', '/domains', { key });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [], nextCursor: null });
  });

  it('lists the account’s own domains, newest first, paged with nextCursor', async () => {
    const { key } = await service.newAccount();
    await createDomain(service, (await service.newAccount()).key); // someone else's
    const created: DomainBody[] = [];
    for (let i = 0; i < 5; i++) {
      created.push(await createDomain(service, key));
      service.clock.advance(1000);
    }
    // One more within the same millisecond as the last: order still follows creation.
    service.clock.stepWall(-1000);
    created.push(await createDomain(service, key));
    const newestFirst = created.map((d) => d.id).reverse();

    const all = await call(service, 'GET', '/domains', { key });
    expect(all.status).toBe(200);
    expect(all.body.nextCursor).toBeNull();
    expect(all.body.data.map((d: DomainBody) => d.id)).toEqual(newestFirst);
    expect(all.body.data[0]).toEqual(created[5]);

    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const path: string = `/domains?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const page: ApiResponse = await call(service, 'GET', path, { key });
      expect(page.status).toBe(200);
      expect(page.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...page.body.data.map((d: DomainBody) => d.id));
      cursor = page.body.nextCursor;
      pages++;
      // A domain added mid-walk is newer than every page: it does not shift the pages still to come.
      if (pages === 1) await createDomain(service, key);
    } while (cursor !== null);
    expect(pages).toBe(3);
    expect(seen).toEqual(newestFirst);
  });

  it('422 invalid_request for a bad limit', async () => {
    const { key } = await service.newAccount();
    for (const limit of ['0', '101', '-1', '1.5', 'abc', '', '1e1']) {
      const res = await call(service, 'GET', `/domains?limit=${encodeURIComponent(limit)}`, { key });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message).toMatch(/\blimit\b/);
    }
    expect((await call(service, 'GET', '/domains?limit=1', { key })).status).toBe(200);
    expect((await call(service, 'GET', '/domains?limit=100', { key })).status).toBe(200);
  });

  it('422 invalid_request for a cursor this list did not issue', async () => {
    const { key, account } = await service.newAccount();
    for (let i = 0; i < 2; i++) await createDomain(service, key);
    const other = await service.newAccount();
    for (let i = 0; i < 2; i++) await createDomain(service, other.key);
    const theirs = (await call(service, 'GET', '/domains?limit=1', { key: other.key })).body.nextCursor as string;
    expect(theirs).toEqual(expect.any(String));
    await service.newKey(account.id);
    await service.newKey(account.id);
    const keysCursor = (await call(service, 'GET', '/keys?limit=1', { key })).body.nextCursor as string;
    expect(keysCursor).toEqual(expect.any(String));
    for (const cursor of ['garbage', 'eyJ9', keysCursor, theirs]) {
      const res = await call(service, 'GET', `/domains?cursor=${encodeURIComponent(cursor)}`, { key });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message).toMatch(/\bcursor\b/);
    }
  });
});

describe('GET /domains/{id}', () => {
  it('200: the domain with each record’s status from the last verification', async () => {
    const { key } = await service.newAccount();
    const d = await createDomain(service, key);
    publish(d, ['Ownership', 'Receiving']);
    const verified = await verify(service, key, d.id);
    const got = await call(service, 'GET', `/domains/${d.id}`, { key });
    expect(got.status).toBe(200);
    const { checks, ...domain } = verified;
    expect(checks).toBeDefined();
    expect(got.body).toEqual(domain);
    expect(stateOf(got.body).records).toEqual({ Ownership: 'published', SPF: 'pending', Receiving: 'published', Signing: 'pending' });
  });

  it('404 not_found for an unknown id, a malformed id, and another account’s domain', async () => {
    const { key } = await service.newAccount();
    const theirs = await createDomain(service, (await service.newAccount()).key);
    expectError(await call(service, 'GET', '/domains/01a00000-0000-7000-8000-000000000000', { key }), 404, 'not_found');
    expectError(await call(service, 'GET', '/domains/not-an-id', { key }), 404, 'not_found');
    expectError(await call(service, 'GET', `/domains/${theirs.id}`, { key }), 404, 'not_found');
  });
});

describe('DELETE /domains/{id}', () => {
  it('204, then the domain is gone: GET, DELETE and verify answer 404 not_found', async () => {
    const { key } = await service.newAccount();
    const keep = await createDomain(service, key);
    const d = await createDomain(service, key);
    const res = await call(service, 'DELETE', `/domains/${d.id}`, { key });
    expect(res.status).toBe(204);
    expect(res.body).toBeNull();
    expectError(await call(service, 'GET', `/domains/${d.id}`, { key }), 404, 'not_found');
    expectError(await call(service, 'DELETE', `/domains/${d.id}`, { key }), 404, 'not_found');
    expectError(await call(service, 'POST', `/domains/${d.id}/verify`, { key }), 404, 'not_found');
    expect((await call(service, 'GET', '/domains', { key })).body.data.map((x: DomainBody) => x.id)).toEqual([keep.id]);
  });

  it('404 not_found for an unknown id and for another account’s domain, which stays', async () => {
    const { key } = await service.newAccount();
    const owner = await service.newAccount();
    const theirs = await createDomain(service, owner.key);
    expectError(await call(service, 'DELETE', '/domains/01a00000-0000-7000-8000-000000000000', { key }), 404, 'not_found');
    expectError(await call(service, 'DELETE', `/domains/${theirs.id}`, { key }), 404, 'not_found');
    expect((await call(service, 'GET', `/domains/${theirs.id}`, { key: owner.key })).status).toBe(200);
  });

  it('frees the name for another account at once', async () => {
    const first = await service.newAccount();
    const name = freshName();
    const d = await createDomain(service, first.key, name);
    publish(d, ['Ownership']);
    await verify(service, first.key, d.id);
    expect((await call(service, 'DELETE', `/domains/${d.id}`, { key: first.key })).status).toBe(204);
    const second = await createDomain(service, (await service.newAccount()).key, name);
    expect(recordOf(second, 'Ownership').value).not.toBe(recordOf(d, 'Ownership').value);
    expect(recordOf(second, 'Signing').value).not.toBe(recordOf(d, 'Signing').value);
  });

  it('keeps token, selector and key: reconnecting returns identical records and verifies at once, DNS unchanged', async () => {
    const { key } = await service.newAccount();
    const name = freshName();
    const first = await createDomain(service, key, name);
    publish(first);
    expect(stateOf(await verify(service, key, first.id))).toEqual(FULL);
    expect((await call(service, 'DELETE', `/domains/${first.id}`, { key })).status).toBe(204);

    service.clock.advance(3 * DAY_MS);
    const again = await createDomain(service, key, ` ${name.toUpperCase()}.`);
    expect(again.name).toBe(name);
    expect(stateOf(again)).toEqual({ status: 'pending', ownershipVerified: false, sending: false, receiving: false, direct: false, records: PENDING_RECORDS });
    expect(again.createdAt).toBe(iso(service.clock.now()));
    const pick = (d: DomainBody) => d.records.map(({ record, type, name: n, value }) => ({ record, type, name: n, value }));
    expect(pick(again)).toEqual(pick(first));

    const checked = await verify(service, key, again.id);
    expect(checked.checks).toEqual(ALL_FOUND);
    expect(stateOf(checked)).toEqual(FULL);
  });
});

describe('kept keys of deleted domains are bounded (KEPT_DOMAIN_KEYS per account)', () => {
  const keyIdsOf = async (accountId: string) =>
    await service.deps.db.select({ id: domainKeys.id, name: domainKeys.name }).from(domainKeys).where(eq(domainKeys.accountId, accountId));
  const pick = (d: DomainBody) => d.records.map(({ record, type, name: n, value }) => ({ record, type, name: n, value }));

  /** `n` create/delete cycles, each with a name never used before, one second apart. */
  async function cycles(key: string, n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      service.clock.advance(1000);
      const d = await createDomain(service, key, freshName('cycle'));
      expect((await call(service, 'DELETE', `/domains/${d.id}`, { key })).status).toBe(204);
    }
  }

  it('30 cycles with new names leave the kept keys at the bound; a long-held domain deleted after them is still kept and reused', async () => {
    expect(KEPT_DOMAIN_KEYS).toBe(20);
    const { account, key } = await service.newAccount();
    const longHeld = await createDomain(service, key, freshName('long'));
    await cycles(key, 30);
    // The live domain's key plus the 20 kept keys released most recently.
    expect(await keyIdsOf(account.id)).toHaveLength(KEPT_DOMAIN_KEYS + 1);

    // Its key is the oldest of all by creation, the newest by release: pruning goes by release, so it stays.
    service.clock.advance(1000);
    expect((await call(service, 'DELETE', `/domains/${longHeld.id}`, { key })).status).toBe(204);
    expect(await keyIdsOf(account.id)).toHaveLength(KEPT_DOMAIN_KEYS);
    expect((await keyIdsOf(account.id)).map((k) => k.name)).toContain(longHeld.name);
    const again = await createDomain(service, key, longHeld.name);
    expect(pick(again)).toEqual(pick(longHeld));
  }, 120_000);

  it('a kept key of a recently deleted domain is reused on reconnect after many cycles', async () => {
    const { key } = await service.newAccount();
    await cycles(key, 25);
    const recent = await createDomain(service, key, freshName('recent'));
    expect((await call(service, 'DELETE', `/domains/${recent.id}`, { key })).status).toBe(204);
    await cycles(key, 5);
    const again = await createDomain(service, key, recent.name);
    expect(pick(again)).toEqual(pick(recent));
  }, 120_000);

  it('a key that queued mail still signs with survives pruning, and goes once the mail has gone', async () => {
    const { account, key } = await service.newAccount();
    const queuedDomain = await createDomain(service, key, freshName('queued'));
    const keyId = (await one(service.deps.db.select().from(domains).where(eq(domains.id, queuedDomain.id))))!.keyId;
    const now = service.clock.now();
    const emailId = '01a00000-0000-7000-8000-00000000f001';
    await service.deps.db.insert(emails).values({
      id: emailId,
      accountId: account.id,
      fromAddress: `a@${queuedDomain.name}`,
      to: ['b@example.net'],
      subject: 's',
      template: 'notification',
      status: 'sent',
      sandbox: false,
      createdAt: now,
    });
    await service.deps.db.insert(outboundMessages).values({
      id: emailId,
      accountId: account.id,
      domainKeyId: keyId,
      fromHeader: `a@${queuedDomain.name}`,
      fromAddress: `a@${queuedDomain.name}`,
      messageId: `<m@${queuedDomain.name}>`,
      subject: 's',
      html: '<p>s</p>',
      text: 's',
      createdAt: now,
      expiresAt: now + 5 * DAY_MS,
    });
    expect((await call(service, 'DELETE', `/domains/${queuedDomain.id}`, { key })).status).toBe(204);

    await cycles(key, 25);
    const kept = (await keyIdsOf(account.id)).map((k) => k.id);
    expect(kept).toContain(keyId);
    expect(kept).toHaveLength(KEPT_DOMAIN_KEYS);
    expect(await one(service.deps.db.select().from(outboundMessages).where(eq(outboundMessages.id, emailId)))).toBeDefined();

    await service.deps.db.delete(outboundMessages).where(eq(outboundMessages.id, emailId));
    await cycles(key, 1);
    expect((await keyIdsOf(account.id)).map((k) => k.id)).not.toContain(keyId);
    expect(await keyIdsOf(account.id)).toHaveLength(KEPT_DOMAIN_KEYS);
  }, 120_000);
});

describe('POST /domains/{id}/verify', () => {
  it('404 not_found for an unknown id and for another account’s domain', async () => {
    const { key } = await service.newAccount();
    const owner = await service.newAccount();
    const theirs = await createDomain(service, owner.key);
    publish(theirs);
    expectError(await call(service, 'POST', '/domains/01a00000-0000-7000-8000-000000000000/verify', { key }), 404, 'not_found');
    expectError(await call(service, 'POST', `/domains/${theirs.id}/verify`, { key }), 404, 'not_found');
    // Nothing was checked or stored on the owner's domain.
    expect((await call(service, 'GET', `/domains/${theirs.id}`, { key: owner.key })).body).toEqual(theirs);
  });

  it('nothing published: every check missing, still pending, lastCheckedAt set to now', async () => {
    const { key } = await service.newAccount();
    const d = await createDomain(service, key);
    service.clock.advance(60_000);
    const v = await verify(service, key, d.id);
    expect(v.checks).toEqual(ALL_MISSING);
    expect(stateOf(v)).toEqual({ status: 'pending', ownershipVerified: false, sending: false, receiving: false, direct: false, records: PENDING_RECORDS });
    expect(v.createdAt).toBe(d.createdAt);
    expect(v.lastCheckedAt).toBe(iso(service.clock.now()));
  });

  it('every record published (the DKIM key split into 255-octet strings): verified, sending directly, receiving', async () => {
    const { key } = await service.newAccount();
    const d = await createDomain(service, key);
    expect(recordOf(d, 'Signing').value.length).toBeGreaterThan(255);
    publish(d);
    service.clock.advance(90 * 60_000 + 7);
    const res = await call(service, 'POST', `/domains/${d.id}/verify`, { key });
    expect(res.status).toBe(200);
    const v: DomainBody = res.body;
    expect(v).toEqual({
      ...d,
      status: 'verified',
      ownershipVerified: true,
      sending: true,
      receiving: true,
      direct: true,
      records: d.records.map((r) => ({ ...r, status: 'published' })),
      lastCheckedAt: iso(service.clock.now()),
      checks: ALL_FOUND,
    });
    expect(v.lastCheckedAt).toMatch(ISO_MS);
    // The answer was stored.
    const { checks: _checks, ...stored } = v;
    expect((await call(service, 'GET', `/domains/${d.id}`, { key })).body).toEqual(stored);
    // Run again: same result.
    expect(stateOf(await verify(service, key, d.id))).toEqual(FULL);
  });

  const partial: [string, Kind[], object, object][] = [
    [
      'ownership only: verified, but neither sending nor receiving',
      ['Ownership'],
      { ownership: 'proven', receiving: 'missing', signing: 'missing', spf: 'missing' },
      { status: 'verified', ownershipVerified: true, sending: false, receiving: false, direct: false, records: { ...PENDING_RECORDS, Ownership: 'published' } },
    ],
    [
      'ownership and MX: receiving',
      ['Ownership', 'Receiving'],
      { ownership: 'proven', receiving: 'published', signing: 'missing', spf: 'missing' },
      {
        status: 'verified',
        ownershipVerified: true,
        sending: false,
        receiving: true,
        direct: false,
        records: { ...PENDING_RECORDS, Ownership: 'published', Receiving: 'published' },
      },
    ],
    [
      'ownership and DKIM without SPF: not sending',
      ['Ownership', 'Signing'],
      { ownership: 'proven', receiving: 'missing', signing: 'published', spf: 'missing' },
      {
        status: 'verified',
        ownershipVerified: true,
        sending: false,
        receiving: false,
        direct: false,
        records: { ...PENDING_RECORDS, Ownership: 'published', Signing: 'published' },
      },
    ],
    [
      'ownership and SPF without DKIM: not sending',
      ['Ownership', 'SPF'],
      { ownership: 'proven', receiving: 'missing', signing: 'missing', spf: 'published' },
      {
        status: 'verified',
        ownershipVerified: true,
        sending: false,
        receiving: false,
        direct: false,
        records: { ...PENDING_RECORDS, Ownership: 'published', SPF: 'published' },
      },
    ],
    [
      'ownership, DKIM and SPF: sending directly',
      ['Ownership', 'Signing', 'SPF'],
      { ownership: 'proven', receiving: 'missing', signing: 'published', spf: 'published' },
      { status: 'verified', ownershipVerified: true, sending: true, receiving: false, direct: true, records: { ...PUBLISHED_RECORDS, Receiving: 'pending' } },
    ],
    [
      'everything but ownership: pending, and ownership gates sending and receiving',
      ['SPF', 'Receiving', 'Signing'],
      { ownership: 'missing', receiving: 'published', signing: 'published', spf: 'published' },
      { status: 'pending', ownershipVerified: false, sending: false, receiving: false, direct: false, records: { ...PUBLISHED_RECORDS, Ownership: 'pending' } },
    ],
  ];
  it.each(partial)('%s', async (_, kinds, checks, state) => {
    const { key } = await service.newAccount();
    const d = await createDomain(service, key);
    publish(d, kinds);
    const v = await verify(service, key, d.id);
    expect(v.checks).toEqual(checks);
    expect(stateOf(v)).toEqual(state);
    expect(stateOf((await call(service, 'GET', `/domains/${d.id}`, { key })).body)).toEqual(state);
  });

  it('reads DNS as DNS means it: SPF include among other mechanisms and records, MX host in upper case with a trailing dot', async () => {
    const { key } = await service.newAccount();
    const d = await createDomain(service, key);
    publish(d, ['Ownership', 'Signing']);
    dns.add(d.name, { type: 'TXT', data: 'google-site-verification=abc123' });
    dns.add(d.name, { type: 'TXT', data: `v=spf1 ip4:1.2.3.4 include:_spf.google.com include:${MAIL_HOST} -all` });
    dns.add(d.name, { type: 'MX', priority: 5, exchange: 'mx1.example.net' });
    dns.add(d.name, { type: 'MX', priority: 20, exchange: `${MAIL_HOST.toUpperCase()}.` });
    const v = await verify(service, key, d.id);
    expect(v.checks).toEqual(ALL_FOUND);
    expect(stateOf(v)).toEqual(FULL);
  });

  it('an SPF record without the include, or two SPF records, is missing', async () => {
    const { key } = await service.newAccount();
    const d = await createDomain(service, key);
    publish(d, ['Ownership', 'Signing']);
    dns.add(d.name, { type: 'TXT', data: 'v=spf1 include:_spf.google.com ~all' });
    let v = await verify(service, key, d.id);
    expect(v.checks?.spf).toBe('missing');
    expect(v.sending).toBe(false);
    dns.add(d.name, { type: 'TXT', data: recordOf(d, 'SPF').value });
    v = await verify(service, key, d.id);
    expect(v.checks?.spf).toBe('missing');
    expect(v.sending).toBe(false);
    dns.drop(d.name, 'TXT');
    dns.add(d.name, { type: 'TXT', data: recordOf(d, 'SPF').value });
    v = await verify(service, key, d.id);
    expect(v.checks?.spf).toBe('published');
    expect(v.sending).toBe(true);
  });

  it('a record published under another value is missing: another token, another key, another mail host', async () => {
    const { key } = await service.newAccount();
    const d = await createDomain(service, key);
    const other = await createDomain(service, key);
    // The other domain's token and key, at this domain's names.
    dns.add(recordOf(d, 'Ownership').name, { type: 'TXT', data: recordOf(other, 'Ownership').value });
    dns.add(recordOf(d, 'Signing').name, { type: 'TXT', data: chunks(recordOf(other, 'Signing').value) });
    dns.add(d.name, { type: 'MX', priority: 10, exchange: 'mx.elsewhere.example' });
    publish(d, ['SPF']);
    const v = await verify(service, key, d.id);
    expect(v.checks).toEqual({ ownership: 'missing', receiving: 'missing', signing: 'missing', spf: 'published' });
    expect(v.status).toBe('pending');
  });

  describe('withdrawal: a record found before and now gone withdraws what it granted', () => {
    async function fullyVerified() {
      const { key } = await service.newAccount();
      const d = await createDomain(service, key);
      publish(d);
      expect(stateOf(await verify(service, key, d.id))).toEqual(FULL);
      return { key, d };
    }

    it('the MX is dropped: receiving withdrawn, the rest stands; republished: receiving again', async () => {
      const { key, d } = await fullyVerified();
      unpublish(d, 'Receiving');
      const v = await verify(service, key, d.id);
      expect(v.checks).toEqual({ ...ALL_FOUND, receiving: 'missing' });
      expect(stateOf(v)).toEqual({ ...FULL, receiving: false, records: { ...PUBLISHED_RECORDS, Receiving: 'pending' } });
      expect(stateOf((await call(service, 'GET', `/domains/${d.id}`, { key })).body)).toEqual(stateOf(v));
      publish(d, ['Receiving']);
      expect(stateOf(await verify(service, key, d.id))).toEqual(FULL);
    });

    it('the DKIM record is dropped: sending withdrawn, no longer direct', async () => {
      const { key, d } = await fullyVerified();
      unpublish(d, 'Signing');
      const v = await verify(service, key, d.id);
      expect(v.checks).toEqual({ ...ALL_FOUND, signing: 'missing' });
      expect(stateOf(v)).toEqual({ ...FULL, sending: false, direct: false, records: { ...PUBLISHED_RECORDS, Signing: 'pending' } });
      expect(stateOf((await call(service, 'GET', `/domains/${d.id}`, { key })).body)).toEqual(stateOf(v));
    });

    it('the SPF record is dropped: sending withdrawn', async () => {
      const { key, d } = await fullyVerified();
      unpublish(d, 'SPF');
      const v = await verify(service, key, d.id);
      expect(v.checks).toEqual({ ...ALL_FOUND, spf: 'missing' });
      expect(stateOf(v)).toEqual({ ...FULL, sending: false, direct: false, records: { ...PUBLISHED_RECORDS, SPF: 'pending' } });
    });

    it('the ownership record is dropped: back to pending, losing sending and receiving; republished: verified again', async () => {
      const { key, d } = await fullyVerified();
      unpublish(d, 'Ownership');
      const v = await verify(service, key, d.id);
      expect(v.checks).toEqual({ ...ALL_FOUND, ownership: 'missing' });
      expect(stateOf(v)).toEqual({
        status: 'pending',
        ownershipVerified: false,
        sending: false,
        receiving: false,
        direct: false,
        records: { ...PUBLISHED_RECORDS, Ownership: 'pending' },
      });
      expect(stateOf((await call(service, 'GET', `/domains/${d.id}`, { key })).body)).toEqual(stateOf(v));
      publish(d, ['Ownership']);
      expect(stateOf(await verify(service, key, d.id))).toEqual(FULL);
    });

    it('everything is dropped: back to where it started', async () => {
      const { key, d } = await fullyVerified();
      for (const kind of KINDS) unpublish(d, kind);
      const v = await verify(service, key, d.id);
      expect(v.checks).toEqual(ALL_MISSING);
      expect(stateOf(v)).toEqual({ status: 'pending', ownershipVerified: false, sending: false, receiving: false, direct: false, records: PENDING_RECORDS });
    });
  });

  describe('a resolver that does not answer gives unknown, and unknown changes nothing stored', () => {
    it('a silent DNS server: every check unknown within the bound, the published records and flags stand', async () => {
      const { key } = await service.newAccount();
      const d = await createDomain(service, key);
      publish(d);
      const before = await verify(service, key, d.id);
      expect(stateOf(before)).toEqual(FULL);

      dns.silent = true;
      service.clock.advance(60_000);
      const started = performance.now();
      const res = await call(service, 'POST', `/domains/${d.id}/verify`, { key });
      const elapsed = performance.now() - started;
      expect(res.status).toBe(200);
      expect(elapsed).toBeLessThan(6000);
      expect(res.body.checks).toEqual(ALL_UNKNOWN);
      expect(stateOf(res.body)).toEqual(FULL);
      expect(res.body.lastCheckedAt).toBe(iso(service.clock.now()));

      dns.silent = false;
      const later = await call(service, 'GET', `/domains/${d.id}`, { key });
      expect(stateOf(later.body)).toEqual(FULL);
      expect(later.body.records).toEqual(before.records);
    });

    it('a silent DNS server on a new domain: unknown, still pending', async () => {
      const { key } = await service.newAccount();
      const d = await createDomain(service, key);
      dns.silent = true;
      const started = performance.now();
      const v = await verify(service, key, d.id);
      expect(performance.now() - started).toBeLessThan(6000);
      expect(v.checks).toEqual(ALL_UNKNOWN);
      expect(stateOf(v)).toEqual({ status: 'pending', ownershipVerified: false, sending: false, receiving: false, direct: false, records: PENDING_RECORDS });
    });

    it('SERVFAIL: unknown, the stored statuses stand', async () => {
      const { key } = await service.newAccount();
      const d = await createDomain(service, key);
      publish(d);
      expect(stateOf(await verify(service, key, d.id))).toEqual(FULL);
      for (const kind of KINDS) dns.fail(recordOf(d, kind).name);
      const v = await verify(service, key, d.id);
      expect(v.checks).toEqual(ALL_UNKNOWN);
      expect(stateOf(v)).toEqual(FULL);
      expect(stateOf((await call(service, 'GET', `/domains/${d.id}`, { key })).body)).toEqual(FULL);
    });

    it('SERVFAIL on one name only: that check unknown, the others read as usual', async () => {
      const { key } = await service.newAccount();
      const d = await createDomain(service, key);
      publish(d);
      await verify(service, key, d.id);
      dns.fail(recordOf(d, 'Ownership').name);
      unpublish(d, 'Receiving');
      const v = await verify(service, key, d.id);
      expect(v.checks).toEqual({ ...ALL_FOUND, ownership: 'unknown', receiving: 'missing' });
      expect(stateOf(v)).toEqual({ ...FULL, receiving: false, records: { ...PUBLISHED_RECORDS, Receiving: 'pending' } });
    });
  });
});

describe('sub-accounts have their own domains', () => {
  it('a domain created with X-Service-Account belongs to the sub-account, on every endpoint', async () => {
    const { key } = await service.newAccount();
    const sub = await call(service, 'POST', '/accounts', { key, body: { name: 'Sub one' } });
    expect(sub.status).toBe(201);
    const subId: string = sub.body.id;

    const parentDomain = await createDomain(service, key);
    const d = await createDomain(service, key, freshName('sub'), subId);

    const withHeader = await call(service, 'GET', '/domains', { key, account: subId });
    expect(withHeader.body.data.map((x: DomainBody) => x.id)).toEqual([d.id]);
    const without = await call(service, 'GET', '/domains', { key });
    expect(without.body.data.map((x: DomainBody) => x.id)).toEqual([parentDomain.id]);

    expect((await call(service, 'GET', `/domains/${d.id}`, { key, account: subId })).body).toEqual(d);
    expectError(await call(service, 'GET', `/domains/${d.id}`, { key }), 404, 'not_found');
    expectError(await call(service, 'GET', `/domains/${parentDomain.id}`, { key, account: subId }), 404, 'not_found');
    expectError(await call(service, 'POST', `/domains/${d.id}/verify`, { key }), 404, 'not_found');
    expectError(await call(service, 'DELETE', `/domains/${d.id}`, { key }), 404, 'not_found');

    // A key minted for the sub-account sees the same domain without the header.
    const subKey = await service.newKey(subId);
    expect((await call(service, 'GET', '/domains', { key: subKey })).body.data.map((x: DomainBody) => x.id)).toEqual([d.id]);

    publish(d);
    expect(stateOf(await verify(service, key, d.id, subId))).toEqual(FULL);
    // The parent cannot take the sub-account's verified name: it is claimed elsewhere.
    expectError(await call(service, 'POST', '/domains', { key, body: { name: d.name } }), 409, 'domain_unavailable');
    expectError(await call(service, 'POST', '/domains', { key, body: { name: d.name }, account: subId }), 409, 'domain_exists');

    expect((await call(service, 'DELETE', `/domains/${d.id}`, { key, account: subId })).status).toBe(204);
    expect((await call(service, 'GET', '/domains', { key, account: subId })).body.data).toEqual([]);
    expect((await call(service, 'GET', `/domains/${parentDomain.id}`, { key })).status).toBe(200);
  });
});

describe('with SMTP_RELAY_URL set: the relay holds the domain', () => {
  let relay: TestService;
  beforeAll(async () => {
    relay = await startService({ DNS_SERVERS: dns.address, SMTP_RELAY_URL: 'smtp://relay.example.net:587' });
  });
  afterAll(() => relay?.close());

  it('a new domain does not send: ownership is not proven yet', async () => {
    const { key } = await relay.newAccount();
    const d = await createDomain(relay, key);
    expect(stateOf(d)).toEqual({ status: 'pending', ownershipVerified: false, sending: false, receiving: false, direct: false, records: PENDING_RECORDS });
  });

  it('only ownership published: sending true through the relay, direct false', async () => {
    const { key } = await relay.newAccount();
    const d = await createDomain(relay, key);
    publish(d, ['Ownership']);
    const v = await verify(relay, key, d.id);
    expect(v.checks).toEqual({ ownership: 'proven', receiving: 'missing', signing: 'missing', spf: 'missing' });
    expect(stateOf(v)).toEqual({
      status: 'verified',
      ownershipVerified: true,
      sending: true,
      receiving: false,
      direct: false,
      records: { ...PENDING_RECORDS, Ownership: 'published' },
    });
    expect(stateOf((await call(relay, 'GET', `/domains/${d.id}`, { key })).body)).toEqual(stateOf(v));
  });

  it('everything published: sending directly; ownership dropped: sending withdrawn', async () => {
    const { key } = await relay.newAccount();
    const d = await createDomain(relay, key);
    publish(d);
    expect(stateOf(await verify(relay, key, d.id))).toEqual(FULL);
    unpublish(d, 'Signing');
    expect(stateOf(await verify(relay, key, d.id))).toEqual({ ...FULL, direct: false, records: { ...PUBLISHED_RECORDS, Signing: 'pending' } });
    unpublish(d, 'Ownership');
    expect(stateOf(await verify(relay, key, d.id))).toEqual({
      status: 'pending',
      ownershipVerified: false,
      sending: false,
      receiving: false,
      direct: false,
      records: { ...PUBLISHED_RECORDS, Ownership: 'pending', Signing: 'pending' },
    });
  });
});

describe('with SPF_DOMAIN set', () => {
  let spf: TestService;
  beforeAll(async () => {
    spf = await startService({ DNS_SERVERS: dns.address, SPF_DOMAIN: 'spf.mailstead.test' });
  });
  afterAll(() => spf?.close());

  it('the SPF record includes SPF_DOMAIN, the MX still names MAIL_HOSTNAME, and verify checks for that include', async () => {
    const { key } = await spf.newAccount();
    const d = await createDomain(spf, key);
    expect(recordOf(d, 'SPF').value).toBe('v=spf1 include:spf.mailstead.test ~all');
    expect(recordOf(d, 'Receiving').value).toBe(`10 ${MAIL_HOST}`);
    publish(d, ['Ownership', 'Signing', 'Receiving']);
    dns.add(d.name, { type: 'TXT', data: `v=spf1 include:${MAIL_HOST} ~all` });
    let v = await verify(spf, key, d.id);
    expect(v.checks?.spf).toBe('missing');
    expect(v.sending).toBe(false);
    dns.drop(d.name, 'TXT');
    publish(d, ['SPF']);
    v = await verify(spf, key, d.id);
    expect(v.checks).toEqual(ALL_FOUND);
    expect(stateOf(v)).toEqual(FULL);
  });
});

describe('with SECRET_KEY=off', () => {
  let off: TestService;
  beforeAll(async () => {
    off = await startService({ DNS_SERVERS: dns.address, SECRET_KEY: 'off' });
  });
  afterAll(() => off?.close());

  it('POST /domains answers 503 not_configured (a DKIM key cannot be kept) and stores nothing', async () => {
    const { key } = await off.newAccount();
    expectError(await call(off, 'POST', '/domains', { key, body: { name: freshName() } }), 503, 'not_configured');
    const list = await call(off, 'GET', '/domains', { key });
    expect(list.status).toBe(200);
    expect(list.body).toEqual({ data: [], nextCursor: null });
  });

  it('validation still comes first: a bad name is 422, not 503', async () => {
    const { key } = await off.newAccount();
    expectError(await call(off, 'POST', '/domains', { key, body: { name: 'localhost' } }), 422, 'invalid_request');
  });
});

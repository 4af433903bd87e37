import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../db/client.js';
import { accounts, domainKeys, domains, webhookEndpoints } from '../db/schema/index.js';
import { findAccount } from '../server/core/accounts.js';
import type { RequestContext } from '../server/core/context.js';
import { createDomain } from '../server/core/domains.js';
import { SCOPES } from '../server/core/scopes.js';
import { createWebhook } from '../server/core/webhooks.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { expectError } from './helpers/sending.js';
import { sendInHalves } from './helpers/split-body.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * A request that awaits before it writes (a domain's DKIM key generated, a webhook URL's host resolved) for a
 * sub-account its parent deletes meanwhile: 404 account_not_found, as for a request that came after the deletion,
 * and nothing written; never a 500 from a row failing its foreign key. (POST /database: tests/database-api.test.ts.)
 */

let dns: TestDnsServer;
let service: TestService;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  service = await startService({ DNS_SERVERS: dns.address });
  dns.add('hooks.meanwhile.test', { type: 'A', address: '93.184.216.34' });
});
afterAll(async () => {
  await service?.close();
  await dns?.stop();
});

/** A sub-account, and the context of its parent's key acting for it (X-Service-Account). */
async function subAccount(): Promise<{ id: string; ctx: RequestContext; key: string }> {
  const { account, key } = await service.newAccount();
  const res = await service.api('POST', '/accounts', { key, body: { name: 'Shop' } });
  expect(res.status).toBe(201);
  const id = res.body.id as string;
  return { id, key, ctx: { keyId: 'parent-key', keyAccount: account, scopes: SCOPES, account: (await findAccount(service.deps.db, id))!, viaHeader: true } };
}

/** `db`, whose transactions begin only once `until` has resolved (the reads before them run at once). */
function transactionsAfter(db: Db, until: Promise<void>): Db {
  return new Proxy(db, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop === 'transaction') return async (...args: Parameters<Db['transaction']>) => (await until, target.transaction(...args));
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

const deleteAccount = async (id: string) => await service.deps.db.delete(accounts).where(eq(accounts.id, id));

describe('the acting account deleted while the request awaited', () => {
  it('POST /domains (the DKIM key being generated)', async () => {
    const sub = await subAccount();
    // The domain's transaction, which comes after the key's generation, begins once the deletion has ended, on either
    // engine (the key's generation alone is not always slower than the deletion).
    let deleted!: () => void;
    const deletion = new Promise<void>((resolve) => {
      deleted = resolve;
    });
    const pending = createDomain({
      deps: { ...service.deps, db: transactionsAfter(service.deps.db, deletion) },
      ctx: sub.ctx,
      input: { name: 'meanwhile.example' },
    });
    await deleteAccount(sub.id);
    deleted();
    await expect(pending).rejects.toMatchObject({ code: 'account_not_found', status: 404 });
    expect(await service.deps.db.select().from(domains).where(eq(domains.accountId, sub.id))).toEqual([]);
    expect(await service.deps.db.select().from(domainKeys).where(eq(domainKeys.accountId, sub.id))).toEqual([]);
  });

  it('POST /webhooks (the URL’s host being resolved)', async () => {
    const sub = await subAccount();
    // The answer waits until the deletion has ended, on either engine.
    const lookup = dns.hold('hooks.meanwhile.test');
    const pending = createWebhook({ deps: service.deps, ctx: sub.ctx, input: { url: 'https://hooks.meanwhile.test/in', events: ['email.delivered'] } });
    await lookup.asked;
    await deleteAccount(sub.id);
    lookup.release();
    await expect(pending).rejects.toMatchObject({ code: 'account_not_found', status: 404 });
    expect(await service.deps.db.select().from(webhookEndpoints).where(eq(webhookEndpoints.accountId, sub.id))).toEqual([]);
  });

  it('over HTTP, the same answer as a request that came after the deletion', async () => {
    const sub = await subAccount();
    await deleteAccount(sub.id);
    expectError(await service.api('POST', '/domains', { key: sub.key, account: sub.id, body: { name: 'after.example' } }), 404, 'account_not_found');
  });
});

describe('the sub-account of X-Service-Account deleted while the body arrived', () => {
  const cases: [string, string, Record<string, string>, unknown][] = [
    ['POST /keys', '/keys', {}, { name: 'minted meanwhile' }],
    ['POST /suppressions', '/suppressions', {}, { address: 'gone@example.net' }],
    [
      'POST /emails with an Idempotency-Key',
      '/emails',
      { 'idempotency-key': 'order-1' },
      { from: 'billing@shop.example', to: 'customer@example.net', sandbox: true, template: { name: 'receipt', total: '$1' } },
    ],
  ];
  it.each(cases)('%s: 404 account_not_found, nothing written', async (_name, path, extra, body) => {
    const sub = await subAccount();
    const headers = { authorization: `Bearer ${sub.key}`, 'x-service-account': sub.id, 'content-type': 'application/json', ...extra };
    const res = await sendInHalves(service.base, { method: 'POST', path, headers, body: JSON.stringify(body) }, async () => {
      expect((await service.api('DELETE', `/accounts/${sub.id}`, { key: sub.key })).status).toBe(204);
    });
    expect({ status: res.status, body: JSON.parse(res.text) }).toEqual({
      status: 404,
      body: { error: { code: 'account_not_found', message: expect.any(String) } },
    });
    expect(await findAccount(service.deps.db, sub.id)).toBeUndefined();
  });
});

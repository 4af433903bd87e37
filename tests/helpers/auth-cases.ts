import { expect, it } from 'vitest';
import { SCOPES, type Scope } from '../../server/core/scopes.js';
import type { TestService } from './service.js';

export interface EndpointUnderTest {
  method: string;
  /** Path relative to /api/v1, or a function building it for a fresh account (for ids of the caller's objects). */
  path: string | ((ctx: { service: TestService; accountId: string; key: string }) => string | Promise<string>);
  scope: Scope;
  /** A second scope that opens the endpoint too (the template catalog's `emails:send`): a key lacking the scope lacks it too. */
  alsoScope?: Scope;
  body?: unknown;
}

/**
 * The standard failures every endpoint shares (docs/api/contract.md, Endpoints): no key, another scheme, an unknown or malformed
 * key, a revoked key (401 invalid_key); a key without the endpoint's scope (403 insufficient_scope); a foreign or
 * unknown X-Service-Account (404 account_not_found, identical for both); a sub-account's key naming a sibling
 * sub-account, its own account or its parent (404 account_not_found: sub-accounts have no sub-accounts).
 */
export function runCommonAuthTests(getService: () => TestService, ep: EndpointUnderTest): void {
  const setup = async () => {
    const service = getService();
    const { account, key } = await service.newAccount({ name: 'Auth case' });
    const path = typeof ep.path === 'string' ? ep.path : await ep.path({ service, accountId: account.id, key });
    return { service, account, key, path };
  };
  const call = (service: TestService, path: string, opts: { key?: string; headers?: Record<string, string>; account?: string }) =>
    service.api(ep.method, path, { ...opts, body: ep.body });
  const expectError = (res: { status: number; body: any }, status: number, code: string) => {
    expect(res.status).toBe(status);
    expect(res.body).toEqual({ error: { code, message: expect.any(String) } });
  };

  it(`${ep.method} ${String(ep.path)}: no key is 401 invalid_key`, async () => {
    const { service, path } = await setup();
    expectError(await call(service, path, {}), 401, 'invalid_key');
  });

  it(`${ep.method} ${String(ep.path)}: a scheme other than Bearer is 401 invalid_key`, async () => {
    const { service, path, key } = await setup();
    expectError(await call(service, path, { headers: { authorization: `Basic ${Buffer.from(`${key}:`).toString('base64')}` } }), 401, 'invalid_key');
    expectError(await call(service, path, { headers: { authorization: `Token ${key}` } }), 401, 'invalid_key');
    expectError(await call(service, path, { headers: { authorization: key } }), 401, 'invalid_key');
  });

  it(`${ep.method} ${String(ep.path)}: an unknown or malformed key is 401 invalid_key`, async () => {
    const { service, path, key } = await setup();
    expectError(await call(service, path, { key: `ms_${'A'.repeat(40)}` }), 401, 'invalid_key');
    expectError(await call(service, path, { key: `${key}x` }), 401, 'invalid_key');
    expectError(await call(service, path, { key: 'ms_short' }), 401, 'invalid_key');
  });

  it(`${ep.method} ${String(ep.path)}: a revoked key is 401 invalid_key at once`, async () => {
    const { service, path, account } = await setup();
    const doomed = await service.newKey(account.id);
    const list = await service.api('GET', '/keys?limit=1', { key: doomed });
    expect(list.status).toBe(200);
    const id = list.body.data[0].id as string;
    expect((await service.api('DELETE', `/keys/${id}`, { key: doomed })).status).toBe(204);
    expectError(await call(service, path, { key: doomed }), 401, 'invalid_key');
  });

  it(`${ep.method} ${String(ep.path)}: a key without ${ep.scope} is 403 insufficient_scope`, async () => {
    const { service, path, account } = await setup();
    const lacking = await service.newKey(
      account.id,
      SCOPES.filter((s) => s !== ep.scope && s !== ep.alsoScope),
    );
    expectError(await call(service, path, { key: lacking }), 403, 'insufficient_scope');
  });

  it(`${ep.method} ${String(ep.path)}: a foreign or unknown X-Service-Account is 404 account_not_found, identically`, async () => {
    const { service, path, key } = await setup();
    const other = await service.newAccount({ name: 'Someone else' });
    const foreignSub = await service.api('POST', '/accounts', { key: other.key, body: { name: 'Their sub' } });
    expect(foreignSub.status).toBe(201);
    const foreign = await call(service, path, { key, account: foreignSub.body.id });
    const unknown = await call(service, path, { key, account: '01a00000-0000-7000-8000-000000000000' });
    const notUuid = await call(service, path, { key, account: 'nope' });
    expectError(foreign, 404, 'account_not_found');
    expectError(unknown, 404, 'account_not_found');
    expectError(notUuid, 404, 'account_not_found');
    expect(foreign.body.error.message.replace(foreignSub.body.id, 'ID')).toBe(unknown.body.error.message.replace('01a00000-0000-7000-8000-000000000000', 'ID'));
  });

  it(`${ep.method} ${String(ep.path)}: a sub-account's key naming a sibling sub-account (or itself, or its parent) is 404 account_not_found`, async () => {
    const { service, path, account, key } = await setup();
    const sub = async (name: string) => {
      const res = await service.api('POST', '/accounts', { key, body: { name } });
      expect(res.status).toBe(201);
      return res.body.id as string;
    };
    const own = await sub('Sub with a key');
    const sibling = await sub('Its sibling');
    const minted = await service.api('POST', '/keys', { key, account: own, body: { name: 'sub key' } });
    expect(minted.status).toBe(201);
    const subKey = minted.body.key as string;
    expectError(await call(service, path, { key: subKey, account: sibling }), 404, 'account_not_found');
    expectError(await call(service, path, { key: subKey, account: own }), 404, 'account_not_found');
    expectError(await call(service, path, { key: subKey, account: account.id }), 404, 'account_not_found');
  });
}

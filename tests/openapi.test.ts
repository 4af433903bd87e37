import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WEBHOOK_EVENT_TYPES } from '../db/schema/index.js';
import { API_BASE, createApp } from '../server/app/http-app.js';
import { SCOPES, type Scope } from '../server/core/scopes.js';
import { ERROR_STATUS } from '../server/shared/errors.js';
import { LISTS } from '../server/api/http/paging.js';
import { apiDocument, documentedPath, expectDocumented } from './helpers/openapi.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * The API document: OpenAPI 3.1 at GET /api/v1/openapi.json, served without a key, generated from
 * the schemas the routes validate with. It names every route the app serves and nothing else, each operation's scope
 * is the one the route's guard asks for, and it is a valid OpenAPI 3.1 document.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(async () => {
  await service.close();
});

type Json = Record<string, any>;
const METHODS = ['get', 'post', 'delete', 'put', 'patch'];

/** Every operation of the document: method, path template, and the operation object. */
const operations = (): { method: string; path: string; op: Json }[] =>
  Object.entries(apiDocument.paths as Record<string, Json>).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => METHODS.includes(method))
      .map(([method, op]) => ({ method: method.toUpperCase(), path, op: op as Json })),
  );

/**
 * Routes outside /api/v1, which the API document does not describe (docs/api/contract.md does not list them): the
 * operator's, and the API reference (an HTML page of this document).
 */
const OUTSIDE_THE_API = new Set(['GET /healthz', 'GET /metrics', 'GET /docs', 'GET /docs/']);

describe('GET /api/v1/openapi.json and GET /api/v1', () => {
  it('serves the document without a key, as JSON', async () => {
    const res = await fetch(`${service.base}/openapi.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await res.json()).toEqual(apiDocument);
  });

  it("an index at /api/v1 (and /api/v1/, the document's `/`), without a key, links the document", async () => {
    for (const path of ['', '/']) {
      const res = await service.api('GET', path);
      expect(res.status).toBe(200);
      expectDocumented(res);
      expect(res.body).toEqual({ name: 'Mailstead API', version: 'v1', links: { openapi: `${API_BASE}/openapi.json` } });
    }
    const linked = await fetch(`${service.url}${API_BASE}/openapi.json`);
    expect(linked.status).toBe(200);
    expect(((await linked.json()) as { openapi: string }).openapi).toBe('3.1.0');
  });

  it('is a valid OpenAPI 3.1 document, every $ref resolving', async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(apiDocument));
    expect(result.errors ?? [], JSON.stringify(result.errors)).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
    const refs = JSON.stringify(apiDocument).match(/"\$ref":"[^"]+"/g) ?? [];
    expect(refs.length).toBeGreaterThan(20);
    for (const ref of new Set(refs)) {
      const pointer = JSON.parse(`{${ref}}`).$ref as string;
      expect(pointer.startsWith('#/components/schemas/'), pointer).toBe(true);
      expect(apiDocument.components.schemas[pointer.slice('#/components/schemas/'.length)], pointer).toBeDefined();
    }
  });
});

describe('the document names every route the app serves, and only those', () => {
  // The dashboard (HTML pages under /dashboard, tests/dashboard-*.test.ts) is not part of the API.
  const served = () => [
    ...new Set(
      createApp(service.deps)
        .routes.filter((r) => r.method !== 'ALL' && !r.path.startsWith('/dashboard'))
        .map((r) => `${r.method} ${r.path}`),
    ),
  ];
  const asTemplate = (path: string) => path.replace(/:([^/]+)/g, '{$1}');

  it('every route under /api/v1 is an operation of the document', () => {
    const documented = new Set(operations().map(({ method, path }) => `${method} ${path}`));
    const missing = served()
      .filter((route) => !OUTSIDE_THE_API.has(route))
      .map((route) => {
        const [method, path] = route.split(' ') as [string, string];
        expect(path === API_BASE || path.startsWith(`${API_BASE}/`), `${route} is outside ${API_BASE} and not known to be`).toBe(true);
        return `${method} ${asTemplate(path.slice(API_BASE.length)) || '/'}`;
      })
      .filter((route) => !documented.has(route));
    expect(missing).toEqual([]);
  });

  it('every operation of the document is a route the app serves', () => {
    const routes = new Set(
      served()
        .map((route) => route.replace(API_BASE, '').replace(/^(\w+) $/, '$1 /'))
        .map(asTemplate),
    );
    const extra = operations()
      .map(({ method, path }) => `${method} ${path}`)
      .filter((op) => !routes.has(op));
    expect(extra).toEqual([]);
    expect(operations().length).toBeGreaterThan(30);
  });

  it('every webhook event type has its post in the webhooks section, and the section names no other', () => {
    expect(Object.keys(apiDocument.webhooks).sort()).toEqual([...WEBHOOK_EVENT_TYPES].sort());
  });
});

describe("each operation's documented scope is the one the route asks for", () => {
  /** A concrete request for an operation: ids nobody has, the receipt template, an address. */
  const concrete = (path: string) =>
    path.replace('{id}', '01a00000-0000-7000-8000-000000000000').replace('{name}', 'receipt').replace('{address}', 'ann%40example.net');

  it.each(operations().map(({ method, path, op }) => [`${method} ${path}`, method, path, op] as const))('%s', async (_label, method, path, op) => {
    const security = op.security as Record<string, string[]>[];
    if (security.length === 0) {
      const res = await service.api(method, concrete(path));
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return;
    }
    // One scope, or (the template list and render) two alternatives: each requirement names one scope.
    expect(security.length).toBeGreaterThanOrEqual(1);
    expect(security.length).toBeLessThanOrEqual(2);
    const accepted = security.map((requirement) => {
      expect(Object.keys(requirement)).toEqual(['apiKey']);
      expect(requirement.apiKey).toHaveLength(1);
      return requirement.apiKey![0] as Scope;
    });
    for (const scope of accepted) expect(SCOPES).toContain(scope);
    expect(op.description).toContain(`Scope: \`${accepted[0]}\``);
    if (accepted[1]) expect(op.description).toContain(`(or \`${accepted[1]}\``);
    const { account } = await service.newAccount({ name: `Scope ${accepted.join(' ')}` });

    const lacking = await service.api(method, concrete(path), {
      key: await service.newKey(
        account.id,
        SCOPES.filter((s) => !accepted.includes(s)),
      ),
    });
    expect(lacking.status, JSON.stringify(lacking.body)).toBe(403);
    expect(lacking.body.error.code).toBe('insufficient_scope');
    expectDocumented(lacking);

    for (const scope of accepted) {
      const holding = await service.api(method, concrete(path), { key: await service.newKey(account.id, [scope]) });
      expect(holding.body?.error?.code, `${scope}: ${JSON.stringify(holding.body)}`).not.toBe('insufficient_scope');
      expect(holding.status).not.toBe(401);
      expectDocumented(holding);
    }

    const noKey = await service.api(method, concrete(path));
    expect(noKey.status).toBe(401);
    expectDocumented(noKey);
  });
});

describe('error responses', () => {
  it('every documented error code is one of docs/api/contract.md (or the two docs/api/behaviour.md adds) at its status, lists aside', () => {
    const listOverrides = new Set(
      Object.values(LISTS).flatMap((l) => [`${l.badLimit.status} ${l.badLimit.code}`, `${l.badCursor.status} ${l.badCursor.code}`]),
    );
    for (const { method, path, op } of operations()) {
      for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
        if (Number(status) < 400) continue;
        const codes = response.content['application/json'].schema.properties.error.properties.code.enum as (keyof typeof ERROR_STATUS)[];
        expect(codes.length, `${method} ${path} ${status}`).toBeGreaterThan(0);
        for (const code of codes) {
          const usual = ERROR_STATUS[code] === Number(status) || listOverrides.has(`${status} ${code}`);
          expect(usual, `${method} ${path}: ${code} at ${status}`).toBe(true);
          expect(response.description, `${method} ${path} ${status}`).toContain(`\`${code}\``);
        }
      }
    }
  });

  it('a keyed operation documents the standard failures; the two public ones document none of them', () => {
    for (const { method, path, op } of operations()) {
      const statuses = Object.keys(op.responses);
      if ((op.security as unknown[]).length === 0) expect(statuses, `${method} ${path}`).toEqual(['200', '500']);
      else for (const status of ['401', '403', '404', '429', '500']) expect(statuses, `${method} ${path}`).toContain(status);
    }
  });

  it('an unknown path is not documented; a path with an id is matched to its template', () => {
    expect(documentedPath('/nope')).toBeUndefined();
    expect(documentedPath('/database/test')).toBe('/database/test');
    expect(documentedPath('/domains/01a00000-0000-7000-8000-000000000000/verify')).toBe('/domains/{id}/verify');
    expect(documentedPath('/suppressions/ann%40example.net')).toBe('/suppressions/{address}');
    expect(documentedPath('/emails?limit=2')).toBe('/emails');
  });
});

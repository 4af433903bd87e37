import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApiError } from '../server/shared/errors.js';
import { jsonBody } from '../server/api/http/body.js';
import { MAX_JSON_DEPTH, parseInput } from '../server/api/http/validate.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * Any JSON body answers 400 or 422, never 500, in time linear in its size. Nesting is limited to
 * MAX_JSON_DEPTH (32) levels, the body object being level 1: the text is scanned before JSON.parse sees it, and
 * parseInput's one iterative pass (which also refuses `__proto__` keys) holds the same limit for any parsed value.
 */

let service: TestService;
let key: string;
let subId: string;

beforeAll(async () => {
  service = await startService();
  key = (await service.newAccount({ name: 'Depth' })).key;
  const sub = await service.api('POST', '/accounts', { key, body: { name: 'Deep sub' } });
  expect(sub.status).toBe(201);
  subId = sub.body.id;
});
afterAll(async () => {
  await service?.close();
});

/** JSON text of `levels` nested containers: objects `{"a":...}`, arrays `[...]`, or both alternating. */
function nest(levels: number, kind: 'object' | 'array' | 'mixed' = 'object'): string {
  if (kind === 'object') return `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;
  if (kind === 'array') return `${'['.repeat(levels)}${']'.repeat(levels)}`;
  const pairs = Math.floor(levels / 2);
  return `${'[{"k":'.repeat(pairs)}1${'}]'.repeat(pairs)}`;
}

/** The path the refusal names for a field nested past the limit: the field, then one segment per level down to 32. */
const pathTo = (field: string[], segment: string) => [...field, ...Array<string>(MAX_JSON_DEPTH - field.length).fill(segment)].join('.');

const post = (path: string, rawBody: string, headers: Record<string, string> = {}) =>
  service.api('POST', path, { key, rawBody, headers: { 'content-type': 'application/json', ...headers } });

function expectTooDeep(res: { status: number; body: any }, path: string): void {
  expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(422);
  expect(res.body).toEqual({ error: { code: 'invalid_request', message: `${path}: is nested more than 32 levels deep` } });
}

describe('10,000 levels are 422 invalid_request naming where, on every endpoint that takes a body', () => {
  const A = (n: number) => Array<string>(n).fill('a');
  const cases: [label: string, path: string | (() => string), body: string, where: string][] = [
    ['POST /keys, in name (objects)', '/keys', `{"name":${nest(10_000)}}`, pathTo(['name'], 'a')],
    [
      'POST /keys, in scopes after a valid entry (arrays)',
      '/keys',
      `{"name":"ci","scopes":["keys:read",${nest(10_000, 'array')}]}`,
      pathTo(['scopes', '1'], '0'),
    ],
    ['POST /keys, in an unknown field', '/keys', `{"name":"ci","extra":${nest(10_000, 'array')}}`, pathTo(['extra'], '0')],
    [
      'POST /accounts, in name (arrays and objects)',
      '/accounts',
      `{"name":${nest(10_000, 'mixed')}}`,
      ['name', ...Array.from({ length: 31 }, (_, i) => (i % 2 === 0 ? '0' : 'k'))].join('.'),
    ],
    ['POST /accounts/{id}/suspend, in reason', () => `/accounts/${subId}/suspend`, `{"suspended":true,"reason":${nest(10_000)}}`, pathTo(['reason'], 'a')],
    ['POST /domains, in name', '/domains', `{"name":${nest(10_000)}}`, pathTo(['name'], 'a')],
    ['POST /suppressions, in address', '/suppressions', `{"address":${nest(10_000, 'array')}}`, pathTo(['address'], '0')],
    [
      'POST /emails, in to',
      '/emails',
      `{"from":"a@example.com","to":${nest(10_000, 'array')},"template":{"name":"receipt","total":"$1"}}`,
      pathTo(['to'], '0'),
    ],
    [
      'POST /emails, in a template variable',
      '/emails',
      `{"from":"a@example.com","to":"b@example.net","template":{"name":"receipt","total":${nest(10_000)}}}`,
      pathTo(['template', 'total'], 'a'),
    ],
    [
      'POST /emails, in tags',
      '/emails',
      `{"from":"a@example.com","to":"b@example.net","template":{"name":"receipt","total":"$1"},"tags":{"t":${nest(10_000)}}}`,
      pathTo(['tags', 't'], 'a'),
    ],
    ['a key with escapes is named decoded', '/keys', `{"na\\u006de":${nest(10_000)}}`, ['name', ...A(31)].join('.')],
  ];
  it.each(cases)('%s', async (_label, path, body, where) => {
    expectTooDeep(await post(typeof path === 'string' ? path : path(), body), where);
  });

  it('the same with an Idempotency-Key on POST /emails (the body is fingerprinted first, then refused)', async () => {
    const res = await post('/emails', `{"from":"a@example.com","to":${nest(10_000, 'array')},"template":{"name":"receipt","total":"$1"}}`, {
      'Idempotency-Key': 'deep-1',
    });
    expectTooDeep(res, pathTo(['to'], '0'));
  });

  it('deep JSON that does not parse is refused as too deep or as not JSON, never 500', async () => {
    for (const body of [`{"name":${'['.repeat(10_000)}`, `${'['.repeat(10_000)}}`, `{"name":${nest(10_000)}`]) {
      const res = await post('/keys', body);
      expect([400, 422]).toContain(res.status);
      expect(res.body).toEqual({ error: { code: res.status === 400 ? 'invalid_json' : 'invalid_request', message: expect.any(String) } });
    }
  });
});

describe('the limit is exactly 32 levels', () => {
  it('a body nested 32 levels deep is validated as usual', async () => {
    // The body object is level 1; name holds 31 more.
    const res = await post('/keys', `{"name":${nest(31)}}`);
    expect(res.status).toBe(422);
    expect(res.body.error.message).toBe('name: must be a string');
  });

  it('33 levels are refused', async () => {
    expectTooDeep(await post('/keys', `{"name":${nest(32)}}`), pathTo(['name'], 'a'));
  });

  it('brackets inside strings are not nesting', async () => {
    const res = await post('/keys', JSON.stringify({ name: `"[{\\${'['.repeat(10_000)}` }));
    expect(res.status).toBe(422);
    expect(res.body.error.message).toBe('name: must be 1 to 60 characters');
  });
});

describe('time linear in the size of the body', () => {
  it('6,000 levels are answered quickly: 20 requests well within 2 s', async () => {
    const body = `{"name":${nest(6_000)}}`;
    const started = performance.now();
    for (let i = 0; i < 20; i++) {
      const res = await post('/keys', body);
      expect([res.status, res.body.error.code]).toEqual([422, 'invalid_request']);
    }
    // A walk quadratic in depth took 0.2 to 0.4 s for each.
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it('a body of nearly 1 MiB of nothing but nesting is refused without parsing it: 8 requests within 1.5 s', async () => {
    const frame = '{"name":}';
    const levels = Math.floor((1024 * 1024 - 1 - frame.length) / 2);
    const body = `{"name":${nest(levels, 'array')}}`;
    expect(Buffer.byteLength(body)).toBeLessThan(1024 * 1024);
    const started = performance.now();
    for (let i = 0; i < 8; i++) {
      const res = await post('/keys', body);
      expect([res.status, res.body.error.code]).toEqual([422, 'invalid_request']);
    }
    // JSON.parse alone takes about a third of a second to build it.
    expect(performance.now() - started).toBeLessThan(1_500);
  });
});

describe('parseInput holds the same limit for any parsed value, in one iterative pass', () => {
  /** A value `levels` containers deep, built without JSON. */
  function deepValue(levels: number): unknown {
    let value: unknown = 'leaf';
    for (let i = 0; i < levels; i++) value = { a: value };
    return value;
  }
  const schema = z.object({ name: z.string() });

  function refusal(fn: () => unknown): ApiError {
    try {
      fn();
    } catch (err) {
      if (err instanceof ApiError) return err;
      throw err;
    }
    throw new Error('expected a refusal');
  }

  it('10,000 levels are 422 naming the field, not a stack overflow', () => {
    const err = refusal(() => parseInput(schema, { name: deepValue(10_000) }));
    expect([err.status, err.code, err.message]).toEqual([422, 'invalid_request', `${pathTo(['name'], 'a')}: is nested more than 32 levels deep`]);
  });

  it('32 levels pass the walk and reach the schema; 33 do not', () => {
    expect(refusal(() => parseInput(schema, { name: deepValue(31) })).message).toBe('name: must be a string');
    expect(refusal(() => parseInput(schema, { name: deepValue(32) })).message).toBe(`${pathTo(['name'], 'a')}: is nested more than 32 levels deep`);
  });

  it('a __proto__ key deep down is still refused by name, and found in the same pass', () => {
    const value = JSON.parse(`{"name":"x","t":{"a":{"b":[1,{"__proto__":{}}]}}}`) as unknown;
    const err = refusal(() => parseInput(schema, value));
    expect([err.status, err.code, err.message]).toEqual([422, 'invalid_request', 't.a.b.1.__proto__: is not an allowed field name']);
  });

  it('jsonBody refuses the text before JSON.parse builds it', () => {
    const err = refusal(() => jsonBody(Buffer.from(`{"name":${nest(500_000, 'array')}}`)));
    expect([err.status, err.code]).toEqual([422, 'invalid_request']);
  });
});

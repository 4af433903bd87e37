import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { templateVariablesInput } from '../server/core/send-request.js';
import { OPERATIONS } from '../server/api/openapi/operations.js';
import { INVALID_INPUTS } from '../server/api/openapi/error-examples.js';
import { MORE_REQUEST_EXAMPLES, REQUEST_EXAMPLES } from '../server/api/openapi/examples.js';
import { renderWithSourceBody } from '../server/core/template-input.js';
import { SCOPES } from '../server/core/scopes.js';
import { parseInput } from '../server/api/http/validate.js';
import { apiDocument, expectDocumented } from './helpers/openapi.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * The API document's examples (server/api/openapi/examples.ts): every request body and every response with a body has
 * one (each error status one per code it lists), each validates against its own schema in the document, each request
 * example passes the route's own validation, and ids are the service's (UUIDv7).
 */

type Json = Record<string, any>;

const DOC = 'https://mailstead.test/api/v1/openapi.json';
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
ajv.addSchema(apiDocument, DOC);

const pointer = (segments: string[]) => `${DOC}#/${segments.map((s) => s.replace(/~/g, '~0').replace(/\//g, '~1')).join('/')}`;

const METHODS = ['get', 'post', 'delete', 'put', 'patch'];

/** Every operation of the document, its `paths` and its `webhooks`, with where it sits. */
const operations = (): { label: string; at: string[]; op: Json; webhook: boolean }[] =>
  (['paths', 'webhooks'] as const).flatMap((section) =>
    Object.entries(apiDocument[section] as Record<string, Json>).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([method]) => METHODS.includes(method))
        .map(([method, op]) => ({
          label: `${section === 'webhooks' ? 'webhook ' : ''}${method.toUpperCase()} ${path}`,
          at: [section, path, method],
          op,
          webhook: section === 'webhooks',
        })),
    ),
  );

/** Each example of a media type: its name and value. */
const examplesOf = (media: Json): [string, unknown][] => [
  ...(media.example !== undefined ? [['example', media.example] as [string, unknown]] : []),
  ...Object.entries((media.examples ?? {}) as Record<string, Json>).map(([name, e]) => [name, e.value] as [string, unknown]),
];

/** Every media type of the document that carries a body: where it is, and the media type object. */
const bodies = () =>
  operations().flatMap(({ label, at, op }) => [
    ...Object.entries((op.requestBody?.content ?? {}) as Record<string, Json>).map(([type, media]) => ({
      label: `${label} request ${type}`,
      at: [...at, 'requestBody', 'content', type],
      media,
      status: null as string | null,
    })),
    ...Object.entries(op.responses as Record<string, Json>).flatMap(([status, response]) =>
      Object.entries((response.content ?? {}) as Record<string, Json>).map(([type, media]) => ({
        label: `${label} ${status} ${type}`,
        at: [...at, 'responses', status, 'content', type],
        media,
        status,
      })),
    ),
  ]);

describe('every operation has examples', () => {
  it('a request body has an example', () => {
    const missing = operations()
      .filter(({ op }) => op.requestBody)
      .flatMap(({ label, op }) =>
        Object.entries(op.requestBody.content as Record<string, Json>)
          .filter(([, media]) => examplesOf(media).length === 0)
          .map(([type]) => `${label} ${type}`),
      );
    expect(missing).toEqual([]);
    expect(operations().filter(({ op }) => op.requestBody).length).toBeGreaterThan(10);
  });

  it('every documented response has an example, except one with no body (a 204, or what a webhook receiver answers)', () => {
    const missing: string[] = [];
    for (const { label, op, webhook } of operations()) {
      for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
        if (!response.content) {
          if (status !== '204' && !webhook) missing.push(`${label} ${status}: no body and not a 204`);
          continue;
        }
        for (const [type, media] of Object.entries(response.content as Record<string, Json>)) {
          if (examplesOf(media).length === 0) missing.push(`${label} ${status} ${type}`);
        }
      }
    }
    expect(missing).toEqual([]);
  });

  it('an error status has an example of each code it lists, named after it (more as `<code>: <what>`) and answering it', () => {
    const wrong: string[] = [];
    for (const { label, op, webhook } of operations()) {
      if (webhook) continue;
      for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
        if (Number(status) < 400) continue;
        const media = response.content['application/json'] as Json;
        const codes = media.schema.properties.error.properties.code.enum as string[];
        const examples = (media.examples ?? {}) as Record<string, Json>;
        for (const code of codes) if (!examples[code]) wrong.push(`${label} ${status}: no example named ${code}`);
        for (const [name, e] of Object.entries(examples)) {
          const code = name.split(':')[0]!;
          if (!codes.includes(code)) wrong.push(`${label} ${status}: example ${name} is of no code listed here`);
          if (e.value?.error?.code !== code) wrong.push(`${label} ${status}: example ${name} answers ${e.value?.error?.code}`);
          if (typeof e.value?.error?.message !== 'string' || e.value.error.message.length < 10) wrong.push(`${label} ${status} ${name}: no real message`);
        }
      }
    }
    expect(wrong).toEqual([]);
  });
});

describe('every example is true to the document and the service', () => {
  it('validates against its own schema', () => {
    const invalid: string[] = [];
    let checked = 0;
    for (const { label, at, media } of bodies()) {
      const validate = ajv.compile({ $ref: pointer([...at, 'schema']) });
      for (const [name, value] of examplesOf(media)) {
        checked++;
        if (!validate(value)) invalid.push(`${label} ${name}: ${ajv.errorsText(validate.errors, { dataVar: 'example' })}`);
      }
    }
    expect(invalid).toEqual([]);
    expect(checked).toBeGreaterThan(250);
  });

  it("each request example passes the route's own validation", () => {
    const refused: string[] = [];
    const check = (label: string, schema: Parameters<typeof parseInput>[0], value: unknown) => {
      try {
        parseInput(schema, value);
      } catch (err) {
        refused.push(`${label}: ${(err as Error).message}`);
      }
    };
    for (const op of OPERATIONS) {
      if (!op.body) continue;
      // The render route validates with the named template's rules (the examples render `receipt`).
      check(op.operationId, op.operationId === 'renderTemplate' ? templateVariablesInput('receipt') : op.body, REQUEST_EXAMPLES[op.operationId]);
      for (const [name, { value }] of Object.entries(MORE_REQUEST_EXAMPLES[op.operationId] ?? {})) {
        // The route reads a body whose `source` is an object as an unsaved source; other bodies as variables.
        const withSource = typeof (value as { source?: unknown }).source === 'object';
        check(`${op.operationId} ${name}`, withSource ? renderWithSourceBody : op.body, value);
      }
    }
    expect(refused).toEqual([]);
    expect(Object.keys(MORE_REQUEST_EXAMPLES)).toEqual(['renderTemplate']);
  });

  it("ids are the service's (UUIDv7, their time from 2026), times ISO 8601 in UTC with milliseconds", () => {
    const wrong: string[] = [];
    const walk = (value: unknown, where: string, key: string) => {
      if (Array.isArray(value)) for (const [i, v] of value.entries()) walk(v, `${where}[${i}]`, key);
      else if (value !== null && typeof value === 'object') for (const [k, v] of Object.entries(value)) walk(v, `${where}.${k}`, k);
      else if (typeof value === 'string' && (key === 'id' || key.endsWith('Id')) && key !== 'operationId') {
        const v7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(value);
        const time = Number.parseInt(value.replace(/-/g, '').slice(0, 12), 16);
        if (!v7 || new Date(time).getUTCFullYear() !== 2026) wrong.push(`${where}: ${value}`);
      } else if (typeof value === 'string' && /At$/.test(key) && !/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(value)) wrong.push(`${where}: ${value}`);
    };
    for (const { label, media } of bodies()) for (const [name, value] of examplesOf(media)) walk(value, `${label} ${name}`, '');
    expect(wrong).toEqual([]);
  });
});

describe('the error examples are what the service answers', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startService();
  });
  afterAll(async () => {
    await service?.close();
  });

  /** The example messages the document gives for `code` at `status` on an operation. */
  const exampleMessages = (path: string, method: string, status: number, code: string): string[] =>
    Object.entries((apiDocument.paths[path][method].responses[String(status)]?.content['application/json'].examples ?? {}) as Record<string, Json>)
      .filter(([name]) => name.split(':')[0] === code)
      .map(([, e]) => e.value.error.message as string);

  /** An id nobody has: a UUIDv7 of the service's form. */
  const UNKNOWN = '019a1c92-7934-7000-a000-000000000000';
  const concrete = (path: string) => path.replace('{id}', UNKNOWN).replace('{name}', 'receipt').replace('{address}', 'bob%40example.net');

  it.each(OPERATIONS.filter((op) => op.auth).map((op) => [`${op.method.toUpperCase()} ${op.path}`, op] as const))('%s', async (_label, op) => {
    const method = op.method.toUpperCase();
    const path = concrete(op.path);
    const { account } = await service.newAccount({ name: `Examples ${op.operationId}` });
    // The query a route needs before it looks anything up (a captured message names its recipient).
    const query = op.operationId === 'getCapturedMessage' ? '?recipient=ann%40example.net' : '';
    const seen: string[] = [];
    const expectExample = (res: { status: number; body: Json }, what: string) => {
      expectDocumented(res as Parameters<typeof expectDocumented>[0]);
      seen.push(`${what}: ${res.status} ${res.body.error.code}`);
      expect(
        exampleMessages(op.path, op.method, res.status, res.body.error.code),
        `${what}: the document's examples of ${res.status} ${res.body.error.code}`,
      ).toContain(res.body.error.message);
    };

    expectExample(await service.api(method, path + query), 'no key');
    // Without the operation's scope, and without the second one that opens it too where it has one.
    const lacking = await service.api(method, path + query, {
      key: await service.newKey(
        account.id,
        SCOPES.filter((s) => s !== op.auth!.scope && s !== op.auth!.alsoScope),
      ),
    });
    expect(lacking.status).toBe(403);
    expectExample(lacking, 'a key without the scope');

    const key = await service.newKey(account.id, SCOPES);
    const invalid = INVALID_INPUTS[op.operationId];
    if (invalid?.body !== undefined) {
      const res = await service.api(method, path, { key, body: invalid.body });
      expect(res.status, JSON.stringify(res.body)).toBe(422);
      expectExample(res, 'the refused body');
    }
    if (invalid?.query !== undefined) {
      const res = await service.api(method, `${path}?${new URLSearchParams(invalid.query)}`, { key });
      expect(res.status, JSON.stringify(res.body)).toBe(422);
      expectExample(res, 'the refused query');
    }
    if (op.list) {
      const res = await service.api(method, `${path}${query ? `${query}&` : '?'}cursor=not-a-cursor`, { key });
      expect([op.list.badCursor.status, 404]).toContain(res.status);
      expectExample(res, 'a cursor of no list');
    }
    if (op.path.includes('{id}') || op.path.includes('{address}')) {
      const res = await service.api(method, path + query, { key, body: REQUEST_EXAMPLES[op.operationId] });
      expect(res.status, JSON.stringify(res.body)).toBe(404);
      expectExample(res, 'an id nobody has');
    }
    if (op.path.includes('{name}')) {
      const res = await service.api(method, op.path.replace('{name}', 'order-shipped'), { key, body: REQUEST_EXAMPLES[op.operationId] });
      expect(res.status, JSON.stringify(res.body)).toBe(404);
      expectExample(res, 'a template nobody has');
    }
    expect(seen.length).toBeGreaterThanOrEqual(2);
  });
});

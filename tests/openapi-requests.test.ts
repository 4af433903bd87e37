import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiDocument } from './helpers/openapi.js';
import { newSender, newSubSender, receipt, type Sender } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * The API document (GET /api/v1/openapi.json) against docs/api/contract.md and the service's answers, where requests are
 * concerned: what the service refuses, the document does not call valid (a suspension without its reason, the
 * suppressions filter's bounds, the tags rules, names blank once trimmed, date-times the service does not take), and
 * each error code docs/api/contract.md names for an endpoint is in its responses.
 */

type Json = Record<string, any>;

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
const DOC = 'https://mailstead.test/openapi.json';
ajv.addSchema(apiDocument, DOC);

/** Whether `value` validates against the document's component `name`. */
const validComponent = (name: string, value: unknown): boolean => ajv.compile({ $ref: `${DOC}#/components/schemas/${name}` })(value) as boolean;

/** The schema of one parameter of an operation. */
const parameter = (path: string, method: string, name: string): Json => {
  const p = (apiDocument.paths[path][method].parameters as Json[]).find((x) => x.name === name);
  if (!p) throw new Error(`no parameter ${name} on ${method} ${path}`);
  return p;
};

let service: TestService;
let s: Sender;

beforeAll(async () => {
  service = await startService({ DEFAULT_DAILY_QUOTA: '100000' });
  s = await newSender(service, { credits: 1000 });
});
afterAll(async () => {
  await service.close();
});

describe('request schemas say what the service refuses', () => {
  it('POST /accounts/{id}/suspend: reason is required when suspended is true (docs/api/contract.md), in the document as in the service', async () => {
    const sub = await newSubSender(service, s.key);
    const body = { suspended: true };
    const res = await service.api('POST', `/accounts/${sub.id}/suspend`, { key: s.key, body });
    // The service follows docs/api/contract.md ...
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe('invalid_request');
    // ... the document calls the same body valid.
    expect(validComponent('SuspendSubAccountRequest', body), 'SuspendSubAccountRequest accepts { suspended: true } without reason').toBe(false);
    expect(validComponent('SuspendSubAccountRequest', { suspended: true, reason: 'Paused for a billing review.' })).toBe(true);
    expect(validComponent('SuspendSubAccountRequest', { suspended: false })).toBe(true);
  });

  it("GET /suppressions: the address query parameter carries docs/api/contract.md's bounds, 1 to 320 characters", async () => {
    const long = 'a'.repeat(321);
    const refused = await service.api('GET', `/suppressions?address=${long}`, { key: s.key });
    expect(refused.status).toBe(422);
    const empty = await service.api('GET', '/suppressions?address=', { key: s.key });
    expect(empty.status).toBe(422);
    const schema = parameter('/suppressions', 'get', 'address').schema as Json;
    expect(schema).toMatchObject({ type: 'string', minLength: 1, maxLength: 320 });
    expect(ajv.validate(schema, long), 'the document accepts a 321-character address').toBe(false);
    expect(ajv.validate(schema, ''), 'the document accepts an empty address').toBe(false);
  });

  it('POST /emails: the document states the tags rules the service enforces (at most 10; names 1 to 40 of A-Za-z0-9_-; values up to 256 characters)', async () => {
    const cases: [string, Record<string, string>][] = [
      ['11 tags', Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`t${i}`, 'v']))],
      ['a name with a space', { 'a b': 'v' }],
      ['a 41-character name', { ['n'.repeat(41)]: 'v' }],
      ['a 257-character value', { a: 'v'.repeat(257) }],
    ];
    const accepted: string[] = [];
    for (const [label, tags] of cases) {
      const body = { ...receipt(s.from, 'ann@example.net', { sandbox: true }), tags };
      const res = await service.api('POST', '/emails', { key: s.key, body });
      expect(res.status, label).toBe(422);
      if (validComponent('SendEmailRequest', body)) accepted.push(label);
    }
    expect(accepted, 'bodies the service refuses that the document calls valid').toEqual([]);
  });

  it('POST /keys and POST /accounts: a name the service refuses as blank or too short once trimmed is not valid in the document', async () => {
    const accepted: string[] = [];
    const key = await service.api('POST', '/keys', { key: s.key, body: { name: '   ' } });
    expect(key.status).toBe(422);
    if (validComponent('MintKeyRequest', { name: '   ' })) accepted.push("POST /keys { name: '   ' }");
    const account = await service.api('POST', '/accounts', { key: s.key, body: { name: ' a ' } });
    expect(account.status).toBe(422);
    if (validComponent('CreateSubAccountRequest', { name: ' a ' })) accepted.push("POST /accounts { name: ' a ' }");
    expect(accepted, 'bodies the service refuses that the document calls valid').toEqual([]);
  });

  it("GET /emails: a since value the document's date-time format accepts is not refused by the service", async () => {
    const schema = parameter('/emails', 'get', 'since').schema as Json;
    const refused: string[] = [];
    for (const since of ['2026-01-01t00:00:00z', '2026-01-01 00:00:00Z', '2026-01-01T00:00:00+0100']) {
      if (!ajv.validate(schema, since)) continue;
      const res = await service.api('GET', `/emails?since=${encodeURIComponent(since)}`, { key: s.key });
      if (res.status !== 200) refused.push(`${since}: ${res.status} ${res.body?.error?.code}`);
    }
    expect(refused, 'values the document calls valid that the service refuses').toEqual([]);
  });
});

describe('the template requests say what the service refuses', () => {
  it('POST /templates: what a kind needs (a subject and html or text; a layout html and no subject), in the document as in the service', async () => {
    const { key } = await service.newAccount({ name: 'Template schemas' });
    const cases: [string, Json][] = [
      ['a template without subject', { name: 'no-subject', text: 'Hello' }],
      ['a template without html or text', { name: 'empty', subject: 'Hi' }],
      ['a layout with a subject', { name: 'brand', kind: 'layout', subject: 'Hi', html: '<div>{{ content }}</div>' }],
      ['a layout without html', { name: 'brand', kind: 'layout', text: '{{ content }}' }],
      ['a layout naming a layout', { name: 'brand', kind: 'layout', html: '<div>{{ content }}</div>', layout: 'other' }],
      ['a name with capitals', { name: 'Order', subject: 'Hi', text: 'Hello' }],
    ];
    const accepted: string[] = [];
    for (const [label, body] of cases) {
      const res = await service.api('POST', '/templates', { key, body });
      expect(res.status, `${label}: ${JSON.stringify(res.body)}`).toBe(422);
      expect(res.body.error.code, label).toBe('invalid_request');
      if (validComponent('CreateTemplateRequest', body)) accepted.push(label);
      // A render's source has no name (the path gives it).
      const { name: _name, ...source } = body;
      if (label !== 'a name with capitals' && validComponent('RenderTemplateRequest', { source })) accepted.push(`render: ${label}`);
    }
    expect(accepted, 'bodies the service refuses that the document calls valid').toEqual([]);
    const good: Json[] = [
      { name: 'shipped', subject: 'Hi', text: 'Hello' },
      { name: 'brand', kind: 'layout', html: '<div>{{ content }}</div>', layout: null },
    ];
    for (const body of good) {
      const { name: _name, ...source } = body;
      expect(validComponent('CreateTemplateRequest', body), JSON.stringify(body)).toBe(true);
      expect(validComponent('RenderTemplateRequest', { source }), JSON.stringify(source)).toBe(true);
      expect((await service.api('POST', '/templates', { key, body })).status).toBe(201);
    }
  });

  it("POST /emails: an own template's name is valid in the document; a built-in's unknown variable and a built-in name with other variables are not", async () => {
    const send = (template: Json) => ({ ...receipt(s.from, 'ann@example.net', { sandbox: true }), template });
    expect(validComponent('SendEmailRequest', send({ name: 'order-shipped', orderNumber: '1042' }))).toBe(true);
    expect(validComponent('SendEmailRequest', send({ name: 'receipt', total: '$1' }))).toBe(true);
    expect(validComponent('SendEmailRequest', send({ name: 'receipt', total: '$1', coupon: 'X' }))).toBe(false);
    expect(validComponent('SendEmailRequest', send({ name: 'Order Shipped' }))).toBe(false);
    expect(validComponent('SendEmailRequest', send({ name: 'order-shipped', orderNumber: 1042 }))).toBe(false);
    const refused = await service.api('POST', '/emails', { key: s.key, body: send({ name: 'receipt', total: '$1', coupon: 'X' }) });
    expect(refused.status).toBe(422);
  });

  it('POST /templates/{name}/render: the variables, or { source, variables }, and not both at once', () => {
    expect(validComponent('RenderTemplateRequest', { total: '$1' })).toBe(true);
    expect(validComponent('RenderTemplateRequest', { source: { subject: 'Hi', text: '{{ n }}', variables: { n: {} } }, variables: { n: '1' } })).toBe(true);
    expect(validComponent('RenderTemplateRequest', { source: { subject: 'Hi', text: 'x' }, total: '$1' })).toBe(false);
    expect(validComponent('RenderTemplateRequest', { total: 1 })).toBe(false);
  });
});

describe('error codes docs/api/contract.md names per endpoint', () => {
  it('DELETE /domains/{id}: the document lists 409 domain_in_use', () => {
    const op = apiDocument.paths['/domains/{id}'].delete as Json;
    const conflict = op.responses['409'] as Json | undefined;
    expect(conflict, 'DELETE /domains/{id} has no 409 response').toBeDefined();
    expect(conflict!.content['application/json'].schema.properties.error.properties.code.enum).toContain('domain_in_use');
  });
});

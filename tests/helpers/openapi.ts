import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { expect } from 'vitest';
import { API_BASE } from '../../server/app/http-app.js';
import { buildOpenApiDocument } from '../../server/api/openapi/document.js';
import type { ApiResponse } from './service.js';

/**
 * Checks answers against the API document (GET /api/v1/openapi.json, built here the same way): the status must be one
 * the document lists for that path and method, and the body must validate against that response's schema (JSON Schema
 * 2020-12, with ajv; objects are closed, so an undocumented field fails too). Webhook posts are checked against the
 * document's `webhooks` section the same way.
 */

type Json = Record<string, any>;

export const apiDocument: Json = buildOpenApiDocument(API_BASE);

const DOCUMENT_ID = 'https://mailstead.test/api/v1/openapi.json';

const ajv = new Ajv2020({ strict: false, allErrors: true });
// ajv-formats is CommonJS: its function is the module's `default` here.
addFormats.default(ajv);
ajv.addSchema(apiDocument, DOCUMENT_ID);

const validators = new Map<string, ValidateFunction>();

/** A validator for the schema at `pointer` (JSON Pointer segments) in the document. */
function validatorAt(pointer: string[]): ValidateFunction {
  const ref = `${DOCUMENT_ID}#/${pointer.map((s) => s.replace(/~/g, '~0').replace(/\//g, '~1')).join('/')}`;
  let validate = validators.get(ref);
  if (!validate) {
    validate = ajv.compile({ $ref: ref });
    validators.set(ref, validate);
  }
  return validate;
}

/** The document's path template a request path falls under (`/domains/0193...` is `/domains/{id}`), literal segments first. */
export function documentedPath(path: string): string | undefined {
  const segments = (path.split('?')[0] || '/')
    .split('/')
    .slice(1)
    .map((s) => decodeURIComponent(s));
  let best: { template: string; literals: number } | undefined;
  for (const template of Object.keys(apiDocument.paths)) {
    const parts = template.split('/').slice(1);
    if (parts.length !== segments.length) continue;
    let literals = 0;
    const fits = parts.every((part, i) => {
      if (/^\{[^}]+\}$/.test(part)) return segments[i] !== '';
      if (part === segments[i]) {
        literals++;
        return true;
      }
      return false;
    });
    if (fits && (!best || literals > best.literals)) best = { template, literals };
  }
  return best?.template;
}

/** Fails unless the answer's status is documented for its path and method and its body validates against that response. */
export function expectDocumented(res: ApiResponse): void {
  const { method, path } = res.request;
  const what = `${method} ${path} answered ${res.status} ${JSON.stringify(res.body)?.slice(0, 300)}`;
  const template = documentedPath(path);
  expect(template, `${what}: no path of the document serves it`).toBeDefined();
  const operation = apiDocument.paths[template!][method.toLowerCase()];
  expect(operation, `${what}: the document has no ${method} on ${template}`).toBeDefined();
  const response = operation.responses[String(res.status)];
  expect(response, `${what}: the document lists no ${res.status} for ${method} ${template}`).toBeDefined();
  if (!response.content) {
    expect(res.body, `${what}: the document says this answer has no body`).toBeNull();
    return;
  }
  const mediaType = Object.keys(response.content)[0]!;
  if (mediaType !== 'application/json') {
    // A body that is not JSON (a captured message): the documented media type, and text.
    expect(res.headers.get('content-type')?.split(';')[0], `${what}: not the documented media type`).toBe(mediaType);
    expect(typeof res.body, `${what}: the body is not text`).toBe('string');
    return;
  }
  const validate = validatorAt(['paths', template!, method.toLowerCase(), 'responses', String(res.status), 'content', 'application/json', 'schema']);
  validate(res.body);
  expect(ajv.errorsText(validate.errors, { dataVar: 'body' }), `${what}: the body does not match the document`).toBe('No errors');
}

/** Fails unless a webhook post's body validates against the document's `webhooks` entry for its type. */
export function expectDocumentedWebhook(body: Json): void {
  const type = String(body.type);
  expect(apiDocument.webhooks[type], `no webhook ${type} in the document`).toBeDefined();
  const validate = validatorAt(['webhooks', type, 'post', 'requestBody', 'content', 'application/json', 'schema']);
  validate(body);
  expect(ajv.errorsText(validate.errors, { dataVar: 'body' }), `the ${type} post does not match the document: ${JSON.stringify(body)}`).toBe('No errors');
}

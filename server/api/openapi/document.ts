import { z } from 'zod';
import { SCOPES } from '../../core/scopes.js';
import { OWN_TEMPLATE_LIMITS } from '../../core/own-templates.js';
import { OWN_VARIABLE_LIMIT } from '../../core/template-catalog.js';
import { TEMPLATE_NAME } from '../../core/template-name.js';
import { TEMPLATES, VARIABLE_LIMITS } from '../../core/templates.js';
import { MAX_TAGS, MAX_TAG_VALUE } from '../../core/send-request.js';
import { ERROR_STATUS, type ErrorCode } from '../../shared/errors.js';
import { ACCOUNT_HEADER } from '../http/auth.js';
import { DEFAULT_LIMIT, MAX_LIMIT } from '../http/paging.js';
import { OUTCOME_EVENT_TYPES, type OutcomeStatus } from '../../core/webhook-fanout.js';
import { MAX_WEBHOOK_URL_LENGTH } from '../../core/webhook-url.js';
import { errorExamples } from './error-examples.js';
import { ANSWER_EXAMPLES, MORE_REQUEST_EXAMPLES, REQUEST_EXAMPLES, RESOURCE_EXAMPLES, webhookPostExample } from './examples.js';
import { type Answer, type ErrorCase, OPERATIONS, type Operation } from './operations.js';
import * as resources from './resources.js';

/**
 * The OpenAPI 3.1 document of /api/v1, built from the operations table and the zod schemas: the request schemas the
 * routes validate with and the resources they answer, converted by zod's own `z.toJSONSchema` (JSON Schema 2020-12,
 * OpenAPI 3.1's dialect). Pure: the same for every server, built once per process.
 */

type Json = Record<string, unknown>;

/** docs/api/contract.md's conditions, one per code: a response lists those of its codes the endpoint can give. */
const ERROR_CONDITIONS: Record<ErrorCode, string> = {
  invalid_json: 'The body could not be parsed as JSON.',
  invalid_idempotency_key: 'Idempotency-Key sent but empty or longer than 255 characters.',
  invalid_key: 'Missing or unknown key, or a revoked one.',
  no_credits: 'The paying account has no credits and its grace window has closed.',
  insufficient_scope: "The key lacks the endpoint's scope.",
  suspended: 'Sending is paused on the acting account or on its parent; the message is the reason.',
  domain_not_yours: 'The from-address is on a domain this account has not connected.',
  domain_not_ready: 'The domain is connected but ownership is not verified or sending is not enabled.',
  account_not_found: `${ACCOUNT_HEADER} names something that is not a sub-account of the key's account (identical for a foreign and an unknown id).`,
  not_found: 'No such object on this account.',
  email_not_found: 'No email with that id on this account.',
  webhook_not_found: 'No webhook endpoint with that id on this account.',
  database_not_connected: 'No database is set on this account.',
  template_not_found: "No template of this account (or its parent's, or built in) has that name.",
  idempotency_in_progress: 'The first request with this Idempotency-Key is still running.',
  domain_exists: 'The domain is already on this account.',
  domain_unavailable: 'The name is claimed elsewhere.',
  domain_limit: 'The account already has 20 domains.',
  domain_in_use: 'The domain still has active mailboxes.',
  conflict: "The request conflicts with the account's state.",
  limit_reached: 'A count limit of the account is reached.',
  template_exists: 'The account already has a template of that name, or the name is a built-in template.',
  template_limit: 'The account already has 100 templates (layouts included).',
  template_in_use: 'The layout is still named by templates of the account; the message names them.',
  body_too_large: 'The request body is 1 MB (1,048,576 bytes) or more.',
  invalid_request: 'The body or query failed validation; the message names the first failing field.',
  invalid_cursor: 'The cursor was not issued by this list for this account.',
  recipient_suppressed: 'One or more recipients are suppressed; nothing is sent; the message names them.',
  idempotency_mismatch: 'The Idempotency-Key was already used with a different body.',
  invalid_url: 'The URL is not acceptable; the message says why.',
  too_many_endpoints: 'The account already has 20 webhook endpoints.',
  blocked_host: 'The host resolves to a private, loopback or reserved address.',
  database_unreachable: 'Could not connect, log in or create the schema; the message says which.',
  invalid_template:
    'The source does not compile: a Liquid syntax error (with its line and column), a variable used but not declared (with its line), or a rule of the language broken; the message says which.',
  rate_limited: "Over the requests a minute allowed from the key (60) or from all the account's keys (600); Retry-After says when to retry.",
  quota_exceeded: 'The daily quota of the account or its parent is used up; it resets at midnight UTC.',
  sandbox_limit: '1000 sandbox sends in the last 24 hours.',
  ping_cooldown: 'A test ping was sent to the endpoint in the last ten seconds; Retry-After says when to retry.',
  internal_error: 'An unexpected failure; the message carries a request id, the cause is only logged.',
  send_failed: "The service's mail server did not accept the message; the send is logged `failed`.",
  not_configured: 'The server cannot store secrets.',
  unavailable:
    "The service's storage failed (a full disk, say), so the request could not be recorded; the message names the cause. For a send, nothing was sent. Retry later.",
  method_not_allowed: 'The path is served, not with this method; Allow lists the methods it takes.',
};

const ACCOUNT_HEADER_NOTE = {
  accepted: `Optional: act for this sub-account of the key's account.`,
  refused: `Not accepted here: this endpoint always acts for the key's own account. An id that is not a sub-account is 404 account_not_found; a sub-account's id is 422 invalid_request.`,
  passed: `Not accepted here: an id that is not a sub-account is 404 account_not_found; a sub-account's id is 409 conflict (a sub-account cannot open a sub-account).`,
} as const;

const pascal = (name: string) => name.replace(/(^|[-_ ])(\w)/g, (_m, _sep, c: string) => c.toUpperCase());

/** Every zod schema the document names: each resource (by its export's name) and each request body (by its operation). */
function componentRegistry(): { registry: z.core.$ZodRegistry<{ id: string }>; idOf: (schema: z.ZodType) => string } {
  const registry = z.registry<{ id: string }>();
  for (const [name, value] of Object.entries(resources)) {
    if (value instanceof z.ZodType) registry.add(value, { id: pascal(name) });
  }
  for (const op of OPERATIONS) {
    if (op.body) registry.add(op.body, { id: `${pascal(op.operationId)}Request` });
  }
  const idOf = (schema: z.ZodType) => {
    const id = registry.get(schema)?.id;
    if (!id) throw new Error('a schema of the API document is not a component');
    return id;
  };
  return { registry, idOf };
}

const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });

/**
 * How zod schemas become JSON Schema here: 2020-12, requests as the client sends them (`io: 'input'`: a transform's
 * input side); a string with a `format` (date-time, uuid) keeps the format and drops zod's long equivalent pattern.
 */
const CONVERSION = {
  target: 'draft-2020-12',
  io: 'input',
  override: ({ jsonSchema }: { jsonSchema: { format?: string; pattern?: string; minimum?: number; maximum?: number } }) => {
    // A date-time keeps zod's pattern: JSON Schema's format takes more (a lower-case t or z, a space, +0100) than
    // the service does.
    if (jsonSchema.format !== undefined && jsonSchema.format !== 'date-time') delete jsonSchema.pattern;
    // z.int() bounds itself to the safe integers: no bound a client needs to read.
    if (jsonSchema.maximum === Number.MAX_SAFE_INTEGER) delete jsonSchema.maximum;
    if (jsonSchema.minimum === Number.MIN_SAFE_INTEGER) delete jsonSchema.minimum;
  },
} as const;

/** The components, converted from zod: request bodies as the client sends them (`io: 'input'`), resources as sent. */
function convertComponents(registry: z.core.$ZodRegistry<{ id: string }>): Record<string, Json> {
  const { schemas } = z.toJSONSchema(registry, { ...CONVERSION, uri: (id) => `#/components/schemas/${id}` });
  if ('__shared' in schemas) throw new Error('the API document has schemas no component names');
  const components: Record<string, Json> = {};
  for (const [id, schema] of Object.entries(schemas)) {
    // Each component is a subschema of the document, not a resource of its own.
    const { $schema: _schema, $id: _id, ...rest } = schema as Json;
    components[id] = rest;
  }
  return components;
}

/** `doc[path]`, which must exist: a renamed field fails the build of the document instead of losing its note. */
function at(doc: Json, path: string[]): Json {
  let node: unknown = doc;
  for (const key of path) {
    node = typeof node === 'object' && node !== null ? (node as Json)[key] : undefined;
    if (node === undefined) throw new Error(`API document: no ${path.join('.')}`);
  }
  return node as Json;
}

/** A send's `template` naming each built-in: exactly its variables, the required ones required. */
function builtInSendTemplates(): Json[] {
  return Object.entries(TEMPLATES).map(([name, def]) => ({
    type: 'object',
    title: name,
    properties: {
      name: { const: name },
      ...Object.fromEntries(
        Object.entries(def.variables).map(([variable, spec]) => {
          const limit = VARIABLE_LIMITS[spec.limit];
          const what = spec.kind === 'url' ? 'An http or https URL. ' : '';
          return [
            variable,
            { type: 'string', maxLength: limit.max, description: `${what}At most ${limit.max} ${limit.unit === 'bytes' ? 'bytes of UTF-8' : 'characters'}.` },
          ];
        }),
      ),
    },
    required: [
      'name',
      ...Object.entries(def.variables)
        .filter(([, spec]) => spec.required)
        .map(([variable]) => variable),
    ],
    additionalProperties: false,
  }));
}

/** A send's `template` naming one of the account's own templates: its variables are the ones it declares. */
function ownSendTemplate(): Json {
  const text = VARIABLE_LIMITS[OWN_VARIABLE_LIMIT.text];
  const url = VARIABLE_LIMITS[OWN_VARIABLE_LIMIT.url];
  return {
    type: 'object',
    title: 'an own template',
    description: `The variables the template (and its layout) declares, each a string: a \`text\` one at most ${text.max} ${text.unit === 'bytes' ? 'bytes of UTF-8' : 'characters'}, a \`url\` one an http or https URL of at most ${url.max} characters. A variable it does not declare, a missing required one or a bad URL is 422 invalid_request naming \`template.<variable>\`.`,
    properties: {
      name: {
        type: 'string',
        pattern: TEMPLATE_NAME.source,
        not: { enum: Object.keys(TEMPLATES) },
        description: "The name of one of the acting account's own templates, else of its parent's (GET /templates lists them).",
      },
    },
    required: ['name'],
    additionalProperties: { type: 'string', maxLength: text.max },
  };
}

/**
 * A template's source (POST /templates, and the `source` of a render): what a kind needs, which zod checks in the core
 * (own-templates.ts) and JSON Schema says with `if`: a layout has html and no subject, a template a subject and html,
 * text or both. On PUT a layout may leave `kind` out, so there it is said in words.
 */
const KIND_RULES: Json = {
  if: { properties: { kind: { const: 'layout' } }, required: ['kind'] },
  then: { required: ['html'], not: { required: ['subject'] }, properties: { layout: { type: 'null' } } },
  else: { required: ['subject'], anyOf: [{ required: ['html'] }, { required: ['text'] }] },
};

/** The words shared by the fields of a template's source. */
function annotateTemplateSource(source: Json, withRules: boolean): void {
  const fields = at(source, ['properties']);
  const notes: Record<string, string> = {
    kind: '`template` (the default on create) or `layout`. A layout wraps the templates that name it; it cannot change kind.',
    subject: 'Liquid source of the Subject: required for a template, refused for a layout.',
    html: "Liquid source of the html part; output is HTML-escaped. A layout's holds `{{ content }}` once, where the template goes. CSS in `<style>` is inlined at render.",
    text: 'Liquid source of the text part; when left out it is generated from the html.',
    layout: "The name of one of the account's layouts (or its parent's) that wraps this template.",
    variables:
      'The variables the source may use, by name: `required` (default false) and `kind` (`text`, the default, or `url`: an http or https URL, never rendered raw). A name used in the source but not declared is 422 invalid_template.',
  };
  for (const [field, description] of Object.entries(notes)) Object.assign(at(fields, [field]), { description });
  if (withRules) Object.assign(source, KIND_RULES);
  source.description = `At most ${OWN_TEMPLATE_LIMITS.sourceBytes / 1024} KB (${OWN_TEMPLATE_LIMITS.sourceBytes} bytes of UTF-8) of subject, html and text together.`;
}

/** The template bodies: create, replace, and the render's two forms as a oneOf. */
function annotateTemplateRequests(components: Record<string, Json>): void {
  const create = at(components, ['CreateTemplateRequest']);
  annotateTemplateSource(create, true);
  Object.assign(at(create, ['properties', 'name']), {
    description: 'What a send names: 1 to 64 of a-z, 0-9 and -, starting with a letter or a digit; unique on the account and not a built-in name.',
  });
  const replace = at(components, ['ReplaceTemplateRequest']);
  annotateTemplateSource(replace, false);
  replace.description = `${replace.description as string} The whole source of the new version: a template needs \`subject\` and \`html\`, \`text\` or both; a layout needs \`html\` and has no subject.`;
  Object.assign(at(replace, ['properties', 'name']), { description: 'Optional; when given, the name in the path (a template is not renamed).' });
  const render = at(components, ['RenderTemplateRequest']);
  const [variables, withSource] = render.anyOf as [Json, Json];
  Object.assign(variables, {
    title: 'variables',
    description:
      "The variables of the saved template the path names, as a send's `template` object holds them without `name`; checked by that template's rules.",
  });
  Object.assign(withSource, {
    title: 'unsaved source',
    description: 'An unsaved source to preview under the name in the path, with sample variables.',
  });
  const source = at(withSource, ['properties', 'source']);
  annotateTemplateSource(source, true);
  Object.assign(at(withSource, ['properties', 'variables']), { description: "Sample values, checked against the source's declared variables." });
  delete render.anyOf;
  Object.assign(render, {
    oneOf: [variables, withSource],
    description: 'The variables of the saved template, or `{ source, variables }` to preview an unsaved one.',
  });
}

/**
 * What JSON Schema cannot learn from a zod transform or refinement, said here once: `to` takes one address as well
 * as a list (zod's preprocess step), a template's variables follow from its name (the templates table, which the
 * send's refinement checks), scopes and webhook URLs are checked by refinements.
 */
function annotateRequests(components: Record<string, Json>): void {
  const send = at(components, ['SendEmailRequest', 'properties']);
  const recipients = send.to as Json;
  send.to = {
    description: 'One recipient address, or 1 to 50 (de-duplicated, compared lower-cased).',
    anyOf: [{ type: 'string', maxLength: (at(recipients, ['items']) as Json).maxLength }, recipients],
  };
  send.template = {
    description:
      "`name` plus that template's string variables (GET /templates lists them). `name` is a built-in template, or one of the acting account's own templates, else its parent's (an own template's variables are checked against its declared `variables` at check 5). Values are HTML-escaped in the html part.",
    oneOf: [...builtInSendTemplates(), ownSendTemplate()],
  };
  Object.assign(at(components, ['SendEmailRequest', 'properties', 'from']), {
    description: 'One mailbox: a bare address, or a display name of up to 80 characters and an address in angle brackets.',
  });
  at(components, ['SendEmailRequest', 'properties']).tags = {
    description: `Up to ${MAX_TAGS} tags: names of 1 to 40 of A-Z a-z 0-9 _ -, values up to ${MAX_TAG_VALUE} characters. Returned on the Email.`,
    type: 'object',
    maxProperties: MAX_TAGS,
    propertyNames: { pattern: '^[A-Za-z0-9_-]{1,40}$' },
    additionalProperties: { type: 'string', maxLength: MAX_TAG_VALUE },
  };
  // Names are trimmed before their length is checked: blank or too short once trimmed is refused.
  Object.assign(at(components, ['MintKeyRequest', 'properties', 'name']), {
    pattern: '\\S',
    description: 'Spaces around it are trimmed; 1 to 60 characters left.',
  });
  Object.assign(at(components, ['CreateSubAccountRequest', 'properties', 'name']), {
    pattern: '\\S.*\\S',
    description: 'Spaces around it are trimmed; 2 to 80 characters left.',
  });
  // A refinement: reason is required when suspended is true.
  Object.assign(at(components, ['SuspendSubAccountRequest']), {
    if: { properties: { suspended: { const: true } }, required: ['suspended'] },
    then: { required: ['reason'] },
    description: '`reason` is required when `suspended` is true; it becomes the message of every refused send.',
  });
  Object.assign(at(components, ['MintKeyRequest', 'properties', 'scopes']), {
    description: "A subset of the minting key's scopes; all of them when left out.",
  });
  Object.assign(at(components, ['MintKeyRequest', 'properties', 'scopes', 'items']), { enum: [...SCOPES] });
  Object.assign(at(components, ['CreateWebhookRequest', 'properties', 'url']), {
    minLength: 1,
    maxLength: MAX_WEBHOOK_URL_LENGTH,
    format: 'uri',
    description: 'https only, without user or password, its host resolving to public addresses only.',
  });
  Object.assign(at(components, ['CreateDomainRequest', 'properties', 'name']), {
    description: 'A bare domain: no scheme, path, port or trailing dot needed (it is lower-cased, IDN as punycode).',
  });
  Object.assign(at(components, ['ConnectDatabaseRequest', 'properties', 'url']), {
    format: 'uri',
    description: 'postgresql://user:password@host:5432/dbname, over TLS; only `sslmode` may be a query parameter.',
  });
  annotateTemplateRequests(components);
}

interface ErrorEntry {
  code: ErrorCode;
  status: number;
  when: string[];
}

/** The errors an operation answers: its own, and the ones its key, account header, body and list bring. */
function errorsOf(op: Operation): ErrorEntry[] {
  const cases: ErrorCase[] = [];
  if (op.auth) {
    cases.push('invalid_key', 'rate_limited', 'insufficient_scope', 'account_not_found');
    if (op.auth.accountHeader === 'refused') cases.push({ code: 'invalid_request', when: `${ACCOUNT_HEADER} names a sub-account: not accepted here.` });
    if (op.auth.accountHeader === 'passed') cases.push({ code: 'conflict', when: `${ACCOUNT_HEADER} sent: a sub-account cannot open a sub-account.` });
    if (op.method !== 'get') cases.push('body_too_large');
  }
  if (op.body) cases.push('invalid_json', 'invalid_request');
  if (op.list) {
    cases.push({ code: op.list.badLimit.code, status: op.list.badLimit.status, when: `limit is not an integer from 1 to ${MAX_LIMIT}.` });
    cases.push({ code: op.list.badCursor.code, status: op.list.badCursor.status, when: 'The cursor was not issued by this list for this account.' });
  }
  cases.push(...op.errors);
  // A change the store could not record (docs/api/decisions.md section 13); a read never writes.
  if (op.method !== 'get') cases.push('unavailable');
  cases.push('internal_error');

  const entries: ErrorEntry[] = [];
  for (const c of cases) {
    const { code, status = ERROR_STATUS[typeof c === 'string' ? c : c.code], when } = typeof c === 'string' ? { code: c } : c;
    const text = when ?? ERROR_CONDITIONS[code];
    const found = entries.find((e) => e.code === code && e.status === status);
    if (found) {
      if (!found.when.includes(text)) found.when.push(text);
    } else entries.push({ code, status, when: [text] });
  }
  return entries;
}

const RETRY_AFTER = { description: 'Seconds to wait before retrying (with rate_limited and ping_cooldown).', schema: { type: 'string', pattern: '^[0-9]+$' } };

/** One response per status: an error envelope whose `code` is one of the codes the endpoint gives at that status. */
function errorResponses(op: Operation): Record<string, Json> {
  const byStatus = new Map<number, ErrorEntry[]>();
  for (const e of errorsOf(op)) byStatus.set(e.status, [...(byStatus.get(e.status) ?? []), e]);
  const responses: Record<string, Json> = {};
  for (const [status, entries] of [...byStatus].sort(([a], [b]) => a - b)) {
    const codes = entries.map((e) => e.code);
    responses[String(status)] = {
      description: entries.map((e) => `\`${e.code}\`: ${e.when.join(' ')}`).join('\n\n'),
      ...(codes.includes('rate_limited') || codes.includes('ping_cooldown') ? { headers: { 'Retry-After': RETRY_AFTER } } : {}),
      // The envelope, its code narrowed to this endpoint's codes at this status; an example of each code.
      content: {
        'application/json': {
          schema: { ...ref('ErrorBody'), properties: { error: { properties: { code: { enum: codes } } } } },
          examples: Object.fromEntries(entries.flatMap((e) => errorExamples(op, e.code, status, e.when.join(' ')))),
        },
      },
    };
  }
  return responses;
}

/** The query parameters of a list (limit, cursor) and of the schema its route validates the query with. */
function queryParameters(op: Operation): Json[] {
  const params: Json[] = [];
  if (op.query) {
    const schema = z.toJSONSchema(op.query, CONVERSION) as Json;
    const required = new Set((schema.required as string[] | undefined) ?? []);
    for (const [name, property] of Object.entries(schema.properties as Record<string, Json>)) {
      if (op.list && (name === 'limit' || name === 'cursor')) continue;
      const description = op.queryNotes?.[name];
      params.push({ name, in: 'query', required: required.has(name), ...(description ? { description } : {}), schema: property });
    }
  }
  if (op.list) {
    params.push(
      {
        name: 'limit',
        in: 'query',
        required: false,
        description: 'Page size.',
        schema: { type: 'integer', minimum: 1, maximum: MAX_LIMIT, default: DEFAULT_LIMIT },
      },
      { name: 'cursor', in: 'query', required: false, description: 'The nextCursor of the previous page.', schema: { type: 'string' } },
    );
  }
  return params;
}

/** The example of an answer: the operation's own (ANSWER_EXAMPLES), else its resource's. */
function answerExample(op: Operation, answer: Answer): unknown {
  const own = ANSWER_EXAMPLES[op.operationId]?.[answer.status];
  if (own !== undefined) return own;
  const name = Object.entries(resources).find(([, schema]) => schema === answer.body)?.[0] as keyof typeof RESOURCE_EXAMPLES | undefined;
  return name === undefined ? undefined : RESOURCE_EXAMPLES[name];
}

/** A request body's example, or its examples when its body takes more than one form (`example` and `examples` exclude each other). */
function requestExamples(op: Operation): Json {
  const more = MORE_REQUEST_EXAMPLES[op.operationId];
  if (!more) return { example: REQUEST_EXAMPLES[op.operationId] };
  return { examples: { default: { value: REQUEST_EXAMPLES[op.operationId] }, ...more } };
}

function operationObject(op: Operation, idOf: (schema: z.ZodType) => string): Json {
  const parameters: Json[] = [
    ...Object.entries(op.pathParams ?? {}).map(([name, description]) => ({ name, in: 'path', required: true, description, schema: { type: 'string' } })),
    ...(op.auth
      ? [{ name: ACCOUNT_HEADER, in: 'header', required: false, description: ACCOUNT_HEADER_NOTE[op.auth.accountHeader], schema: { type: 'string' } }]
      : []),
    ...Object.entries(op.requestHeaders ?? {}).map(([name, h]) => ({ name, in: 'header', required: false, ...h })),
    ...queryParameters(op),
  ];
  const responses: Record<string, Json> = {};
  for (const answer of op.answers) {
    responses[String(answer.status)] = {
      description: answer.description,
      ...(answer.headers ? { headers: answer.headers } : {}),
      ...(answer.status === 204
        ? {}
        : answer.raw
          ? { content: { [answer.raw.mediaType]: { schema: { type: 'string', description: answer.raw.description }, example: answerExample(op, answer) } } }
          : { content: { 'application/json': { schema: answer.body ? ref(idOf(answer.body)) : { type: 'object' }, example: answerExample(op, answer) } } }),
    };
  }
  Object.assign(responses, errorResponses(op));
  const scopeLine = op.auth ? `Scope: \`${op.auth.scope}\`${op.auth.alsoScope ? ` (or \`${op.auth.alsoScope}\`, which opens it too)` : ''}.` : 'No key needed.';
  return {
    operationId: op.operationId,
    tags: [op.tag],
    summary: op.summary,
    description: [scopeLine, op.description].filter(Boolean).join('\n\n'),
    // Alternatives: a key holding any one of them is let in.
    security: op.auth ? [op.auth.scope, ...(op.auth.alsoScope ? [op.auth.alsoScope] : [])].map((scope) => ({ apiKey: [scope] })) : [],
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(op.body ? { requestBody: { required: true, content: { 'application/json': { schema: ref(idOf(op.body)), ...requestExamples(op) } } } } : {}),
    responses,
  };
}

const WEBHOOK_HEADERS: [string, string][] = [
  ['X-Service-Delivery', "The delivery id (the body's `id`): drop one already handled."],
  ['X-Service-Event', "The event type (the body's `type`)."],
  ['X-Service-Signature', '`t=<unix seconds>,v1=<hex>`: HMAC-SHA256 of `<t>.<raw body>`, keyed with the whole secret string.'],
  ['webhook-id', 'Standard Webhooks: the delivery id.'],
  ['webhook-timestamp', 'Standard Webhooks: the same `t`.'],
  ['webhook-signature', 'Standard Webhooks: `v1,<base64>`, HMAC-SHA256 of `<id>.<t>.<raw body>` keyed with the bytes base64-decoded from after `whsec_`.'],
];

const WEBHOOK_RESPONSES = {
  '2XX': { description: 'Delivered: any 2xx within 10 seconds. The body is never read; redirects are not followed.' },
  default: {
    description:
      'Anything else, or no answer within 10 seconds, is a failure: retried after 1 min, 5 min, 30 min, 2 h and 12 h (6 attempts); 10 consecutive failures switch the endpoint off.',
  },
};

/** The posts a registered endpoint receives, one per event type. */
function webhooks(): Record<string, Json> {
  const parameters = WEBHOOK_HEADERS.map(([name, description]) => ({ name, in: 'header', required: true, description, schema: { type: 'string' } }));
  const post = (type: string, summary: string, schema: Json, example: unknown) => ({
    post: {
      operationId: `${type.replace(/\W/g, '_')}_webhook`,
      tags: ['Webhooks'],
      summary,
      parameters,
      requestBody: { required: true, content: { 'application/json': { schema, example } } },
      responses: WEBHOOK_RESPONSES,
    },
  });
  const entries = (Object.entries(OUTCOME_EVENT_TYPES) as [OutcomeStatus, string][]).map(([status, type]) => [
    type,
    post(
      type,
      `An outcome recorded as ${status}`,
      { allOf: [ref('EmailEventPost'), { properties: { type: { const: type }, data: { properties: { status: { const: status } } } } }] },
      webhookPostExample(status),
    ),
  ]);
  const ping = post('ping', 'The ping of POST /webhooks/{id}/test; never retried', ref('PingPost'), RESOURCE_EXAMPLES.pingPost);
  return Object.fromEntries([...entries, ['ping', ping]]);
}

const DESCRIPTION = `Mailstead's HTTP API: send email from your own domains and follow what became of it.

Every endpoint but this document and the index needs \`Authorization: Bearer <API_KEY>\` and one scope (each operation's \`security\` names it; the template list and render take either \`templates:read\` or the older \`emails:send\`, as two alternatives). \`${ACCOUNT_HEADER}: <sub-account id>\` acts for a sub-account of the key's account where accepted. Checks run in this order: key (401), rate limits (429), scope (403), account header (404), then the body (413: 1 MB or more), then the endpoint's own.

Every error is \`{ "error": { "code", "message" } }\`: clients branch on \`code\`. Unknown fields in a body are \`422 invalid_request\` naming them. An unknown path is \`404 not_found\`; a known path asked with a method it does not serve is \`405 method_not_allowed\` with an \`Allow\` header.

Lists are keyset-paged: \`limit\` (1 to ${MAX_LIMIT}, default ${DEFAULT_LIMIT}) and \`cursor\`; they answer \`{ data, nextCursor }\`, nextCursor null on the last page.`;

const TAGS: [string, string][] = [
  ['Emails', 'Sending and the send log.'],
  ['Templates', "The templates a send names: the built-in ones and the account's own templates and layouts."],
  ['Events', 'Recorded delivery outcomes.'],
  ['Domains', 'Sending domains and their DNS records.'],
  ['Accounts', 'The account and its sub-accounts.'],
  ['Keys', 'API keys and their scopes.'],
  ['Webhooks', 'Signed posts of delivery outcomes.'],
  ['Suppressions', 'Addresses the account will not send to.'],
  ['Database', 'The customer-owned Postgres that receives message content and outcomes.'],
  ['API', 'This document and the index.'],
];

/** The OpenAPI 3.1 document of the API under `base` (`/api/v1`). */
export function buildOpenApiDocument(base: string): Json {
  const { registry, idOf } = componentRegistry();
  const schemas = convertComponents(registry);
  annotateRequests(schemas);
  const paths: Record<string, Record<string, Json>> = {};
  for (const op of OPERATIONS) {
    (paths[op.path] ??= {})[op.method] = operationObject(op, idOf);
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Mailstead API', version: 'v1', description: DESCRIPTION },
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    servers: [{ url: base }],
    tags: TAGS.map(([name, description]) => ({ name, description })),
    paths,
    webhooks: webhooks(),
    components: {
      schemas,
      securitySchemes: {
        apiKey: {
          type: 'http',
          scheme: 'bearer',
          description: 'An API key (`ms_` and 40 letters and digits), created by POST /keys or the operator CLI; the scopes it holds decide what it may call.',
        },
      },
    },
  };
}

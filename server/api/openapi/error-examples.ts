import type { z } from 'zod';
import { MAX_DOMAINS } from '../../core/domains.js';
import { templateVariablesInput } from '../../core/send-request.js';
import { ApiError, type ErrorCode } from '../../shared/errors.js';
import { ACCOUNT_HEADER } from '../http/auth.js';
import { MAX_LIMIT } from '../http/paging.js';
import { parseInput } from '../http/validate.js';
import { EXAMPLE_IDS as ID, EXAMPLE_NAMES, sendRequest } from './examples.js';
import type { Operation } from './operations.js';

/**
 * The examples of the API document's error responses: each code's message in the service's own wording (its
 * ApiError call sites) with the story's values (examples.ts), an operation's own wording where it has one, and for
 * `invalid_request` the message the route's own validation gives for a refused input. tests/openapi-examples.test.ts
 * asks the running service for these errors and finds each answer's message among them.
 */

type Json = Record<string, unknown>;

const { domain: DOMAIN, recipient: TO } = EXAMPLE_NAMES;

/**
 * A body each body-taking operation refuses with `422 invalid_request`: its example is the message the route's own
 * validation gives for it (so the message is the service's, not a paraphrase). A query's bad value likewise.
 */
export const INVALID_INPUTS: Record<string, { body?: unknown; query?: Record<string, string>; schema?: z.ZodType }> = {
  sendEmail: { body: { ...sendRequest, to: 'ann@example' } },
  listEmails: { query: { status: 'delivered' } },
  getCapturedMessage: { query: {} },
  createDomain: { body: { name: 'https://shop.example/' } },
  createSubAccount: { body: { name: ' ' } },
  suspendSubAccount: { body: { suspended: true } },
  mintKey: { body: { name: 'Checkout server', scopes: ['emails:sends'] } },
  createWebhook: { body: { url: 'hooks.shop.example' } },
  replayWebhook: { body: { since: '2026-11-02' } },
  listEvents: { query: { type: 'email.opened' } },
  listSuppressions: { query: { address: '' } },
  addSuppression: { body: { address: 'carol@' } },
  connectDatabase: { body: { url: 5432 } },
  // The route validates with the named template's own rules.
  renderTemplate: { body: { receiptNumber: 'R-1042' }, schema: templateVariablesInput('receipt') },
  createTemplate: { body: { name: 'Order Shipped', subject: 'Your order has shipped', text: 'It is on its way.' } },
  replaceTemplate: { body: { kind: 'partial', subject: 'Your order has shipped', text: 'It is on its way.' } },
};

/**
 * The message of each error code, in the service's wording with the story's values. An operation's own wording (a
 * resource named in a not_found, its own limit; several where it has several) is in ERROR_MESSAGES_OF; the messages of
 * invalid_request, of a list's refusals and of a missing scope are made from the operation (document.ts).
 */
export const ERROR_MESSAGES: Record<ErrorCode, string> = {
  invalid_json: 'The request body is not valid JSON.',
  invalid_idempotency_key: 'Idempotency-Key must be 1 to 255 characters.',
  invalid_key: 'Missing or unknown API key: send Authorization: Bearer <API_KEY>.',
  no_credits: 'This account has no credits left and its grace window has closed.',
  insufficient_scope: 'This key lacks the scope emails:send.',
  suspended: 'Paused for a billing review.',
  domain_not_yours: 'The domain news.example is not connected to this account.',
  domain_not_ready: `The domain ${DOMAIN} is not verified yet: publish its records and call verify.`,
  account_not_found: `No sub-account ${ID.subAccount.replace(/.{4}$/, '0000')} under this key's account.`,
  not_found: 'No object with that id on this account.',
  email_not_found: 'No email with that id on this account.',
  webhook_not_found: 'No webhook endpoint with that id on this account.',
  database_not_connected: 'No database is set on this account.',
  template_not_found: 'No template named order-shipped on this account.',
  idempotency_in_progress: 'A request with this Idempotency-Key is still running; retry shortly.',
  domain_exists: `The domain ${DOMAIN} is already connected to this account.`,
  domain_unavailable: `The domain ${DOMAIN} cannot be connected to this account.`,
  domain_limit: `This account already has ${MAX_DOMAINS} domains.`,
  domain_in_use: `The domain ${DOMAIN} still has active mailboxes.`,
  conflict: 'A sub-account cannot open a sub-account: send this request without X-Service-Account.',
  limit_reached: 'A count limit of this account is reached.',
  template_exists: 'A template named order-shipped already exists on this account.',
  template_limit: 'This account already has 100 templates (layouts included); delete one first.',
  template_in_use: 'The layout brand is still named by 2 templates: order-shipped, welcome-back.',
  body_too_large: 'The request body must be under 1 MB.',
  invalid_request: 'body: must be a JSON object',
  invalid_cursor: 'cursor: was not issued by this list (emails)',
  recipient_suppressed: 'Suppressed recipients, nothing was sent: bob@example.net.',
  idempotency_mismatch: 'This Idempotency-Key was already used with a different request body.',
  invalid_url: 'The URL must use https.',
  too_many_endpoints: 'This account already has 20 webhook endpoints; delete one first.',
  blocked_host: 'The URL host resolves to a private, loopback or reserved address.',
  invalid_template: 'html: line 3: the variable orderNumber is used but not declared in variables.',
  database_unreachable:
    'The database could not be used: could not log in: password authentication failed (password authentication failed for user "mailstead").',
  rate_limited: 'Rate limit reached: over 60 requests a minute from this key. Retry in 12 s.',
  quota_exceeded: 'The daily quota of this account has 0 recipients left today; it resets at 2026-11-03T00:00:00.000Z.',
  sandbox_limit: '1000 sandbox sends in the last 24 hours; try again later.',
  ping_cooldown: 'A test ping was sent to this endpoint in the last ten seconds; retry in 7 s.',
  internal_error: `Internal error; request id ${ID.request}.`,
  send_failed: 'The mail server did not accept the message; nothing was sent. Retry later.',
  not_configured: 'The server cannot store secrets (SECRET_KEY=off).',
  unavailable: 'The service could not record this request: its storage is full (no space left for DATA_DIR). Retry later.',
  method_not_allowed: '/api/v1/domains does not take PUT; it takes GET, HEAD, POST.',
};

/** How a source that does not compile is refused (the language module words the rest of the message). */
const TEMPLATE_SOURCE_ERRORS = [
  'html: line 3, column 14: output "{{ orderNumber }" not closed',
  'html: line 3: the variable orderNumber is used but not declared in variables.',
  'html: a layout must hold {{ content }} exactly once',
];

/** A source refused by the core's own rules before it is compiled (own-templates.ts). */
const TEMPLATE_SOURCE_REFUSALS = [
  'subject: is required',
  'html: a template needs html, text or both',
  'subject: a layout has no subject; its templates give theirs',
  'layout: no layout named brand on this account',
];

const NO_SUB_ACCOUNT = 'No sub-account with that id on this account.';
const NO_DOMAIN = 'No domain with that id on this account.';

/** An operation's own wording of a code, where the code's default message would name the wrong thing. */
export const ERROR_MESSAGES_OF: Record<string, Partial<Record<ErrorCode, string | string[]>>> = {
  sendEmail: {
    unavailable: 'The service could not record this request: its storage is full (no space left for DATA_DIR). Nothing was sent. Retry later.',
  },
  getCapturedMessage: {
    email_not_found: [
      'No email with that id on this account.',
      'Messages are kept only in capture mode (DELIVERY_MODE=capture); this server delivers them.',
      `No captured message of ${TO} for this email.`,
    ],
  },
  createDomain: { not_configured: 'The server cannot store secrets (SECRET_KEY=off), so it cannot keep a DKIM key.' },
  getDomain: { not_found: NO_DOMAIN },
  deleteDomain: { not_found: NO_DOMAIN },
  verifyDomain: { not_found: NO_DOMAIN },
  createSubAccount: { limit_reached: 'This account already has 200 sub-accounts.' },
  getSubAccount: { not_found: NO_SUB_ACCOUNT },
  deleteSubAccount: { not_found: NO_SUB_ACCOUNT },
  suspendSubAccount: {
    not_found: NO_SUB_ACCOUNT,
    conflict: 'This sub-account was suspended by the operator; only support can change that.',
  },
  mintKey: {
    // Besides the key's own scope (keys:write): a scope it asks to grant.
    insufficient_scope: 'This key cannot grant scopes it does not hold: webhooks:write.',
    limit_reached: 'This account already has 50 live keys; revoke one first.',
  },
  revokeKey: { not_found: 'No key with that id on this account.' },
  createWebhook: {
    invalid_url: 'The URL must use https.',
    not_configured: 'This server cannot store secrets (SECRET_KEY=off), so no webhook signing secret can be kept.',
  },
  testWebhook: { not_configured: 'The server cannot read webhook secrets (SECRET_KEY=off).' },
  replayWebhook: {
    limit_reached:
      '9840 deliveries are pending for this endpoint and this replay would add 312; at most 10000 may be pending. Replay again once the receiver has taken some of them, or narrow the window.',
  },
  removeSuppression: { not_found: "bob@example.net is not on this account's suppression list." },
  createTemplate: {
    template_exists: ['A template named order-shipped already exists on this account.', 'receipt is the name of a built-in template; choose another name.'],
    invalid_template: TEMPLATE_SOURCE_ERRORS,
    invalid_request: TEMPLATE_SOURCE_REFUSALS,
  },
  replaceTemplate: {
    conflict: 'receipt is a built-in template and cannot be changed; create your own under another name.',
    invalid_template: TEMPLATE_SOURCE_ERRORS,
    invalid_request: [
      ...TEMPLATE_SOURCE_REFUSALS,
      'name: must be the name in the path; a template is not renamed',
      'kind: order-shipped is a template; its kind cannot change (create a new one instead)',
    ],
  },
  deleteTemplate: { conflict: 'receipt is a built-in template and cannot be deleted.' },
  renderTemplate: {
    invalid_template: TEMPLATE_SOURCE_ERRORS,
    invalid_request: ['trackingUrl: is required by the order-shipped template', 'trackingUrl: must be an http or https URL'],
  },
  connectDatabase: {
    invalid_url: 'sslmode disable is not accepted: the connection always uses TLS (verify or no-verify).',
    blocked_host: 'The database host resolves to a private, loopback or reserved address.',
    not_configured: 'This server cannot store secrets (SECRET_KEY=off), so no database URL can be kept.',
  },
  testDatabase: {
    blocked_host: 'The database host resolves to a private, loopback or reserved address.',
    database_unreachable: 'The database could not be used: could not connect: timed out.',
  },
};

/** The message the route's own validation gives for the operation's refused input in INVALID_INPUTS, if it has one. */
function validationMessage(op: Operation): string | undefined {
  const invalid = INVALID_INPUTS[op.operationId];
  const schema = invalid?.schema ?? (invalid?.body !== undefined ? op.body : op.query);
  if (!invalid || !schema) return undefined;
  try {
    parseInput(schema, invalid.body ?? invalid.query, invalid.body !== undefined ? 'body' : 'query');
  } catch (err) {
    if (err instanceof ApiError && err.code === 'invalid_request') return err.message;
    throw err;
  }
  throw new Error(`API document: the invalid input of ${op.operationId} is accepted`);
}

/**
 * The examples of `code` at `status` for an operation, one per way the service words it: what its validation, its
 * list (a bad limit, a cursor of another list) or its account header rule says, and its own wording; else the code's
 * message. The first is named after the code, the others `<code>: <what>`.
 */
export function errorExamples(op: Operation, code: ErrorCode, status: number, when: string): [string, Json][] {
  const found: { what: string; message: string }[] = [];
  if (code === 'insufficient_scope' && op.auth) {
    const also = op.auth.alsoScope ? ` (or ${op.auth.alsoScope})` : '';
    found.push({ what: 'scope', message: `This key lacks the scope ${op.auth.scope}${also}.` });
  }
  const validation = code === 'invalid_request' && status === 422 ? validationMessage(op) : undefined;
  if (validation) found.push({ what: INVALID_INPUTS[op.operationId]?.body !== undefined ? 'body' : 'query', message: validation });
  if (op.list && code === op.list.badLimit.code && status === op.list.badLimit.status) {
    found.push({ what: 'limit', message: `limit: must be an integer from 1 to ${MAX_LIMIT}` });
  }
  if (op.list && code === op.list.badCursor.code && status === op.list.badCursor.status) {
    found.push({ what: 'cursor', message: `cursor: was not issued by this list (${op.list.name})` });
  }
  if (code === 'invalid_request' && op.auth?.accountHeader === 'refused') {
    found.push({ what: ACCOUNT_HEADER, message: `${ACCOUNT_HEADER}: is not accepted on this endpoint; send it without the header.` });
  }
  const own = ERROR_MESSAGES_OF[op.operationId]?.[code];
  for (const [i, message] of (own === undefined ? [] : typeof own === 'string' ? [own] : own).entries()) found.push({ what: String(i + 1), message });
  if (found.length === 0) found.push({ what: '', message: ERROR_MESSAGES[code] });
  return found.map(({ what, message }, i) => [i === 0 ? code : `${code}: ${what}`, { summary: when, value: { error: { code, message } } }]);
}

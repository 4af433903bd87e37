import type { z } from 'zod';
import { createSubAccountInput, suspendInput } from '../../core/accounts.js';
import { connectDatabaseInput } from '../../core/customer-db.js';
import { createDomainInput } from '../../core/domains.js';
import { capturedMessageQuery, emailFilter } from '../../core/emails.js';
import { eventFilter } from '../../core/events.js';
import { mintKeyInput } from '../../core/keys.js';
import type { Scope } from '../../core/scopes.js';
import { sendRequestSchema } from '../../core/send-request.js';
import { addSuppressionInput, suppressionFilter } from '../../core/suppressions.js';
import { createTemplateBody, renderTemplateBody, replaceTemplateBody } from '../../core/template-input.js';
import { replayInput } from '../../core/webhook-replay.js';
import { createWebhookInput } from '../../core/webhooks.js';
import type { ErrorCode } from '../../shared/errors.js';
import type { AccountHeaderMode } from '../http/auth.js';
import { LISTS, type ListDef } from '../http/paging.js';
import * as r from './resources.js';

/**
 * Every endpoint of the API as data, for the API document: path, scope, how the account header is treated, the
 * request schemas the route validates with (the core's own), the answers and the error codes each can give. The
 * standard failures (key, rate limits, scope, account header, body size, internal error) are added by the document
 * from `auth` and the method; only an endpoint's own errors are listed here. A test walks the app's routes against
 * this table's document both ways.
 */

/** An error an endpoint answers: its code (at the code's usual status unless `status` says otherwise), and when. */
export type ErrorCase = ErrorCode | { code: ErrorCode; status?: number; when?: string };

export interface Answer {
  status: 200 | 201 | 204;
  description: string;
  /** The body, one of the resources; none for a 204. */
  body?: z.ZodType;
  /** A body that is not JSON: its media type and what it holds (a string of bytes). */
  raw?: { mediaType: string; description: string };
  headers?: Record<string, { description: string; schema: Record<string, unknown> }>;
}

export interface Operation {
  method: 'get' | 'post' | 'put' | 'delete';
  /** Relative to /api/v1, in the document's form: `/domains/{id}`. */
  path: string;
  operationId: string;
  tag: string;
  summary: string;
  description?: string;
  /**
   * The scope the key needs (or `alsoScope`, which opens the endpoint too: the template catalog's older scope) and how
   * X-Service-Account is treated; null: served without a key.
   */
  auth: { scope: Scope; alsoScope?: Scope; accountHeader: AccountHeaderMode } | null;
  pathParams?: Record<string, string>;
  /** A keyset-paged list: `limit` and `cursor`, and the list's own answers to a bad one. */
  list?: ListDef;
  /** The query schema the route validates with (its `limit` and `cursor` are the list's), and what each field means. */
  query?: z.ZodObject;
  queryNotes?: Record<string, string>;
  requestHeaders?: Record<string, { description: string; schema: Record<string, unknown> }>;
  /** The body schema the route validates with; with it come `400 invalid_json` and `422 invalid_request`. */
  body?: z.ZodType;
  answers: Answer[];
  errors: ErrorCase[];
}

const ID = { id: 'The id, as its create call answered it.' };

const list = (page: z.ZodType, what: string): Answer => ({ status: 200, description: `A page of ${what}, newest first.`, body: page });
const noContent = (description: string): Answer => ({ status: 204, description });

export const OPERATIONS: Operation[] = [
  // The API itself.
  {
    method: 'get',
    path: '/',
    operationId: 'getApiIndex',
    tag: 'API',
    summary: 'The API index',
    description: 'Served without a key: the API version and a link to this document.',
    auth: null,
    answers: [{ status: 200, description: 'The index.', body: r.apiIndex }],
    errors: [],
  },
  {
    method: 'get',
    path: '/openapi.json',
    operationId: 'getOpenApiDocument',
    tag: 'API',
    summary: 'This document',
    description: 'Served without a key: the OpenAPI 3.1 document of the API, generated from the schemas the routes validate with.',
    auth: null,
    answers: [{ status: 200, description: 'The OpenAPI 3.1 document.' }],
    errors: [],
  },

  // Emails.
  {
    method: 'post',
    path: '/emails',
    operationId: 'sendEmail',
    tag: 'Emails',
    summary: 'Send one message',
    description:
      "Checks run in this order, and the first refusal answers: (1) the key, its scope and the account header; (2) the Idempotency-Key; (3) whether the account, and for a sub-account its parent, may send (suspension, daily quota); (4) whether the paying account has credit; (5) the body, then recipients beyond the quota left; (6) the from-domain; (7) the suppression lists (the parent's too for a sub-account); then the sandbox limit. With `sandbox: true` every check runs, the send is logged `sandboxed`, and nothing is sent, counted or charged. GET /templates lists the templates and their variables.",
    auth: { scope: 'emails:send', accountHeader: 'accepted' },
    requestHeaders: {
      'Idempotency-Key': {
        description: 'Optional, 1 to 255 characters. The same key and body within 24 hours replays the first answer with `Idempotent-Replayed: true`.',
        schema: { type: 'string', minLength: 1, maxLength: 255 },
      },
    },
    body: sendRequestSchema,
    answers: [
      {
        status: 200,
        description: 'The send was logged (and queued, unless sandboxed).',
        body: r.sendResult,
        headers: {
          'Idempotent-Replayed': {
            description: 'Present, `true`, when this is the stored answer to an earlier request with the same key and body.',
            schema: { type: 'string', enum: ['true'] },
          },
        },
      },
    ],
    errors: [
      'invalid_idempotency_key',
      'no_credits',
      'suspended',
      'domain_not_yours',
      'domain_not_ready',
      'idempotency_in_progress',
      'recipient_suppressed',
      'idempotency_mismatch',
      'quota_exceeded',
      'sandbox_limit',
      'send_failed',
    ],
  },
  {
    method: 'get',
    path: '/emails',
    operationId: 'listEmails',
    tag: 'Emails',
    summary: 'The send log',
    auth: { scope: 'emails:read', accountHeader: 'accepted' },
    list: LISTS.emails,
    query: emailFilter,
    queryNotes: { status: 'Only sends with this status.', since: 'Only sends created at or after it: a date-time with a zone offset or Z.' },
    answers: [list(r.emailPage, 'sends')],
    errors: [{ code: 'invalid_request', when: 'A bad status or since.' }],
  },
  {
    method: 'get',
    path: '/emails/{id}',
    operationId: 'getEmail',
    tag: 'Emails',
    summary: 'One send, with its delivery events',
    auth: { scope: 'emails:read', accountHeader: 'accepted' },
    pathParams: ID,
    answers: [{ status: 200, description: 'The send, with `events` per recipient in the order they happened.', body: r.emailWithEvents }],
    errors: ['email_not_found'],
  },
  {
    method: 'get',
    path: '/emails/{id}/message',
    operationId: 'getCapturedMessage',
    tag: 'Emails',
    summary: 'The message one recipient received, in capture mode',
    description:
      'On a server running DELIVERY_MODE=capture (`npm run dev`), where no mail leaves the machine: the raw RFC 5322 message kept for one recipient of the send, byte for byte as it would have gone out, DKIM-signature included. The store keeps the newest 10,000 messages. On a server delivering mail (DELIVERY_MODE=direct) there is none to show: 404.',
    auth: { scope: 'emails:read', accountHeader: 'accepted' },
    pathParams: ID,
    query: capturedMessageQuery,
    queryNotes: { recipient: "One of the send's recipients (compared case-insensitively)." },
    answers: [
      { status: 200, description: 'The message as captured.', raw: { mediaType: 'message/rfc822', description: 'The RFC 5322 message, CRLF line ends.' } },
    ],
    errors: [
      {
        code: 'email_not_found',
        when: 'No email with that id on this account, the server does not capture (DELIVERY_MODE=direct), or no message is kept for that recipient (a sandboxed send, not yet attempted, or dropped as one of the oldest).',
      },
      { code: 'invalid_request', when: '`recipient` is missing or not a string of 1 to 320 characters.' },
    ],
  },

  // Domains.
  {
    method: 'get',
    path: '/domains',
    operationId: 'listDomains',
    tag: 'Domains',
    summary: 'The connected domains',
    auth: { scope: 'domains:read', accountHeader: 'accepted' },
    list: LISTS.domains,
    answers: [list(r.domainPage, 'domains')],
    errors: [],
  },
  {
    method: 'post',
    path: '/domains',
    operationId: 'createDomain',
    tag: 'Domains',
    summary: 'Connect a domain',
    description: 'Answers the four DNS records to publish, each `pending`; then call verify.',
    auth: { scope: 'domains:write', accountHeader: 'accepted' },
    body: createDomainInput,
    answers: [{ status: 201, description: 'The domain, every record pending.', body: r.domain }],
    errors: [
      'domain_exists',
      { code: 'domain_unavailable', when: 'The name is claimed elsewhere (never confirmed as such).' },
      'domain_limit',
      { code: 'not_configured', when: 'The server cannot store secrets, so no DKIM key can be kept.' },
    ],
  },
  {
    method: 'get',
    path: '/domains/{id}',
    operationId: 'getDomain',
    tag: 'Domains',
    summary: 'One domain',
    auth: { scope: 'domains:read', accountHeader: 'accepted' },
    pathParams: ID,
    answers: [{ status: 200, description: "The domain, each record's status from the last verification.", body: r.domain }],
    errors: [{ code: 'not_found', when: 'No domain with that id on this account.' }],
  },
  {
    method: 'delete',
    path: '/domains/{id}',
    operationId: 'deleteDomain',
    tag: 'Domains',
    summary: 'Disconnect a domain',
    auth: { scope: 'domains:write', accountHeader: 'accepted' },
    pathParams: ID,
    answers: [noContent('Disconnected; reconnecting the name returns the same records.')],
    errors: [
      { code: 'not_found', when: 'No domain with that id on this account.' },
      // docs/api/contract.md names it for this endpoint; this service has no mailboxes, so the condition never holds.
      {
        code: 'domain_in_use',
        when: 'Never answered by this service: there are no mailboxes (every local part of a receiving domain is accepted), so no domain is ever in use.',
      },
    ],
  },
  {
    method: 'post',
    path: '/domains/{id}/verify',
    operationId: 'verifyDomain',
    tag: 'Domains',
    summary: 'Read DNS now and store what it shows',
    auth: { scope: 'domains:write', accountHeader: 'accepted' },
    pathParams: ID,
    answers: [{ status: 200, description: 'The domain as it now stands, with what this verification found.', body: r.verifiedDomain }],
    errors: [{ code: 'not_found', when: 'No domain with that id on this account.' }],
  },

  // Accounts.
  {
    method: 'get',
    path: '/account',
    operationId: 'getAccount',
    tag: 'Accounts',
    summary: "The key's account, or the sub-account named by the header",
    auth: { scope: 'accounts:read', accountHeader: 'accepted' },
    answers: [{ status: 200, description: 'The account.', body: r.account }],
    errors: [],
  },
  {
    method: 'get',
    path: '/accounts',
    operationId: 'listSubAccounts',
    tag: 'Accounts',
    summary: 'The sub-accounts',
    auth: { scope: 'accounts:read', accountHeader: 'accepted' },
    list: LISTS.accounts,
    answers: [list(r.accountPage, 'sub-accounts')],
    errors: [],
  },
  {
    method: 'post',
    path: '/accounts',
    operationId: 'createSubAccount',
    tag: 'Accounts',
    summary: 'Open a sub-account',
    auth: { scope: 'accounts:write', accountHeader: 'passed' },
    body: createSubAccountInput,
    answers: [{ status: 201, description: 'The sub-account, parentId set.', body: r.account }],
    errors: [
      { code: 'conflict', when: 'A sub-account tried to open a sub-account (its key, or X-Service-Account sent).' },
      { code: 'limit_reached', when: 'The account already has 200 sub-accounts.' },
    ],
  },
  {
    method: 'get',
    path: '/accounts/{id}',
    operationId: 'getSubAccount',
    tag: 'Accounts',
    summary: 'One sub-account',
    auth: { scope: 'accounts:read', accountHeader: 'refused' },
    pathParams: ID,
    answers: [{ status: 200, description: 'The sub-account.', body: r.account }],
    errors: [{ code: 'not_found', when: 'No sub-account with that id under this account.' }],
  },
  {
    method: 'delete',
    path: '/accounts/{id}',
    operationId: 'deleteSubAccount',
    tag: 'Accounts',
    summary: 'Delete a sub-account and everything under it',
    description: 'Keys, domains, send log, counters, credit and webhooks go with it. There is no undo.',
    auth: { scope: 'accounts:write', accountHeader: 'refused' },
    pathParams: ID,
    answers: [noContent('Deleted.')],
    errors: [{ code: 'not_found', when: 'No sub-account with that id under this account.' }],
  },
  {
    method: 'post',
    path: '/accounts/{id}/suspend',
    operationId: 'suspendSubAccount',
    tag: 'Accounts',
    summary: "Pause or resume a sub-account's sending",
    auth: { scope: 'accounts:write', accountHeader: 'refused' },
    pathParams: ID,
    body: suspendInput,
    answers: [{ status: 200, description: 'The sub-account as it now stands.', body: r.account }],
    errors: [
      { code: 'not_found', when: 'No sub-account with that id under this account.' },
      { code: 'conflict', when: 'The suspension was placed by the operator or the reputation breaker, or the own rates still grade as paused.' },
    ],
  },

  // Keys.
  {
    method: 'get',
    path: '/keys',
    operationId: 'listKeys',
    tag: 'Keys',
    summary: 'The keys of the account, revoked ones included',
    auth: { scope: 'keys:read', accountHeader: 'accepted' },
    list: LISTS.keys,
    answers: [list(r.keyPage, 'keys')],
    errors: [],
  },
  {
    method: 'post',
    path: '/keys',
    operationId: 'mintKey',
    tag: 'Keys',
    summary: 'Mint a key',
    description:
      'It holds at most the scopes of the minting key (all of them when `scopes` is left out). With X-Service-Account it belongs to that sub-account.',
    auth: { scope: 'keys:write', accountHeader: 'accepted' },
    body: mintKeyInput,
    answers: [{ status: 201, description: 'The key, with the full `key` returned only here.', body: r.mintedKey }],
    errors: [
      { code: 'invalid_key', when: 'The minting key was revoked while the request was in flight.' },
      { code: 'insufficient_scope', when: 'The key asks for a scope it does not hold.' },
      { code: 'limit_reached', when: 'The account already has 50 live keys.' },
    ],
  },
  {
    method: 'delete',
    path: '/keys/{id}',
    operationId: 'revokeKey',
    tag: 'Keys',
    summary: 'Revoke a key',
    description: 'Also when already revoked. It stops working at once and stays in the list with `revokedAt` set. A key may revoke itself.',
    auth: { scope: 'keys:write', accountHeader: 'accepted' },
    pathParams: ID,
    answers: [noContent('Revoked.')],
    errors: [{ code: 'not_found', when: 'No key with that id on this account.' }],
  },

  // Webhooks.
  {
    method: 'get',
    path: '/webhooks',
    operationId: 'listWebhooks',
    tag: 'Webhooks',
    summary: 'The webhook endpoints',
    auth: { scope: 'webhooks:read', accountHeader: 'accepted' },
    list: LISTS.webhooks,
    answers: [list(r.webhookEndpointPage, 'webhook endpoints')],
    errors: [],
  },
  {
    method: 'post',
    path: '/webhooks',
    operationId: 'createWebhook',
    tag: 'Webhooks',
    summary: 'Register a webhook endpoint',
    description:
      'The URL must be https, 1 to 2,000 characters, without credentials, and every address its host resolves to public. `events` repeats are dropped.',
    auth: { scope: 'webhooks:write', accountHeader: 'accepted' },
    body: createWebhookInput,
    answers: [{ status: 201, description: 'The endpoint, with its signing `secret` returned only here.', body: r.createdWebhookEndpoint }],
    errors: ['invalid_url', 'too_many_endpoints', { code: 'not_configured', when: 'The server cannot store secrets, so no signing secret can be kept.' }],
  },
  {
    method: 'get',
    path: '/webhooks/{id}',
    operationId: 'getWebhook',
    tag: 'Webhooks',
    summary: 'One webhook endpoint',
    auth: { scope: 'webhooks:read', accountHeader: 'accepted' },
    pathParams: ID,
    answers: [{ status: 200, description: 'The endpoint, never its secret.', body: r.webhookEndpoint }],
    errors: ['webhook_not_found'],
  },
  {
    method: 'delete',
    path: '/webhooks/{id}',
    operationId: 'deleteWebhook',
    tag: 'Webhooks',
    summary: 'Delete a webhook endpoint',
    description: 'Posting stops now, and every delivery queued or kept for it is deleted.',
    auth: { scope: 'webhooks:write', accountHeader: 'accepted' },
    pathParams: ID,
    answers: [noContent('Deleted.')],
    errors: ['webhook_not_found'],
  },
  {
    method: 'post',
    path: '/webhooks/{id}/test',
    operationId: 'testWebhook',
    tag: 'Webhooks',
    summary: 'Post a ping now and wait for the answer',
    description: 'One final attempt, never retried. A successful ping switches an endpoint disabled after 10 consecutive failures back on.',
    auth: { scope: 'webhooks:write', accountHeader: 'accepted' },
    pathParams: ID,
    answers: [{ status: 200, description: 'What the receiver answered.', body: r.webhookTestResult }],
    errors: ['webhook_not_found', 'ping_cooldown', { code: 'not_configured', when: 'The server cannot read webhook secrets.' }],
  },
  {
    method: 'get',
    path: '/webhooks/{id}/deliveries',
    operationId: 'listWebhookDeliveries',
    tag: 'Webhooks',
    summary: "An endpoint's deliveries",
    auth: { scope: 'webhooks:read', accountHeader: 'accepted' },
    pathParams: ID,
    list: LISTS.webhookDeliveries,
    answers: [list(r.webhookDeliveryPage, 'deliveries')],
    errors: ['webhook_not_found'],
  },
  {
    method: 'post',
    path: '/webhooks/{id}/replay',
    operationId: 'replayWebhook',
    tag: 'Webhooks',
    summary: 'Queue again the outcomes of a time window',
    description:
      "Fresh deliveries (new ids, due now) of the acting account's outcomes that occurred in [since, until), oldest first, with the data the original posts had. `events` defaults to the email event types the endpoint subscribes to. A window of more than 10,000 outcomes is refused whole, and so is a replay that would leave more than 10,000 deliveries pending at the endpoint. Answered once every delivery is queued.",
    auth: { scope: 'webhooks:write', accountHeader: 'accepted' },
    pathParams: ID,
    body: replayInput,
    answers: [{ status: 200, description: 'How many deliveries were queued.', body: r.replayResult }],
    errors: [
      'webhook_not_found',
      { code: 'invalid_request', when: 'A bad field, until not after since, or more than 10,000 outcomes in the window.' },
      { code: 'limit_reached', when: 'The endpoint would have more than 10,000 deliveries pending; the message says how many are.' },
    ],
  },

  // Events.
  {
    method: 'get',
    path: '/events',
    operationId: 'listEvents',
    tag: 'Events',
    summary: 'Every recorded delivery outcome',
    description:
      'Recorded whether or not any webhook endpoint exists: walk `since=<last occurredAt seen>` to reconcile after an outage, skipping ids already handled.',
    auth: { scope: 'emails:read', accountHeader: 'accepted' },
    list: LISTS.events,
    query: eventFilter,
    queryNotes: { since: 'Only outcomes that occurred at or after it: a date-time with a zone offset or Z.', type: 'Only outcomes of this event type.' },
    answers: [list(r.outcomeEventPage, 'outcomes')],
    errors: [{ code: 'invalid_request', when: 'A bad since or type.' }],
  },

  // Suppressions.
  {
    method: 'get',
    path: '/suppressions',
    operationId: 'listSuppressions',
    tag: 'Suppressions',
    summary: 'The suppression list',
    auth: { scope: 'suppressions:read', accountHeader: 'accepted' },
    list: LISTS.suppressions,
    query: suppressionFilter,
    queryNotes: { address: 'Only this address (1 to 320 characters, compared lower-cased): a way to ask whether it is listed.' },
    answers: [list(r.suppressionPage, 'suppressions')],
    errors: [{ code: 'invalid_request', when: 'A bad address.' }],
  },
  {
    method: 'post',
    path: '/suppressions',
    operationId: 'addSuppression',
    tag: 'Suppressions',
    summary: 'Add an address to the list',
    auth: { scope: 'suppressions:write', accountHeader: 'accepted' },
    body: addSuppressionInput,
    answers: [
      { status: 201, description: 'A new entry, reason `manual`.', body: r.suppression },
      { status: 200, description: 'The address was already listed: the existing entry.', body: r.suppression },
    ],
    errors: [],
  },
  {
    method: 'delete',
    path: '/suppressions/{address}',
    operationId: 'removeSuppression',
    tag: 'Suppressions',
    summary: 'Remove an address from the list',
    description: "A parent's list is left alone.",
    auth: { scope: 'suppressions:write', accountHeader: 'accepted' },
    pathParams: { address: 'The address, percent-encoded; compared lower-cased.' },
    answers: [noContent('Removed.')],
    errors: [{ code: 'not_found', when: "The address is not on this account's list." }],
  },

  // Database.
  {
    method: 'get',
    path: '/database',
    operationId: 'getDatabase',
    tag: 'Database',
    summary: 'The customer database status',
    description: "The database this account's mail is written to: its own, else its parent's.",
    auth: { scope: 'database:read', accountHeader: 'accepted' },
    answers: [{ status: 200, description: 'The status; `connected` false with the rest empty when none is set.', body: r.databaseStatus }],
    errors: [],
  },
  {
    method: 'post',
    path: '/database',
    operationId: 'connectDatabase',
    tag: 'Database',
    summary: 'Connect a Postgres',
    description:
      'A `postgresql://` URL with a host and a user, over TLS (`sslmode=disable` is refused; `no-verify` is accepted for a self-signed certificate). The service connects, creates schema `service`, then stores the URL encrypted; it is never returned.',
    auth: { scope: 'database:write', accountHeader: 'accepted' },
    body: connectDatabaseInput,
    answers: [{ status: 200, description: 'The status of the connected database.', body: r.databaseStatus }],
    errors: [
      'invalid_url',
      'blocked_host',
      'database_unreachable',
      { code: 'not_configured', when: 'The server cannot store secrets, so no database URL can be kept.' },
    ],
  },
  {
    method: 'post',
    path: '/database/test',
    operationId: 'testDatabase',
    tag: 'Database',
    summary: 'Connect to the stored URL now',
    auth: { scope: 'database:write', accountHeader: 'accepted' },
    answers: [{ status: 200, description: 'The fresh status.', body: r.databaseStatus }],
    errors: ['database_not_connected', 'database_unreachable', 'blocked_host'],
  },
  {
    method: 'delete',
    path: '/database',
    operationId: 'deleteDatabase',
    tag: 'Database',
    summary: 'Forget the database URL and stop writing',
    description: 'The schema and rows in the customer database stay.',
    auth: { scope: 'database:write', accountHeader: 'accepted' },
    answers: [noContent('Forgotten.')],
    errors: [{ code: 'database_not_connected', when: 'No database of its own is set on this account.' }],
  },

  // Templates.
  {
    method: 'get',
    path: '/templates',
    operationId: 'listTemplates',
    tag: 'Templates',
    summary: "The built-in templates and the account's own",
    description:
      "Every template a send can name, sorted by name: the six built-in ones (`builtIn: true`, read-only, their source shown so you can copy one), the account's own templates and layouts, and for a sub-account its parent's (`inherited: true`) unless it has its own of the same name. Keys that hold `emails:send` may list them too.",
    auth: { scope: 'templates:read', alsoScope: 'emails:send', accountHeader: 'accepted' },
    list: LISTS.templates,
    answers: [{ status: 200, description: 'A page of templates, sorted by name.', body: r.templatePage }],
    errors: [],
  },
  {
    method: 'post',
    path: '/templates',
    operationId: 'createTemplate',
    tag: 'Templates',
    summary: 'Save a template or a layout of your own',
    description:
      'A template (`kind: "template"`, the default) needs `subject` and `html`, `text` or both; a layout (`kind: "layout"`) has html holding `{{ content }}` once, no subject and no layout. The source is Liquid: a variable it uses must be declared in `variables`. It is compiled now, with the layout it names, so a mistake shows here and not at the first send. At most 100 templates (layouts included) per account and 256 KB of source (subject, html and text) each.',
    auth: { scope: 'templates:write', accountHeader: 'accepted' },
    body: createTemplateBody,
    answers: [{ status: 201, description: 'The template at version 1.', body: r.template }],
    errors: [
      { code: 'template_exists', when: 'The account already has a template (or layout) of that name.' },
      { code: 'template_exists', when: 'The name is a built-in template.' },
      'template_limit',
      'invalid_template',
      {
        code: 'invalid_request',
        when: "A bad field: a name that is not 1 to 64 of a-z, 0-9 and - (starting with a letter or a digit), a template without subject or without both html and text, a layout with a subject or a layout of its own or without html, a layout named that is not one of the account's (or its parent's) layouts, or a bad `variables` declaration.",
      },
    ],
  },
  {
    method: 'get',
    path: '/templates/{name}',
    operationId: 'getTemplate',
    tag: 'Templates',
    summary: 'One template, with its current source',
    description: "A built-in, the account's own, or (for a sub-account) its parent's, in that order of lookup.",
    auth: { scope: 'templates:read', accountHeader: 'accepted' },
    pathParams: { name: 'The template name.' },
    answers: [{ status: 200, description: 'The template.', body: r.template }],
    errors: ['template_not_found'],
  },
  {
    method: 'put',
    path: '/templates/{name}',
    operationId: 'replaceTemplate',
    tag: 'Templates',
    summary: 'Replace the source of a template, as a new version',
    description:
      "The whole source again (a field left out is gone from the new version), checked as on create; `version` goes up by one and the newest 50 versions are kept. `name`, when given, must be the path's (a template is not renamed) and `kind`, when given, the template's. Only the account's own: a sub-account saves its own copy of a parent's template with POST under the same name.",
    auth: { scope: 'templates:write', accountHeader: 'accepted' },
    pathParams: { name: 'The template name.' },
    body: replaceTemplateBody,
    answers: [{ status: 200, description: 'The template at its new version.', body: r.template }],
    errors: [
      { code: 'template_not_found', when: "The account has no template of that name (a parent's template is read-only for its sub-accounts)." },
      { code: 'conflict', when: 'The name is a built-in template, which is read-only.' },
      'invalid_template',
      {
        code: 'invalid_request',
        when: "A bad field, as on create; or a `name` other than the path's, or a `kind` other than the template's.",
      },
    ],
  },
  {
    method: 'delete',
    path: '/templates/{name}',
    operationId: 'deleteTemplate',
    tag: 'Templates',
    summary: 'Delete a template or a layout, with its versions',
    description: "A layout that templates still name (the account's own, or its sub-accounts' that have no layout of that name) stays until they name another.",
    auth: { scope: 'templates:write', accountHeader: 'accepted' },
    pathParams: { name: 'The template name.' },
    answers: [noContent('Deleted.')],
    errors: [
      { code: 'template_not_found', when: "The account has no template of that name (a parent's template is read-only for its sub-accounts)." },
      { code: 'conflict', when: 'The name is a built-in template, which cannot be deleted.' },
      'template_in_use',
    ],
  },
  {
    method: 'get',
    path: '/templates/{name}/versions',
    operationId: 'listTemplateVersions',
    tag: 'Templates',
    summary: "A template's kept versions",
    description: 'The newest 50 versions are kept; older ones are dropped, and version numbers are never reused. A built-in has none (an empty page).',
    auth: { scope: 'templates:read', accountHeader: 'accepted' },
    pathParams: { name: 'The template name.' },
    list: LISTS.templateVersions,
    answers: [{ status: 200, description: 'A page of versions, newest first.', body: r.templateVersionPage }],
    errors: ['template_not_found'],
  },
  {
    method: 'post',
    path: '/templates/{name}/render',
    operationId: 'renderTemplate',
    tag: 'Templates',
    summary: 'Render a template without sending',
    description:
      "Two forms of body. The variables alone, as a send's `template` object holds them without `name`: the saved template named in the path is rendered, its variables checked by the send's own rules (the same refusals, the field named from the body's root). Or `{ source, variables }`: an unsaved source (the body of POST /templates without `name`) is checked as a save would check it and rendered, for an editor's preview; the path names it, and need not be saved yet. A layout renders around a sample paragraph. Nothing is sent, stored, logged, counted or charged. Keys that hold `emails:send` may render too.",
    auth: { scope: 'templates:read', alsoScope: 'emails:send', accountHeader: 'accepted' },
    pathParams: { name: 'A template name, as GET /templates lists them.' },
    // The route tells the two forms apart, and checks flat variables by the named template's rules (templateVariablesInput).
    body: renderTemplateBody,
    answers: [{ status: 200, description: 'What a send of these variables would carry.', body: r.renderedTemplate }],
    errors: [
      { code: 'template_not_found', when: "Variables alone, and no template of that name (built-in, own or the parent's)." },
      { code: 'invalid_template', when: 'With `source`: the source does not compile; the message says where.' },
    ],
  },
];

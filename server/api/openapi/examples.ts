import type { z } from 'zod';
import { renderChecked } from '../../core/send-request.js';
import type { DeclaredVariable, TemplateRow, TemplateVersionRow } from '../../../db/schema/index.js';
import { builtInViews, ownView, versionView } from '../../core/template-catalog.js';
import { OUTCOME_EVENT_TYPES, type OutcomeStatus } from '../../core/webhook-fanout.js';
import type * as r from './resources.js';

/**
 * The API document's examples, as data: one story (Acme Shop sends a receipt from shop.example to ann@example.net, which
 * is delivered and posted to its webhook endpoint), told once per resource, so every example that names the same thing
 * names it with the same id and time. Requests are what a client sends, responses what the service answers (each typed
 * as the resource schema's output, so the compiler holds them to the resources; tests/openapi-examples.test.ts
 * validates each against its schema in the document, and each request against the route's own validation). The
 * error examples are in error-examples.ts.
 */

/** A UUIDv7 created at `at` (the service's ids: the time in the first 48 bits, so ids sort by creation). */
function uuidv7(at: string, random: string): string {
  const ms = Date.parse(at).toString(16).padStart(12, '0');
  return `${ms.slice(0, 8)}-${ms.slice(8, 12)}-7${random.slice(0, 3)}-a${random.slice(3, 6)}-${random.slice(6, 18)}`;
}

const T = {
  account: '2026-09-14T08:30:00.000Z',
  key: '2026-09-14T08:31:12.204Z',
  keyUsed: '2026-11-02T14:03:27.398Z',
  domain: '2026-09-14T08:40:05.331Z',
  domainChecked: '2026-09-14T09:02:47.118Z',
  webhook: '2026-09-20T16:45:10.027Z',
  database: '2026-09-22T10:05:33.845Z',
  databaseOk: '2026-11-02T14:03:29.221Z',
  subAccount: '2026-10-03T11:20:41.900Z',
  suppression: '2026-10-21T07:12:55.610Z',
  email: '2026-11-02T14:03:27.412Z',
  delivered: '2026-11-02T14:03:28.975Z',
  webhookDelivery: '2026-11-02T14:03:29.040Z',
  delivery2: '2026-11-02T14:03:29.102Z',
  ping: '2026-11-02T15:30:00.518Z',
  layout: '2026-10-12T09:14:03.377Z',
  template: '2026-10-12T09:21:48.051Z',
  templateV2: '2026-10-19T13:02:11.664Z',
  templateV3: '2026-10-27T16:40:57.209Z',
} as const;

const ID = {
  account: uuidv7(T.account, 'bce2473222c56c58f7'),
  key: uuidv7(T.key, 'ec193da22d2f6cc445'),
  domain: uuidv7(T.domain, 'a5dd79b2f903ba965f'),
  webhook: uuidv7(T.webhook, '88f9c7261841b0eae2'),
  subAccount: uuidv7(T.subAccount, 'df48a0e35f014ab2cd'),
  suppression: uuidv7(T.suppression, '8044fdb1b996c77868'),
  email: uuidv7(T.email, '7f404721c427c162fe'),
  event: uuidv7(T.delivered, 'd576f6774b0fd88855'),
  webhookDelivery: uuidv7(T.webhookDelivery, '4cb52395968d8330d4'),
  delivery2: uuidv7(T.delivery2, '27f7a329cd349c2889'),
  ping: uuidv7(T.ping, 'cc8754dd12c0d7d423'),
  layout: uuidv7(T.layout, '3e91b0c47a6d25f810'),
  template: uuidv7(T.template, '9b27d5e0c18f43a6b2'),
  request: 'f3b1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d',
} as const;

/** The ids of the story, for the error examples and the tests. */
export const EXAMPLE_IDS = ID;

const DOMAIN = 'shop.example';
const FROM = `receipts@${DOMAIN}`;
const TO = 'ann@example.net';
const SELECTOR = 'ms967c4928';
const DKIM_PUBLIC_KEY =
  'MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAyhbGxGMzksalrPkO5Hb0xQGmsKB1m0I5YYIUBv33JYKKb4V1CeYgVAXxSaKXFD/nNJS+grjSrOsFWTVI6TkV8N781OxDDerCceBEG9KNx+RaXRcb4fSiAayfKDdWZs7MGWMWgohl/5fnATauAd/IlVz9jvyeQWZboarTdIux86N7CJ496by/rIShy23mScS3PohwpWNpm49DxdU0/6ZnVbq2WdXy4mXUPvA5PSuE41z6FDZo1uqb3lA+9gm88mEuB/uLznQRACu9KgV6Kse2ZR2ZTVQ667NXLO1v7+r6Qvh6u/ANXMh5HP1AcAaJCG91cU+AAS5m7m5c2PDDcS/xRwIDAQAB';
const KEY = 'ms_yf3mOp2HwFAXBcWbo8tVRIqkMRXbGdiStbSuSdV3';
const WEBHOOK_URL = 'https://hooks.shop.example/mailstead';

/** The story's names, for the error examples (error-examples.ts). */
export const EXAMPLE_NAMES = { domain: DOMAIN, recipient: TO } as const;

type Out<S extends z.ZodType> = z.output<S>;

// The resources, one example each.

const receiptVariables = { receiptNumber: 'R-1042', paidOn: '2 November 2026', paymentMethod: 'Visa ending 4242', total: '€48.00' };

export const sendRequest = {
  from: `Acme Shop <${FROM}>`,
  to: TO,
  template: { name: 'receipt', ...receiptVariables },
  tags: { order: '1042' },
};

const account: Out<typeof r.account> = {
  id: ID.account,
  name: 'Acme Shop',
  parentId: null,
  createdAt: T.account,
  sending: {
    tier: 'healthy',
    totalSent: 18_204,
    totalBounced: 91,
    totalComplained: 2,
    sentToday: 312,
    dailyQuota: 10_000,
    effectiveQuota: 10_000,
    suspended: false,
  },
  credits: {
    balance: 31_796,
    state: 'ok',
    freeUntil: null,
    graceDaysLeft: 0,
    graceEmailsLeft: 0,
    totalPurchased: 50_000,
    totalUsed: 18_204,
  },
};

const subAccount: Out<typeof r.account> = {
  ...account,
  id: ID.subAccount,
  name: 'Acme Shop EU',
  parentId: ID.account,
  createdAt: T.subAccount,
  sending: { ...account.sending, totalSent: 0, totalBounced: 0, totalComplained: 0, sentToday: 0, dailyQuota: 1_000, effectiveQuota: 1_000 },
  credits: { ...account.credits, balance: 0, totalPurchased: 0, totalUsed: 0 },
};

const suspendedSubAccount: Out<typeof r.account> = {
  ...subAccount,
  sending: { ...subAccount.sending, suspended: true, suspendedReason: 'Paused for a billing review.' },
};

const key: Out<typeof r.key> = {
  id: ID.key,
  name: 'Checkout server',
  prefix: KEY.slice(0, 11),
  scopes: ['emails:send', 'emails:read'],
  createdAt: T.key,
  lastUsedAt: T.keyUsed,
  revokedAt: null,
};

const mintedKey: Out<typeof r.mintedKey> = { id: ID.key, name: key.name, prefix: key.prefix, scopes: key.scopes, createdAt: T.key, key: KEY };

const records = (status: 'pending' | 'published'): Out<typeof r.dnsRecord>[] => [
  { record: 'Ownership', type: 'TXT', name: `_service-verify.${DOMAIN}`, value: 'service-verify=425243cf8ad85993075e3aaaae4d3abbf4be7f69', status },
  { record: 'SPF', type: 'TXT', name: DOMAIN, value: 'v=spf1 include:mail.mailstead.example ~all', status },
  { record: 'Receiving', type: 'MX', name: DOMAIN, value: '10 mail.mailstead.example', status: 'pending' },
  { record: 'Signing', type: 'TXT', name: `${SELECTOR}._domainkey.${DOMAIN}`, value: `v=DKIM1; h=sha256; k=rsa; p=${DKIM_PUBLIC_KEY}`, status },
];

const newDomain: Out<typeof r.domain> = {
  id: ID.domain,
  name: DOMAIN,
  status: 'pending',
  ownershipVerified: false,
  sending: false,
  receiving: false,
  direct: false,
  records: records('pending'),
  createdAt: T.domain,
  lastCheckedAt: T.domain,
};

const domain: Out<typeof r.domain> = {
  ...newDomain,
  status: 'verified',
  ownershipVerified: true,
  sending: true,
  records: records('published'),
  lastCheckedAt: T.domainChecked,
};

const verifiedDomain: Out<typeof r.verifiedDomain> = {
  ...domain,
  checks: { ownership: 'proven', spf: 'published', receiving: 'missing', signing: 'published' },
};

const email: Out<typeof r.email> = {
  id: ID.email,
  from: FROM,
  to: [TO],
  subject: 'Your receipt R-1042',
  template: 'receipt',
  source: 'api',
  templateVersion: null,
  status: 'sent',
  error: null,
  createdAt: T.email,
  deliveredAt: T.delivered,
  bouncedAt: null,
  complainedAt: null,
  sandbox: false,
  tags: { order: '1042' },
  attachments: [],
};

const DELIVERED = { dsn: '2.0.0', detail: '250 2.0.0 Ok: queued as 4QxT2J1n5Kz9' } as const;

const emailEvent: Out<typeof r.emailEvent> = { recipient: TO, status: 'delivered', ...DELIVERED, occurredAt: T.delivered };

const outcomeEvent: Out<typeof r.outcomeEvent> = {
  id: ID.event,
  type: 'email.delivered',
  emailId: ID.email,
  recipient: TO,
  status: 'delivered',
  ...DELIVERED,
  occurredAt: T.delivered,
};

const suppression: Out<typeof r.suppression> = {
  id: ID.suppression,
  address: 'bob@example.net',
  reason: 'bounce',
  detail: '550 5.1.1 <bob@example.net>: Recipient address rejected: User unknown',
  createdAt: T.suppression,
};

const manualSuppression: Out<typeof r.suppression> = { ...suppression, address: 'carol@example.org', reason: 'manual', detail: '' };

const webhookEndpoint: Out<typeof r.webhookEndpoint> = {
  id: ID.webhook,
  url: WEBHOOK_URL,
  events: ['email.delivered', 'email.bounced', 'email.complained'],
  active: true,
  failureCount: 0,
  disabledAt: null,
  createdAt: T.webhook,
};

const webhookDelivery: Out<typeof r.webhookDelivery> = {
  id: ID.webhookDelivery,
  eventType: 'email.delivered',
  attempts: 1,
  lastStatus: 200,
  lastError: null,
  deliveredAt: T.webhookDelivery,
  nextAttemptAt: null,
  createdAt: T.webhookDelivery,
};

const retriedDelivery: Out<typeof r.webhookDelivery> = {
  id: ID.delivery2,
  eventType: 'email.bounced',
  attempts: 2,
  lastStatus: 503,
  lastError: 'HTTP 503',
  deliveredAt: null,
  nextAttemptAt: '2026-11-02T14:39:29.102Z',
  createdAt: T.delivery2,
};

const databaseStatus: Out<typeof r.databaseStatus> = {
  connected: true,
  host: 'db.shop.example',
  port: 5432,
  database: 'mail',
  user: 'mailstead',
  sslMode: 'verify',
  state: 'connected',
  schemaVersion: 3,
  lastOkAt: T.databaseOk,
  lastError: null,
  updatedAt: T.database,
  pending: 0,
};

// An own template and its layout: Acme Shop's shipping notice in its brand.

const brandVariables: Record<string, DeclaredVariable> = { unsubscribeUrl: { required: false, kind: 'url' } };

const brandSource = {
  html: [
    '<!doctype html><html><head><meta charset="utf-8"><style>.brand { color: #0b6e4f; font-weight: 600 }</style></head>',
    '<body><p class="brand">Acme Shop</p>',
    '{{ content }}',
    '{% if unsubscribeUrl %}<p><a href="{{ unsubscribeUrl }}">Unsubscribe</a></p>{% endif %}</body></html>',
  ].join('\n'),
  text: 'Acme Shop\n\n{{ content }}',
};

const orderVariables: Record<string, DeclaredVariable> = {
  orderNumber: { required: true, kind: 'text' },
  firstName: { required: false, kind: 'text' },
  trackingUrl: { required: true, kind: 'url' },
};

/** The source of each version of order-shipped: the wording changed twice. */
const orderSources = [
  { subject: 'Order {{ orderNumber }} has shipped', html: '<p>Order {{ orderNumber }} has shipped: <a href="{{ trackingUrl }}">track it</a>.</p>' },
  {
    subject: 'Your order {{ orderNumber }} has shipped',
    html: '<p>Hi{% if firstName %} {{ firstName }}{% endif %},</p>\n<p>Order {{ orderNumber }} has shipped: <a href="{{ trackingUrl }}">track it</a>.</p>',
  },
  {
    subject: 'Your order {{ orderNumber }} is on its way',
    html: '<p>Hi{% if firstName %} {{ firstName }}{% endif %},</p>\n<p>Order <strong>{{ orderNumber }}</strong> is on its way.</p>\n<p><a href="{{ trackingUrl }}">Track your parcel</a></p>',
  },
] as const;

const VERSION_TIMES = [T.template, T.templateV2, T.templateV3] as const;

const layoutRow: TemplateRow = {
  id: ID.layout,
  accountId: ID.account,
  name: 'brand',
  kind: 'layout',
  version: 1,
  createdAt: Date.parse(T.layout),
  updatedAt: Date.parse(T.layout),
};
const layoutVersion: TemplateVersionRow = {
  templateId: ID.layout,
  version: 1,
  subject: null,
  ...brandSource,
  layout: null,
  variables: brandVariables,
  createdAt: Date.parse(T.layout),
};

const orderVersions: TemplateVersionRow[] = orderSources.map((source, i) => ({
  templateId: ID.template,
  version: i + 1,
  ...source,
  text: null,
  layout: 'brand',
  variables: orderVariables,
  createdAt: Date.parse(VERSION_TIMES[i]!),
}));

const orderRow = (version: number): TemplateRow => ({
  id: ID.template,
  accountId: ID.account,
  name: 'order-shipped',
  kind: 'template',
  version,
  createdAt: Date.parse(T.template),
  updatedAt: Date.parse(VERSION_TIMES[version - 1]!),
});

/** order-shipped at a version, as the API shows it. */
const orderShipped = (version: number): Out<typeof r.template> => ownView({ row: orderRow(version), version: orderVersions[version - 1]!, origin: 'own' });

const brandLayout: Out<typeof r.template> = ownView({ row: layoutRow, version: layoutVersion, origin: 'own' });

const byName = (a: { name: string }, b: { name: string }) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** A template's body as POST /templates takes it (`variables` as declared: `kind` text and `required` false are defaults). */
const createOrderShipped = {
  name: 'order-shipped',
  subject: orderSources[0].subject,
  html: orderSources[0].html,
  layout: 'brand',
  variables: { orderNumber: { required: true }, firstName: {}, trackingUrl: { required: true, kind: 'url' } },
};

const { name: _name, ...orderShippedSource } = createOrderShipped;
/** PUT /templates/order-shipped: the whole source again, as version 3 has it. */
const replaceOrderShipped = { ...orderShippedSource, subject: orderSources[2].subject, html: orderSources[2].html };

const orderShippedVariables = { orderNumber: '1042', firstName: 'Ann', trackingUrl: 'https://track.example/parcels/JD014600003SE' };

/** A cursor as the lists issue them: base64url JSON naming the list, the account and the last id, and a MAC. */
const cursor = (list: string, lastId: string) =>
  `${Buffer.from(JSON.stringify({ l: list, a: ID.account, k: lastId })).toString('base64url')}.Qm9vHk1x4kR2c0FtcGxlTWFj`;

const page = <T>(data: T[], list: string | null) => ({ data, nextCursor: list === null ? null : cursor(list, (data.at(-1) as { id: string }).id) });

/**
 * The default example of each resource a response answers, by the export name of its schema in resources.ts (the
 * component's name in the document, pascal-cased). An answer takes its resource's example unless ANSWER_EXAMPLES has
 * one for its operation and status.
 */
export const RESOURCE_EXAMPLES: { [K in keyof typeof r]?: Out<(typeof r)[K]> } = {
  apiIndex: { name: 'Mailstead API', version: 'v1', links: { openapi: '/api/v1/openapi.json' } },
  sendResult: { id: ID.email, sandbox: false },
  email,
  emailEvent,
  emailWithEvents: { ...email, events: [emailEvent] },
  domain,
  verifiedDomain,
  account,
  key,
  mintedKey,
  suppression,
  webhookEndpoint,
  createdWebhookEndpoint: { ...webhookEndpoint, secret: 'whsec_tiNksNt3d25Py3O0stH8HW8gFieou86RiktF/CL92hc=' },
  webhookTestResult: { id: ID.ping, status: 200, delivered: true, error: null },
  webhookDelivery,
  replayResult: { queued: 312 },
  outcomeEvent,
  databaseStatus,
  template: orderShipped(3),
  templateVersion: versionView(orderVersions[2]!),
  templatePage: { data: [...builtInViews(), brandLayout, orderShipped(3)].sort(byName), nextCursor: null },
  templateVersionPage: { data: orderVersions.map(versionView).reverse(), nextCursor: null },
  renderedTemplate: renderChecked({ name: 'receipt', vars: receiptVariables }),
  accountPage: page([subAccount], null),
  keyPage: page([key], null),
  domainPage: page([domain], null),
  emailPage: page([email], 'emails'),
  outcomeEventPage: page([outcomeEvent], 'events'),
  suppressionPage: page([suppression], 'suppressions'),
  webhookEndpointPage: page([webhookEndpoint], null),
  webhookDeliveryPage: page([retriedDelivery, webhookDelivery], null),
  errorBody: { error: { code: 'not_found', message: 'No domain with that id on this account.' } },
  outcomeEventData: { messageId: ID.email, recipient: TO, status: 'delivered', ...DELIVERED, occurredAt: T.delivered, from: FROM, tags: { order: '1042' } },
  emailEventPost: {
    id: ID.webhookDelivery,
    type: 'email.delivered',
    createdAt: T.webhookDelivery,
    data: { messageId: ID.email, recipient: TO, status: 'delivered', ...DELIVERED, occurredAt: T.delivered, from: FROM, tags: { order: '1042' } },
  },
  pingPost: { id: ID.ping, type: 'ping', createdAt: T.ping, data: { endpointId: ID.webhook } },
};

const CAPTURED_MESSAGE = [
  `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=${DOMAIN}; s=${SELECTOR};`,
  ' h=from:to:subject:date:message-id:mime-version:content-type; bh=q2VBMoCFAa6W3aTk/mp1nJ0vu9rH2yD+eQ4m6Qx5w1E=;',
  ' b=NQZ3n0cJq1kz8mX5a0pW7yVvR2s4tBf9hL6dE1gC3iU8oA5rK7wT2xY9zS4vP0nM6jH1bF3cD8eG5aL2kQ7wR9tY0uI4oP6sA3dF8gH1jK5lZ2xC7vB9nM4qW6eR0tY3uI8oP1aS5dF7gH2jK4lZ9xC6vB3nM8qW1eR5tY7uI0oP2aS4dF6gH9jK3lZ8x==',
  `From: Acme Shop <${FROM}>`,
  `To: ${TO}`,
  'Subject: Your receipt R-1042',
  'Date: Mon, 02 Nov 2026 14:03:27 +0000',
  `Message-ID: <${ID.email}@${DOMAIN}>`,
  'MIME-Version: 1.0',
  'Content-Type: multipart/alternative; boundary="--_mailstead_7f404721"',
  '',
  '----_mailstead_7f404721',
  'Content-Type: text/plain; charset=utf-8',
  'Content-Transfer-Encoding: quoted-printable',
  '',
  'Receipt R-1042',
  '',
  '...',
  '----_mailstead_7f404721--',
  '',
].join('\r\n');

/** An operation's answer whose example is not its resource's default, by operationId and status. */
export const ANSWER_EXAMPLES: Record<string, Record<number, unknown>> = {
  getOpenApiDocument: {
    200: {
      openapi: '3.1.0',
      info: { title: 'Mailstead API', version: 'v1' },
      servers: [{ url: '/api/v1' }],
      paths: { '/emails': { post: { operationId: 'sendEmail', summary: 'Send one message' } } },
    },
  },
  getCapturedMessage: { 200: CAPTURED_MESSAGE },
  createDomain: { 201: newDomain },
  createSubAccount: { 201: subAccount },
  getSubAccount: { 200: subAccount },
  suspendSubAccount: { 200: suspendedSubAccount },
  addSuppression: { 201: manualSuppression, 200: manualSuppression },
  createTemplate: { 201: orderShipped(1) },
};

/** The body each operation that takes one is sent with, by operationId. */
export const REQUEST_EXAMPLES: Record<string, unknown> = {
  sendEmail: sendRequest,
  createDomain: { name: DOMAIN },
  createSubAccount: { name: 'Acme Shop EU' },
  suspendSubAccount: { suspended: true, reason: 'Paused for a billing review.' },
  mintKey: { name: 'Checkout server', scopes: ['emails:send', 'emails:read'] },
  createWebhook: { url: WEBHOOK_URL, events: ['email.delivered', 'email.bounced', 'email.complained'] },
  replayWebhook: { since: '2026-11-02T00:00:00Z', until: '2026-11-03T00:00:00Z', events: ['email.delivered'] },
  addSuppression: { address: 'carol@example.org' },
  connectDatabase: { url: 'postgresql://mailstead:s3cret-Pa55@db.shop.example:5432/mail?sslmode=verify-full' },
  renderTemplate: receiptVariables,
  createTemplate: createOrderShipped,
  replaceTemplate: replaceOrderShipped,
};

/**
 * Further request examples of an operation whose body takes more than one form, by operationId and name (the
 * document then lists them with REQUEST_EXAMPLES' one, named `default`).
 */
export const MORE_REQUEST_EXAMPLES: Record<string, Record<string, { summary: string; value: unknown }>> = {
  renderTemplate: {
    'unsaved source': {
      summary: 'An unsaved template previewed in its layout, with sample variables (POST /templates/order-shipped/render).',
      value: {
        source: { subject: orderSources[2].subject, html: orderSources[2].html, layout: 'brand', variables: createOrderShipped.variables },
        variables: orderShippedVariables,
      },
    },
    'saved template': {
      summary: 'The saved order-shipped template with sample variables (POST /templates/order-shipped/render).',
      value: orderShippedVariables,
    },
  },
};

/** What the receiving server said, per outcome status (a complaint comes from a feedback report, not a reply). */
const OUTCOMES: Record<OutcomeStatus, { dsn: string; detail: string }> = {
  delivered: DELIVERED,
  bounced: { dsn: '5.1.1', detail: `550 5.1.1 <${TO}>: Recipient address rejected: User unknown` },
  deferred: { dsn: '4.2.2', detail: '452 4.2.2 Mailbox full, try again later' },
  complained: { dsn: '5.7.1', detail: 'Complaint (feedback report: abuse)' },
};

/** The body of the post of an outcome of `status`, as its endpoint receives it. */
export function webhookPostExample(status: OutcomeStatus): Out<typeof r.emailEventPost> {
  const post = RESOURCE_EXAMPLES.emailEventPost!;
  return { ...post, type: OUTCOME_EVENT_TYPES[status], data: { ...post.data, status, ...OUTCOMES[status] } };
}

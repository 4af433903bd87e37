import { z } from 'zod';
import {
  CUSTOMER_DB_SSL_MODES,
  CUSTOMER_DB_STATES,
  EMAIL_SOURCES,
  EMAIL_STATUSES,
  EVENT_STATUSES,
  SUPPRESSION_REASONS,
  WEBHOOK_EVENT_TYPES,
} from '../../../db/schema/index.js';
import type { AccountView } from '../../core/accounts.js';
import type { DatabaseStatus } from '../../core/customer-db.js';
import type { DomainView } from '../../core/domains.js';
import type { Checks } from '../../core/domain-checks.js';
import type { EmailView, EventView } from '../../core/emails.js';
import { EMAIL_EVENT_TYPES, type EventItem } from '../../core/events.js';
import type { KeyView, MintedKeyView } from '../../core/keys.js';
import { SCOPES } from '../../core/scopes.js';
import type { SendResult } from '../../core/sending.js';
import type { Warning } from '../../core/sending-policy.js';
import type { SuppressionView } from '../../core/suppressions.js';
import type { TemplateVersionView, TemplateView } from '../../core/template-catalog.js';
import type { Rendered } from '../../core/templates.js';
import type { WebhookDeliveryView, WebhookEndpointView } from '../../core/webhooks.js';
import type { PingResult } from '../../webhooks/dispatcher.js';
import type { OutcomeEventData } from '../../core/webhook-fanout.js';
import { ERROR_STATUS } from '../../shared/errors.js';

/**
 * The resources the API answers with, as zod schemas for the API document (requests are validated by the core's own
 * schemas; these describe what comes back). Each is tied at compile time to the type the core returns: `documents<V>()`
 * accepts a schema only if every value it describes is a V, so a field the core adds, renames or retypes breaks the
 * build until it is documented. Each exported schema is a component of the document, named after its export. The
 * route tests check the other way round: every answer validates against the document (objects are closed, so an
 * undocumented field fails there).
 */

const documents =
  <View>() =>
  <S extends z.ZodType<View>>(schema: S): S =>
    schema;

const id = z.uuid().describe('An id (UUIDv7: ids increase in creation order).');
const timestamp = z.iso.datetime().describe('ISO 8601 date-time in UTC with milliseconds.');
const nullableTimestamp = timestamp.nullable();

export const warning = documents<Warning>()(
  z
    .strictObject({
      code: z.enum(['trial', 'grace']),
      message: z.string(),
      freeUntil: timestamp.optional().describe('With `trial`: when the free trial ends.'),
      graceDaysLeft: z.int().min(0).optional().describe('With `grace`: days of the grace window left after this send.'),
      graceEmailsLeft: z.int().min(0).optional().describe('With `grace`: sends of the grace window left after this send.'),
    })
    .describe('Present while the paying account is on its free trial or in the grace window after credits ran out.'),
);

export const sendResult = documents<SendResult>()(
  z.strictObject({
    id: id.describe('Id of the logged send; GET /emails/{id} reads it.'),
    sandbox: z.boolean(),
    warning: warning.optional(),
  }),
);

const tags = z.record(z.string(), z.string()).describe('The tags the send carried.');

export const email = documents<EmailView>()(
  z.strictObject({
    id,
    from: z.string().describe('Sender address.'),
    to: z.array(z.string()).describe('Recipient addresses.'),
    subject: z.string(),
    template: z.string().nullable().describe('Template name; null for a message submitted over SMTP.'),
    source: z.enum(EMAIL_SOURCES).describe('How the send came in: `api` (POST /emails) or `smtp` (SMTP submission on the submission ports).'),
    templateVersion: z.int().min(1).nullable().describe("The version of the account's own template that was sent; null for a built-in."),
    status: z.enum(EMAIL_STATUSES),
    error: z.string().nullable(),
    createdAt: timestamp,
    deliveredAt: nullableTimestamp,
    bouncedAt: nullableTimestamp,
    complainedAt: nullableTimestamp,
    sandbox: z.boolean(),
    tags: tags.optional(),
    attachments: z
      .array(
        z.strictObject({
          filename: z.string(),
          contentType: z.string(),
          size: z.int().min(0).describe('Bytes, decoded.'),
          sha256: z.string().describe('SHA-256 of the bytes, hex.'),
          contentId: z.string().nullable().describe('Set for an inline part referenced from html as `cid:<contentId>`.'),
        }),
      )
      .describe('What was attached (never the bytes: they are kept only until delivered); empty when nothing was.'),
  }),
);

export const emailEvent = documents<EventView>()(
  z.strictObject({
    recipient: z.string(),
    status: z.enum(EVENT_STATUSES),
    dsn: z.string().describe('Enhanced status code, such as 2.0.0 or 5.1.1.'),
    detail: z.string().describe("The receiving server's reply text."),
    occurredAt: timestamp,
  }),
);

export const emailWithEvents = documents<EmailView & { events: EventView[] }>()(
  email.extend({ events: z.array(emailEvent).describe('Per recipient, in the order they happened; none for a sandboxed or failed send.') }),
);

const recordStatus = z.enum(['pending', 'published']);

export const dnsRecord = z.strictObject({
  record: z.enum(['Ownership', 'SPF', 'Receiving', 'Signing']),
  type: z.enum(['TXT', 'MX']),
  name: z.string().describe('DNS name.'),
  value: z.string().describe('DNS value.'),
  status: recordStatus.describe('What the last verification found.'),
});

export const domain = documents<DomainView>()(
  z.strictObject({
    id,
    name: z.string().describe('Bare domain, lower-cased.'),
    status: z.enum(['pending', 'verified']),
    ownershipVerified: z.boolean(),
    sending: z.boolean(),
    receiving: z.boolean(),
    direct: z.boolean(),
    records: z.array(dnsRecord),
    createdAt: timestamp,
    lastCheckedAt: timestamp,
  }),
);

const checkValue = z.enum(['proven', 'published', 'missing', 'unknown']).describe('`unknown`: a resolver did not answer, and the last result stands.');

export const verifiedDomain = documents<DomainView & { checks: Checks }>()(
  domain.extend({
    checks: z
      .strictObject({ ownership: checkValue, spf: checkValue, receiving: checkValue, signing: checkValue })
      .describe('What this verification found, per record.'),
  }),
);

export const account = documents<AccountView>()(
  z.strictObject({
    id,
    name: z.string(),
    parentId: id.nullable().describe('Null for a top-level account.'),
    createdAt: timestamp,
    sending: z.strictObject({
      tier: z.enum(['healthy', 'warning', 'throttled', 'paused']),
      totalSent: z.int().min(0),
      totalBounced: z.int().min(0),
      totalComplained: z.int().min(0),
      sentToday: z.int().min(0).describe('Recipients sent to today (UTC).'),
      dailyQuota: z.int().min(0),
      effectiveQuota: z.int().min(0).describe('dailyQuota, or a tenth of it while the tier is throttled.'),
      suspended: z.boolean(),
      suspendedReason: z.string().optional().describe('Present while suspended.'),
    }),
    credits: z.strictObject({
      balance: z.int(),
      state: z.enum(['trial', 'ok', 'grace', 'exhausted']),
      freeUntil: nullableTimestamp,
      graceDaysLeft: z.int().min(0),
      graceEmailsLeft: z.int().min(0),
      totalPurchased: z.int().min(0),
      totalUsed: z.int().min(0),
    }),
  }),
);

const scope = z.enum(SCOPES);

export const key = documents<KeyView>()(
  z.strictObject({
    id,
    name: z.string(),
    prefix: z.string().describe('The leading characters of the key, for recognition.'),
    scopes: z.array(scope),
    createdAt: timestamp,
    lastUsedAt: nullableTimestamp,
    revokedAt: nullableTimestamp,
  }),
);

export const mintedKey = documents<MintedKeyView>()(
  z.strictObject({
    id,
    name: z.string(),
    prefix: z.string(),
    scopes: z.array(scope),
    createdAt: timestamp,
    key: z.string().describe('The full key, returned only here, once.'),
  }),
);

export const suppression = documents<SuppressionView>()(
  z.strictObject({
    id,
    address: z.string().describe('Lower-cased.'),
    reason: z.enum(SUPPRESSION_REASONS),
    detail: z.string().describe("The receiving server's reply text, for a bounce."),
    createdAt: timestamp,
  }),
);

export const webhookEndpoint = documents<WebhookEndpointView>()(
  z.strictObject({
    id,
    url: z.string(),
    events: z.array(z.enum(WEBHOOK_EVENT_TYPES)),
    active: z.boolean().describe('False once switched off after 10 consecutive failures.'),
    failureCount: z.int().min(0).describe('Consecutive failures.'),
    disabledAt: nullableTimestamp,
    createdAt: timestamp,
  }),
);

export const createdWebhookEndpoint = documents<WebhookEndpointView & { secret: string }>()(
  webhookEndpoint.extend({ secret: z.string().describe('The signing secret (`whsec_...`), returned only here, once.') }),
);

export const webhookTestResult = documents<PingResult>()(
  z.strictObject({
    id: id.describe('The delivery id of the ping.'),
    status: z.int().nullable().describe('The HTTP status the receiver answered, or null when none.'),
    delivered: z.boolean(),
    error: z.string().nullable(),
  }),
);

export const webhookDelivery = documents<WebhookDeliveryView>()(
  z.strictObject({
    id,
    eventType: z.enum(WEBHOOK_EVENT_TYPES),
    attempts: z.int().min(0),
    lastStatus: z.int().nullable().describe('The status the receiver returned at the last attempt.'),
    lastError: z.string().nullable().describe('Such as `HTTP 503`, `timeout`, `connection_refused`, `dns_error`, `tls_error`, `blocked_host`.'),
    deliveredAt: nullableTimestamp,
    nextAttemptAt: nullableTimestamp,
    createdAt: timestamp,
  }),
);

export const replayResult = documents<{ queued: number }>()(z.strictObject({ queued: z.int().min(0).describe('Deliveries queued.') }));

export const outcomeEvent = documents<EventItem>()(
  z.strictObject({
    id: id.describe('The outcome id (the same in the customer database).'),
    type: z.enum(EMAIL_EVENT_TYPES),
    emailId: id,
    recipient: z.string(),
    status: z.enum(EVENT_STATUSES),
    dsn: z.string(),
    detail: z.string(),
    occurredAt: timestamp,
  }),
);

export const databaseStatus = documents<DatabaseStatus>()(
  z.strictObject({
    connected: z.boolean().describe('False, with every other field null and pending 0, when no database is set.'),
    host: z.string().nullable(),
    port: z.int().nullable(),
    database: z.string().nullable(),
    user: z.string().nullable(),
    sslMode: z.enum(CUSTOMER_DB_SSL_MODES).nullable(),
    state: z.enum(CUSTOMER_DB_STATES).nullable(),
    schemaVersion: z.int().nullable(),
    lastOkAt: nullableTimestamp,
    lastError: z.string().nullable(),
    updatedAt: nullableTimestamp,
    pending: z.int().min(0).describe('Writes waiting because the database could not be reached.'),
  }),
);

const templateVariable = z.strictObject({
  required: z.boolean(),
  kind: z.enum(['text', 'url']).describe('`url`: must be an http or https URL, and is only placed where an attribute takes a URL.'),
  maxLength: z.int().min(1).describe('The longest value accepted, counted in lengthUnit.'),
  lengthUnit: z.enum(['characters', 'bytes']).describe('`characters` are code points; `bytes` are of UTF-8.'),
});

export const template = documents<TemplateView>()(
  z.strictObject({
    name: z.string().describe('What a send names in `template.name`.'),
    kind: z.enum(['template', 'layout']).describe('A layout wraps the templates that name it: its html holds `{{ content }}` once.'),
    builtIn: z.boolean().describe('A template of the service: read-only; its source is shown so it can be copied.'),
    inherited: z.boolean().describe("The parent account's template, read-only for this sub-account, which may save its own under the same name."),
    description: z.string().nullable().describe('What a built-in template is for; null for an own one.'),
    subject: z.string().nullable().describe('Liquid source of the Subject; null for a layout.'),
    html: z.string().nullable().describe('Liquid source of the html part (variables are HTML-escaped).'),
    text: z.string().nullable().describe('Liquid source of the text part; when null, the text is generated from the html.'),
    layout: z.string().nullable().describe('The name of the layout that wraps it, or null.'),
    variables: z.record(z.string(), templateVariable).describe('The variables a send may give, by name.'),
    version: z.int().min(1).nullable().describe('The current version, from 1; null for a built-in.'),
    createdAt: z.iso.datetime().nullable(),
    updatedAt: z.iso.datetime().nullable(),
  }),
);

export const templateVersion = documents<TemplateVersionView>()(
  z.strictObject({
    version: z.int().min(1),
    subject: z.string().nullable(),
    html: z.string().nullable(),
    text: z.string().nullable(),
    layout: z.string().nullable(),
    variables: z.record(z.string(), templateVariable),
    createdAt: z.iso.datetime(),
  }),
);

export const renderedTemplate = documents<Rendered>()(
  z.strictObject({ subject: z.string(), html: z.string().describe('Every variable HTML-escaped.'), text: z.string() }),
);

export const apiIndex = z.strictObject({
  name: z.string(),
  version: z.literal('v1'),
  links: z.strictObject({ openapi: z.string().describe('This API document (OpenAPI 3.1).') }),
});

/** `{ data, nextCursor }` of a keyset-paged list. */
const pageOf = <T extends z.ZodType>(item: T) =>
  z.strictObject({ data: z.array(item), nextCursor: z.string().nullable().describe('Pass back as `cursor`; null on the last page.') });

export const accountPage = pageOf(account);
export const keyPage = pageOf(key);
export const domainPage = pageOf(domain);
export const emailPage = pageOf(email);
export const outcomeEventPage = pageOf(outcomeEvent);
export const suppressionPage = pageOf(suppression);
export const webhookEndpointPage = pageOf(webhookEndpoint);
export const webhookDeliveryPage = pageOf(webhookDelivery);
export const templatePage = pageOf(template);
export const templateVersionPage = pageOf(templateVersion);

export const errorBody = z.strictObject({
  error: z.strictObject({
    code: z.enum(Object.keys(ERROR_STATUS) as [keyof typeof ERROR_STATUS, ...(keyof typeof ERROR_STATUS)[]]).describe('What clients branch on.'),
    message: z.string().describe('For a person; may change.'),
  }),
});

/** The `data` of an email event's post. */
export const outcomeEventData = documents<OutcomeEventData>()(
  z.strictObject({
    messageId: id.describe('The email id, as POST /emails answered it.'),
    recipient: z.string(),
    status: z.enum(EVENT_STATUSES),
    dsn: z.string(),
    detail: z.string(),
    occurredAt: timestamp,
    from: z.string().describe('Sender address.'),
    tags: tags.optional(),
  }),
);

export const emailEventPost = z.strictObject({
  id: id.describe('The delivery id, also in X-Service-Delivery and webhook-id: drop one already handled.'),
  type: z.enum(EMAIL_EVENT_TYPES).describe('Also in X-Service-Event.'),
  createdAt: timestamp,
  data: outcomeEventData,
});

export const pingPost = z.strictObject({
  id,
  type: z.literal('ping'),
  createdAt: timestamp,
  data: z.strictObject({ endpointId: id }),
});

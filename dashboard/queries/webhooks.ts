import { type SQL, and, count, eq, gt, isNotNull, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { type WebhookDeliveryRow, type WebhookEndpointRow, accounts, webhookDeliveries, webhookEndpoints } from '../../db/schema/index.js';
import { type WebhookDeliveryView, type WebhookEndpointView, deliveryView, endpointView } from '../../server/core/webhooks.js';
import { ApiError } from '../../server/shared/errors.js';
import { isUuid } from '../../server/shared/ids.js';
import { WEBHOOK_DISABLE_AFTER_FAILURES } from '../../server/core/webhook-schedule.js';
import type { BadgeTone } from '../ui.js';
import { type IdPage, PAGE_SIZE, type PageLink, pageByIds } from './id-pages.js';
import { one } from '../../db/sql.js';

/**
 * Webhook endpoints and deliveries across all accounts, for the operator (the API lists one account's only). Rows
 * are presented through the API's own views (endpointView, deliveryView), so a field means the same thing in both.
 */

/**
 * An endpoint's health, from the fields the dispatcher keeps: `failureCount` counts consecutive failed attempts and
 * the service switches the endpoint off (`active` false) at WEBHOOK_DISABLE_AFTER_FAILURES. Policy as data: the
 * label, the badge and the list filter of each state.
 */
export const ENDPOINT_HEALTH = {
  enabled: { label: 'Enabled', tone: 'ok', where: () => and(eq(webhookEndpoints.active, true), eq(webhookEndpoints.failureCount, 0)) },
  failing: { label: 'Failing', tone: 'warn', where: () => and(eq(webhookEndpoints.active, true), gt(webhookEndpoints.failureCount, 0)) },
  disabled: { label: 'Disabled', tone: 'bad', where: () => eq(webhookEndpoints.active, false) },
} as const satisfies Record<string, { label: string; tone: BadgeTone; where: () => SQL | undefined }>;

export type EndpointHealth = keyof typeof ENDPOINT_HEALTH;

export function isEndpointHealth(s: string): s is EndpointHealth {
  return Object.hasOwn(ENDPOINT_HEALTH, s);
}

export function healthOf(view: WebhookEndpointView): EndpointHealth {
  if (!view.active) return 'disabled';
  return view.failureCount > 0 ? 'failing' : 'enabled';
}

/** Why an endpoint is in its state, in a sentence (null when all is well). */
export function healthReason(view: WebhookEndpointView, lastError: string | null): string | null {
  const cause = lastError ? ` The last failure: ${lastError}.` : '';
  if (!view.active)
    return `Switched off by the service after ${WEBHOOK_DISABLE_AFTER_FAILURES} consecutive failed attempts; nothing is posted until it is re-enabled or a test ping succeeds.${cause}`;
  if (view.failureCount > 0)
    return `${view.failureCount} consecutive failed ${view.failureCount === 1 ? 'attempt' : 'attempts'}; at ${WEBHOOK_DISABLE_AFTER_FAILURES} the service switches it off.${cause}`;
  return null;
}

export interface EndpointSummary {
  view: WebhookEndpointView;
  accountId: string;
  accountName: string;
  /** The latest delivered post (a ping included): the receiver answered 2xx then. */
  lastDeliveredAt: number | null;
  /** The latest failed answer of an email event while the endpoint is failing or off (pings never count). */
  lastError: string | null;
}

/**
 * How many of an endpoint's newest deliveries the two summaries look at. A retry can succeed or fail hours after
 * deliveries made since (retries never hold back later ones), so the newest delivery is not the latest answer: the
 * latest answer among this many is, unless this many newer ones were answered since, which then are just as recent.
 */
const RECENT_DELIVERIES = 200;

// Over the (endpoint_id, id) index, newest first, RECENT_DELIVERIES at most. The last error is looked for only while
// failures are being counted, so a healthy endpoint's history is never walked; its attempts (in the order they were
// made) say which failure came last.
const lastDeliveredAt = sql<number | null>`(select max(r.delivered_at) from (select d.delivered_at from webhook_deliveries d
  where d.endpoint_id = ${webhookEndpoints.id} and d.delivered_at is not null order by d.id desc limit ${RECENT_DELIVERIES}) r)`;
const lastError = sql<string | null>`case when ${webhookEndpoints.failureCount} > 0 or not ${webhookEndpoints.active} then
  coalesce((select a.error from webhook_attempts a join (select d.id from webhook_deliveries d
     where d.endpoint_id = ${webhookEndpoints.id} and d.event_type <> 'ping' and d.last_error is not null
     order by d.id desc limit ${RECENT_DELIVERIES}) r on a.delivery_id = r.id
   where not a.delivered and a.error is not null order by a.seq desc limit 1),
  (select d.last_error from webhook_deliveries d
   where d.endpoint_id = ${webhookEndpoints.id} and d.event_type <> 'ping' and d.last_error is not null order by d.id desc limit 1)) end`;

const summaryColumns = { endpoint: webhookEndpoints, accountName: accounts.name, lastDeliveredAt, lastError };

function toSummary(r: { endpoint: WebhookEndpointRow; accountName: string; lastDeliveredAt: number | null; lastError: string | null }): EndpointSummary {
  return {
    view: endpointView(r.endpoint),
    accountId: r.endpoint.accountId,
    accountName: r.accountName,
    lastDeliveredAt: r.lastDeliveredAt,
    lastError: r.lastError,
  };
}

export interface EndpointFilter {
  accountId?: string | undefined;
  health?: EndpointHealth | undefined;
}

/** Every account's endpoints, newest first, filtered by account and health, `limit` to a page. */
export async function listEndpoints(db: Db, filter: EndpointFilter, link: PageLink, limit = PAGE_SIZE): Promise<IdPage<EndpointSummary>> {
  const where = and(
    filter.accountId ? eq(webhookEndpoints.accountId, filter.accountId) : undefined,
    filter.health ? ENDPOINT_HEALTH[filter.health].where() : undefined,
  );
  return await pageByIds(
    webhookEndpoints.id,
    link,
    limit,
    (s: EndpointSummary) => s.view.id,
    async (bound, order, take) =>
      (
        await db
          .select(summaryColumns)
          .from(webhookEndpoints)
          .innerJoin(accounts, eq(accounts.id, webhookEndpoints.accountId))
          .where(and(where, bound))
          .orderBy(order)
          .limit(take)
      ).map(toSummary),
  );
}

/** One endpoint of any account, or 404 (a malformed id too). */
export async function requireEndpointSummary(db: Db, id: string): Promise<EndpointSummary & { pending: number }> {
  const row = isUuid(id)
    ? await one(
        db.select(summaryColumns).from(webhookEndpoints).innerJoin(accounts, eq(accounts.id, webhookEndpoints.accountId)).where(eq(webhookEndpoints.id, id)),
      )
    : undefined;
  if (!row) throw new ApiError('webhook_not_found', 'There is no webhook endpoint with that id.');
  // Read from the pending index: deliveries that will still be attempted (or wait for the endpoint to come back).
  const pending =
    (
      await one(
        db
          .select({ n: count() })
          .from(webhookDeliveries)
          .where(and(eq(webhookDeliveries.endpointId, id), isNotNull(webhookDeliveries.nextAttemptAt))),
      )
    )?.n ?? 0;
  return { ...toSummary(row), pending };
}

/**
 * Where a delivery stands, from its row and its endpoint: what the API's fields mean together. Policy as data: each
 * state's label and badge; `stateOf` picks one.
 */
export const DELIVERY_STATES = {
  delivered: { label: 'Delivered', tone: 'ok' },
  sending: { label: 'Sending', tone: 'info' },
  waiting: { label: 'Waiting', tone: 'warn' },
  queued: { label: 'Queued', tone: 'info' },
  retrying: { label: 'Retrying', tone: 'warn' },
  failed: { label: 'Failed', tone: 'bad' },
} as const satisfies Record<string, { label: string; tone: BadgeTone }>;

export type DeliveryState = keyof typeof DELIVERY_STATES;

export function stateOf(row: WebhookDeliveryRow, endpointActive: boolean, now: number): DeliveryState {
  if (row.deliveredAt !== null) return 'delivered';
  // No next attempt: all six were used, or it was a ping (one attempt, final whatever the answer).
  if (row.nextAttemptAt === null) return 'failed';
  if (row.lockedUntil !== null && row.lockedUntil > now) return 'sending';
  if (!endpointActive) return 'waiting';
  return row.attempts === 0 ? 'queued' : 'retrying';
}

export interface DeliverySummary {
  view: WebhookDeliveryView;
  state: DeliveryState;
  /** The email the event is about (`data.messageId`); null for a ping. */
  emailId: string | null;
  recipient: string | null;
}

/** What a delivery's stored `data` names: the email and recipient of an email event. */
function eventSubject(row: WebhookDeliveryRow): { emailId: string | null; recipient: string | null } {
  if (row.eventType === 'ping') return { emailId: null, recipient: null };
  try {
    const data = JSON.parse(row.data) as { messageId?: unknown; recipient?: unknown };
    return { emailId: typeof data.messageId === 'string' ? data.messageId : null, recipient: typeof data.recipient === 'string' ? data.recipient : null };
  } catch {
    return { emailId: null, recipient: null };
  }
}

function toDelivery(row: WebhookDeliveryRow, endpointActive: boolean, now: number): DeliverySummary {
  return { view: deliveryView(row), state: stateOf(row, endpointActive, now), ...eventSubject(row) };
}

/** An endpoint's deliveries, newest first (ids are UUIDv7: id order is event order). */
export async function listEndpointDeliveries(db: Db, endpoint: WebhookEndpointView, link: PageLink, now: number): Promise<IdPage<DeliverySummary>> {
  return await pageByIds(
    webhookDeliveries.id,
    link,
    PAGE_SIZE,
    (d: DeliverySummary) => d.view.id,
    async (bound, order, take) =>
      (
        await db
          .select()
          .from(webhookDeliveries)
          .where(and(eq(webhookDeliveries.endpointId, endpoint.id), bound))
          .orderBy(order)
          .limit(take)
      ).map((r) => toDelivery(r, endpoint.active, now)),
  );
}

/** One delivery of the given endpoint, or 404 (another endpoint's delivery too); with its stored row for the payload. */
export async function requireDelivery(db: Db, endpoint: WebhookEndpointView, id: string, now: number): Promise<DeliverySummary & { row: WebhookDeliveryRow }> {
  const row = isUuid(id)
    ? await one(
        db
          .select()
          .from(webhookDeliveries)
          .where(and(eq(webhookDeliveries.id, id), eq(webhookDeliveries.endpointId, endpoint.id))),
      )
    : undefined;
  if (!row) throw new ApiError('not_found', 'This endpoint has no delivery with that id.');
  return { ...toDelivery(row, endpoint.active, now), row };
}

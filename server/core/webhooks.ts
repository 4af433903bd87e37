import { and, count, desc, eq, isNull, lt, or, sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Db } from '../../db/client.js';
import {
  type WebhookDeliveryRow,
  type WebhookEndpointRow,
  WEBHOOK_EVENT_TYPES,
  webhookAttempts,
  webhookDeliveries,
  webhookEndpoints,
} from '../../db/schema/index.js';
import { iso, isoOrNull } from '../shared/clock.js';
import type { Deps } from './deps.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { encryptSecret } from '../shared/secrets.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';
import { newWebhookSecret } from './webhook-signing.js';
import { MAX_WEBHOOK_URL_LENGTH, checkWebhookUrl, isAbsoluteUri } from './webhook-url.js';
import { assertAccountExists } from './accounts.js';
import type { PageRequest, RequestContext } from './context.js';
import { changes, execute, one } from '../../db/sql.js';

/** Webhook endpoints and their deliveries (docs/api/contract.md, Webhooks): the rules, without HTTP. */

export const MAX_ENDPOINTS = 20;
/** One test ping per endpoint in this window (docs/api/contract.md, Limits: "Test ping"). */
export const PING_COOLDOWN_MS = 10_000;

export const createWebhookInput = z.strictObject({
  // The schema's `format uri, 1 to 2000 characters` here (422 invalid_request); https, no credentials and a public host
  // are the service's rules, judged by checkWebhookUrl (422 invalid_url).
  url: z
    .string()
    .min(1, `must be 1 to ${MAX_WEBHOOK_URL_LENGTH} characters`)
    .max(MAX_WEBHOOK_URL_LENGTH, `must be 1 to ${MAX_WEBHOOK_URL_LENGTH} characters`)
    .refine(isAbsoluteUri, 'must be an absolute URI (such as https://hooks.example.com/mailstead), with no spaces, and non-ASCII characters percent-encoded'),
  // No maximum: repeats are dropped, so the list is never longer than the event types.
  events: z.array(z.enum(WEBHOOK_EVENT_TYPES)).min(1, 'must name at least one event type'),
});

export interface WebhookEndpointView {
  id: string;
  url: string;
  events: string[];
  active: boolean;
  failureCount: number;
  disabledAt: string | null;
  createdAt: string;
}

export interface WebhookDeliveryView {
  id: string;
  eventType: string;
  attempts: number;
  lastStatus: number | null;
  lastError: string | null;
  deliveredAt: string | null;
  nextAttemptAt: string | null;
  createdAt: string;
}

export function endpointView(row: WebhookEndpointRow): WebhookEndpointView {
  return {
    id: row.id,
    url: row.url,
    events: row.events,
    active: row.active,
    failureCount: row.failureCount,
    disabledAt: isoOrNull(row.disabledAt),
    createdAt: iso(row.createdAt),
  };
}

export function deliveryView(row: WebhookDeliveryRow): WebhookDeliveryView {
  return {
    id: row.id,
    eventType: row.eventType,
    attempts: row.attempts,
    lastStatus: row.lastStatus,
    lastError: row.lastError,
    deliveredAt: isoOrNull(row.deliveredAt),
    nextAttemptAt: isoOrNull(row.nextAttemptAt),
    createdAt: iso(row.createdAt),
  };
}

export interface WebhookAttemptView {
  attempt: number;
  attemptedAt: string;
  /** The receiver's HTTP status; null when no answer came (a connection or TLS error, a timeout). */
  status: number | null;
  error: string | null;
  delivered: boolean;
}

/** A delivery's attempts, first to last (webhook_attempts; the delivery row keeps only the last answer). */
export async function deliveryAttempts(db: Db, deliveryId: string): Promise<WebhookAttemptView[]> {
  return (await db.select().from(webhookAttempts).where(eq(webhookAttempts.deliveryId, deliveryId)).orderBy(webhookAttempts.attempt)).map((a) => ({
    attempt: a.attempt,
    attemptedAt: iso(a.attemptedAt),
    status: a.status,
    error: a.error,
    delivered: a.delivered,
  }));
}

/** The associated data sealing an endpoint's secret: a sealed secret copied onto another endpoint does not open. */

/**
 * POST /webhooks: the body's rules (422 invalid_request), a server that can keep a secret (503 not_configured), an
 * https URL without credentials whose host resolves only to public addresses (422 invalid_url), room for one more
 * (422 too_many_endpoints). The secret is answered this once and stored sealed.
 */
export async function createWebhook({
  deps,
  ctx,
  input,
}: {
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'resolver' | 'secretKey'>;
  ctx: RequestContext;
  input: z.output<typeof createWebhookInput>;
}): Promise<WebhookEndpointView & { secret: string }> {
  if (!deps.secretKey) throw new ApiError('not_configured', 'This server cannot store secrets (SECRET_KEY=off), so no webhook signing secret can be kept.');
  const url = await checkWebhookUrl(deps, input.url);
  // What is stored and answered is the URL as parsed (host lower-cased, a `'` in the query percent-encoded...).
  if (url.href.length > MAX_WEBHOOK_URL_LENGTH)
    throw new ApiError('invalid_request', `url: must be 1 to ${MAX_WEBHOOK_URL_LENGTH} characters once normalized (${url.href.length})`);
  const now = deps.clock.now();
  const id = newId(now);
  const secret = newWebhookSecret();
  const row: WebhookEndpointRow = {
    id,
    accountId: ctx.account.id,
    url: url.href,
    events: [...new Set(input.events)],
    secretSealed: encryptSecret(deps.secretKey, secret, SEAL_CONTEXTS.webhookSecret(id)),
    active: true,
    failureCount: 0,
    disabledAt: null,
    lastPingAt: null,
    createdAt: now,
  };
  await deps.db.transaction(async (tx) => {
    await assertAccountExists(tx, ctx.account.id);
    const n = (await one(tx.select({ n: count() }).from(webhookEndpoints).where(eq(webhookEndpoints.accountId, ctx.account.id))))?.n ?? 0;
    if (n >= MAX_ENDPOINTS) throw new ApiError('too_many_endpoints', `This account already has ${MAX_ENDPOINTS} webhook endpoints; delete one first.`);
    await tx.insert(webhookEndpoints).values(row);
  });
  return { ...endpointView(row), secret };
}

export async function listWebhooks({ deps, ctx, page }: { deps: Pick<Deps, 'db'>; ctx: RequestContext; page: PageRequest }): Promise<WebhookEndpointView[]> {
  return (
    await deps.db
      .select()
      .from(webhookEndpoints)
      .where(and(eq(webhookEndpoints.accountId, ctx.account.id), page.after ? lt(webhookEndpoints.id, page.after) : undefined))
      .orderBy(desc(webhookEndpoints.id))
      .limit(page.limit + 1)
  ).map(endpointView);
}

/** The acting account's endpoint, or 404 webhook_not_found (another account's looks exactly like none). */
export async function requireEndpoint(deps: Pick<Deps, 'db'>, ctx: RequestContext, id: string): Promise<WebhookEndpointRow> {
  const row = await one(
    deps.db
      .select()
      .from(webhookEndpoints)
      .where(and(eq(webhookEndpoints.id, id), eq(webhookEndpoints.accountId, ctx.account.id))),
  );
  if (!row) throw new ApiError('webhook_not_found', 'No webhook endpoint with that id on this account.');
  return row;
}

export async function getWebhook({ deps, ctx, id }: { deps: Pick<Deps, 'db'>; ctx: RequestContext; id: string }): Promise<WebhookEndpointView> {
  return endpointView(await requireEndpoint(deps, ctx, id));
}

/**
 * Deliveries (with their attempts) deleted per transaction when an endpoint is deleted: an endpoint keeps its
 * delivered history until then, so it may hold far more than the pending cap, and one statement for all of them would
 * hold the event loop for as long as it takes.
 */
export const DELETE_CHUNK_ROWS = 250;

/** Deletes up to `limit` of the endpoint's deliveries, oldest first (their attempts go with them); how many. */
async function deleteDeliveryChunk(db: Db, endpointId: string, limit: number): Promise<number> {
  return await execute(
    db,
    sql`
    delete from webhook_deliveries where id in (
      select id from webhook_deliveries where endpoint_id = ${endpointId} order by id limit ${limit}
    )`,
  );
}

/**
 * DELETE /webhooks/{id}: the endpoint and every delivery queued or kept for it. First the endpoint is switched off,
 * so nothing more is posted to it from now on; then its deliveries go DELETE_CHUNK_ROWS at a time, each chunk its own
 * transaction of the group commit, the event loop free between them; the chunk that finds the last of them deletes
 * the endpoint too. The 204 comes once that is on disk. A process that stops before then leaves the endpoint
 * switched off with part of its deliveries: the DELETE was not answered, and repeating it finishes the job.
 */
export async function deleteWebhook({ deps, ctx, id }: { deps: Pick<Deps, 'clock' | 'commits' | 'db'>; ctx: RequestContext; id: string }): Promise<void> {
  const row = await requireEndpoint(deps, ctx, id);
  const now = deps.clock.now();
  await deps.commits.run(async (db) => {
    await db
      .update(webhookEndpoints)
      .set({ active: false, disabledAt: row.disabledAt ?? now })
      .where(eq(webhookEndpoints.id, row.id));
  });
  for (;;) {
    const done = await deps.commits.run(async (db) => {
      if ((await deleteDeliveryChunk(db, row.id, DELETE_CHUNK_ROWS)) === DELETE_CHUNK_ROWS) return false;
      await db.delete(webhookEndpoints).where(eq(webhookEndpoints.id, row.id));
      return true;
    });
    if (done) return;
  }
}

/**
 * The cooldown of POST /webhooks/{id}/test: one ping per endpoint every ten seconds (429 ping_cooldown, with
 * Retry-After), taken atomically so two tests at once cannot both post. Answers the endpoint with its new lastPingAt.
 */
export async function takePingSlot({ deps, ctx, id }: { deps: Pick<Deps, 'clock' | 'db'>; ctx: RequestContext; id: string }): Promise<WebhookEndpointRow> {
  const row = await requireEndpoint(deps, ctx, id);
  const now = deps.clock.now();
  const taken = changes(
    await deps.db
      .update(webhookEndpoints)
      .set({ lastPingAt: now })
      .where(and(eq(webhookEndpoints.id, row.id), or(isNull(webhookEndpoints.lastPingAt), sql`${webhookEndpoints.lastPingAt} <= ${now - PING_COOLDOWN_MS}`))),
  );
  if (taken === 0) {
    const last = (await one(deps.db.select({ at: webhookEndpoints.lastPingAt }).from(webhookEndpoints).where(eq(webhookEndpoints.id, row.id))))?.at ?? now;
    const retryAfter = Math.max(1, Math.ceil((last + PING_COOLDOWN_MS - now) / 1000));
    throw new ApiError('ping_cooldown', `A test ping was sent to this endpoint in the last ten seconds; retry in ${retryAfter} s.`, {
      headers: { 'Retry-After': String(retryAfter) },
    });
  }
  return { ...row, lastPingAt: now };
}

export async function listDeliveries({
  deps,
  ctx,
  id,
  page,
}: {
  deps: Pick<Deps, 'db'>;
  ctx: RequestContext;
  id: string;
  page: PageRequest;
}): Promise<WebhookDeliveryView[]> {
  const endpoint = await requireEndpoint(deps, ctx, id);
  return (
    await deps.db
      .select()
      .from(webhookDeliveries)
      .where(and(eq(webhookDeliveries.endpointId, endpoint.id), page.after ? lt(webhookDeliveries.id, page.after) : undefined))
      .orderBy(desc(webhookDeliveries.id))
      .limit(page.limit + 1)
  ).map(deliveryView);
}

import { eq } from 'drizzle-orm';
import { type WebhookDeliveryRow, type WebhookEndpointRow, webhookDeliveries } from '../../db/schema/index.js';
import { iso, leaseNow } from '../shared/clock.js';
import { newWorkerId } from '../queues/leases.js';
import { singleNode } from '../queues/nodes.js';
import type { Deps } from '../core/deps.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { decryptSecret } from '../shared/secrets.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';
import { createFairSlots } from '../queues/fair-slots.js';
import { createQueueWorker } from '../queues/runner.js';
import { logFailure } from '../shared/store-health.js';
import { WEBHOOK_TIMEOUT_MS, postWebhook } from './http-client.js';
import { signedHeaders } from '../core/webhook-signing.js';
import { type WebhookAttempt, recordAttemptHistory, recordWebhookAttempt, reenableWebhookEndpoint } from '../core/webhook-deliveries.js';
import { type ClaimedWebhook, webhookQueue } from './webhook-queue.js';
import { changes } from '../../db/sql.js';

/** The HTTP client's signature (server/webhooks/http-client.ts); tests may pass another. */
export type PostWebhook = (
  deps: Pick<Deps, 'resolver' | 'config' | 'logger'>,
  url: string,
  headers: Record<string, string>,
  body: string,
  options?: { timeoutMs?: number },
) => Promise<WebhookAttempt>;

export interface DispatcherOptions {
  /** How often due deliveries are looked for (besides `poke()` and a finished post); WEBHOOK_INTERVAL_MS by default. */
  intervalMs: number;
  /** Endpoints posted to at once, in all. */
  maxInFlight: number;
  /** Endpoints of one account posted to at once, so one account's slow receivers leave room for the others. */
  perAccount: number;
  /** How long a claim holds a delivery; longer than a post can take (the timeout and the DNS lookups). */
  leaseMs: number;
  /** A receiver's time to answer with its status. */
  timeoutMs: number;
  post: PostWebhook;
}

export const DEFAULT_DISPATCHER_OPTIONS: Omit<DispatcherOptions, 'intervalMs'> = {
  maxInFlight: 16,
  perAccount: 4,
  leaseMs: 120_000,
  timeoutMs: WEBHOOK_TIMEOUT_MS,
  post: postWebhook,
};

/** The body of a delivery's post: `{ id, type, createdAt, data }`, exactly the bytes that are signed. */
export function webhookPostBody(row: WebhookDeliveryRow): string {
  const data: unknown = JSON.parse(row.data);
  return JSON.stringify({ id: row.id, type: row.eventType, createdAt: iso(row.createdAt), data });
}

/** The endpoint's signing secret, unsealed with the server's key (null when it cannot be). */
function endpointSecret(deps: Pick<Deps, 'secretKey'>, endpoint: WebhookEndpointRow): string | null {
  if (!deps.secretKey) return null;
  try {
    return decryptSecret(deps.secretKey, endpoint.secretSealed, SEAL_CONTEXTS.webhookSecret(endpoint.id)).toString('utf8');
  } catch {
    return null;
  }
}

/** Signs and posts one delivery now; never throws (a client failure is a `connection_error` attempt). */
async function attemptDelivery(
  deps: Pick<Deps, 'clock' | 'config' | 'logger' | 'resolver' | 'secretKey'>,
  endpoint: WebhookEndpointRow,
  row: WebhookDeliveryRow,
  post: PostWebhook,
  timeoutMs: number,
): Promise<WebhookAttempt> {
  const secret = endpointSecret(deps, endpoint);
  if (secret === null) {
    deps.logger.error('webhook.secret_unreadable', { endpointId: endpoint.id, deliveryId: row.id });
    return { delivered: false, status: null, error: 'secret_unreadable' };
  }
  const body = webhookPostBody(row);
  const headers = signedHeaders(secret, { id: row.id, type: row.eventType }, Math.floor(deps.clock.now() / 1000), body);
  try {
    return await post(deps, endpoint.url, headers, body, { timeoutMs });
  } catch (err) {
    deps.logger.error('webhook.post_crashed', { endpointId: endpoint.id, deliveryId: row.id, err });
    return { delivered: false, status: null, error: 'connection_error' };
  }
}

/**
 * The webhook dispatcher. Every `intervalMs`, on `poke()` and whenever a post ends, it claims due deliveries (the
 * earliest due one of each active endpoint with nothing in flight, accounts in turn) and posts them, each in a slot
 * of `createFairSlots` with the endpoint as destination: at most `maxInFlight` endpoints at once, `perAccount` of one
 * account, one delivery of an endpoint at a time. So a receiver that stalls holds only its own endpoint's slot, and an
 * account's slow receivers never hold up another account's deliveries.
 */
export function createWebhookDispatcher(
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'metrics' | 'resolver' | 'secretKey' | 'storeHealth'> & Partial<Pick<Deps, 'nodes'>>,
  options: Partial<DispatcherOptions> = {},
) {
  const opts: DispatcherOptions = { ...DEFAULT_DISPATCHER_OPTIONS, intervalMs: deps.config.webhookIntervalMs, ...options };
  const nodes = deps.nodes ?? singleNode(deps.config.nodeName);
  const worker = newWorkerId(nodes.name);
  const queue = webhookQueue(deps.db);
  const slots = createFairSlots({ total: opts.maxInFlight, perAccount: opts.perAccount, perDestination: 1 });
  /** Endpoints with a post in flight in this process (their lease may have run out on a moved clock). */
  const busy = new Set<string>();
  /** Posts in flight per account (claimed, in a slot or waiting for one). */
  const byAccount = new Map<string, number>();

  /** One attempt: the claimed delivery posted in its endpoint's slot, and its outcome recorded. */
  async function deliver({ delivery, endpoint }: ClaimedWebhook): Promise<void> {
    const slot = await slots.acquire(endpoint.accountId, endpoint.id);
    if (!slot) {
      await queue.release(worker, [delivery.id]);
      return;
    }
    try {
      const attempt = await attemptDelivery(deps, endpoint, delivery, opts.post, opts.timeoutMs);
      const now = deps.clock.now();
      const recorded = await recordWebhookAttempt(deps.db, worker, delivery, attempt, now);
      const fields = {
        deliveryId: delivery.id,
        endpointId: endpoint.id,
        accountId: endpoint.accountId,
        type: delivery.eventType,
        attempts: delivery.attempts + 1,
        status: attempt.status,
      };
      if (recorded.recorded) deps.metrics.webhookAttempt(attempt.delivered ? 'delivered' : recorded.nextAttemptAt === null ? 'gave_up' : 'failed');
      if (!recorded.recorded) deps.logger.info('webhook.attempt_dropped', { ...fields, reason: 'delivery gone or lease lost' });
      else if (attempt.delivered) deps.logger.debug('webhook.delivered', fields);
      else
        deps.logger.info('webhook.attempt_failed', {
          ...fields,
          error: attempt.error,
          nextAttemptAt: recorded.nextAttemptAt === null ? null : iso(recorded.nextAttemptAt),
          failureCount: recorded.failureCount,
        });
      if (recorded.disabled)
        deps.logger.warn('webhook.endpoint_disabled', { endpointId: endpoint.id, accountId: endpoint.accountId, failureCount: recorded.failureCount });
    } catch (err) {
      // The attempt could not be written: the delivery keeps its lease, and is tried again once it runs out (never
      // at once, which would post to the receiver in a loop while the database refuses writes).
      logFailure(deps, 'webhook.record_failed', err, { deliveryId: delivery.id, endpointId: endpoint.id });
    } finally {
      slot.release();
    }
  }

  const runner = createQueueWorker<ClaimedWebhook>({
    intervalMs: opts.intervalMs,
    maxInFlight: opts.maxInFlight,
    onError: (err) => logFailure(deps, 'webhook.claim_failed', err),
    wake: { db: deps.db, queue: 'webhooks' },
    claim: async (room) =>
      await queue.claim(worker, {
        now: deps.clock.now(),
        leaseNow: leaseNow(deps.clock),
        leaseMs: opts.leaseMs,
        room: { total: room, perAccount: (accountId) => opts.perAccount - (byAccount.get(accountId) ?? 0), busyEndpoints: busy },
      }),
    // The endpoint stays busy until its post is recorded; once the attempt settles, the runner looks again: the
    // endpoint's next delivery, or another's, may be due now.
    attempt: (job) => {
      const account = job.endpoint.accountId;
      busy.add(job.endpoint.id);
      byAccount.set(account, (byAccount.get(account) ?? 0) + 1);
      return deliver(job).finally(() => {
        busy.delete(job.endpoint.id);
        const n = (byAccount.get(account) ?? 1) - 1;
        if (n === 0) byAccount.delete(account);
        else byAccount.set(account, n);
      });
    },
    // Leases of earlier processes of this host (or, with several nodes, of nodes) that are gone are released first.
    onStart: async () => {
      const released = await queue.releaseDead(worker, await nodes.deadHolders(worker));
      if (released > 0) deps.logger.warn('webhook.leases_released', { released });
      const capped = await queue.capForeign(worker, leaseNow(deps.clock), opts.leaseMs);
      if (capped > 0) deps.logger.warn('webhook.leases_capped', { capped });
    },
    // A claimed delivery still waiting for a slot (none should: claims stay within the room) gives its lease back.
    drain: async () => slots.cancelAll(),
  });

  return {
    worker,
    /** Claims and posts until nothing more is due (tests drive it with a fake clock); the number of posts made. */
    runOnce: runner.runOnce,
    /** Starts the loop (from main), woken by every durable commit that queues deliveries. */
    start: runner.start,
    /** Looks now instead of at the next interval. */
    poke: runner.wake,
    /** Stops claiming, lets the posts in flight finish and record their attempt, and gives back any lease left. */
    async stop(): Promise<void> {
      await runner.stop();
      await queue.release(worker);
    },
  };
}

export type WebhookDispatcher = ReturnType<typeof createWebhookDispatcher>;

export interface PingResult {
  id: string;
  status: number | null;
  delivered: boolean;
  error: string | null;
}

/**
 * Posts a `ping` to the endpoint now and waits for the answer: one delivery row, one attempt, final whatever the
 * answer (never retried, never counted as a failure). A successful ping switches a disabled endpoint back on, with no
 * failures, and its waiting deliveries due now so they resume in event order.
 */
export async function pingEndpoint(
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>,
  endpoint: WebhookEndpointRow,
  options: { post?: PostWebhook; timeoutMs?: number } = {},
): Promise<PingResult> {
  if (!deps.secretKey) throw new ApiError('not_configured', 'The server cannot read webhook secrets (SECRET_KEY=off).');
  const now = deps.clock.now();
  const row: WebhookDeliveryRow = {
    id: newId(now),
    endpointId: endpoint.id,
    accountId: endpoint.accountId,
    eventType: 'ping',
    data: JSON.stringify({ endpointId: endpoint.id }),
    attempts: 0,
    lastStatus: null,
    lastError: null,
    deliveredAt: null,
    nextAttemptAt: null,
    lockedBy: null,
    lockedUntil: null,
    createdAt: now,
  };
  await deps.db.insert(webhookDeliveries).values(row);
  const attempt = await attemptDelivery(deps, endpoint, row, options.post ?? postWebhook, options.timeoutMs ?? WEBHOOK_TIMEOUT_MS);
  const at = deps.clock.now();
  const recorded = await deps.db.transaction(async () => {
    const changed = changes(
      await deps.db
        .update(webhookDeliveries)
        .set({ attempts: 1, lastStatus: attempt.status, lastError: attempt.delivered ? null : attempt.error, deliveredAt: attempt.delivered ? at : null })
        .where(eq(webhookDeliveries.id, row.id)),
    );
    // The endpoint was deleted while the ping was posted (its deliveries with it): nothing to write back.
    if (changed === 0) return null;
    await recordAttemptHistory(deps.db, row.id, 1, attempt, at);
    return { reenabled: attempt.delivered ? await reenableWebhookEndpoint(deps.db, endpoint.id, at) : false };
  });
  if (!recorded) {
    deps.logger.info('webhook.attempt_dropped', { endpointId: endpoint.id, accountId: endpoint.accountId, deliveryId: row.id, type: 'ping' });
    throw new ApiError('webhook_not_found', 'The webhook endpoint was deleted while its test ping was under way.');
  }
  const { reenabled } = recorded;
  deps.logger.info('webhook.ping', {
    endpointId: endpoint.id,
    accountId: endpoint.accountId,
    deliveryId: row.id,
    delivered: attempt.delivered,
    status: attempt.status,
    error: attempt.error,
  });
  if (reenabled) deps.logger.info('webhook.endpoint_reenabled', { endpointId: endpoint.id, accountId: endpoint.accountId, by: 'ping' });
  return { id: row.id, status: attempt.status, delivered: attempt.delivered, error: attempt.delivered ? null : attempt.error };
}

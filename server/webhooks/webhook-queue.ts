import { hostname } from 'node:os';
import { and, eq, inArray, isNotNull, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { isDeadHolder } from '../queues/leases.js';
import { definePrepared } from '../../db/prepared.js';
import { type WebhookDeliveryRow, type WebhookEndpointRow, webhookAttempts, webhookDeliveries, webhookEndpoints } from '../../db/schema/index.js';
import { WEBHOOK_DISABLE_AFTER_FAILURES, nextWebhookAttemptAt } from '../core/webhook-schedule.js';

/**
 * The webhook delivery queue (webhook_deliveries): rows claimed with a lease, one UPDATE ... RETURNING, attempted,
 * and rescheduled from the retry table. Deliveries of one endpoint go out one at a time, in id (event) order among
 * those due; a disabled endpoint's deliveries wait.
 */

export interface ClaimedWebhook {
  delivery: WebhookDeliveryRow;
  endpoint: WebhookEndpointRow;
}

/** How many endpoints may still be taken: in all, per account, and which endpoints are busy in this process. */
export interface WebhookClaimRoom {
  total: number;
  perAccount: (accountId: string) => number;
  busyEndpoints: ReadonlySet<string>;
}

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  lease: db
    .update(webhookDeliveries)
    .set({ lockedBy: sql`${p('worker')}`, lockedUntil: sql`${p('until')}` })
    .where(
      sql`${webhookDeliveries.id} in (select value from json_each(${p('ids')})) and ${webhookDeliveries.nextAttemptAt} <= ${p('now')}
          and (${webhookDeliveries.lockedUntil} is null or ${webhookDeliveries.lockedUntil} <= ${p('leaseNow')})`,
    )
    .returning()
    .prepare(),
}));

/**
 * Leases, until `leaseNow + leaseMs`, the earliest due delivery of each active endpoint that has none in flight (that
 * delivery under a live lease, or an endpoint busy in this process), accounts in turn within their room. The candidates
 * are read from the pending index only, so neither delivered history nor a switched-off endpoint's backlog costs
 * anything. `now` (the wall clock) says what is due; `leaseNow` (server/shared/clock.ts leaseNow) writes and judges leases.
 */
export function claimDueWebhookDeliveries(db: Db, worker: string, now: number, leaseMs: number, room: WebhookClaimRoom, leaseNow: number = now): ClaimedWebhook[] {
  if (room.total <= 0) return [];
  const rows = db.transaction(() => {
    // Each active endpoint's earliest due delivery, from the pending index: the cost follows the number of active
    // endpoints, not the backlog (a switched-off endpoint's rows are never read). Busy: that delivery is leased.
    const candidates = db.all<{ id: string; endpointId: string; accountId: string; busy: number }>(sql`
      select c.id as id, c.endpointId as endpointId, c.accountId as accountId,
             coalesce((select locked_until from webhook_deliveries where id = c.id), 0) > ${leaseNow} as busy
      from (
        select e.id as endpointId, e.account_id as accountId,
               (select d.id from webhook_deliveries d indexed by webhook_deliveries_pending_idx
                where d.endpoint_id = e.id and d.next_attempt_at is not null and d.next_attempt_at <= ${now}
                order by d.id limit 1) as id
        from webhook_endpoints e
        where e.active = 1
      ) c
      where c.id is not null
      order by c.id`);
    // Oldest first within an account; accounts in turn (each one's first, then each one's second...).
    const byAccount = new Map<string, string[]>();
    for (const c of candidates) {
      if (c.busy || room.busyEndpoints.has(c.endpointId)) continue;
      const list = byAccount.get(c.accountId) ?? [];
      if (list.length < room.perAccount(c.accountId)) list.push(c.id);
      byAccount.set(c.accountId, list);
    }
    const lists = [...byAccount.values()];
    const ids: string[] = [];
    for (let turn = 0; ids.length < room.total && lists.some((l) => turn < l.length); turn++) {
      for (const list of lists) if (turn < list.length && ids.length < room.total) ids.push(list[turn]!);
    }
    return ids.length === 0 ? [] : statements(db).lease.all({ worker, until: leaseNow + leaseMs, now, leaseNow, ids: JSON.stringify(ids) });
  });
  if (rows.length === 0) return [];
  const endpoints = new Map(
    db
      .select()
      .from(webhookEndpoints)
      .where(inArray(webhookEndpoints.id, [...new Set(rows.map((r) => r.endpointId))]))
      .all()
      .map((e) => [e.id, e]),
  );
  rows.sort((a, b) => (a.id < b.id ? -1 : 1));
  return rows.flatMap((delivery) => {
    const endpoint = endpoints.get(delivery.endpointId);
    return endpoint ? [{ delivery, endpoint }] : [];
  });
}

export interface WebhookAttempt {
  delivered: boolean;
  status: number | null;
  error: string | null;
}

export interface RecordedAttempt {
  /** False when the row was gone (its endpoint deleted) or no longer leased to this worker: nothing was written. */
  recorded: boolean;
  /** When the next attempt is due; null when delivered or final. */
  nextAttemptAt: number | null;
  /** The endpoint was switched off by this attempt (the 10th consecutive failure). */
  disabled: boolean;
  failureCount: number;
}

/**
 * Records one attempt of a leased delivery and the endpoint's health, in one transaction: attempts + 1, the status and
 * error, delivered or the next gap of the schedule (or final); a success resets the endpoint's failure count, a failure
 * increments it and the 10th in a row switches the endpoint off.
 */
export function recordWebhookAttempt(db: Db, worker: string, delivery: WebhookDeliveryRow, attempt: WebhookAttempt, now: number): RecordedAttempt {
  const attempts = delivery.attempts + 1;
  const nextAttemptAt = attempt.delivered ? null : nextWebhookAttemptAt(attempts, now);
  return db.transaction(() => {
    const changed = db
      .update(webhookDeliveries)
      .set({
        attempts,
        lastStatus: attempt.status,
        lastError: attempt.delivered ? null : attempt.error,
        deliveredAt: attempt.delivered ? now : null,
        nextAttemptAt,
        lockedBy: null,
        lockedUntil: null,
      })
      .where(and(eq(webhookDeliveries.id, delivery.id), eq(webhookDeliveries.lockedBy, worker)))
      .run().changes;
    if (changed === 0) return { recorded: false, nextAttemptAt: null, disabled: false, failureCount: 0 };
    recordAttemptHistory(db, delivery.id, attempts, attempt, now);
    if (attempt.delivered) {
      db.update(webhookEndpoints).set({ failureCount: 0 }).where(eq(webhookEndpoints.id, delivery.endpointId)).run();
      return { recorded: true, nextAttemptAt, disabled: false, failureCount: 0 };
    }
    const limit = WEBHOOK_DISABLE_AFTER_FAILURES;
    // Every right-hand side reads the row as it was before this update.
    const after = db.get<{ failureCount: number; disabledAt: number | null; active: number } | undefined>(sql`
      update webhook_endpoints
      set failure_count = failure_count + 1,
          active = case when failure_count + 1 >= ${limit} then 0 else active end,
          disabled_at = case when active = 1 and failure_count + 1 >= ${limit} then ${now} else disabled_at end
      where id = ${delivery.endpointId}
      returning failure_count as failureCount, disabled_at as disabledAt, active`);
    const disabled = after !== undefined && after.active === 0 && after.disabledAt === now;
    return { recorded: true, nextAttemptAt, disabled, failureCount: after?.failureCount ?? 0 };
  });
}

/** One line of a delivery's attempt history (webhook_attempts), beside the update of the delivery itself. */
export function recordAttemptHistory(db: Db, deliveryId: string, number: number, attempt: WebhookAttempt, at: number): void {
  db.insert(webhookAttempts).values({ deliveryId, attempt: number, attemptedAt: at, status: attempt.status, error: attempt.delivered ? null : attempt.error, delivered: attempt.delivered }).run();
}

/** Gives back leases this worker still holds (shutdown, or a delivery it could not attempt). */
export function releaseWebhookDeliveries(db: Db, worker: string, ids?: string[]): number {
  const where = ids === undefined ? eq(webhookDeliveries.lockedBy, worker) : and(eq(webhookDeliveries.lockedBy, worker), inArray(webhookDeliveries.id, ids));
  if (ids !== undefined && ids.length === 0) return 0;
  return db.update(webhookDeliveries).set({ lockedBy: null, lockedUntil: null }).where(where).run().changes;
}

/**
 * Switches an endpoint back on (a successful ping, or the operator): active, no failures, and its waiting deliveries
 * due now, so they resume at once in event order instead of at whatever retry time each had reached. False when it was
 * already on; its run of failures still ends (a delivered post resets failureCount, a ping's as any other).
 */
export function reenableWebhookEndpoint(db: Db, endpointId: string, now: number): boolean {
  return db.transaction(() => {
    const changed = db
      .update(webhookEndpoints)
      .set({ active: true, disabledAt: null, failureCount: 0 })
      .where(and(eq(webhookEndpoints.id, endpointId), eq(webhookEndpoints.active, false)))
      .run().changes;
    if (changed === 0) {
      db.update(webhookEndpoints).set({ failureCount: 0 }).where(eq(webhookEndpoints.id, endpointId)).run();
      return false;
    }
    db.update(webhookDeliveries)
      .set({ nextAttemptAt: now })
      .where(and(eq(webhookDeliveries.endpointId, endpointId), sql`${webhookDeliveries.nextAttemptAt} > ${now}`))
      .run();
    return true;
  });
}

/**
 * At start: leases of earlier workers on this host whose process is gone (or an earlier run under this same pid) are
 * released at once, so a killed process's deliveries are due again now; a lease of a process that may still run is
 * left to expire. The same rule as the mail queue's.
 */
export function releaseDeadWebhookLeases(db: Db, worker: string, host = hostname()): number {
  const holders = db
    .selectDistinct({ lockedBy: webhookDeliveries.lockedBy })
    .from(webhookDeliveries)
    .where(and(isNotNull(webhookDeliveries.lockedBy), sql`${webhookDeliveries.lockedBy} <> ${worker}`))
    .all();
  let released = 0;
  for (const { lockedBy } of holders) {
    if (!lockedBy || !isDeadHolder(lockedBy, worker, host)) continue;
    released += db
      .update(webhookDeliveries)
      .set({ lockedBy: null, lockedUntil: null })
      .where(eq(webhookDeliveries.lockedBy, lockedBy))
      .run().changes;
  }
  return released;
}

/** At start, after releaseDeadWebhookLeases: another worker's lease cut to one term from now, as the mail queue's capForeignLeases. */
export function capForeignWebhookLeases(db: Db, worker: string, leaseNow: number, leaseMs: number): number {
  return db
    .update(webhookDeliveries)
    .set({ lockedUntil: leaseNow + leaseMs })
    .where(and(isNotNull(webhookDeliveries.lockedBy), sql`${webhookDeliveries.lockedBy} <> ${worker}`, sql`${webhookDeliveries.lockedUntil} > ${leaseNow + leaseMs}`))
    .run().changes;
}

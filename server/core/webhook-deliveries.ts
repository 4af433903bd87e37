import { and, eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { markQueued } from '../../db/queue-wake.js';
import { type WebhookDeliveryRow, webhookAttempts, webhookDeliveries, webhookEndpoints } from '../../db/schema/index.js';
import { WEBHOOK_DISABLE_AFTER_FAILURES, nextWebhookAttemptAt } from './webhook-schedule.js';
import { changes, queryRow } from '../../db/sql.js';

/**
 * The rules of a webhook delivery's attempt and of its endpoint's health: what an attempt's outcome writes (the
 * delivery rescheduled from the retry table or final, its history, the endpoint's run of failures and its switch-off),
 * and how an endpoint is switched back on. The queue that leases the deliveries is server/webhooks/webhook-queue.ts.
 */

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
export async function recordWebhookAttempt(
  db: Db,
  worker: string,
  delivery: WebhookDeliveryRow,
  attempt: WebhookAttempt,
  now: number,
): Promise<RecordedAttempt> {
  const attempts = delivery.attempts + 1;
  const nextAttemptAt = attempt.delivered ? null : nextWebhookAttemptAt(attempts, now);
  return await db.transaction(async () => {
    const changed = changes(
      await db
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
        .where(and(eq(webhookDeliveries.id, delivery.id), eq(webhookDeliveries.lockedBy, worker))),
    );
    if (changed === 0) return { recorded: false, nextAttemptAt: null, disabled: false, failureCount: 0 };
    await recordAttemptHistory(db, delivery.id, attempts, attempt, now);
    if (attempt.delivered) {
      await db.update(webhookEndpoints).set({ failureCount: 0 }).where(eq(webhookEndpoints.id, delivery.endpointId));
      return { recorded: true, nextAttemptAt, disabled: false, failureCount: 0 };
    }
    const limit = WEBHOOK_DISABLE_AFTER_FAILURES;
    // Every right-hand side reads the row as it was before this update.
    const after = await queryRow<{ failureCount: number; disabledAt: number | null; active: number }>(
      db,
      sql`
      update webhook_endpoints
      set failure_count = failure_count + 1,
          active = case when failure_count + 1 >= ${limit} then 0 else active end,
          disabled_at = case when active = 1 and failure_count + 1 >= ${limit} then ${now} else disabled_at end
      where id = ${delivery.endpointId}
      returning failure_count as failureCount, disabled_at as disabledAt, active`,
    );
    const disabled = after !== undefined && after.active === 0 && after.disabledAt === now;
    return { recorded: true, nextAttemptAt, disabled, failureCount: after?.failureCount ?? 0 };
  });
}

/** One line of a delivery's attempt history (webhook_attempts), beside the update of the delivery itself. */
export async function recordAttemptHistory(db: Db, deliveryId: string, number: number, attempt: WebhookAttempt, at: number): Promise<void> {
  await db.insert(webhookAttempts).values({
    deliveryId,
    attempt: number,
    attemptedAt: at,
    status: attempt.status,
    error: attempt.delivered ? null : attempt.error,
    delivered: attempt.delivered,
  });
}

/**
 * Switches an endpoint back on (a successful ping, or the operator): active, no failures, and its waiting deliveries
 * due now, so they resume at once in event order instead of at whatever retry time each had reached. False when it was
 * already on; its run of failures still ends (a delivered post resets failureCount, a ping's as any other).
 */
export async function reenableWebhookEndpoint(db: Db, endpointId: string, now: number): Promise<boolean> {
  return await db.transaction(async () => {
    const changed = changes(
      await db
        .update(webhookEndpoints)
        .set({ active: true, disabledAt: null, failureCount: 0 })
        .where(and(eq(webhookEndpoints.id, endpointId), eq(webhookEndpoints.active, false))),
    );
    if (changed === 0) {
      await db.update(webhookEndpoints).set({ failureCount: 0 }).where(eq(webhookEndpoints.id, endpointId));
      return false;
    }
    await db
      .update(webhookDeliveries)
      .set({ nextAttemptAt: now })
      .where(and(eq(webhookDeliveries.endpointId, endpointId), sql`${webhookDeliveries.nextAttemptAt} > ${now}`));
    // Its waiting deliveries are due now: the dispatcher beside this process looks once this is durable.
    markQueued(db, 'webhooks');
    return true;
  });
}

import { inArray, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { type WebhookDeliveryRow, type WebhookEndpointRow, webhookDeliveries, webhookEndpoints } from '../../db/schema/index.js';
import { type QueueStore, sqliteLeases } from '../queues/lease-table.js';
import { takeInTurns } from '../queues/turns.js';
import { indexedBy, isTrue, lockRows, queryRows } from '../../db/sql.js';

/**
 * The webhook delivery queue (webhook_deliveries) on the queue mechanism (server/queues/): rows claimed with a lease,
 * attempted, and rescheduled from the retry table (server/core/webhook-deliveries.ts). Deliveries of one endpoint go
 * out one at a time, in id (event) order among those due; a disabled endpoint's deliveries wait.
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

/** A claim: `now` (the wall clock) says what is due; `leaseNow` (server/shared/clock.ts leaseNow) writes and judges leases. */
export interface WebhookClaim {
  now: number;
  leaseNow: number;
  leaseMs: number;
  room: WebhookClaimRoom;
}

/**
 * A delivery is leased only while it is due, and only while no other delivery of its endpoint is under a live lease:
 * one post at a time per endpoint whatever the order the deliveries were committed in (a delivery made by one node's
 * transaction may commit after another node's later one, and be the earliest while the later one is in flight).
 */
const leases = sqliteLeases({
  table: webhookDeliveries,
  id: webhookDeliveries.id,
  lockedBy: webhookDeliveries.lockedBy,
  lockedUntil: webhookDeliveries.lockedUntil,
  leasable: sql`${webhookDeliveries.nextAttemptAt} <= ${sql.placeholder('now')}
    and not exists (select 1 from webhook_deliveries l
                    where l.endpoint_id = webhook_deliveries.endpoint_id and l.locked_by is not null
                      and l.locked_until > ${sql.placeholder('leaseNow')} and l.id <> webhook_deliveries.id)`,
  // A holder's leases across the table, from the leased index (the posts in flight), never the delivered history. Postgres
  // proves the index's condition from most of those scans by itself; SQLite only from the condition written out.
  leased: sql`${webhookDeliveries.lockedBy} is not null`,
});

/**
 * Leases, until `leaseNow + leaseMs`, the earliest due delivery of each active endpoint that has none in flight (that
 * delivery under a live lease, or an endpoint busy in this process), accounts in turn within their room. The candidates
 * are read from the pending index only, so neither delivered history nor a switched-off endpoint's backlog costs
 * anything.
 */
export async function claimDueWebhookDeliveries(db: Db, worker: string, { now, leaseNow, leaseMs, room }: WebhookClaim): Promise<ClaimedWebhook[]> {
  if (room.total <= 0) return [];
  const rows = await db.transaction(async () => {
    // Each active endpoint's earliest due delivery, from the pending index: the cost follows the number of active
    // endpoints, not the backlog (a switched-off endpoint's rows are never read). Busy: that delivery is leased.
    // Busy: any delivery of the endpoint is leased (from the leased index: as small as the posts in flight).
    const candidates = await queryRows<{ id: string; endpointId: string; accountId: string; busy: number }>(
      db,
      sql`
      select c.id as id, c."endpointId" as "endpointId", c."accountId" as "accountId",
             exists (select 1 from webhook_deliveries l${indexedBy(db, 'webhook_deliveries_leased_idx')}
                     where l.endpoint_id = c."endpointId" and l.locked_by is not null and l.locked_until > ${leaseNow}) as busy
      from (
        select e.id as "endpointId", e.account_id as "accountId",
               (select d.id from webhook_deliveries d${indexedBy(db, 'webhook_deliveries_pending_idx')}
                where d.endpoint_id = e.id and d.next_attempt_at is not null and d.next_attempt_at <= ${now}
                order by d.id limit 1) as id
        from webhook_endpoints e
        where ${isTrue(db, sql.raw('e.active'))}
      ) c
      where c.id is not null
      order by c.id`,
    );
    // Oldest first within an account; accounts in turn (each one's first, then each one's second...).
    const byAccount = new Map<string, string[]>();
    for (const c of candidates) {
      if (c.busy || room.busyEndpoints.has(c.endpointId)) continue;
      const list = byAccount.get(c.accountId) ?? [];
      if (list.length < room.perAccount(c.accountId)) list.push(c.id);
      byAccount.set(c.accountId, list);
    }
    const taken = takeInTurns([...byAccount.values()], room.total);
    // Two nodes claiming at once: the second waits here for the first's leases of the same endpoints, and its lease
    // statement (a snapshot after them) sees them and leases none of those endpoints' deliveries.
    await lockRows(db, webhookEndpoints, webhookEndpoints.id, [...new Set(candidates.filter((c) => taken.includes(c.id)).map((c) => c.endpointId))].sort());
    return await leases.lease(db, worker, taken, leaseNow + leaseMs, leaseNow, { now });
  });
  if (rows.length === 0) return [];
  const endpoints = new Map(
    (
      await db
        .select()
        .from(webhookEndpoints)
        .where(inArray(webhookEndpoints.id, [...new Set(rows.map((r) => r.endpointId))]))
    ).map((e) => [e.id, e]),
  );
  rows.sort((a, b) => (a.id < b.id ? -1 : 1));
  return rows.flatMap((delivery) => {
    const endpoint = endpoints.get(delivery.endpointId);
    return endpoint ? [{ delivery, endpoint }] : [];
  });
}

/** The webhook queue's store on SQLite (server/queues/lease-table.ts QueueStore). */
export function webhookQueue(db: Db): QueueStore<ClaimedWebhook, WebhookClaim> {
  return {
    claim: async (worker, request) => await claimDueWebhookDeliveries(db, worker, request),
    renew: async (worker, ids, until) => await leases.renew(db, worker, ids, until),
    release: async (worker, ids) => await leases.release(db, worker, ids),
    stillHeld: async (worker, id) => await leases.stillHeld(db, worker, id),
    releaseDead: async (worker, isDead) => await leases.releaseDead(db, worker, isDead),
    releaseNode: async (node) => await leases.releaseNode(db, node),
    capForeign: async (worker, leaseNow, leaseMs) => await leases.capForeign(db, worker, leaseNow, leaseMs),
  };
}

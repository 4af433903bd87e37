import { and, eq, inArray, isNotNull, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { definePrepared } from '../db/prepared.js';
import { type OutboundMessageRow, type OutboundRecipientRow, outboundMessages, outboundRecipients } from '../db/schema/index.js';

/** The durable outbound queue (outbound_recipients): claimed with a lease, one UPDATE ... RETURNING. */

export interface Claimed {
  recipient: OutboundRecipientRow;
  message: OutboundMessageRow;
}

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  claim: db
    .update(outboundRecipients)
    .set({ lockedBy: sql`${p('worker')}`, lockedUntil: sql`${p('until')}` })
    .where(
      inArray(
        outboundRecipients.id,
        db
          .select({ id: outboundRecipients.id })
          .from(outboundRecipients)
          .where(
            and(
              eq(outboundRecipients.status, 'queued'),
              sql`${outboundRecipients.nextAttemptAt} <= ${p('now')}`,
              sql`(${outboundRecipients.lockedUntil} is null or ${outboundRecipients.lockedUntil} <= ${p('now')})`,
            ),
          )
          .orderBy(outboundRecipients.nextAttemptAt, outboundRecipients.id)
          .limit(p('limit')),
      ),
    )
    .returning()
    .prepare(),
}));

/**
 * Leases up to `limit` due recipients to `worker` until `now + leaseMs`. A lease that expired (its holder died or
 * hung) is claimed again.
 */
export function claimDueRecipients(db: Db, worker: string, now: number, leaseMs: number, limit: number): Claimed[] {
  const rows = statements(db).claim.all({ worker, until: now + leaseMs, now, limit });
  if (rows.length === 0) return [];
  const messages = new Map(
    db
      .select()
      .from(outboundMessages)
      .where(inArray(outboundMessages.id, [...new Set(rows.map((r) => r.messageId))]))
      .all()
      .map((m) => [m.id, m]),
  );
  return rows.flatMap((recipient) => {
    const message = messages.get(recipient.messageId);
    return message ? [{ recipient, message }] : [];
  });
}

/** Gives claimed recipients back without an attempt (shutdown before they were tried). */
export function releaseRecipients(db: Db, worker: string, ids: string[]): void {
  if (ids.length === 0) return;
  db.update(outboundRecipients)
    .set({ lockedBy: null, lockedUntil: null })
    .where(and(inArray(outboundRecipients.id, ids), eq(outboundRecipients.lockedBy, worker)))
    .run();
}

/**
 * At start, leases of earlier runs are void: one process owns the queue, so whatever a killed process held was in
 * flight when it died and is due again now.
 */
export function releaseStaleLeases(db: Db, worker: string): number {
  return db
    .update(outboundRecipients)
    .set({ lockedBy: null, lockedUntil: null })
    .where(and(isNotNull(outboundRecipients.lockedBy), sql`${outboundRecipients.lockedBy} <> ${worker}`))
    .run().changes;
}

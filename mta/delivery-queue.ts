import { hostname } from 'node:os';
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

/**
 * The claim, fair between accounts: due rows are numbered per account (its earliest first) and taken in rounds (every
 * account's first, then every account's second...), each account up to the room it has left; so one account's
 * backlog, however early, never keeps another's due mail from being claimed.
 */
const statements = definePrepared((db) => ({
  claim: db
    .update(outboundRecipients)
    .set({ lockedBy: sql`${p('worker')}`, lockedUntil: sql`${p('until')}` })
    .where(
      sql`${outboundRecipients.id} in (
        select id from (
          select r.id as id, r.next_attempt_at as due,
            row_number() over (partition by m.account_id order by r.next_attempt_at, r.id) as turn,
            coalesce(json_extract(${p('room')}, '$."' || m.account_id || '"'), ${p('perAccount')}) as room
          from ${outboundRecipients} r join ${outboundMessages} m on m.id = r.message_id
          where r.status = 'queued' and r.next_attempt_at <= ${p('now')} and (r.locked_until is null or r.locked_until <= ${p('now')})
        )
        where turn <= room
        order by turn, due, id
        limit ${p('limit')}
      )`,
    )
    .returning()
    .prepare(),
}));

/** How many recipients each account may still take: `room[accountId]`, else `perAccount`. */
export interface ClaimShares {
  perAccount: number;
  room: Record<string, number>;
}

/**
 * Leases up to `limit` due recipients to `worker` until `now + leaseMs`, accounts in turn within their shares. A lease
 * that expired (its holder died or hung) is claimed again.
 */
export function claimDueRecipients(
  db: Db,
  worker: string,
  now: number,
  leaseMs: number,
  limit: number,
  shares: ClaimShares = { perAccount: limit, room: {} },
): Claimed[] {
  const rows = statements(db).claim.all({ worker, until: now + leaseMs, now, limit, perAccount: shares.perAccount, room: JSON.stringify(shares.room) });
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

/** Extends the leases this worker still holds, so a long delivery is never claimed twice. */
export function renewLeases(db: Db, worker: string, ids: string[], until: number): void {
  if (ids.length === 0) return;
  db.update(outboundRecipients)
    .set({ lockedUntil: until })
    .where(and(eq(outboundRecipients.lockedBy, worker), sql`${outboundRecipients.id} in (select value from json_each(${JSON.stringify(ids)}))`))
    .run();
}

/** Worker ids are `<host>:<pid>:<random>`. */
function workerProcess(worker: string): { host: string; pid: number } | null {
  const m = /^(.*):(\d+):[^:]+$/.exec(worker);
  return m ? { host: m[1]!, pid: Number(m[2]) } : null;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * At start: the leases of earlier workers on this host whose process is gone (killed, or an earlier run under this
 * same pid, as in a restarted container) are released at once, so their recipients are due again now. A lease of a
 * process that may still run (another host, or a live pid) is left to expire.
 */
export function releaseDeadLeases(db: Db, worker: string, host = hostname()): number {
  const holders = db
    .selectDistinct({ lockedBy: outboundRecipients.lockedBy })
    .from(outboundRecipients)
    .where(and(isNotNull(outboundRecipients.lockedBy), sql`${outboundRecipients.lockedBy} <> ${worker}`))
    .all();
  let released = 0;
  for (const { lockedBy } of holders) {
    const holder = lockedBy ? workerProcess(lockedBy) : null;
    if (!holder || holder.host !== host) continue;
    if (holder.pid !== process.pid && processAlive(holder.pid)) continue;
    released += db
      .update(outboundRecipients)
      .set({ lockedBy: null, lockedUntil: null })
      .where(eq(outboundRecipients.lockedBy, lockedBy!))
      .run().changes;
  }
  return released;
}

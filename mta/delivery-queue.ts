import { hostname } from 'node:os';
import { and, eq, inArray, isNotNull, sql } from 'drizzle-orm';
import { type Db, clientOf, unsynced } from '../db/client.js';
import { isDeadHolder } from '../server/queues/leases.js';
import { definePrepared } from '../db/prepared.js';
import { type OutboundMessageRow, type OutboundRecipientRow, outboundMessages, outboundRecipients } from '../db/schema/index.js';

/** The durable outbound queue (outbound_recipients): claimed with a lease, one UPDATE ... RETURNING. */

export interface Claimed {
  recipient: OutboundRecipientRow;
  message: OutboundMessageRow;
}

const p = sql.placeholder;

/**
 * The claim, fair between accounts, in three indexed steps (a large backlog costs no more than a small one): the
 * accounts with queued mail (a skip-scan of outbound_recipients_account_due_idx), each account's earliest due
 * recipients up to its room, then the lease on those taken in rounds (every account's first, then every account's
 * second...) up to the limit. So one account's backlog, however early, never keeps another's due mail unclaimed.
 */
const statements = definePrepared((db) => ({
  lease: db
    .update(outboundRecipients)
    .set({ lockedBy: sql`${p('worker')}`, lockedUntil: sql`${p('until')}` })
    // By primary key: the unary + keeps SQLite from scanning the status index instead (a whole backlog).
    .where(
      sql`${outboundRecipients.id} in (select value from json_each(${p('ids')})) and +${outboundRecipients.status} = 'queued'
          and (${outboundRecipients.lockedUntil} is null or ${outboundRecipients.lockedUntil} <= ${p('leaseNow')})`,
    )
    .returning()
    .prepare(),
  /** Whether this worker still holds the recipient's lease (it is gone when its account was deleted). */
  held: db
    .select({ id: outboundRecipients.id })
    .from(outboundRecipients)
    .where(and(eq(outboundRecipients.id, p('id')), eq(outboundRecipients.lockedBy, p('worker'))))
    .prepare(),
  /** The claimed recipients' messages, by id. */
  messages: db
    .select()
    .from(outboundMessages)
    .where(sql`${outboundMessages.id} in (select value from json_each(${p('ids')}))`)
    .prepare(),
  /**
   * The accounts with queued mail (a skip-scan of outbound_recipients_account_due_idx, one step per account) whose
   * sending is not paused: neither the account nor its parent suspended. A paused account's mail waits, unclaimed,
   * until the suspension is lifted.
   */
  accounts: clientOf(db)
    .prepare(
      `with recursive a(id) as (
        select (select min(account_id) from outbound_recipients where status = 'queued')
        union all
        select (select min(account_id) from outbound_recipients where status = 'queued' and account_id > a.id) from a where a.id is not null
      )
      select id from a where id is not null
        and not exists (select 1 from accounts x left join accounts parent on parent.id = x.parent_id
                        where x.id = a.id and (x.suspended_by is not null or parent.suspended_by is not null))`,
    )
    .pluck(),
  /** An account's earliest due recipients. */
  due: clientOf(db)
    .prepare(
      `select id from outbound_recipients indexed by outbound_recipients_account_due_idx
       where status = 'queued' and account_id = @account and next_attempt_at <= @now and (locked_until is null or locked_until <= @leaseNow)
       order by next_attempt_at, id limit @room`,
    )
    .pluck(),
}));

/** How many recipients each account may still take: `room[accountId]`, else `perAccount`. */
export interface ClaimShares {
  perAccount: number;
  room: Record<string, number>;
}

/**
 * Leases up to `limit` due recipients to `worker` until `leaseNow + leaseMs`, accounts in turn within their shares,
 * none of an account whose sending is paused (it or its parent suspended). A lease that expired (its holder died or
 * hung) is claimed again. `now` (the wall clock) says what is due; `leaseNow` (server/shared/clock.ts leaseNow, the engine's
 * steady timeline) writes and judges the leases; the two differ only after a step of the wall clock.
 */
export function claimDueRecipients(
  db: Db,
  worker: string,
  now: number,
  leaseMs: number,
  limit: number,
  shares: ClaimShares = { perAccount: limit, room: {} },
  leaseNow: number = now,
): Claimed[] {
  const q = statements(db);
  // The lease is not worth an fsync: lost in a power failure, the recipient is claimed again.
  const rows = unsynced(db, () => db.transaction(() => {
    const accounts = q.accounts.all() as string[];
    const perAccount = accounts.map((account) => {
      const room = Math.min(limit, shares.room[account] ?? shares.perAccount);
      return room <= 0 ? [] : (q.due.all({ account, now, leaseNow, room }) as string[]);
    });
    const ids: string[] = [];
    for (let turn = 0; ids.length < limit && perAccount.some((list) => turn < list.length); turn++) {
      for (const list of perAccount) if (turn < list.length && ids.length < limit) ids.push(list[turn]!);
    }
    return ids.length === 0 ? [] : q.lease.all({ worker, until: leaseNow + leaseMs, leaseNow, ids: JSON.stringify(ids) });
  }));
  if (rows.length === 0) return [];
  const messages = new Map(q.messages.all({ ids: JSON.stringify([...new Set(rows.map((r) => r.messageId))]) }).map((m) => [m.id, m]));
  return rows.flatMap((recipient) => {
    const message = messages.get(recipient.messageId);
    return message ? [{ recipient, message }] : [];
  });
}

/** Gives claimed recipients back without an attempt (shutdown before they were tried). */
/**
 * Whether the recipient is still queued under this worker's lease, just before its message goes out: a recipient whose
 * account was deleted meanwhile (its rows cascade away) is not sent.
 */
export function stillHeld(db: Db, worker: string, id: string): boolean {
  return statements(db).held.get({ id, worker }) !== undefined;
}

export function releaseRecipients(db: Db, worker: string, ids: string[]): void {
  if (ids.length === 0) return;
  unsynced(db, () =>
    db.update(outboundRecipients)
      .set({ lockedBy: null, lockedUntil: null })
      .where(and(inArray(outboundRecipients.id, ids), eq(outboundRecipients.lockedBy, worker)))
      .run(),
  );
}

/** Extends the leases this worker still holds, so a long delivery is never claimed twice. */
export function renewLeases(db: Db, worker: string, ids: string[], until: number): void {
  if (ids.length === 0) return;
  unsynced(db, () =>
    db.update(outboundRecipients)
      .set({ lockedUntil: until })
      .where(and(eq(outboundRecipients.lockedBy, worker), sql`${outboundRecipients.id} in (select value from json_each(${JSON.stringify(ids)}))`))
      .run(),
  );
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
    if (!lockedBy || !isDeadHolder(lockedBy, worker, host)) continue;
    released += db
      .update(outboundRecipients)
      .set({ lockedBy: null, lockedUntil: null })
      .where(eq(outboundRecipients.lockedBy, lockedBy))
      .run().changes;
  }
  return released;
}

/**
 * At start, after releaseDeadLeases: a lease of another worker that reaches further than one term from now was written
 * before the wall clock stepped back (a holder renews to at most one term ahead), so it is cut to one term from now
 * on this process's timeline (`leaseNow`): it still runs out after at most its term, never after the size of the step.
 */
export function capForeignLeases(db: Db, worker: string, leaseNow: number, leaseMs: number): number {
  return db
    .update(outboundRecipients)
    .set({ lockedUntil: leaseNow + leaseMs })
    .where(and(isNotNull(outboundRecipients.lockedBy), sql`${outboundRecipients.lockedBy} <> ${worker}`, sql`${outboundRecipients.lockedUntil} > ${leaseNow + leaseMs}`))
    .run().changes;
}

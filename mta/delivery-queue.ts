import { eq, getTableColumns, sql } from 'drizzle-orm';
import { type Db, pointReads, unsynced } from '../db/client.js';
import { definePrepared } from '../db/prepared.js';
import { emails, outboundMessages, outboundRecipients } from '../db/schema/index.js';
import type { Claimed } from '../server/core/outcomes.js';
import { type QueueStore, sqliteLeases } from '../server/queues/lease-table.js';
import { takeInTurns } from '../server/queues/turns.js';
import { isPostgres } from '../db/pg/state.js';
import { indexedBy, isOneOfPlaceholder, listParam, plainStatement } from '../db/sql.js';

/**
 * The durable outbound queue (outbound_recipients) on the queue mechanism (server/queues/): claimed with a lease, one
 * UPDATE ... RETURNING. Leases are not worth an fsync (unsynced, db/client.ts): lost in a power failure, a recipient
 * is claimed again, and a lost release runs out.
 */

export type { Claimed };

/**
 * A recipient is leased only while it is queued. By primary key: on SQLite the unary + keeps the planner from scanning
 * the status index instead (a whole backlog); Postgres has no unary + on text, nor the need. Across the table (a
 * holder's leases), through that status index: only queued rows hold a lease (an outcome clears it as it sets the
 * status), and the delivered ones, the table's whole history, are never read.
 */
const leases = sqliteLeases({
  table: outboundRecipients,
  id: outboundRecipients.id,
  lockedBy: outboundRecipients.lockedBy,
  lockedUntil: outboundRecipients.lockedUntil,
  leasable: (db) => (isPostgres(db) ? sql`${outboundRecipients.status} = 'queued'` : sql`+${outboundRecipients.status} = 'queued'`),
  leased: sql`${outboundRecipients.status} = 'queued'`,
});

/**
 * The claim, fair between accounts, in three indexed steps (a large backlog costs no more than a small one): the
 * accounts with queued mail (a skip-scan of outbound_recipients_account_due_idx), each account's earliest due
 * recipients up to its room, then the lease on those taken in turns (every account's first, then every account's
 * second...) up to the limit. So one account's backlog, however early, never keeps another's due mail unclaimed.
 */
const statements = definePrepared((db) => ({
  /** The claimed recipients' messages, by id, each with its email's whole `to` list (the message's To header). */
  messages: db
    .select({ message: outboundMessages, to: emails.to })
    .from(outboundMessages)
    .leftJoin(emails, eq(emails.id, outboundMessages.id))
    .where(isOneOfPlaceholder(db, outboundMessages.id, 'ids'))
    .prepare(),
}));

/**
 * The accounts with queued mail (a skip-scan of outbound_recipients_account_due_idx, one step per account) whose
 * sending is not paused: neither the account nor its parent suspended. A paused account's mail waits, unclaimed,
 * until the suspension is lifted.
 */
async function accountsWithQueuedMail(db: Db): Promise<string[]> {
  return (await accountsStatement.rows<{ id: string }>(db, {})).map((r) => r.id);
}

const accountsStatement = plainStatement(
  () => sql`with recursive a(id) as (
        select (select min(account_id) from outbound_recipients where status = 'queued')
        union all
        select (select min(account_id) from outbound_recipients where status = 'queued' and account_id > a.id) from a where a.id is not null
      )
      select id from a where id is not null
        and not exists (select 1 from accounts x left join accounts parent on parent.id = x.parent_id
                        where x.id = a.id and (x.suspended_by is not null or parent.suspended_by is not null))`,
);

/** An account's earliest due recipients. */
async function dueOf(db: Db, account: string, now: number, leaseNow: number, room: number): Promise<string[]> {
  return (await dueStatement.rows<{ id: string }>(db, { account, now, leaseNow, room })).map((r) => r.id);
}

const dueStatement = plainStatement(
  (db) => sql`select id from outbound_recipients${indexedBy(db, 'outbound_recipients_account_due_idx')}
       where status = 'queued' and account_id = ${sql.placeholder('account')} and next_attempt_at <= ${sql.placeholder('now')}
       and (locked_until is null or locked_until <= ${sql.placeholder('leaseNow')})
       order by next_attempt_at, id limit ${sql.placeholder('room')}`,
);

/**
 * Postgres: the whole claim in one statement, one round trip and its own transaction (three round trips as BEGIN, the
 * candidates, the lease and COMMIT; the claim runs about once for every ten messages delivered). The accounts with
 * queued mail and each one's earliest due recipients up to its room, each row taken FOR UPDATE SKIP LOCKED (a row
 * another node is leasing right now is passed over, not waited for); of those, accounts in turn (every account's
 * first, then every account's second..., as takeInTurns does on SQLite) up to the limit; and their lease, checked
 * again on the row as the lease statement does. The leased rows come back with the fields of db/schema's recipients.
 */
const claimPgStatement = plainStatement(
  () => sql`with recursive a(id) as (
        select (select min(account_id) from outbound_recipients where status = 'queued')
        union all
        select (select min(account_id) from outbound_recipients where status = 'queued' and account_id > a.id) from a where a.id is not null
      ),
      due as (
        select d.id, a.id as account, row_number() over (partition by a.id order by d.next_attempt_at, d.id) as turn from a
        cross join lateral (
          select r.id, r.next_attempt_at from outbound_recipients r
          where r.status = 'queued' and r.account_id = a.id and r.next_attempt_at <= ${sql.placeholder('now')}
            and (r.locked_until is null or r.locked_until <= ${sql.placeholder('leaseNow')})
          order by r.next_attempt_at, r.id
          limit least(${sql.placeholder('limit')}::int, coalesce((${sql.placeholder('rooms')}::jsonb ->> a.id)::int, ${sql.placeholder('perAccount')}::int))
          for update of r skip locked
        ) d
        where a.id is not null
          and not exists (select 1 from accounts x left join accounts parent on parent.id = x.parent_id
                          where x.id = a.id and (x.suspended_by is not null or parent.suspended_by is not null))
      ),
      taken as (select id from due order by turn, account limit ${sql.placeholder('limit')}::int)
      update outbound_recipients r set locked_by = ${sql.placeholder('worker')}, locked_until = ${sql.placeholder('until')}
      from taken
      where r.id = taken.id and r.status = 'queued' and (r.locked_until is null or r.locked_until <= ${sql.placeholder('leaseNow')})
      returning ${sql.join(
        RECIPIENT_FIELDS.map(([field, column]) => sql`r.${sql.identifier(column.name)} as ${sql.identifier(field)}`),
        sql`, `,
      )}`,
);

/** Due recipients leased to `worker` until `until` (Postgres, one statement), as the lease statement gives them. */
async function claimOnPostgres(
  db: Db,
  worker: string,
  now: number,
  leaseNow: number,
  until: number,
  limit: number,
  shares: ClaimShares,
): Promise<RecipientRow[]> {
  const rows = await claimPgStatement.rows<Record<string, unknown>>(db, {
    now,
    leaseNow,
    until,
    worker,
    limit: Math.max(0, limit),
    perAccount: Math.max(0, shares.perAccount),
    rooms: JSON.stringify(Object.fromEntries(Object.entries(shares.room).map(([account, room]) => [account, Math.max(0, room)]))),
  });
  return rows.map((row) => {
    const recipient: Record<string, unknown> = {};
    for (const [field, column] of RECIPIENT_FIELDS) recipient[field] = row[field] === null ? null : column.mapFromDriverValue(row[field]);
    return recipient as RecipientRow;
  });
}

/** The recipients' fields and their columns, as drizzle maps a row of db/schema's outbound_recipients. */
const RECIPIENT_FIELDS = Object.entries(getTableColumns(outboundRecipients));

type RecipientRow = typeof outboundRecipients.$inferSelect;

/** Each account's due recipients up to its room (SQLite: one indexed step per account), in account order for takeInTurns. */
async function dueOnSqlite(db: Db, now: number, leaseNow: number, limit: number, shares: ClaimShares): Promise<string[][]> {
  const perAccount: string[][] = [];
  for (const account of await accountsWithQueuedMail(db)) {
    const room = Math.min(limit, shares.room[account] ?? shares.perAccount);
    perAccount.push(room <= 0 ? [] : await dueOf(db, account, now, leaseNow, room));
  }
  return perAccount;
}

/** How many recipients each account may still take: `room[accountId]`, else `perAccount`. */
export interface ClaimShares {
  perAccount: number;
  room: Record<string, number>;
}

/**
 * A claim: up to `limit` recipients, accounts within their shares. `now` (the wall clock) says what is due; `leaseNow`
 * (server/shared/clock.ts leaseNow, the engine's steady timeline) writes and judges the leases; the two differ only
 * after a step of the wall clock.
 */
export interface RecipientClaim {
  now: number;
  leaseNow: number;
  leaseMs: number;
  limit: number;
  shares: ClaimShares;
}

/**
 * Leases up to `limit` due recipients to `worker` until `leaseNow + leaseMs`, accounts in turn within their shares,
 * none of an account whose sending is paused (it or its parent suspended). A lease that expired (its holder died or
 * hung) is claimed again.
 */
export async function claimDueRecipients(
  db: Db,
  worker: string,
  now: number,
  leaseMs: number,
  limit: number,
  shares: ClaimShares = { perAccount: limit, room: {} },
  leaseNow: number = now,
): Promise<Claimed[]> {
  const q = statements(db);
  const rows = isPostgres(db)
    ? await claimOnPostgres(db, worker, now, leaseNow, leaseNow + leaseMs, limit, shares)
    : await unsynced(
        db,
        async () =>
          await db.transaction(async () => {
            const perAccount = await dueOnSqlite(db, now, leaseNow, limit, shares);
            return await leases.lease(db, worker, takeInTurns(perAccount, limit), leaseNow + leaseMs, leaseNow);
          }),
      );
  if (rows.length === 0) return [];
  const messages = new Map((await q.messages.execute({ ids: listParam(db, [...new Set(rows.map((r) => r.messageId))]) })).map((m) => [m.message.id, m]));
  return rows.flatMap((recipient) => {
    const found = messages.get(recipient.messageId);
    return found ? [{ recipient, message: found.message, to: found.to ?? [recipient.recipient] }] : [];
  });
}

/**
 * Whether the recipient is still queued under this worker's lease, just before its message goes out: a recipient whose
 * account was deleted meanwhile (its rows cascade away) is not sent.
 */
export async function stillHeld(db: Db, worker: string, id: string): Promise<boolean> {
  return await pointReads(db, () => leases.stillHeld(db, worker, id));
}

/** Extends the leases this worker still holds, so a long delivery is never claimed twice. */
export async function renewLeases(db: Db, worker: string, ids: string[], until: number): Promise<void> {
  if (ids.length === 0) return;
  await unsynced(db, async () => await leases.renew(db, worker, ids, until));
}

/** At start: the leases of earlier workers on this host whose process is gone are released (server/queues/lease-table.ts). */
export async function releaseDeadLeases(db: Db, worker: string, isDead?: (holder: string) => boolean): Promise<number> {
  return await leases.releaseDead(db, worker, isDead);
}

/** At start, after releaseDeadLeases: another worker's lease cut to one term from now (a wall clock stepped back). */
export async function capForeignLeases(db: Db, worker: string, leaseNow: number, leaseMs: number): Promise<number> {
  return await leases.capForeign(db, worker, leaseNow, leaseMs);
}

/** The outbound queue's store on SQLite (server/queues/lease-table.ts QueueStore). */
export function recipientQueue(db: Db): QueueStore<Claimed, RecipientClaim> {
  return {
    claim: async (worker, r) => await claimDueRecipients(db, worker, r.now, r.leaseMs, r.limit, r.shares, r.leaseNow),
    renew: async (worker, ids, until) => await renewLeases(db, worker, [...ids], until),
    // Claimed recipients given back without an attempt (shutdown before they were tried).
    release: async (worker, ids) => (ids !== undefined && ids.length === 0 ? 0 : await unsynced(db, async () => await leases.release(db, worker, ids))),
    stillHeld: async (worker, id) => await stillHeld(db, worker, id),
    releaseDead: async (worker, isDead) => await releaseDeadLeases(db, worker, isDead),
    releaseNode: async (node) => await leases.releaseNode(db, node),
    capForeign: async (worker, leaseNow, leaseMs) => await capForeignLeases(db, worker, leaseNow, leaseMs),
  };
}

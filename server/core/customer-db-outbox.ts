import { and, asc, count, eq, inArray, isNotNull, isNull, lte, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import type { CustomerWrite } from '../../db/customer/writes.js';
import { cutErrorText } from '../../db/customer/error-text.js';
import { definePrepared } from '../../db/prepared.js';
import { markQueued } from '../../db/queue-wake.js';
import { type CustomerDbWriteRow, customerDbWrites } from '../../db/schema/index.js';
import { DAY_MS } from '../shared/clock.js';
import { newId } from '../shared/ids.js';
import { decryptSecret, encryptSecret, openBytes, sealBytes } from '../shared/secrets.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';
import { changes, one, plainStatement, queryRows } from '../../db/sql.js';

/**
 * The outbox of the customer-database writer (docs/api/decisions.md section 8): each write is queued in the same SQLite
 * transaction as what it records, its content sealed with the secret key, and deleted once the customer database has
 * it. While the database cannot be reached, writes wait here for up to seven days.
 */

/** How long a write waits for its database before it is dropped (docs/api/contract.md, Limits: "Queued database writes"). */
export const WRITE_RETENTION_MS = 7 * DAY_MS;
/** Tries of a write the database refuses for its data before it is set aside, and the gaps between them. */
export const DATA_RETRY_GAPS_MS: readonly number[] = [30_000, 120_000];
export const DATA_TRIES = DATA_RETRY_GAPS_MS.length + 1;

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  pending: db
    .select({ n: count() })
    .from(customerDbWrites)
    .where(and(eq(customerDbWrites.databaseAccountId, p('owner')), isNull(customerDbWrites.setAsideAt)))
    .prepare(),
  pendingOf: db
    .select({ n: count() })
    .from(customerDbWrites)
    .where(and(eq(customerDbWrites.databaseAccountId, p('owner')), eq(customerDbWrites.accountId, p('accountId')), isNull(customerDbWrites.setAsideAt)))
    .prepare(),
  due: db
    .select()
    .from(customerDbWrites)
    .where(and(eq(customerDbWrites.databaseAccountId, p('owner')), isNull(customerDbWrites.setAsideAt), lte(customerDbWrites.nextAttemptAt, p('now'))))
    .orderBy(asc(customerDbWrites.id))
    .limit(p('limit'))
    .prepare(),
}));

/**
 * The account whose database receives the writes of the account `d.account_id` names (its own, else its parent's), as
 * plain SQL over an outer query's `d` (a domain): null when neither has a database. A send reads the same rule with its
 * account rows (core/sending.ts readForSend).
 */
export const OWNER_SQL = `coalesce(
    (select own.account_id from customer_databases own where own.account_id = d.account_id),
    (select up.account_id from accounts a join customer_databases up on up.account_id = a.parent_id where a.id = d.account_id))`;

/** The account whose database receives this account's writes (its own, else its parent's), or null when neither has one. */
export async function databaseOwnerOf(db: Db, accountId: string): Promise<string | null> {
  const row = await ownerStatement.row<{ owner: string | null }>(db, { accountId });
  return row?.owner ?? null;
}

const ownerStatement = plainStatement(
  () => sql`select ${sql.raw(OWNER_SQL)} as owner from (select cast(${sql.placeholder('accountId')} as text) as account_id) d`,
);
const insertWrite = plainStatement(
  () => sql`insert into customer_db_writes (id, database_account_id, account_id, kind, payload_sealed, raw_sealed, spool_id, next_attempt_at, created_at)
     values (${p('id')}, ${p('owner')}, ${p('accountId')}, ${p('kind')}, ${p('payloadSealed')}, ${p('rawSealed')}, ${p('spoolId')}, ${p('now')}, ${p('now')})`,
);

/**
 * Queues one write for the database of `accountId` (or its parent's); call it inside the transaction that records
 * what the write carries. Nothing is queued when neither account has a database, or the server keeps no secret key
 * (no database can be connected then). Returns whether a write was queued.
 */
export async function queueCustomerDbWrite(
  deps: { db: Db; secretKey: Buffer | null },
  accountId: string,
  write: QueuedWrite,
  now: number,
  /** The database's owner, when the caller's transaction read it already (undefined: looked up here). */
  knownOwner?: string | null,
): Promise<boolean> {
  if (!deps.secretKey) return false;
  const owner = knownOwner !== undefined ? knownOwner : await databaseOwnerOf(deps.db, accountId);
  if (owner === null) return false;
  const id = newId(now);
  // A received message's bytes are sealed as bytes, beside the JSON rather than inside it as base64.
  const { raw, ...content } = write as QueuedWrite & { raw?: Buffer };
  const payloadSealed = encryptSecret(deps.secretKey, JSON.stringify(content), SEAL_CONTEXTS.customerDbWrite(id));
  const rawSealed = raw ? sealBytes(deps.secretKey, raw, SEAL_CONTEXTS.customerDbWriteRaw(id)) : null;
  const spoolId = 'spoolId' in write ? write.spoolId : null;
  await insertWrite.run(deps.db, { id, owner, accountId, kind: write.kind, payloadSealed, rawSealed, spoolId, now });
  markQueued(deps.db, 'customer-db');
  return true;
}

/**
 * A received message for one account, held in this write (small) or in the inbound spool (db/inbound-spool.ts):
 * the writer parses it into `service.inbound` and `service.attachments` when it applies the write.
 */
export interface SpooledInboundWrite {
  kind: 'inbound';
  /** The service.inbound id. */
  id: string;
  /** The spool file holding a large message; null when the message is `raw` here. */
  spoolId: string | null;
  /** A small message itself (stored sealed in its own column, never in the JSON). */
  raw?: Buffer;
  accountId: string;
  /** The envelope recipients of this account. */
  toAddresses: string[];
  mailFrom: string;
  remoteAddress: string;
  helo: string;
  receivedAt: number;
  size: number;
}

export type QueuedWrite = CustomerWrite | SpooledInboundWrite;

export const isSpooled = (w: QueuedWrite): w is SpooledInboundWrite => 'spoolId' in w;

/** A queued write with its content opened, or the reason it could not be. */
export type OpenedWrite = { row: CustomerDbWriteRow; write: QueuedWrite } | { row: CustomerDbWriteRow; write: null; error: string };

export function openWrite(secretKey: Buffer, row: CustomerDbWriteRow): OpenedWrite {
  try {
    const write = JSON.parse(decryptSecret(secretKey, row.payloadSealed, SEAL_CONTEXTS.customerDbWrite(row.id)).toString('utf8')) as QueuedWrite & {
      raw?: Buffer | string;
    };
    if (row.rawSealed) write.raw = openBytes(secretKey, row.rawSealed, SEAL_CONTEXTS.customerDbWriteRaw(row.id));
    // Queued by a version that kept the bytes inside the JSON, as base64.
    else if (typeof write.raw === 'string') write.raw = Buffer.from(write.raw, 'base64');
    return { row, write: write as QueuedWrite };
  } catch {
    return { row, write: null, error: 'The queued write could not be decrypted with the current secret key.' };
  }
}

/** The writes of one database that are due now, oldest first (the order they happened in). */
export async function dueWrites(db: Db, owner: string, now: number, limit: number): Promise<CustomerDbWriteRow[]> {
  return await statements(db).due.execute({ owner, now, limit });
}

/** Writes waiting for a database (docs/api/contract.md: `pending`); those set aside do not wait. */
export async function pendingWrites(db: Db, owner: string): Promise<number> {
  return (await one(statements(db).pending.execute({ owner })))?.n ?? 0;
}

/** Of those, the writes of one account's own mail (a sub-account's, in its parent's database). */
export async function pendingWritesOf(db: Db, owner: string, accountId: string): Promise<number> {
  return (await one(statements(db).pendingOf.execute({ owner, accountId })))?.n ?? 0;
}

/** The written ones go: their content no longer stays in the service. */
export async function deleteWrites(db: Db, ids: readonly string[]): Promise<void> {
  for (let i = 0; i < ids.length; i += 500) await db.delete(customerDbWrites).where(inArray(customerDbWrites.id, ids.slice(i, i + 500)));
}

/**
 * A write the database refused for its data: tried again after the next gap, or set aside once it has had its tries
 * (kept, out of the way of the writes behind it, until the retention window drops it). Returns whether it was set aside.
 */
export async function recordRefusedWrite(db: Db, row: CustomerDbWriteRow, error: string, now: number, options: { final?: boolean } = {}): Promise<boolean> {
  const attempts = row.attempts + 1;
  // A final refusal (a write that cannot even be opened will never land) is set aside at once.
  const gap = options.final ? undefined : DATA_RETRY_GAPS_MS[attempts - 1];
  await db
    .update(customerDbWrites)
    .set(
      gap === undefined
        ? { attempts, lastError: cutErrorText(error), setAsideAt: now }
        : { attempts, lastError: cutErrorText(error), nextAttemptAt: now + gap },
    )
    .where(eq(customerDbWrites.id, row.id));
  return gap === undefined;
}

/**
 * The database's set-aside writes back in line, due now, with their tries counted afresh: after a successful
 * POST /database/test or a reconnect (the customer fixed what refused them). Still refused, they are set aside again
 * after the same gaps, and the error is the database's last error again. Returns how many.
 */
export async function requeueSetAside(db: Db, owner: string, now: number): Promise<number> {
  return changes(
    await db
      .update(customerDbWrites)
      .set({ setAsideAt: null, attempts: 0, nextAttemptAt: now })
      .where(and(eq(customerDbWrites.databaseAccountId, owner), isNotNull(customerDbWrites.setAsideAt))),
  );
}

/**
 * Drops every write queued at least the retention window ago: by `created_at`, which nothing moves, so a write
 * retried or set aside and put back in line (its `next_attempt_at` later) still goes seven days after it was queued.
 * The count per database, for the log, is taken in the same transaction as the delete, with the same condition.
 */
export async function dropExpiredWrites(db: Db, now: number): Promise<Map<string, number>> {
  const cutoff = now - WRITE_RETENTION_MS;
  return await db.transaction(async () => {
    const counts = await queryRows<{ owner: string; n: number }>(
      db,
      sql`
      select database_account_id as owner, count(*) as n from customer_db_writes where created_at <= ${cutoff} group by database_account_id`,
    );
    if (counts.length > 0) await db.delete(customerDbWrites).where(lte(customerDbWrites.createdAt, cutoff));
    return new Map(counts.map((c) => [c.owner, c.n]));
  });
}

/** Every write still queued for a database (a DELETE /database): the count removed. */
export async function dropWritesOf(db: Db, owner: string): Promise<number> {
  return changes(await db.delete(customerDbWrites).where(eq(customerDbWrites.databaseAccountId, owner)));
}

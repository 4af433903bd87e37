import { and, eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { customerDatabases } from '../../db/schema/index.js';
import { cutErrorText } from '../../db/customer/error-text.js';
import { one } from '../../db/sql.js';

/**
 * A connected database's state as the writer and the endpoints see it (docs/api/contract.md, Database status): `connected` until a
 * write fails for a connection reason, `unreachable` until the next success. Updates name the connection they are
 * about, so a result of a replaced URL never lands on its successor.
 */

const SECOND = 1000;
const MINUTE = 60 * SECOND;

/**
 * Gaps between the writer's attempts at an unreachable database, by connection failures in a row; the last repeats
 * until the writes are seven days old (docs/api/decisions.md section 8: "retried with growing gaps for 7 days").
 */
export const RECONNECT_GAPS_MS: readonly number[] = [5 * SECOND, 15 * SECOND, 30 * SECOND, 1 * MINUTE, 2 * MINUTE, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE];

export function reconnectGap(failures: number): number {
  return RECONNECT_GAPS_MS[Math.min(failures, RECONNECT_GAPS_MS.length) - 1] ?? RECONNECT_GAPS_MS[0]!;
}

const row = (owner: string, connectionId: string) => and(eq(customerDatabases.accountId, owner), eq(customerDatabases.connectionId, connectionId));

/**
 * The writer reached the database (a batch was answered): `connected`, due again at once; lastOkAt now when a write
 * of it `landed` (a batch whose every write was refused for its data moves it not). A connection error is cleared; an
 * error about a set-aside write stays visible. updatedAt moves when the state or the error changes.
 */
export async function markReached(db: Db, owner: string, connectionId: string, now: number, opts: { landed: boolean; schemaVersion?: number }): Promise<void> {
  const { landed, schemaVersion } = opts;
  await db
    .update(customerDatabases)
    .set({
      state: 'connected',
      ...(landed ? { lastOkAt: now } : {}),
      failures: 0,
      nextAttemptAt: now,
      updatedAt: sql`case when ${customerDatabases.state} <> 'connected' or ${customerDatabases.lastErrorKind} = 'connection' then ${now} else ${customerDatabases.updatedAt} end`,
      lastError: sql`case when ${customerDatabases.lastErrorKind} = 'connection' then null else ${customerDatabases.lastError} end`,
      lastErrorKind: sql`case when ${customerDatabases.lastErrorKind} = 'connection' then null else ${customerDatabases.lastErrorKind} end`,
      ...(schemaVersion === undefined ? {} : { schemaVersion }),
    })
    .where(row(owner, connectionId));
}

/** A test connection succeeded: as markReached, and the last error of any kind is cleared (the status is fresh). */
export async function markTested(db: Db, owner: string, connectionId: string, now: number, schemaVersion: number): Promise<void> {
  await db
    .update(customerDatabases)
    .set({
      state: 'connected',
      lastOkAt: now,
      failures: 0,
      nextAttemptAt: now,
      lastError: null,
      lastErrorKind: null,
      schemaVersion,
      updatedAt: sql`case when ${customerDatabases.state} <> 'connected' or ${customerDatabases.lastError} is not null then ${now} else ${customerDatabases.updatedAt} end`,
    })
    .where(row(owner, connectionId));
}

/**
 * The database could not be reached: `unreachable`, the error (cut to MAX_ERROR_TEXT characters: the database wrote
 * it), and the next attempt after the gap of this many failures in a row. Returns whether the state changed (the
 * writer logs the turn once).
 */
export async function markUnreachable(
  db: Db,
  owner: string,
  connectionId: string,
  error: string,
  now: number,
): Promise<{ changed: boolean; failures: number }> {
  const message = cutErrorText(error);
  return await db.transaction(async () => {
    const before = await one(
      db
        .select({ state: customerDatabases.state, failures: customerDatabases.failures, lastError: customerDatabases.lastError })
        .from(customerDatabases)
        .where(row(owner, connectionId)),
    );
    if (!before) return { changed: false, failures: 0 };
    const failures = before.failures + 1;
    const moved = before.state !== 'unreachable' || before.lastError !== message;
    await db
      .update(customerDatabases)
      .set({
        state: 'unreachable',
        failures,
        lastError: message,
        lastErrorKind: 'connection',
        nextAttemptAt: now + reconnectGap(failures),
        ...(moved ? { updatedAt: now } : {}),
      })
      .where(row(owner, connectionId));
    return { changed: before.state !== 'unreachable', failures };
  });
}

/** A write was set aside for its data: its error (cut) becomes the database's last error, the state is untouched. */
export async function noteSetAside(db: Db, owner: string, error: string, now: number): Promise<void> {
  const message = cutErrorText(error);
  await db
    .update(customerDatabases)
    .set({
      lastError: message,
      lastErrorKind: 'data',
      updatedAt: sql`case when ${customerDatabases.lastError} is ${message} then ${customerDatabases.updatedAt} else ${now} end`,
    })
    .where(eq(customerDatabases.accountId, owner));
}

/** Whether `connectionId` is still the owner's database (not replaced by a new URL, nor deleted). */
export async function isCurrentConnection(db: Db, owner: string, connectionId: string): Promise<boolean> {
  return (
    (await one(db.select({ id: customerDatabases.connectionId }).from(customerDatabases).where(eq(customerDatabases.accountId, owner))))?.id === connectionId
  );
}

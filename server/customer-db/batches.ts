import type pg from 'pg';
import { eq } from 'drizzle-orm';
import { classifyConnectError } from '../../db/customer/connect.js';
import { cutErrorText, customerErrorText } from '../../db/customer/error-text.js';
import { migrateCustomerDb } from '../../db/customer/schema.js';
import { type CustomerWrite, TargetChangedError, applyWrites, isDataError } from '../../db/customer/writes.js';
import { type CustomerDatabaseRow, type CustomerDbWriteRow, customerDatabases } from '../../db/schema/index.js';
import type { Deps } from '../core/deps.js';
import { type OpenedWrite, deleteWrites, dueWrites, isSpooled, openWrite, recordRefusedWrite } from '../core/customer-db-outbox.js';
import { isCurrentConnection, markReached, markUnreachable, noteSetAside } from '../core/customer-db-status.js';
import { ParserStoppedError } from './inbound/parser.js';
import { SpoolError } from './inbound/parse-message.js';
import type { InboundHandoff } from './inbound-handoff.js';
import type { Pools } from './pools.js';

/** The sealed size of one batch's writes (small received messages make most of it). */
const BATCH_PAYLOAD_BYTES = 16 * 1024 * 1024;

/**
 * The leading rows of a batch whose sealed content (the JSON and a received message's bytes) fits `budget` bytes;
 * always the first, however large.
 */
export function withinBudget(rows: readonly CustomerDbWriteRow[], budget: number): CustomerDbWriteRow[] {
  let left = budget;
  const taken: CustomerDbWriteRow[] = [];
  for (const row of rows) {
    left -= row.payloadSealed.length + (row.rawSealed?.length ?? 0);
    if (taken.length > 0 && left < 0) break;
    taken.push(row);
  }
  return taken;
}

/**
 * A statement the database cancelled for its statement_timeout (SQLSTATE 57014), or a query the client gave up on
 * (pg's query_timeout): the batch was too slow for the database as it is now, not refused.
 */
export function isTimeout(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  return e?.code === '57014' || e?.message === 'Query read timeout';
}

/** What the batches take besides the store, the clock, the log, the secret key and the spool. */
export interface BatchParts {
  pools: Pick<Pools, 'poolFor' | 'closePool'>;
  inbound: Pick<InboundHandoff, 'parseInlineAll' | 'applySpooled'>;
  /** Writes applied in one transaction (at most). */
  batchSize: number;
  /** Whether the writer still runs (its loop, a test driving it, or a stop letting the batches in flight finish). */
  isRunning: () => boolean;
  isStopping: () => boolean;
  /** Look for due writes again now (a database's target changed: its writes are another's). */
  poke: () => void;
}

/**
 * The batches of one database: its due writes taken oldest first, applied in one Postgres transaction each
 * (db/customer/writes.ts) and deleted once committed; refusals recorded (retried a few times, then set aside); a
 * database that fails turns `unreachable`; a batch that timed out is halved for the next attempt.
 */
export function createBatches(deps: Pick<Deps, 'db' | 'clock' | 'logger' | 'secretKey' | 'config' | 'inboundSpool'>, parts: BatchParts) {
  const { pools, inbound, isRunning, isStopping } = parts;
  /** Batch sizes below parts.batchSize, by database, after a batch timed out (halved; doubled back as batches land). */
  const batchLimits = new Map<string, number>();

  async function failed(db: CustomerDatabaseRow, message: string): Promise<void> {
    pools.closePool(db.accountId);
    const { changed, failures } = await markUnreachable(deps.db, db.accountId, db.connectionId, message, deps.clock.now());
    const fields = { accountId: db.accountId, host: db.host, message, failures };
    if (changed) deps.logger.warn('customer_db.unreachable', fields);
    else deps.logger.info('customer_db.attempt_failed', fields);
  }

  /**
   * Writes a batch's opened writes in order: runs of emails, events and small received messages as one statement set
   * (db/customer/writes.ts), each large received message on its own from its spool file (server/customer-db/inbound/store.ts).
   * Deletes what landed, records what was refused, and removes the spooled messages nothing reads any more.
   */
  async function writeBatch(client: pg.PoolClient, db: CustomerDatabaseRow, opened: OpenedWrite[]): Promise<void> {
    /** Refused writes: the error, and whether no retry can help (set aside at once). */
    const refused = new Map<string, { error: string; final: boolean }>();
    const landedSpools: string[] = [];
    let run: { row: OpenedWrite['row']; write: CustomerWrite }[] = [];
    const stillTarget = async () => await isCurrentConnection(deps.db, db.accountId, db.connectionId);
    const flushRun = async () => {
      if (run.length === 0) return;
      for (const r of await applyWrites(
        client,
        run.map((o) => o.write),
        { stillTarget },
      ))
        refused.set(run[r.index]!.row.id, { error: r.error.message, final: false });
      run = [];
    };
    // Small received messages are parsed up front, several at once (their DNS checks overlap), into rows the batch
    // statements write like emails and events.
    const parsedInbound = await inbound.parseInlineAll(opened);
    for (const o of opened) {
      const inline = parsedInbound.get(o.row.id);
      if (o.write === null) {
        // A write that cannot even be opened will never land.
        refused.set(o.row.id, { error: o.error, final: true });
      } else if (inline instanceof Error) {
        refused.set(o.row.id, { error: inline.message, final: !(inline instanceof ParserStoppedError) });
      } else if (inline) {
        run.push({ row: o.row, write: inline });
      } else if (isSpooled(o.write)) {
        await flushRun();
        if (!(await stillTarget())) throw new TargetChangedError();
        try {
          await inbound.applySpooled(client, o.write, { stillTarget });
          // Gone from the outbox as soon as it landed: `pending` follows the messages one by one, and a crash later
          // in the batch does not parse this one again.
          await deleteWrites(deps.db, [o.row.id]);
          if (o.write.spoolId !== null) landedSpools.push(o.write.spoolId);
        } catch (err) {
          // The parse thread stopped with it (or crashed on it): tried again after the data-refusal gaps.
          if (!(err instanceof SpoolError) && !(err instanceof ParserStoppedError) && !isDataError(err)) throw err;
          refused.set(o.row.id, { error: (err as Error).message, final: err instanceof SpoolError });
        }
      } else run.push({ row: o.row, write: o.write });
    }
    await flushRun();
    const now = deps.clock.now();
    await deps.db.transaction(async () => {
      await deleteWrites(
        deps.db,
        opened.filter((o) => !refused.has(o.row.id)).map((o) => o.row.id),
      );
      for (const o of opened) {
        const r = refused.get(o.row.id);
        if (r === undefined) continue;
        // The database's words (a trigger's message can be megabytes): cut before they are kept or logged.
        const error = cutErrorText(r.error);
        const setAside = await recordRefusedWrite(deps.db, o.row, error, now, { final: r.final });
        const fields = { accountId: db.accountId, writeId: o.row.id, kind: o.row.kind, error };
        if (setAside) {
          deps.logger.error('customer_db.write_set_aside', fields);
          await noteSetAside(deps.db, db.accountId, `A queued ${o.row.kind} write was set aside after the database refused it: ${error}`, now);
        } else deps.logger.warn('customer_db.write_refused', fields);
      }
      await markReached(deps.db, db.accountId, db.connectionId, now, { landed: opened.some((o) => !refused.has(o.row.id)) });
    });
    for (const spool of landedSpools) await deps.inboundSpool.release(spool);
  }

  /** Writes everything due for one database, batch after batch, until none is left or the database fails. */
  async function serve(db: CustomerDatabaseRow): Promise<void> {
    const entry = await pools.poolFor(db);
    if (typeof entry === 'string') return await failed(db, entry);
    let client: pg.PoolClient;
    try {
      client = await entry.pool.connect();
    } catch (err) {
      return await failed(db, describe(err));
    }
    let broken: Error | undefined;
    try {
      if (!entry.migrated) {
        const version = await migrateCustomerDb(client);
        entry.migrated = true;
        if (version !== db.schemaVersion)
          await deps.db.update(customerDatabases).set({ schemaVersion: version }).where(eq(customerDatabases.accountId, db.accountId));
      }
      while (isRunning()) {
        // A URL replaced or deleted meanwhile: its writes are the new database's (the next run opens it), or dropped.
        if (!(await isCurrentConnection(deps.db, db.accountId, db.connectionId))) throw new TargetChangedError();
        const limit = batchLimits.get(db.accountId) ?? parts.batchSize;
        const fetched = await dueWrites(deps.db, db.accountId, deps.clock.now(), limit);
        if (fetched.length === 0) break;
        // A batch of small received messages is held parsed at once: its sealed size is bounded too.
        const rows = withinBudget(fetched, BATCH_PAYLOAD_BYTES);
        await writeBatch(
          client,
          db,
          rows.map((row) => openWrite(deps.secretKey!, row)),
        );
        // A smaller batch landed after a timeout: the next may be larger again.
        if (limit < parts.batchSize) batchLimits.set(db.accountId, Math.min(parts.batchSize, limit * 2));
        if ((fetched.length < limit && rows.length === fetched.length) || isStopping()) break;
      }
    } catch (err) {
      if (err instanceof TargetChangedError) {
        deps.logger.info('customer_db.target_changed', { accountId: db.accountId, message: err.message });
        parts.poke();
      } else {
        broken = err instanceof Error ? err : new Error(String(err));
        // A batch the database could not take within the statement timeout would time out again as it is: the next
        // attempt takes half as many writes, down to one.
        if (isTimeout(err)) batchLimits.set(db.accountId, Math.max(1, Math.floor((batchLimits.get(db.accountId) ?? parts.batchSize) / 2)));
        await failed(db, describe(err));
      }
    } finally {
      client.release(broken);
    }
  }

  return { serve };
}

export type Batches = ReturnType<typeof createBatches>;

/** A failure as the status shows it: the stage and reason of a connection error, else the database's message (cut). */
function describe(err: unknown): string {
  const classified = classifyConnectError(err);
  if (classified.stage !== 'other') return classified.message;
  return customerErrorText(err, { withCode: true });
}

import type pg from 'pg';
import { and, eq, gt, lte, sql } from 'drizzle-orm';
import { classifyConnectError, openCustomerPool } from '../../db/customer/connect.js';
import { cutErrorText, customerErrorText } from '../../db/customer/error-text.js';
import { migrateCustomerDb } from '../../db/customer/schema.js';
import { definePrepared } from '../../db/prepared.js';
import { type CustomerWrite, type InboundWrite, TargetChangedError, applyWrites, isDataError } from '../../db/customer/writes.js';
import { type InboundParser, ParserStoppedError, createInboundParser } from './inbound/parser.js';
import { applySpooledInbound } from './inbound/store.js';
import { SpoolError } from './inbound/parse-message.js';
import { spoolPath, sweepSpool } from '../../db/inbound-spool.js';
import { rmSync } from 'node:fs';
import { type CustomerDatabaseRow, type CustomerDbWriteRow, customerDatabases } from '../../db/schema/index.js';
import type { Deps } from '../core/deps.js';
import { createPollLoop } from '../queues/poll-loop.js';
import { configsFor, connectFailure, targetOf } from './connection.js';
import { type OpenedWrite, type SpooledInboundWrite, deleteWrites, dropExpiredWrites, dueWrites, isSpooled, openWrite, recordRefusedWrite, spoolReferenced } from '../core/customer-db-outbox.js';
import { isCurrentConnection, markReached, markUnreachable, noteSetAside } from '../core/customer-db-status.js';
import { logFailure } from '../shared/store-health.js';

/**
 * The customer-database writer: takes the outbox's waiting writes of each connected database, oldest first, in
 * batches applied in one Postgres transaction each (db/customer/writes.ts), and deletes them once committed. A
 * database that cannot be reached turns `unreachable` and is tried again after growing gaps; writes older than seven
 * days are dropped with a logged count; a write the database refuses for its data is retried a few times and then
 * set aside, never holding up the writes behind it. One batch per database at a time, so a database's writes land in
 * the order they happened.
 */

export interface WriterOptions {
  /** How often due writes are looked for besides `poke()`. */
  intervalMs: number;
  /** Writes applied in one transaction. */
  batchSize: number;
  /** Databases written to at once. */
  maxDatabases: number;
  /** Connections per customer database. */
  poolMax: number;
  /** The parse thread's script (tests start one that dies); the built mta/inbound/parse-worker.js otherwise. */
  parserWorkerUrl?: URL;
  /** The parse threads to use (main shares them with the inbound server, and closes them); else the writer's own. */
  parser?: InboundParser;
}

/** The sealed size of one batch's writes (small received messages make most of it). */
const BATCH_PAYLOAD_BYTES = 16 * 1024 * 1024;

const statements = definePrepared((db) => ({
  dueDatabases: db
    .select()
    .from(customerDatabases)
    .where(
      and(
        lte(customerDatabases.nextAttemptAt, sql.placeholder('now')),
        sql`exists (select 1 from customer_db_writes w indexed by customer_db_writes_pending_idx
                    where w.database_account_id = ${customerDatabases.accountId} and w.set_aside_at is null and w.next_attempt_at <= ${sql.placeholder('now')})`,
      ),
    )
    .orderBy(customerDatabases.nextAttemptAt)
    .prepare(),
  databaseCount: db.select({ count: sql<number>`count(*)` }).from(customerDatabases).prepare(),
}));

/** How often the spool is swept, and how old an unreferenced file must be (files are written before their commit). */
const SPOOL_SWEEP_EVERY_MS = 5 * 60_000;
const SPOOL_ORPHAN_AFTER_MS = 15 * 60_000;

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

export const DEFAULT_WRITER_OPTIONS: WriterOptions = { intervalMs: 1000, batchSize: 500, maxDatabases: 8, poolMax: 2 };

interface PoolEntry {
  connectionId: string;
  pool: pg.Pool;
  migrated: boolean;
}

export function createCustomerDbWriter(deps: Deps, options: Partial<WriterOptions> = {}) {
  const opts: WriterOptions = { ...DEFAULT_WRITER_OPTIONS, ...options };
  const pools = new Map<string, PoolEntry>();
  const parser = opts.parser ?? createInboundParser(deps, opts.parserWorkerUrl ? { workerUrl: opts.parserWorkerUrl } : {});
  /** Databases with a run in flight. */
  const busy = new Set<string>();
  /** Batch sizes below opts.batchSize, by database, after a batch timed out (halved; doubled back as batches land). */
  const batchLimits = new Map<string, number>();
  const runs = new Set<Promise<void>>();
  /** Set by runOnce (tests) while it drives the writer without the loop. */
  let driving = false;
  let stopping = false;
  const loop = createPollLoop({
    intervalMs: opts.intervalMs,
    tick: () => void claim(),
    onError: (err) => logFailure(deps, 'customer_db.claim_failed', err),
  });

  function closePool(owner: string): void {
    const entry = pools.get(owner);
    if (!entry) return;
    pools.delete(owner);
    entry.pool.end().catch(() => undefined);
  }

  /** The pool of a database's current URL, opened on the first checked address that connects; a replaced URL's pool is closed. */
  async function poolFor(db: CustomerDatabaseRow): Promise<PoolEntry | string> {
    const known = pools.get(db.accountId);
    if (known && known.connectionId === db.connectionId) return known;
    if (known) closePool(db.accountId);
    if (!deps.secretKey) return 'The server has no secret key to open the stored URL.';
    let target;
    try {
      target = targetOf(deps.secretKey, db);
    } catch {
      return 'The stored URL could not be read with the current secret key; connect the database again.';
    }
    const reached = await configsFor(deps, target);
    if (!reached.ok) return reached.message;
    // Each checked address in turn while the failure is at the network, as POST /database connects.
    let failure = 'could not connect';
    for (const config of reached.configs) {
      const pool = openCustomerPool(config, { max: opts.poolMax, logger: deps.logger });
      try {
        (await pool.connect()).release();
      } catch (err) {
        pool.end().catch(() => undefined);
        const { atNetwork, message } = connectFailure(err);
        failure = message;
        if (atNetwork) continue;
        return failure;
      }
      const entry: PoolEntry = { connectionId: db.connectionId, pool, migrated: false };
      pools.set(db.accountId, entry);
      return entry;
    }
    return failure;
  }

  function failed(db: CustomerDatabaseRow, message: string): void {
    closePool(db.accountId);
    const { changed, failures } = markUnreachable(deps.db, db.accountId, db.connectionId, message, deps.clock.now());
    const fields = { accountId: db.accountId, host: db.host, message, failures };
    if (changed) deps.logger.warn('customer_db.unreachable', fields);
    else deps.logger.info('customer_db.attempt_failed', fields);
  }

  /**
   * Writes a batch's opened writes in order: runs of emails, events and small received messages as one statement set
   * (db/customer/writes.ts), each large received message on its own from its spool file (server/customer-db/inbound/store.ts).
   * Deletes what landed, records what was refused, and removes the spool files nothing reads any more.
   */
  async function writeBatch(client: pg.PoolClient, db: CustomerDatabaseRow, opened: OpenedWrite[]): Promise<void> {
    /** Refused writes: the error, and whether no retry can help (set aside at once). */
    const refused = new Map<string, { error: string; final: boolean }>();
    const landedSpools: string[] = [];
    let run: { row: OpenedWrite['row']; write: CustomerWrite }[] = [];
    const stillTarget = () => isCurrentConnection(deps.db, db.accountId, db.connectionId);
    const flushRun = async () => {
      if (run.length === 0) return;
      for (const r of await applyWrites(client, run.map((o) => o.write), { stillTarget })) refused.set(run[r.index]!.row.id, { error: r.error.message, final: false });
      run = [];
    };
    // Small received messages are parsed up front, several at once (their DNS checks overlap), into rows the batch
    // statements write like emails and events.
    const parsedInbound = await parseInlineAll(opened);
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
        if (!stillTarget()) throw new TargetChangedError();
        try {
          await applySpooledInbound(client, deps, (w) => parser.parseSpooled(w), o.write, { stillTarget });
          // Gone from the outbox as soon as it landed: `pending` follows the messages one by one, and a crash later
          // in the batch does not parse this one again.
          deleteWrites(deps.db, [o.row.id]);
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
    deps.db.transaction(() => {
      deleteWrites(
        deps.db,
        opened.filter((o) => !refused.has(o.row.id)).map((o) => o.row.id),
      );
      for (const o of opened) {
        const r = refused.get(o.row.id);
        if (r === undefined) continue;
        // The database's words (a trigger's message can be megabytes): cut before they are kept or logged.
        const error = cutErrorText(r.error);
        const setAside = recordRefusedWrite(deps.db, o.row, error, now, { final: r.final });
        const fields = { accountId: db.accountId, writeId: o.row.id, kind: o.row.kind, error };
        if (setAside) {
          deps.logger.error('customer_db.write_set_aside', fields);
          noteSetAside(deps.db, db.accountId, `A queued ${o.row.kind} write was set aside after the database refused it: ${error}`, now);
        } else deps.logger.warn('customer_db.write_refused', fields);
      }
      markReached(deps.db, db.accountId, db.connectionId, now, { landed: opened.some((o) => !refused.has(o.row.id)) });
    });
    for (const spool of landedSpools) {
      if (!spoolReferenced(deps.db, spool)) rmSync(spoolPath(deps.config.dataDir, spool), { force: true });
    }
  }

  /** The small received messages of a batch parsed (in the parse thread, server/customer-db/inbound/parser.ts); an Error for one that cannot be. */
  async function parseInlineAll(opened: OpenedWrite[]): Promise<Map<string, InboundWrite | Error>> {
    const todo = opened.filter((o) => o.write !== null && isSpooled(o.write) && o.write.raw !== undefined);
    let results: (InboundWrite | Error)[];
    try {
      results = await parser.parseAll(todo.map((o) => o.write as SpooledInboundWrite));
    } catch (err) {
      // The thread died with the batch: each message is tried again after the data-refusal gaps, and set aside if it
      // keeps killing it.
      const error = err instanceof ParserStoppedError ? err : new ParserStoppedError(String(err));
      results = todo.map(() => error);
    }
    return new Map(todo.map((o, i) => [o.row.id, results[i]!]));
  }

  /** Writes everything due for one database, batch after batch, until none is left or the database fails. */
  async function serve(db: CustomerDatabaseRow): Promise<void> {
    const entry = await poolFor(db);
    if (typeof entry === 'string') return failed(db, entry);
    let client: pg.PoolClient;
    try {
      client = await entry.pool.connect();
    } catch (err) {
      return failed(db, describe(err));
    }
    let broken: Error | undefined;
    try {
      if (!entry.migrated) {
        const version = await migrateCustomerDb(client);
        entry.migrated = true;
        if (version !== db.schemaVersion) deps.db.update(customerDatabases).set({ schemaVersion: version }).where(eq(customerDatabases.accountId, db.accountId)).run();
      }
      while (loop.running || driving || stopping) {
        // A URL replaced or deleted meanwhile: its writes are the new database's (the next run opens it), or dropped.
        if (!isCurrentConnection(deps.db, db.accountId, db.connectionId)) throw new TargetChangedError();
        const limit = batchLimits.get(db.accountId) ?? opts.batchSize;
        const fetched = dueWrites(deps.db, db.accountId, deps.clock.now(), limit);
        if (fetched.length === 0) break;
        // A batch of small received messages is held parsed at once: its sealed size is bounded too.
        const rows = withinBudget(fetched, BATCH_PAYLOAD_BYTES);
        await writeBatch(client, db, rows.map((row) => openWrite(deps.secretKey!, row)));
        // A smaller batch landed after a timeout: the next may be larger again.
        if (limit < opts.batchSize) batchLimits.set(db.accountId, Math.min(opts.batchSize, limit * 2));
        if ((fetched.length < limit && rows.length === fetched.length) || stopping) break;
      }
    } catch (err) {
      if (err instanceof TargetChangedError) {
        deps.logger.info('customer_db.target_changed', { accountId: db.accountId, message: err.message });
        loop.poke();
      } else {
        broken = err instanceof Error ? err : new Error(String(err));
        // A batch the database could not take within the statement timeout would time out again as it is: the next
        // attempt takes half as many writes, down to one.
        if (isTimeout(err)) batchLimits.set(db.accountId, Math.max(1, Math.floor((batchLimits.get(db.accountId) ?? opts.batchSize) / 2)));
        failed(db, describe(err));
      }
    } finally {
      client.release(broken);
    }
  }

  /**
   * Databases whose next attempt is due and that have a write due, not already being written. Asked on every poke
   * (after each queued write's commit), so the statement is compiled once; and not asked at all while every database
   * the writer knows of is being served (each serve keeps fetching until its database has nothing due).
   */
  function dueDatabases(now: number): CustomerDatabaseRow[] {
    if (busy.size > 0 && busy.size >= (statements(deps.db).databaseCount.get()?.count ?? 0)) return [];
    return statements(deps.db)
      .dueDatabases.all({ now })
      .filter((d) => !busy.has(d.accountId));
  }

  function dropExpired(): void {
    const now = deps.clock.now();
    for (const [owner, count] of dropExpiredWrites(deps.db, now)) {
      const message = `${count} queued write${count === 1 ? ' was' : 's were'} dropped after waiting seven days for the database.`;
      deps.logger.error('customer_db.writes_dropped', { accountId: owner, count, message });
      deps.db.update(customerDatabases).set({ lastError: message, lastErrorKind: 'connection', updatedAt: now }).where(eq(customerDatabases.accountId, owner)).run();
    }
  }

  /** Closes the pools of databases no longer connected (deleted, or replaced: poolFor handles replaced ones too). */
  function closeForgotten(): void {
    if (pools.size === 0) return;
    const live = new Set(deps.db.select({ id: customerDatabases.accountId }).from(customerDatabases).all().map((r) => r.id));
    for (const owner of [...pools.keys()]) if (!live.has(owner) && !busy.has(owner)) closePool(owner);
  }

  /** Spool files no queued write reads (a crash between the file and its commit, writes dropped or deleted). */
  let lastSweep = 0;
  function sweep(): void {
    if (Date.now() - lastSweep < SPOOL_SWEEP_EVERY_MS) return;
    lastSweep = Date.now();
    const removed = sweepSpool(deps.config.dataDir, Date.now(), SPOOL_ORPHAN_AFTER_MS, (id) => spoolReferenced(deps.db, id));
    if (removed > 0) deps.logger.info('inbound.spool_swept', { removed });
  }

  /** When the housekeeping last ran: the loop is poked after every queued write, and it need not run that often. */
  let lastHousekeeping = Number.NEGATIVE_INFINITY;

  function claim(): Promise<void>[] {
    const now = deps.clock.now();
    if (driving || now - lastHousekeeping >= opts.intervalMs) {
      lastHousekeeping = now;
      dropExpired();
      closeForgotten();
      sweep();
    }
    const room = opts.maxDatabases - busy.size;
    if (room <= 0) return [];
    return dueDatabases(deps.clock.now())
      .slice(0, room)
      .map((db) => {
        busy.add(db.accountId);
        const run = serve(db)
          .catch((err: unknown) => deps.logger.error('customer_db.writer_failed', { accountId: db.accountId, err }))
          .finally(() => {
            busy.delete(db.accountId);
            runs.delete(run);
            loop.poke();
          });
        runs.add(run);
        return run;
      });
  }

  /** Writes until nothing more is due now (tests drive it with a fake clock); the number of database runs made. */
  async function runOnce(): Promise<number> {
    const wasDriving = driving;
    driving = true;
    let total = 0;
    try {
      for (;;) {
        const started = claim();
        if (started.length === 0 && runs.size === 0) return total;
        total += started.length;
        await Promise.race(started.length > 0 ? started : [...runs]);
      }
    } finally {
      driving = wasDriving;
    }
  }


  return {
    runOnce,
    /** Starts the loop (from main). A start tries every database at once: an operator restarting expects the writes to flow. */
    start(): void {
      if (loop.running) return;
      const now = deps.clock.now();
      deps.db.update(customerDatabases).set({ nextAttemptAt: now }).where(gt(customerDatabases.nextAttemptAt, now)).run();
      loop.start();
    },
    /** Writes were queued: look now instead of at the next interval. */
    poke: loop.poke,
    /** Stops taking new batches, lets the batches in flight commit, and closes every pool. */
    async stop(): Promise<void> {
      stopping = true;
      await loop.stop();
      while (runs.size > 0) await Promise.all([...runs]);
      await Promise.all([...pools.values()].map((e) => e.pool.end().catch(() => undefined)));
      pools.clear();
      if (!opts.parser) await parser.close();
      stopping = false;
    },
  };
}

export type CustomerDbWriter = ReturnType<typeof createCustomerDbWriter>;

/** A failure as the status shows it: the stage and reason of a connection error, else the database's message (cut). */
function describe(err: unknown): string {
  const classified = classifyConnectError(err);
  if (classified.stage !== 'other') return classified.message;
  return customerErrorText(err, { withCode: true });
}

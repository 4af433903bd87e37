import { open } from 'node:fs/promises';
import type Database from 'better-sqlite3';
import { type Db, connectionOf } from './client.js';
import { type QueueName, collectMarks, wakeMarked } from './queue-wake.js';
import { lateOrLocked } from './late-writes.js';
import { type Settled, runPgBatch, runPgTransaction } from './pg/state.js';

interface Job<T> {
  fn: (db: Db, ahead?: Promise<unknown>, handOn?: HandOn) => T | Promise<T>;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
  ahead?: ReadAhead<unknown>;
  lock?: WriteLock;
}

/**
 * A write's reading, for the group commit on Postgres to issue ahead: the readings of a batch's writes leave together
 * at its start, one round trip for the lot (db/pg/state.ts PgUnits.batch), and each write is given its reading as a
 * promise instead of reading in its turn. `keys` names what the write's reading and its writes are confined to, among
 * what other writes with a reading ahead read and write (a send's: its account and its parent): the writes with a
 * reading run first in the batch, and a reading taken ahead is given only to a write before which no write with one of
 * its keys ran; else, and on SQLite (where a reading costs no round trip), the write reads in its turn.
 */
export interface ReadAhead<R> {
  /** Absent for a write that reads nothing ahead, only keeps to its keys (given null). */
  read?: (db: Db) => Promise<R>;
  keys: (reading: R) => readonly string[];
  /**
   * The write's reading after a write before it in the batch under the same keys, with the same `carry`: worked out
   * from its own reading taken ahead and what that write handed on (HandOn); undefined when that does not tell (the
   * write then reads in its turn). So writes under the same keys (a send's account) skip their readings too, and run
   * at once, each as soon as the one before has handed on.
   */
  carry?: (reading: R, handed: unknown) => R | undefined;
  /** Rows the reading locks that are known before it is read (a send's account): WriteLock. */
  lock?: WriteLock;
}

/**
 * Rows a write locks that are known before it runs (a send's or a submission's account), and the statement that locks
 * rows by such keys with those they lead to (theirs: the accounts and their parents, in id order). A batch on Postgres
 * with two writes or more that declare one locks all their keys at once, sorted, before any write runs (ahead of the
 * readings, in their write): a batch whose writes locked their rows in the order they came would deadlock with
 * another node's batch that came in another order. Writes that declare the same `take` share its statement.
 */
export interface WriteLock {
  keys: readonly string[];
  take: (db: Db, keys: readonly string[]) => Promise<unknown>;
  /**
   * The rows are written late in a batch that takes late writes (db/late-writes.ts: a send's account counters), and
   * read unlocked: locked first only in a batch that does not.
   */
  late?: boolean;
}

/**
 * Given to a write whose reading ahead carries (ReadAhead.carry), on Postgres: it calls it with what the next write
 * under the same keys needs, once every statement whose effect that write could read has been issued (the statements
 * of one transaction run in the order issued; db/sql.ts `together` and `issue` start theirs at once). The next write
 * may start then, without waiting for those statements' answers.
 */
export type HandOn = (handed: unknown) => void;

/**
 * The batch's locks taken before its writes run (WriteLock): each statement once, over its writes' keys sorted. None
 * for fewer than two writes that declare one: a lone write's rows are locked in one statement anyway.
 */
function lockFirst(db: Db, jobs: readonly Job<unknown>[], late: boolean): (() => Promise<unknown>) | undefined {
  const byTake = new Map<WriteLock['take'], Set<string>>();
  let declared = 0;
  for (const job of jobs) {
    const lock = job.ahead?.lock ?? job.lock;
    if (!lock || (late && lock.late)) continue;
    declared++;
    const keys = byTake.get(lock.take) ?? new Set();
    for (const key of lock.keys) keys.add(key);
    byTake.set(lock.take, keys);
  }
  if (declared < 2) return undefined;
  return () => Promise.all([...byTake].map(([take, keys]) => take(db, [...keys].sort())));
}

/**
 * A write that committed but whose flush failed (the WAL's fdatasync: EIO...): its effects are in the database the
 * service reads, and on disk unless the device lost them, so the write neither failed nor is known durable. Carries
 * the flush's error `code`, so the store's health counts it like the error itself.
 */
export class FlushFailedError extends Error {
  override name = 'FlushFailedError';
  readonly code: unknown;
  constructor(override readonly cause: unknown) {
    super(`committed, but the flush to disk failed: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.code = (cause as { code?: unknown } | null)?.code;
  }
}

/** The WAL's file could not be opened for its flush: nothing was flushed, nothing lost; the next flush tries again. */
export class WalOpenError extends Error {
  override name = 'WalOpenError';
  readonly code: unknown;
  constructor(override readonly cause: unknown) {
    super(`the write-ahead log could not be opened for its flush: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.code = (cause as { code?: unknown } | null)?.code;
  }
}

/**
 * The store after a flush of the WAL failed: Linux reports a writeback error once and may have dropped the pages, so
 * frames written before it may never reach the disk, and SQLite's recovery would then stop there and drop every later
 * one. No write is taken, and none acknowledged, until a restart recovers from what the disk really holds.
 */
export class StoreUnsafeError extends Error {
  override name = 'StoreUnsafeError';
  readonly code: unknown;
  constructor(override readonly cause: unknown) {
    super(`the store stopped taking writes after a flush to disk failed (${cause instanceof Error ? cause.message : String(cause)}); restart the service`);
    this.code = (cause as { code?: unknown } | null)?.code ?? 'EIO';
  }
}

/** A batch this large commits at once, even while a flush is under way. */
export const MAX_BATCH = 256;

/** Makes every WAL frame written so far durable (fdatasync of the -wal file). */
export type WalSync = () => Promise<void>;

/**
 * fdatasync of the database's write-ahead log on libuv's thread pool, so the event loop keeps serving while the disk
 * flushes. fsync works on the file, not the descriptor: every frame any connection wrote before the call is covered.
 * The -wal file lives as long as the server's connection is open (SQLite removes it only when the last one closes);
 * `close` gives the descriptor back with it (db/client.ts Store.close).
 */
export function walSyncOf(databasePath: string): WalSync & { close(): Promise<void> } {
  let handle: ReturnType<typeof open> | null = null;
  const sync = async () => {
    const opening = (handle ??= open(`${databasePath}-wal`, 'r'));
    let fileHandle: Awaited<typeof opening>;
    try {
      fileHandle = await opening;
    } catch (err) {
      // Opened again at the next flush (too many open files passes): the frames are still in the page cache, and
      // a later fdatasync of the file covers them.
      if (handle === opening) handle = null;
      throw new WalOpenError(err);
    }
    await fileHandle.datasync();
  };
  return Object.assign(sync, {
    async close(): Promise<void> {
      const h = handle;
      handle = null;
      await (await h?.catch(() => null))?.close();
    },
  });
}

/**
 * Durability barrier: `durable()` resolves once an fsync that started after the call has finished. Calls made while
 * one is in flight share the next; so one flush of the disk acknowledges every commit that came before it.
 */
export function createDurabilityBarrier(sync: WalSync) {
  let inFlight = false;
  let waiting: { resolve: () => void; reject: (err: unknown) => void }[] = [];
  let idle: (() => void)[] = [];
  const start = () => {
    const batch = waiting;
    waiting = [];
    inFlight = true;
    sync()
      .then(
        () => {
          for (const w of batch) w.resolve();
        },
        (err: unknown) => {
          for (const w of batch) w.reject(err);
        },
      )
      .finally(() => {
        inFlight = false;
        const ready = idle;
        idle = [];
        for (const f of ready) f();
        if (waiting.length > 0 && !inFlight) start();
      });
  };
  return {
    durable(): Promise<void> {
      return new Promise<void>((resolve, reject) => {
        waiting.push({ resolve, reject });
        if (!inFlight) start();
      });
    },
    /** Runs `f` once no flush is under way: at once, or when the current one ends (before the next starts). */
    whenIdle(f: () => void): void {
      if (inFlight) idle.push(f);
      else f();
    },
  };
}

/**
 * Group commit: writes share one transaction, and transactions share fsyncs. A write submitted while no flush is
 * under way commits with the others of the same turn of the event loop, at once; one submitted while a flush is under
 * way waits for its end (it could not be acknowledged before the next flush anyway), so every write that arrives
 * during a flush commits in one batch and the next flush starts at once. No timer: a lone write waits for nobody.
 * Each write runs in its own savepoint: one that throws rolls back alone and rejects its own promise; if the commit
 * itself fails, every write of the batch is rejected. A promise resolves only after its write is durable.
 *
 * The connection runs synchronous=FULL, which fsyncs the WAL inside COMMIT and so blocks the event loop for the
 * disk's flush. A batch instead commits with synchronous=NORMAL (the frames reach the WAL, unsynced) and waits for
 * the durability barrier's fdatasync of the WAL on the thread pool before any of its promises resolves: the same
 * guarantee (nothing is acknowledged before it is on disk), without the event loop waiting for the disk. Every other
 * transaction on the connection still commits with FULL.
 */
export function createGroupCommit(
  store: { db: Db; sqlite: Database.Database },
  sync: WalSync,
  opts: {
    /** Hears every failure (a write that threw, refusals included; a commit; a flush), e.g. to watch the store's health. */
    onFailure?: (err: unknown) => void;
    /** Hears, once, the flush failure after which no write is taken (StoreUnsafeError), e.g. to close the store to writes. */
    onUnsafe?: (err: unknown) => void;
  } = {},
): GroupCommit {
  const onFailure = opts.onFailure ?? (() => undefined);
  /** The failed flush that made the store unsafe (a WAL that could not be opened does not: nothing was flushed). */
  let unsafe: unknown = null;
  const flushFailed = (err: unknown) => {
    onFailure(err);
    if (unsafe !== null || err instanceof WalOpenError) return;
    unsafe = err;
    opts.onUnsafe?.(err);
  };
  const { db, sqlite } = store;
  const conn = connectionOf(db);
  const barrier = createDurabilityBarrier(sync);
  // PRAGMA synchronous takes effect when the statement is compiled, not when a prepared one runs again: exec it.
  const setSynchronous = (level: 'NORMAL' | 'FULL') => sqlite.exec(`PRAGMA synchronous = ${level}`);
  const q = {
    savepoint: sqlite.prepare('SAVEPOINT group_commit_job'),
    release: sqlite.prepare('RELEASE group_commit_job'),
    rollback: sqlite.prepare('ROLLBACK TO group_commit_job'),
  };
  let pending: Job<unknown>[] = [];
  let scheduled = false;

  /** The queues marked by the jobs of the batch being committed (db/queue-wake.ts): woken once it is durable. */
  let marked = new Set<QueueName>();
  const runJob = async (job: Job<unknown>): Promise<{ ok: true; value: unknown } | { ok: false; err: unknown }> => {
    q.savepoint.run();
    try {
      const { value, marks } = await collectMarks(db, () => job.fn(db));
      q.release.run();
      for (const m of marks) marked.add(m);
      return { ok: true, value };
    } catch (err) {
      onFailure(err);
      // A full disk (SQLITE_FULL) or an I/O error may make SQLite roll back the whole transaction, savepoint and all:
      // then the batch is lost, and every write of it is refused with this error, the store's own (ROLLBACK TO would
      // fail with "no such savepoint", hiding the cause).
      if (!sqlite.inTransaction) throw err;
      q.rollback.run();
      q.release.run();
      return { ok: false, err };
    }
  };
  /** The batch's jobs one after the other, in one transaction. */
  const commitBatch = async (jobs: Job<unknown>[]) => {
    conn.control('BEGIN IMMEDIATE');
    try {
      const outcomes: Awaited<ReturnType<typeof runJob>>[] = [];
      for (const job of jobs) outcomes.push(await runJob(job));
      conn.control('COMMIT');
      return outcomes;
    } catch (err) {
      if (sqlite.inTransaction) conn.control('ROLLBACK');
      throw err;
    }
  };

  const flush = async () => {
    scheduled = false;
    const jobs = pending;
    if (jobs.length === 0) return;
    pending = [];
    let outcomes: Awaited<ReturnType<typeof runJob>>[];
    marked = new Set();
    try {
      // The batch holds the connection (db/sqlite-connection.ts): a statement from outside it waits for its commit
      // rather than joining it, and none runs with synchronous=NORMAL but the batch's.
      outcomes = await conn.hold(async () => {
        setSynchronous('NORMAL');
        try {
          return await commitBatch(jobs);
        } finally {
          try {
            setSynchronous('FULL');
          } catch (err) {
            onFailure(err);
          }
        }
      });
    } catch (err) {
      // The commit failed, or the connection is closed (a write that came after the store closed, at a stop): every
      // write of the batch is refused, none is thrown out of this callback of the event loop.
      onFailure(err);
      for (const job of jobs) job.reject(err);
      return;
    }
    const done = barrier.durable();
    done.catch(flushFailed); // each write that waits on it hears of a failed flush itself
    // The workers of the queues this batch marked wake once it is durable, before any of its writers goes on.
    const wake = marked;
    if (wake.size > 0)
      done.then(
        () => unsafe === null && wakeMarked(db, wake),
        () => undefined,
      );
    jobs.forEach((job, i) => {
      const o = outcomes[i]!;
      // A rolled-back write left nothing to make durable. One whose frames follow a failed flush is not known to be
      // on disk, whatever a later flush says.
      if (o.ok)
        done.then(
          () => (unsafe === null ? job.resolve(o.value) : job.reject(new FlushFailedError(unsafe))),
          (err: unknown) => job.reject(new FlushFailedError(err)),
        );
      else job.reject(o.err);
    });
  };

  return {
    // Each write reads in its turn: a reading costs no round trip on SQLite.
    run<T, R = never>(fn: (db: Db, ahead?: Promise<R>, handOn?: HandOn) => T | Promise<T>): Promise<T> {
      if (unsafe !== null) return Promise.reject(new StoreUnsafeError(unsafe));
      return new Promise<T>((resolve, reject) => {
        pending.push({ fn, resolve, reject } as Job<unknown>);
        if (pending.length >= MAX_BATCH) void flush();
        else if (!scheduled) {
          scheduled = true;
          // The rest of this turn's writes join first; then the batch commits, or waits for the flush under way.
          setImmediate(() => barrier.whenIdle(() => void flush()));
        }
      });
    },
  };
}

/**
 * Declared rather than inferred. Tests wrap `run` as `{ ...commits, run }`: a wrapper written as an object literal
 * typed through `Parameters<typeof original.run<T>>` made TypeScript 5 overflow its stack (printing the type while
 * reporting the literal's missing member) as soon as a member was added here.
 */
export interface GroupCommit {
  /**
   * Runs `fn` in the next batch's transaction; resolves once the batch is durable. Rejects with what `fn` threw, or
   * the commit's error (nothing was written), or a FlushFailedError (written, durability unknown). `lock`: rows `fn`
   * locks, for a write without a reading ahead (WriteLock; a reading ahead declares its own).
   */
  run<T, R = never>(fn: (db: Db, ahead?: Promise<R>, handOn?: HandOn) => T | Promise<T>, ahead?: ReadAhead<R>, lock?: WriteLock): Promise<T>;
}

/**
 * The group commit on Postgres (synchronous_commit on: durable when COMMIT returns). Writes submitted in the same turn
 * of the event loop, and those that arrive while a batch runs, share the next batch's transaction, each in its own
 * savepoint (db/pg/state.ts PgUnits.batch): one BEGIN and one COMMIT, and one flush of Postgres's WAL, for the lot,
 * and each write's statements leave with the release of the one before. A write that throws rolls back alone; if the
 * commit fails, every write of the batch is rejected. A lone write waits for nobody. One batch runs at a time (two at
 * once, each on a connection of its own, measured slower: docs/performance.md, sessions 29 and 35).
 */
export function createPgGroupCommit(db: Db): GroupCommit {
  const pending: Job<unknown>[] = [];
  let running = false;
  let scheduled = false;
  const schedule = () => {
    if (scheduled || running || pending.length === 0) return;
    scheduled = true;
    // The rest of this turn's writes join first.
    setImmediate(() => {
      scheduled = false;
      void flush();
    });
  };
  const flush = async () => {
    if (running || pending.length === 0) return;
    const jobs = pending.splice(0, MAX_BATCH);
    running = true;
    try {
      // A batch whose writes lock nothing but what they may write late takes late writes (db/late-writes.ts): one
      // refused, it runs again without them. Else its rows are locked as the writes declare (WriteLock), none late: a
      // batch holding rows from its start that waited at its end for rows another holds from its start could deadlock.
      const lateOrNot = jobs.every((job) => {
        const lock = job.ahead?.lock ?? job.lock;
        return !lock || lock.late === true;
      })
        ? lateOrLocked
        : <T>(attempt: (late: boolean) => Promise<T>) => attempt(false);
      if (jobs.length === 1) {
        const job = jobs[0]!;
        await lateOrNot((late) => runPgTransaction(db, async () => job.fn(db), { late })).then(job.resolve, job.reject);
        return;
      }
      let settled: Settled[];
      try {
        settled = await lateOrNot((late) =>
          runPgBatch(
            db,
            jobs.map((job) => (ahead?: Promise<unknown>, handOn?: HandOn) => Promise.resolve(job.fn(db, ahead, handOn))),
            jobs.map((job) => {
              const ahead = job.ahead;
              if (!ahead) return undefined;
              const read = ahead.read;
              return { ...(read ? { read: () => read(db) } : {}), keys: ahead.keys, carry: ahead.carry };
            }),
            lockFirst(db, jobs, late),
            { late },
          ),
        );
      } catch (err) {
        for (const job of jobs) job.reject(err);
        return;
      }
      jobs.forEach((job, i) => {
        const s = settled[i]!;
        if (s.ok) job.resolve(s.value);
        else job.reject(s.err);
      });
    } finally {
      running = false;
      schedule();
    }
  };
  return {
    run<T, R = never>(fn: (db: Db, ahead?: Promise<R>, handOn?: HandOn) => T | Promise<T>, ahead?: ReadAhead<R>, lock?: WriteLock): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        pending.push({ fn, resolve, reject, ahead, lock } as Job<unknown>);
        schedule();
      });
    },
  };
}

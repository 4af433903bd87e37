import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type Database from 'better-sqlite3';
import type { DbLogger } from './log.js';

/**
 * WAL checkpoints off the event loop. SQLite checkpoints on the committing connection once the log passes
 * `wal_autocheckpoint` pages: inside a COMMIT on the event loop, copying a thousand pages and fsyncing the log and
 * the database file (5-15 ms under load, every hundred-odd sends or a few hundred received messages). While the
 * checkpoint thread runs, it does that work on its own connection every CHECKPOINT_EVERY_MS, PASSIVE (never waiting
 * for the writer, never blocking it), and the event loop's connection checkpoints itself only past
 * FALLBACK_AUTOCHECKPOINT_PAGES: the log stays bounded if the thread falls behind or dies. Checkpoints are as safe
 * from any connection: SQLite fsyncs the log before copying and the database file before the log is reused.
 */

export const CHECKPOINT_EVERY_MS = 100;
/** The event loop's connection checkpoints itself past this many log pages while the thread runs (SQLite's default: 1000). */
export const FALLBACK_AUTOCHECKPOINT_PAGES = 20_000;
export const DEFAULT_AUTOCHECKPOINT_PAGES = 1000;

const CHECKPOINT_HEAP = { maxYoungGenerationSizeMb: 1, maxOldGenerationSizeMb: 16 };

function workerFile(): URL {
  const here = new URL('./checkpoint-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(here))) return here;
  return new URL('../dist/db/checkpoint-worker.js', import.meta.url);
}

export interface Checkpointer {
  /** Whether the thread is running (false once asked to stop, or after it died). */
  readonly running: boolean;
  /** Stops the thread after its checkpoint in progress; the connection checkpoints itself again as before. */
  stop(): Promise<void>;
  /**
   * Runs one read-only statement on the thread's own connection and resolves with its first row: for a scan that
   * would otherwise hold the event loop (the /metrics gauges over a large queue). It reads the last committed state,
   * as any other connection would. Rejects when the thread is not running (or dies meanwhile), and for a statement
   * that writes. The thread compiles each distinct `sql` once and keeps it: pass constant SQL, never text built per
   * call.
   */
  read<Row>(sql: string, params?: Record<string, unknown>): Promise<Row | undefined>;
  /** As `read`, every row. */
  readAll<Row>(sql: string, params?: Record<string, unknown>): Promise<Row[]>;
}

export function startCheckpointer(sqlite: Database.Database, logger: DbLogger, options: { everyMs?: number; workerUrl?: URL } = {}): Checkpointer {
  const worker = new Worker(options.workerUrl ?? workerFile(), {
    workerData: { path: sqlite.name, everyMs: options.everyMs ?? CHECKPOINT_EVERY_MS },
    // It allocates next to nothing: a small heap keeps its share of the resident set small.
    resourceLimits: CHECKPOINT_HEAP,
  });
  // Never what keeps the process alive.
  worker.unref();
  let running = true;
  let stopped: (() => void) | null = null;
  let stopping: Promise<void> | null = null;
  sqlite.pragma(`wal_autocheckpoint = ${FALLBACK_AUTOCHECKPOINT_PAGES}`);
  const fallBack = () => {
    if (!running) return;
    running = false;
    if (sqlite.open) sqlite.pragma(`wal_autocheckpoint = ${DEFAULT_AUTOCHECKPOINT_PAGES}`);
  };
  let nextRead = 0;
  const reads = new Map<number, { resolve: (row: unknown) => void; reject: (err: Error) => void }>();
  const failReads = (why: string) => {
    for (const r of reads.values()) r.reject(new Error(why));
    reads.clear();
  };
  // Unref'd while idle; a read waiting for its answer holds the process, as any other pending I/O would.
  const holdWhileReading = () => {
    if (stopped) return;
    if (reads.size > 0) worker.ref();
    else worker.unref();
  };
  const ask = (sql: string, params: Record<string, unknown>, all: boolean): Promise<unknown> => {
    if (!running || stopped) return Promise.reject(new Error('the checkpoint thread is not running'));
    const id = nextRead++;
    return new Promise<unknown>((resolve, reject) => {
      reads.set(id, { resolve, reject });
      holdWhileReading();
      worker.postMessage({ id, sql, params, all });
    });
  };
  worker.on('message', (m: { error?: string; id?: number; row?: unknown; readError?: string }) => {
    if (m.error) logger.warn('db.checkpoint_failed', { message: m.error });
    if (m.id === undefined) return;
    const pending = reads.get(m.id);
    reads.delete(m.id);
    holdWhileReading();
    if (m.readError !== undefined) pending?.reject(new Error(m.readError));
    else pending?.resolve(m.row);
  });
  worker.on('error', (err) => logger.error('db.checkpoint_thread_failed', { err }));
  worker.on('exit', (code) => {
    if (running && !stopped) logger.error('db.checkpoint_thread_exited', { code, message: 'WAL checkpoints are back on the event loop' });
    fallBack();
    failReads('the checkpoint thread has stopped');
    stopped?.();
  });
  return {
    get running() {
      return running && !stopped;
    },
    read<Row>(sql: string, params: Record<string, unknown> = {}) {
      return ask(sql, params, false) as Promise<Row | undefined>;
    },
    readAll<Row>(sql: string, params: Record<string, unknown> = {}) {
      return ask(sql, params, true) as Promise<Row[]>;
    },
    stop() {
      if (!running) return Promise.resolve();
      stopping ??= new Promise<void>((resolve) => {
        stopped = resolve;
        // Held until it has closed its connection: the process must not end under it.
        worker.ref();
        worker.postMessage('stop');
      });
      return stopping;
    },
  };
}

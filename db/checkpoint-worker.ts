import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

/**
 * The checkpoint thread (db/checkpointer.ts): its own connection to the service's database, copying the write-ahead
 * log into the database file with PASSIVE checkpoints (never blocking the event loop's connection, which writes on)
 * every `everyMs`. Posts each failure ({ error }). Between checkpoints it answers reads ({ id, sql, params, all }: one
 * read-only statement, its first row or all its rows back as { id, row } or { id, readError }), so a long scan never
 * holds the event loop.
 */

const { path, everyMs } = workerData as { path: string; everyMs: number };
const db = new Database(path, { fileMustExist: true });
db.pragma('busy_timeout = 1000');
// The checkpoint fsyncs the log before it copies and the database file after it: frames are never lost to a crash.
db.pragma('synchronous = FULL');
// It writes nothing (a checkpoint is no write of data): the reads it answers cannot either, whatever their SQL.
db.pragma('query_only = 1');
// This connection never checkpoints on its own commits (it makes none); only here, on the timer.
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');

const timer = setInterval(() => {
  try {
    checkpoint.run();
  } catch (err) {
    parentPort!.postMessage({ error: err instanceof Error ? err.message : String(err) });
  }
}, everyMs);

/** The reads' statements, compiled once each (a handful: the /metrics gauges'). */
const statements = new Map<string, Database.Statement>();

function read(sql: string, params: Record<string, unknown>, all: boolean): unknown {
  let statement = statements.get(sql);
  if (!statement) {
    statement = db.prepare(sql);
    // Only reads: this connection is the checkpoint's, and nothing here may write.
    if (!statement.readonly || !statement.reader) throw new Error('only a read-only statement that returns rows may run on the checkpoint thread');
    statements.set(sql, statement);
  }
  return all ? statement.all(params) : statement.get(params);
}

parentPort!.on('message', (message: unknown) => {
  if (message === 'stop') {
    clearInterval(timer);
    db.close();
    parentPort!.close();
    return;
  }
  const { id, sql, params, all } = message as { id: number; sql: string; params: Record<string, unknown>; all: boolean };
  try {
    parentPort!.postMessage({ id, row: read(sql, params, all) });
  } catch (err) {
    parentPort!.postMessage({ id, readError: err instanceof Error ? err.message : String(err) });
  }
});

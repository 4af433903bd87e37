import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

/**
 * The checkpoint thread (db/checkpointer.ts): its own connection to the service's database, copying the write-ahead
 * log into the database file with PASSIVE checkpoints (never blocking the event loop's connection, which writes on)
 * every `everyMs`. Posts each failure ({ error }).
 */

const { path, everyMs } = workerData as { path: string; everyMs: number };
const db = new Database(path, { fileMustExist: true });
db.pragma('busy_timeout = 1000');
// The checkpoint fsyncs the log before it copies and the database file after it: frames are never lost to a crash.
db.pragma('synchronous = FULL');
// This connection never checkpoints on its own commits (it makes none); only here, on the timer.
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');

const timer = setInterval(() => {
  try {
    checkpoint.run();
  } catch (err) {
    parentPort!.postMessage({ error: err instanceof Error ? err.message : String(err) });
  }
}, everyMs);

parentPort!.on('message', (message: unknown) => {
  if (message !== 'stop') return;
  clearInterval(timer);
  db.close();
  parentPort!.close();
});

import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { processAlive } from '../../db/data-dir.js';

/**
 * The lease holders of the queues (outbound recipients, webhook deliveries): each worker leases rows under an id
 * `<host>:<pid>:<random>`, which says at start whether an earlier holder's process is gone.
 */

/** A fresh worker id for this process. */
export function newWorkerId(): string {
  return `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

function holderProcess(worker: string): { host: string; pid: number } | null {
  const m = /^(.*):(\d+):[^:]+$/.exec(worker);
  return m ? { host: m[1]!, pid: Number(m[2]) } : null;
}

/**
 * Whether the leases of `holder` can be released at once by `worker` starting now: the holder ran on this host and its
 * process is gone, or it ran under this very pid (an earlier run, as in a restarted container). A holder of another
 * host, or whose process may still run, keeps its leases until they expire.
 */
export function isDeadHolder(holder: string, worker: string, host = hostname()): boolean {
  if (holder === worker) return false;
  const p = holderProcess(holder);
  if (!p || p.host !== host) return false;
  return p.pid === process.pid || !processAlive(p.pid);
}

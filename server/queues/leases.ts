import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { processAlive } from '../../db/data-dir.js';

/**
 * The lease holders of the queues (outbound recipients, webhook deliveries): each worker leases rows under an id
 * `<node>:<pid>:<random>` (the node is NODE_NAME, the host name by default), which says whether an earlier holder is
 * gone: on SQLite by its process, at start; on Postgres by its node's liveness lock (server/app/liveness.ts).
 */

/** A fresh worker id for this process, on `node`. */
export function newWorkerId(node: string = hostname()): string {
  return `${node}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

function holderProcess(worker: string): { host: string; pid: number } | null {
  const m = /^(.*):(\d+):[^:]+$/.exec(worker);
  return m ? { host: m[1]!, pid: Number(m[2]) } : null;
}

/** The node a lease holder's id names (its part before the first colon). */
export function holderNode(holder: string): string {
  const colon = holder.indexOf(':');
  return colon < 0 ? holder : holder.slice(0, colon);
}

/**
 * Whether the leases of `holder` can be released at once by `worker` of `node` starting now, judged by the nodes'
 * liveness locks: an earlier run of this node (its lock is this process's now), or a node whose lock nobody holds.
 */
export function isDeadNodeHolder(holder: string, worker: string, node: string, live: ReadonlySet<string>): boolean {
  if (holder === worker) return false;
  const of = holderNode(holder);
  return of === node || !live.has(of);
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

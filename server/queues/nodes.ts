import { hostname } from 'node:os';
import type { Nodes } from '../core/nodes.js';
import { isDeadHolder } from './leases.js';

/** One node: this process, lease holders judged by their process on this host (isDeadHolder). */
export function singleNode(name: string = hostname()): Nodes {
  return {
    name,
    liveCount: () => 1,
    share: (limit) => limit,
    deadHolders: async (worker) => (holder) => isDeadHolder(holder, worker, name),
    exclusive: async (_kind, _key, work) => await work(),
  };
}

import type { Db } from '../../db/client.js';
import { type NodeLink, openNodeLink } from '../../db/pg/node-link.js';
import type { PgTarget } from '../../db/pg/state.js';
import { type QueueName, forwardWakes, markQueued, wakeFromElsewhere } from '../../db/queue-wake.js';
import { recipientQueue } from '../../mta/delivery-queue.js';
import { releaseDeadClaims } from '../core/idempotency.js';
import { isDeadNodeHolder } from '../queues/leases.js';
import { type Nodes, shareOf, skipped } from '../core/nodes.js';
import type { Logger } from '../shared/logger.js';
import { webhookQueue } from '../webhooks/webhook-queue.js';

/**
 * A node among several over one Postgres (docs/api/decisions.md section 12; docs/operating/several-nodes.md): its
 * liveness lock held on its own connection (db/pg/node-link.ts), the live nodes read every LIVENESS_POLL_MS, and a
 * node seen live and then gone has its work given back at once: its leases on the recipient and webhook queues and
 * its running idempotency claims (the lease's term stays the fallback). Its wakes are told to the other nodes while
 * there are any. At its own start, the claims of its earlier run and of nodes no longer live are freed (the workers
 * judge the leases the same way as they start: `deadHolders`).
 */

export const LIVENESS_POLL_MS = 1000;
/** How long a start waits for its name's liveness lock (an earlier run of this node, killed a moment ago). */
const NAME_WAIT_MS = 30_000;
/** The least time between two wakes of one queue told to the other nodes. */
export const FORWARD_GAP_MS = 50;
/** Between two tries to open the link again after it was lost. */
const RELINK_MS = 1000;

export interface Liveness {
  readonly nodes: Nodes;
  /** Reads the live nodes now and gives back the work of those gone since the last look (the poll's step). */
  sweep(): Promise<void>;
  stop(): Promise<void>;
}

export interface LivenessOptions {
  target: PgTarget;
  db: Db;
  node: string;
  logger: Logger;
  pollMs?: number;
  nameWaitMs?: number;
  forwardGapMs?: number;
}

export async function startLiveness(opts: LivenessOptions): Promise<Liveness> {
  const { db, node, logger } = opts;
  const open = () => openNodeLink(opts.target, node, { onQueued: (queue) => wakeFromElsewhere(db, queue), waitMs: opts.nameWaitMs ?? NAME_WAIT_MS });
  let link: NodeLink | null = await open();
  let live = await link.liveNodes();
  let stopped = false;

  // This node's earlier run held nothing now (its lock is ours), nor does a node no longer live.
  const freed = await releaseDeadClaims(db, (holder) => holder === null || holder === node || !live.has(holder));
  if (freed > 0) logger.info('idempotency.dead_claims_released', { count: freed });

  const queues = [recipientQueue(db), webhookQueue(db)];
  async function giveBack(gone: string): Promise<void> {
    let leases = 0;
    for (const queue of queues) leases += await queue.releaseNode(gone);
    const claims = await releaseDeadClaims(db, (holder) => holder === gone);
    // What it gave back is due now: this node's workers look at once rather than at their poll, and so do the others'
    // (for the recipient queue, when this node's engine has no room for all of it: mta/delivery-engine.ts).
    if (leases > 0) {
      markQueued(db, 'recipients');
      markQueued(db, 'webhooks');
    }
    logger.warn('node.gone', {
      node: gone,
      leasesReleased: leases,
      claimsReleased: claims,
      message: `node ${gone} lost its liveness lock: its work is taken over`,
    });
  }

  async function sweep(): Promise<void> {
    if (!link) return;
    const now = await link.liveNodes();
    for (const name of live) if (name !== node && !now.has(name)) await giveBack(name);
    live = now;
  }

  // A wake told to the others only while there are others, and at most once per FORWARD_GAP_MS per queue (one more at
  // the end of the gap when wakes came meanwhile): it is for a node that is idle, and a busy node claims without it,
  // while every notification costs each other node a claim.
  const sending = new Map<QueueName, boolean>();
  const tell = (queue: QueueName) => {
    if (!link || live.size <= 1) return;
    if (sending.has(queue)) {
      sending.set(queue, true);
      return;
    }
    sending.set(queue, false);
    const current = link;
    void current
      .notifyQueued(queue)
      .catch(() => undefined)
      .then(() => new Promise((r) => setTimeout(r, opts.forwardGapMs ?? FORWARD_GAP_MS).unref()))
      .finally(() => {
        const again = sending.get(queue);
        sending.delete(queue);
        if (again) tell(queue);
      });
  };
  forwardWakes(db, tell);

  let polling = false;
  const timer = setInterval(() => {
    if (polling) return;
    polling = true;
    sweep()
      .catch((err: unknown) => logger.error('node.sweep_failed', { err }))
      .finally(() => {
        polling = false;
      });
  }, opts.pollMs ?? LIVENESS_POLL_MS);
  timer.unref();

  // A lost link is a lost lock: the others take this node's work over. Open it again (the lock taken anew) until stopped.
  const watch = (current: NodeLink) => {
    void current.lost.then(async (err) => {
      if (stopped || link !== current) return;
      link = null;
      logger.error('node.link_lost', { err, message: 'the connection holding this node liveness lock was lost: the other nodes may take its work over' });
      while (!stopped && !link) {
        await new Promise((r) => setTimeout(r, RELINK_MS));
        try {
          const again = await open();
          if (stopped) await again.close();
          else {
            link = again;
            watch(again);
            logger.info('node.link_restored', {});
          }
        } catch (e) {
          logger.error('node.relink_failed', { err: e });
        }
      }
    });
  };
  watch(link);

  const nodes: Nodes = {
    name: node,
    liveCount: () => Math.max(1, live.size),
    share: (limit) => shareOf(limit, live, node),
    deadHolders: async (worker) => {
      const now = link ? await link.liveNodes() : live;
      return (holder) => isDeadNodeHolder(holder, worker, node, now);
    },
    exclusive: async (kind, key, work) => {
      const held = link;
      if (!held || !(await held.tryLock(kind, key))) return skipped;
      try {
        return await work();
      } finally {
        await held.unlock(kind, key).catch(() => undefined);
      }
    },
  };

  return {
    nodes,
    sweep,
    async stop() {
      stopped = true;
      clearInterval(timer);
      forwardWakes(db, null);
      const current = link;
      link = null;
      await current?.close();
    },
  };
}

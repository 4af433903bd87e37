import { createRunner } from '../server/queues/runner.js';
import { newWorkerId } from '../server/queues/leases.js';
import { singleNode } from '../server/queues/nodes.js';
import type { Deps } from '../server/core/deps.js';
import { type Claimed, recipientQueue } from './delivery-queue.js';
import { keepWakes, tellOtherNodes } from '../db/queue-wake.js';
import { createFairSlots } from '../server/queues/fair-slots.js';
import { type Signer, createSigner } from './signer.js';
import { createRouter } from './routing.js';
import { type ClientOptions, DEFAULT_CLIENT_TIMEOUTS } from './smtp-client.js';
import { logFailure } from '../server/shared/store-health.js';
import { leaseNow } from '../server/shared/clock.js';
import type { Job } from './outbound/domain-work.js';
import { createLanes } from './outbound/lanes.js';
import { createMessageCache } from './outbound/message-cache.js';
import { createOutcomeRecording } from './outbound/outcome-recording.js';
import { createSigningKeyCache } from './outbound/signing-keys.js';
import { createTransports } from './outbound/transports.js';

export interface EngineOptions {
  /** Open SMTP connections at most, overall. */
  maxConnections: number;
  /** Open SMTP connections at most per destination domain, whatever the accounts. */
  perDomain: number;
  /**
   * Recipients waiting per connection before another one to the same destination is opened: the recipients of an
   * email share a connection (docs/api/decisions.md section 3), and a backlog still gets up to `perDomain`. A connection opened
   * for a queue that the others drain meanwhile is only a handshake and a QUIT, and counts against the server's limit.
   */
  recipientsPerLane: number;
  /** Open SMTP connections at most for one account, so others always find a free one (fairness). */
  perAccount: number;
  /** Recipients claimed at once, and held (claimed, not yet finished) at most. */
  batchSize: number;
  /** Recipients one account may hold at most, so a backlog of one never keeps another's mail from being claimed. */
  perAccountHeld: number;
  /** How long a claim holds unless renewed; the engine renews its own claims every third of it. */
  leaseMs: number;
  /** Idle wait between claims when nothing is due (real time; due-ness itself reads the injected clock). */
  pollMs: number;
  timeouts: Omit<ClientOptions, 'name'>;
  /**
   * How long stop() waits for the transactions in flight (a server may take up to ten minutes to answer the end of
   * data): past it, stop() returns and the process may exit; those recipients stay leased and are tried again after
   * the next start, as after a crash.
   */
  stopGraceMs: number;
}

export const DEFAULT_ENGINE_OPTIONS: EngineOptions = {
  // Postfix's default concurrency to one destination is 20; one account takes at most a third of all connections.
  maxConnections: 64,
  perDomain: 20,
  recipientsPerLane: 4,
  perAccount: 20,
  batchSize: 200,
  perAccountHeld: 100,
  leaseMs: 2 * 60_000,
  pollMs: 1000,
  timeouts: DEFAULT_CLIENT_TIMEOUTS,
  stopGraceMs: 10_000,
};

/**
 * The outbound engine. Claimed recipients wait in a queue per account and destination domain; each queue is served by
 * lanes (connections), each taking the queue's next recipient for its own SMTP transaction and recording the outcome
 * before the next step. A lane resolves its route first (cached, bounded, holding nothing), then asks for a
 * connection slot: at most `maxConnections` in all, `perDomain` per destination and `perAccount` per account, granted
 * to waiting accounts in turn, and given back between transactions when an account with fewer waits. Claims are fair
 * too: each account's recipients in turn, at most `perAccountHeld` held per account. So a slow destination, a silent
 * DNS or a large backlog holds up only the mail of its own account and destination.
 */
export function createDeliveryEngine(
  deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'logger' | 'metrics' | 'resolver' | 'secretKey' | 'storeHealth'> & Partial<Pick<Deps, 'nodes'>>,
  options: Partial<EngineOptions> = {},
  /** Parts made by the caller instead: the signing thread (a test holds its builds, as a busy signer would). */
  parts: { signer?: Signer } = {},
) {
  const opts = { ...DEFAULT_ENGINE_OPTIONS, ...options };
  const nodes = deps.nodes ?? singleNode(deps.config.nodeName);
  const worker = newWorkerId(nodes.name);

  const queue = recipientQueue(deps.db);

  // The queue's state: the recipients held (claimed, not yet finished), stopping. The loop, the lanes in flight, the
  // lease renewal, start, stop and wake are the runner's (server/queues/runner.ts).
  /** Recipients held per account (claimed, not yet finished). */
  const heldByAccount = new Map<string, number>();
  /** Recipients finished since the last claim: a claim waits until enough room is worth a query. */
  let finishedSinceClaim = 0;
  /** Claimed and not yet finished: the claims this engine renews. */
  const held = new Set<string>();
  let stopping = false;
  const runner = createRunner({
    intervalMs: opts.pollMs,
    tick: async () => await tick(),
    onError: (err) => logFailure(deps, 'delivery.claim_failed', err),
    wake: { db: deps.db, queue: 'recipients' },
    // Leases of earlier runs whose process (or, with several nodes, whose node) is gone are released first; a lease
    // of a holder that may still be running is left to run out.
    onStart: async () => {
      const released = await queue.releaseDead(worker, await nodes.deadHolders(worker));
      if (released > 0) deps.logger.warn('delivery.leases_released', { released });
      const capped = await queue.capForeign(worker, leaseNow(deps.clock), opts.leaseMs);
      if (capped > 0) deps.logger.warn('delivery.leases_capped', { capped });
      stopping = false;
    },
    every: {
      ms: Math.max(1000, Math.floor(opts.leaseMs / 3)),
      run: async () => {
        try {
          await queue.renew(worker, [...held], leaseNow(deps.clock) + opts.leaseMs);
        } catch (err) {
          logFailure(deps, 'delivery.lease_renewal_failed', err);
        }
      },
    },
    // No new connection waits: the recipients not yet in a transaction go back.
    drain: async () => {
      slots.cancelAll();
      await releaseWaiting();
    },
    stopGraceMs: opts.stopGraceMs,
  });

  // The parts: connection slots, routes, the signing thread and the messages it builds, outcomes, transports, lanes.
  const isStopping = () => stopping;
  // A destination's connections are split between the live nodes (docs/api/decisions.md section 12): shares that add
  // up to perDomain (server/core/nodes.ts shareOf), at least one each.
  const perDomain = () => nodes.share(opts.perDomain);
  const slots = createFairSlots({ total: opts.maxConnections, perAccount: opts.perAccount, perDestination: perDomain });
  const router = createRouter(deps);
  const signingKeys = createSigningKeyCache(deps);
  const signer: Signer = parts.signer ?? createSigner({ onCrash: (err) => deps.logger.error('delivery.signer_failed', { err }) });
  const messages = createMessageCache(deps, { signer, signingKey: signingKeys.open });
  const outcomes = createOutcomeRecording(deps, { worker, isStopping });
  const transports = createTransports(deps, { slots, messages, outcomes, isStopping, timeouts: opts.timeouts });
  const lanes = createLanes(deps, {
    router,
    slots,
    transports,
    outcomes,
    isStopping,
    track: (lane) => void runner.track(lane),
    perDomain,
    recipientsPerLane: opts.recipientsPerLane,
  });

  // What the queue says: adopt what is claimed, claim, tick, give back.
  function adopt(claimed: Claimed[]): Promise<void>[] {
    // A recipient this engine still holds (its lease lapsed, say, while the loop was stalled) is not taken twice.
    return claimed
      .filter((c) => !held.has(c.recipient.id))
      .map(
        (c) =>
          new Promise<void>((resolve) => {
            const account = c.message.accountId;
            held.add(c.recipient.id);
            heldByAccount.set(account, (heldByAccount.get(account) ?? 0) + 1);
            messages.retain(c);
            let finished = false;
            const job: Job = {
              ...c,
              finish: () => {
                if (finished) return;
                finished = true;
                held.delete(c.recipient.id);
                const n = (heldByAccount.get(account) ?? 1) - 1;
                if (n === 0) heldByAccount.delete(account);
                else heldByAccount.set(account, n);
                messages.release(c.message.id);
                resolve();
                // Room for a useful claim again (a quarter of the batch, or everything): claim now, not at the poll.
                finishedSinceClaim++;
                if (finishedSinceClaim >= opts.batchSize / 4 || held.size === 0) runner.wake();
              },
            };
            lanes.enqueue(job);
          }),
      );
  }

  /** Claims what is due, up to the room left; returns how many recipients were claimed and their completions. */
  async function claim(limit: number): Promise<Promise<void>[]> {
    if (limit <= 0 || stopping) return [];
    finishedSinceClaim = 0;
    const room: Record<string, number> = {};
    for (const [account, n] of heldByAccount) room[account] = Math.max(0, opts.perAccountHeld - n);
    // Due by the wall clock (the schedule is stored as times of day); leases on the process's steady timeline.
    return adopt(
      await queue.claim(worker, {
        now: deps.clock.now(),
        leaseNow: leaseNow(deps.clock),
        leaseMs: opts.leaseMs,
        limit,
        shares: { perAccount: opts.perAccountHeld, room },
      }),
    );
  }

  /** Claims everything due now (by the injected clock, up to `batchSize`) and resolves when each is finished. */
  async function runOnce(): Promise<number> {
    const finished = await claim(opts.batchSize);
    await Promise.all(finished);
    return finished.length;
  }

  /**
   * One claim of the loop. Claims are batched: one claim query serves many recipients, so it waits until half the
   * batch is free. It claims again at once while the claim filled the room; otherwise when poked, when half the batch
   * is done, when a lane ends, or at the poll.
   */
  async function tick(): Promise<boolean> {
    if (!claimsAtOnce()) return false;
    const room = opts.batchSize - held.size;
    const claimed = (await claim(room)).length;
    const full = claimed > 0 && claimed === room;
    // More may be due than this node took (its room, or an account's share, filled): the other nodes are told, since
    // the wakes made here are not while this engine keeps them.
    if (full || (claimed > 0 && [...heldByAccount.values()].some((n) => n >= opts.perAccountHeld))) tellOtherNodes(deps.db, 'recipients');
    return full;
  }

  /** Whether a wake now makes a claim at once: not stopping, and nothing held or room for half a batch. */
  function claimsAtOnce(): boolean {
    return !stopping && (held.size === 0 || opts.batchSize - held.size >= opts.batchSize / 2);
  }
  let keeping: (() => void) | null = null;

  /** Gives back every recipient still waiting for a connection (shutdown). */
  async function releaseWaiting(): Promise<void> {
    await lanes.drainWaiting(async (jobs) => {
      await queue.release(
        worker,
        jobs.map((j) => j.recipient.id),
      );
      for (const job of jobs) job.finish();
    });
  }

  return {
    worker,
    runOnce,
    /**
     * Starts the loop (from main), woken by every durable commit that queues recipients. With several nodes, a wake made
     * here that this engine claims at once is not told to the others (server/app/liveness.ts), whose claims would race
     * it for the same rows; the engine tells them when it leaves due work behind.
     */
    async start(): Promise<void> {
      await runner.start();
      keeping ??= keepWakes(deps.db, 'recipients', claimsAtOnce);
    },
    /** Claims now instead of at the next poll. */
    poke: runner.wake,
    /** Stops claiming; lets in-flight transactions finish, gives waiting recipients back; resolves when idle. */
    async stop(): Promise<void> {
      stopping = true;
      keeping?.();
      keeping = null;
      const { abandoned } = await runner.stop();
      if (abandoned) {
        deps.logger.warn('delivery.stop_abandoned', {
          recipients: held.size,
          message: `replies still awaited after ${opts.stopGraceMs} ms: those recipients stay leased and are tried again after the next start`,
        });
      }
      await releaseWaiting();
      await signer.close();
    },
  };
}

export type DeliveryEngine = ReturnType<typeof createDeliveryEngine>;

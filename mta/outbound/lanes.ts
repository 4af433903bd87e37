import type { Deps } from '../../server/core/deps.js';
import type { FairSlots } from '../../server/queues/fair-slots.js';
import { logFailure } from '../../server/shared/store-health.js';
import type { Router } from '../routing.js';
import type { DomainWork, Job } from './domain-work.js';
import type { OutcomeRecording } from './outcome-recording.js';
import type { Transports } from './transports.js';

/** What the lanes take besides the log and the store's health. */
export interface LaneParts {
  router: Pick<Router, 'route'>;
  slots: Pick<FairSlots, 'acquire'>;
  transports: Transports;
  outcomes: Pick<OutcomeRecording, 'recordAll'>;
  isStopping: () => boolean;
  /** Tracks a lane until it ends (the engine's runner: its stop waits for it, and its end wakes a claim). */
  track: (lane: Promise<void>) => void;
  /** Open SMTP connections at most per destination domain (lanes per queue): this node's share among the live nodes. */
  perDomain: () => number;
  /** Recipients waiting per lane before another lane to the same destination is started. */
  recipientsPerLane: number;
}

/**
 * The engine's lanes. Claimed recipients wait in a queue per account and destination domain; each queue is served by
 * lanes (connections), each taking the queue's next recipient for its own transaction. A lane resolves its route first
 * (cached, bounded, holding nothing), then asks for a connection slot in turn.
 */
export function createLanes(deps: Pick<Deps, 'logger' | 'storeHealth'>, parts: LaneParts) {
  const { router, slots, transports, outcomes, isStopping } = parts;
  const work = new Map<string, DomainWork>();

  /** Queues a claimed recipient for its account's destination, with a new lane when the queue's backlog asks for one. */
  function enqueue(job: Job): void {
    const account = job.message.accountId;
    const domain = job.recipient.recipientDomain;
    const key = `${account} ${domain}`;
    let w = work.get(key);
    if (!w) {
      w = { key, account, domain, jobs: [], lanes: 0, live: 0 };
      work.set(key, w);
    }
    w.jobs.push(job);
    if (w.lanes < parts.perDomain() && w.jobs.length > w.lanes * parts.recipientsPerLane) startLane(w);
  }

  function startLane(w: DomainWork): void {
    w.lanes++;
    parts.track(
      lane(w)
        .catch((err: unknown) => logFailure(deps, 'delivery.lane_failed', err, { domain: w.domain, accountId: w.account }))
        .finally(() => {
          w.lanes--;
          if (w.jobs.length > 0 && w.lanes === 0 && !isStopping()) startLane(w);
          else if (w.jobs.length === 0 && w.lanes === 0 && work.get(w.key) === w) work.delete(w.key);
        }),
    );
  }

  /**
   * One connection's worth of work for an account's destination: the route first (holding no slot), then a slot in
   * turn, then the queue's recipients one transaction each, until none is left, or until another account that holds
   * fewer slots waits for this one: then the slot is given back and asked for again, behind it.
   */
  async function lane(w: DomainWork): Promise<void> {
    const route = await router.route(w.domain);
    if (route.kind === 'fail') {
      // Another lane holds a connection to this domain: its recipients stay with it.
      if (w.live > 0) return;
      return await outcomes.recordAll(w, route.outcome);
    }
    if (route.kind === 'capture' || route.kind === 'simulator') return await transports.deliverLocally(w, route.kind);
    while (w.jobs.length > 0 && !isStopping()) {
      const slot = await slots.acquire(w.account, w.domain);
      if (!slot) return;
      try {
        if ((await transports.serve(w, route.targets, slot)) === 'done') return;
      } finally {
        slot.release();
      }
    }
  }

  return {
    enqueue,
    /** Hands each queue's waiting recipients, taken out of it, to `take` (shutdown: they are given back). */
    async drainWaiting(take: (jobs: Job[]) => Promise<void>): Promise<void> {
      for (const w of work.values()) await take(w.jobs.splice(0));
    },
  };
}

export type Lanes = ReturnType<typeof createLanes>;

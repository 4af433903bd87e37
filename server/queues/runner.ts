import type { Db } from '../../db/client.js';
import { type QueueName, onQueueMarked } from '../../db/queue-wake.js';
import { createPollLoop } from './poll-loop.js';

/**
 * The worker of a durable queue, written once: a poll loop woken by its queue's marks (db/queue-wake.ts) and at every
 * interval, the work in flight tracked, start, stop (waiting for that work, within a grace time if the queue has one)
 * and wake. The queue says what one pass claims and starts (`tick`), or, with `createQueueWorker`, what it claims and
 * what one attempt is.
 */
export interface RunnerOptions {
  /** How often the loop looks for due work when nothing wakes it. */
  intervalMs: number;
  /** One pass: claims what fits and starts its work (through `track`); true when it filled its room (run again now). */
  tick: () => Promise<boolean | undefined>;
  /** A pass's error (a claim that failed): logged by the queue; the loop goes on. */
  onError: (err: unknown) => void;
  /** The queue whose producers' marks wake the loop while it runs. */
  wake?: { db: Db; queue: QueueName };
  /** At start, before the first pass (leases of dead holders given back, say). */
  onStart?: () => Promise<void>;
  /** Run every `everyMs` while the worker runs (the renewal of its leases). */
  every?: { ms: number; run: () => void };
  /** At stop, once no pass runs and before waiting for the work in flight: give back what has not begun. */
  drain?: () => Promise<void>;
  /** How long stop waits for the work in flight; unbounded when absent. */
  stopGraceMs?: number;
}

export function createRunner(opts: RunnerOptions) {
  const inFlight = new Set<Promise<void>>();
  let settledCount = 0;
  const loop = createPollLoop({ intervalMs: opts.intervalMs, tick: opts.tick, onError: opts.onError });
  let unsubscribe: (() => void) | null = null;
  let timer: NodeJS.Timeout | null = null;

  async function settle(): Promise<boolean> {
    const settled = (async () => {
      while (inFlight.size > 0) await Promise.all([...inFlight]);
    })();
    if (opts.stopGraceMs === undefined) {
      await settled;
      return false;
    }
    let grace: NodeJS.Timeout | undefined;
    const abandoned = await Promise.race([
      settled.then(() => false),
      new Promise<boolean>((resolve) => (grace = setTimeout(() => resolve(true), opts.stopGraceMs))),
    ]);
    clearTimeout(grace);
    return abandoned;
  }

  return {
    get running(): boolean {
      return loop.running;
    },
    /** Work in flight (tracked and not yet settled). */
    get inFlight(): number {
      return inFlight.size;
    },
    /** How many tracked pieces of work have settled so far (a pass can tell whether one settled while it claimed). */
    get settled(): number {
      return settledCount;
    },
    /** Settles when any work in flight does (at once when none is). */
    anySettled(): Promise<void> {
      return inFlight.size === 0 ? Promise.resolve() : Promise.race([...inFlight]);
    },
    /**
     * Tracks `work` until it settles (stop waits for it); then the loop looks again at once, since its room, or the
     * next job of what it served, may be free now. The returned promise never rejects.
     */
    track(work: Promise<unknown>, options: { wakeAfter?: boolean } = {}): Promise<void> {
      const done: Promise<void> = work
        .then(
          () => undefined,
          () => undefined,
        )
        .finally(() => {
          inFlight.delete(done);
          settledCount += 1;
          if (options.wakeAfter !== false) loop.poke();
        });
      inFlight.add(done);
      return done;
    },
    /** Starts the loop and its subscription to the queue's marks. */
    async start(): Promise<void> {
      if (loop.running) return;
      await opts.onStart?.();
      if (opts.wake) unsubscribe = onQueueMarked(opts.wake.db, opts.wake.queue, loop.poke);
      if (opts.every) {
        timer = setInterval(opts.every.run, opts.every.ms);
        timer.unref();
      }
      loop.start();
    },
    /** Looks now instead of at the end of the interval. */
    wake: loop.poke,
    /**
     * Stops the loop after the pass in progress, drains, and waits for the work in flight (within `stopGraceMs`);
     * resolves with whether work was still in flight when the grace time ran out.
     */
    async stop(): Promise<{ abandoned: boolean }> {
      unsubscribe?.();
      unsubscribe = null;
      await loop.stop();
      await opts.drain?.();
      const abandoned = await settle();
      if (timer) clearInterval(timer);
      timer = null;
      return { abandoned };
    },
  };
}

export type Runner = ReturnType<typeof createRunner>;

/** A queue whose pass claims jobs and runs one attempt for each: what it claims, and what one attempt is. */
export interface QueueWorkerOptions<Job> extends Omit<RunnerOptions, 'tick'> {
  /** Attempts in flight at most. */
  maxInFlight: number;
  /** Claims up to `room` due jobs (room = maxInFlight less the attempts in flight; none when it is 0 or less). */
  claim: (room: number) => Promise<Job[]>;
  /** One attempt of one job; the worker tracks it until it settles (its failure is the attempt's to record). */
  attempt: (job: Job) => Promise<void>;
}

/**
 * A runner whose every pass claims what fits and starts one attempt per job; `runOnce` (tests, with a fake clock)
 * claims and attempts until nothing more is due.
 */
export function createQueueWorker<Job>(opts: QueueWorkerOptions<Job>) {
  const runner: Runner = createRunner({
    ...opts,
    tick: async () => {
      // The attempts it starts are tracked by the runner, not waited for here.
      void (await pass());
      return undefined;
    },
  });

  async function pass(): Promise<Promise<void>[]> {
    // Asked even without room: a queue may do its housekeeping in its claim (it claims nothing then).
    return (await opts.claim(opts.maxInFlight - runner.inFlight)).map((job) => runner.track(opts.attempt(job)));
  }

  /**
   * Claims and attempts until nothing more is due and nothing is in flight; the number of attempts made. A pass that
   * claimed nothing while an attempt settled may have read the queue before that attempt's writes (the next job of
   * its endpoint, say, still behind it), so it looks once more.
   */
  async function runOnce(): Promise<number> {
    let total = 0;
    for (;;) {
      const settledBefore = runner.settled;
      const started = await pass();
      if (started.length === 0 && runner.inFlight === 0 && runner.settled === settledBefore) return total;
      total += started.length;
      await (started.length > 0 ? Promise.race(started) : runner.anySettled());
    }
  }

  return {
    ...runner,
    runOnce,
    get running() {
      return runner.running;
    },
    get inFlight() {
      return runner.inFlight;
    },
    get settled() {
      return runner.settled;
    },
  };
}

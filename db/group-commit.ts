import type { Db } from './client.js';

type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

interface Job<T> {
  fn: (tx: Tx) => T;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
}

/** How long the first write of a batch waits for company before the batch commits. */
export const GATHER_MS = 2;
/** A batch this large commits at once. */
export const MAX_BATCH = 256;

/**
 * Group commit: writes submitted within GATHER_MS of each other share one transaction, so one fsync
 * (synchronous=FULL) acknowledges many. Each write runs in its own savepoint: one that throws rolls back alone and
 * rejects its own promise; if the commit itself fails, every write of the batch is rejected. A promise resolves only
 * after its write is durable.
 */
export function createGroupCommit(db: Db) {
  let pending: Job<unknown>[] = [];
  let timer: NodeJS.Timeout | null = null;

  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    const jobs = pending;
    pending = [];
    const outcomes: ({ ok: true; value: unknown } | { ok: false; err: unknown })[] = [];
    try {
      db.transaction((tx) => {
        for (const job of jobs) {
          try {
            outcomes.push({ ok: true, value: tx.transaction((sp) => job.fn(sp)) });
          } catch (err) {
            outcomes.push({ ok: false, err });
          }
        }
      });
    } catch (err) {
      for (const job of jobs) job.reject(err);
      return;
    }
    jobs.forEach((job, i) => {
      const o = outcomes[i]!;
      if (o.ok) job.resolve(o.value);
      else job.reject(o.err);
    });
  };

  return {
    run<T>(fn: (tx: Tx) => T): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        pending.push({ fn, resolve, reject } as Job<unknown>);
        if (pending.length >= MAX_BATCH) flush();
        else if (!timer) timer = setTimeout(flush, GATHER_MS);
      });
    },
  };
}

export type GroupCommit = ReturnType<typeof createGroupCommit>;
export type { Tx };

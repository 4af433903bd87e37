import type Database from 'better-sqlite3';
import { type Db, clientOf } from './client.js';

/**
 * The wake of the durable queues. A producer marks its queue (`markQueued`) inside the transaction that writes the
 * queued rows; the queue's worker, subscribed with `onQueueMarked` while it runs, is woken once that commit is
 * durable, so no call site pokes a worker by hand:
 * - a mark made inside a job of the group commit (db/group-commit.ts) wakes once that batch's flush of the WAL is
 *   done (nothing if the job rolled back or the batch failed);
 * - any other mark (a plain `db.transaction` or statement, synchronous=FULL: durable when it returns) wakes on the
 *   next microtask, which runs only after the synchronous better-sqlite3 transaction around the mark has returned.
 * A wake is a hint (the worker claims what is due), so a mark of a transaction that rolled back costs one idle claim.
 * Marks of one batch or one synchronous step wake each queue once.
 */

export type QueueName = 'recipients' | 'webhooks' | 'customer-db';

interface Wakes {
  listeners: Map<QueueName, Set<() => void>>;
  /** Marks of the group-commit job running now, held for its batch's flush; null outside a job. */
  job: Set<QueueName> | null;
  /** Marks waiting for the next microtask. */
  soon: Set<QueueName> | null;
}

const byConnection = new WeakMap<Database.Database, Wakes>();

function wakesOf(db: Db): Wakes {
  const sqlite = clientOf(db);
  let w = byConnection.get(sqlite);
  if (!w) {
    w = { listeners: new Map(), job: null, soon: null };
    byConnection.set(sqlite, w);
  }
  return w;
}

/** Records that `queue` has work from the transaction under way; its worker wakes once the commit is durable. */
export function markQueued(db: Db, queue: QueueName): void {
  const w = wakesOf(db);
  if (w.job) {
    w.job.add(queue);
    return;
  }
  if (!w.soon) {
    const soon = (w.soon = new Set());
    queueMicrotask(() => {
      w.soon = null;
      fire(w, soon);
    });
  }
  w.soon.add(queue);
}

/** Calls `listener` after each durable commit that marked `queue`; returns the unsubscribe. */
export function onQueueMarked(db: Db, queue: QueueName, listener: () => void): () => void {
  const w = wakesOf(db);
  const set = w.listeners.get(queue) ?? new Set();
  w.listeners.set(queue, set);
  // A wrapper, so one function subscribed twice is two subscriptions, each removed by its own unsubscribe.
  const entry = () => listener();
  set.add(entry);
  return () => {
    set.delete(entry);
  };
}

/**
 * For the group commit: runs one job, and returns the marks it made, held back from the microtask wake (the caller
 * wakes them with `wakeMarked` once the batch is durable). Nothing is returned when the job throws.
 */
export function collectMarks<T>(db: Db, fn: () => T): { value: T; marks: Set<QueueName> } {
  const w = wakesOf(db);
  const outer = w.job;
  const marks = new Set<QueueName>();
  w.job = marks;
  try {
    return { value: fn(), marks };
  } finally {
    w.job = outer;
  }
}

/** Wakes the workers of `marks` (the group commit, once the batch that made them is durable). */
export function wakeMarked(db: Db, marks: Iterable<QueueName>): void {
  fire(wakesOf(db), marks);
}

function fire(w: Wakes, marks: Iterable<QueueName>): void {
  for (const queue of new Set(marks)) {
    for (const listener of [...(w.listeners.get(queue) ?? [])]) listener();
  }
}

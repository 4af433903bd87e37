import { type Db, unitOf } from './client.js';

/**
 * The wake of the durable queues. A producer marks its queue (`markQueued`) inside the transaction that writes the
 * queued rows; the queue's worker, subscribed with `onQueueMarked` while it runs, is woken once that commit is
 * durable, so no call site pokes a worker by hand:
 * - a mark made inside a job of the group commit (db/group-commit.ts) wakes once that batch's flush of the WAL is
 *   done (nothing if the job rolled back or the batch failed);
 * - a mark made inside a `db.transaction` (or another unit holding the connection: db/sqlite-connection.ts) wakes
 *   once it has committed (synchronous=FULL: durable when COMMIT returns), nothing if it rolled back;
 * - a mark after a statement of its own (synchronous=FULL, durable when it returns) wakes on the next microtask.
 * A wake is a hint (the worker claims what is due), so a mark of a transaction that rolled back costs one idle claim.
 * Marks of one batch or one synchronous step wake each queue once. With several nodes (server/app/liveness.ts), each
 * wake is also told to the other nodes (`forwardWakes`), whose workers are woken by `wakeFromElsewhere`, unless this
 * node's worker of the queue keeps it (`keepWakes`): it claims at once, with room, what the wake announces, and the
 * other nodes' claims would only race it for the same rows; such a worker tells them itself (`tellOtherNodes`) when it
 * may leave due work behind.
 */

export type QueueName = 'recipients' | 'webhooks' | 'customer-db';

interface Wakes {
  listeners: Map<QueueName, Set<() => void>>;
  /** Marks of the group-commit job running now, held for its batch's flush; null outside a job. */
  job: Set<QueueName> | null;
  /** Marks waiting for the next microtask. */
  soon: Set<QueueName> | null;
  /** Tells the other nodes of a wake made here; null with one node. */
  forward: ((queue: QueueName) => void) | null;
  /** Per queue, whether this node's worker takes a wake made here itself (then it is not told to the other nodes). */
  keeps: Map<QueueName, () => boolean>;
}

const byDb = new WeakMap<Db, Wakes>();
/** The queues marked inside each open unit of work, woken together once it commits. */
const unitMarks = new WeakMap<object, Set<QueueName>>();

function wakesOf(db: Db): Wakes {
  let w = byDb.get(db);
  if (!w) {
    w = { listeners: new Map(), job: null, soon: null, forward: null, keeps: new Map() };
    byDb.set(db, w);
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
  // Inside a transaction (or another unit holding the connection): once it has committed, on the microtask after,
  // each queue once; nothing if it rolls back.
  const scope = unitOf(db);
  if (scope) {
    let marks = unitMarks.get(scope);
    if (!marks) {
      const made = new Set<QueueName>();
      unitMarks.set(scope, made);
      scope.afterCommit.push(() => queueMicrotask(() => fire(w, made)));
      marks = made;
    }
    marks.add(queue);
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
export async function collectMarks<T>(db: Db, fn: () => T | Promise<T>): Promise<{ value: T; marks: Set<QueueName> }> {
  const w = wakesOf(db);
  const outer = w.job;
  const marks = new Set<QueueName>();
  w.job = marks;
  try {
    return { value: await fn(), marks };
  } finally {
    w.job = outer;
  }
}

/** Wakes the workers of `marks` (the group commit, once the batch that made them is durable). */
export function wakeMarked(db: Db, marks: Iterable<QueueName>): void {
  fire(wakesOf(db), marks);
}

function fire(w: Wakes, marks: Iterable<QueueName>, local = false): void {
  for (const queue of new Set(marks)) {
    // Asked before the listeners run: whether the worker, as it stands, claims what this wake announces.
    const kept = !local && w.forward !== null && (w.keeps.get(queue)?.() ?? false);
    for (const listener of [...(w.listeners.get(queue) ?? [])]) listener();
    if (!local && !kept) w.forward?.(queue);
  }
}

/**
 * Says that this node's worker of `queue` takes the wakes made here while `keeps()` is true (it will claim at once, with
 * room): they are not told to the other nodes then. Returns the undo (the worker stopping).
 */
export function keepWakes(db: Db, queue: QueueName, keeps: () => boolean): () => void {
  const w = wakesOf(db);
  w.keeps.set(queue, keeps);
  return () => {
    if (w.keeps.get(queue) === keeps) w.keeps.delete(queue);
  };
}

/** Tells the other nodes that `queue` has work this node's worker may leave (nothing with one node). */
export function tellOtherNodes(db: Db, queue: QueueName): void {
  wakesOf(db).forward?.(queue);
}

const QUEUES: readonly QueueName[] = ['recipients', 'webhooks', 'customer-db'];

/** Passes every wake made on this node to `forward` (the other nodes'); null stops it. */
export function forwardWakes(db: Db, forward: ((queue: QueueName) => void) | null): void {
  wakesOf(db).forward = forward;
}

/** Wakes this node's workers of `queue`, named by another node's wake (an unknown name is ignored). */
export function wakeFromElsewhere(db: Db, queue: string): void {
  const known = QUEUES.find((q) => q === queue);
  if (known) fire(wakesOf(db), [known], true);
}

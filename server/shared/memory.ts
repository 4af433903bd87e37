import { setFlagsFromString } from 'node:v8';
import { isMainThread } from 'node:worker_threads';
import { runInNewContext } from 'node:vm';

/**
 * Streaming a large message through the process (the SMTP socket, the sealed spool, the parser, the Postgres
 * protocol) copies every chunk a few times. The copies are garbage at once, but V8 collects the memory behind
 * Buffers only when its own heap asks for it (64 MB of it past the last collection), so a 25 MB message raised the
 * resident set by 80 MB before any collection ran. A path that streams one payload (the DATA stream, each pass over a
 * spool file, an attachment on its way to Postgres) counts it with its own collector: once that payload passes
 * COLLECT_EVERY_BYTES, and every as many bytes after, a collection runs (a 25 MB message then raises the peak by
 * 4-11 MB). Small messages (nearly all) never cause one.
 *
 * A full collection stops the thread that runs it (30-90 ms on this machine, more the larger the heap). Run as soon
 * as asked, a 25 MB message's spent close to half the main thread's time, several back to back: every session and
 * request stalled up to 250-350 ms again and again (/healthz p99 121-173 ms meanwhile). So on the main thread they are
 * paced (collectionDelay): collections take at most COLLECTION_SHARE of its time, and a stream whose collection is due
 * and not yet allowed waits for it before it reads on (its socket or file is not read meanwhile, so the memory stays
 * bounded): the large payload is slowed, not everyone else (/healthz p99 under 75 ms, tests/inbound-large.test.ts).
 *
 * A forced full collection is atomic: the whole heap is marked on the thread that asks (on the main thread, with a 45 MB
 * heap, 33-75 ms on this machine under load), where V8's own full collections mark concurrently and stop the thread
 * 8-25 ms. So a payload asks for full ones only once it passes FULL_FROM_BYTES: what a smaller one leaves behind is at
 * most its own size, for V8's own collections to free; a 2.5 MB message asked for two, and each was one of the two
 * slowest /healthz answers while it was received (tests/inbound-bombs.test.ts).
 */

export const COLLECT_EVERY_BYTES = 512 * 1024;

/** The most of the main thread's time that collections may take: after one that took t ms, the next waits 4t. */
export const COLLECTION_SHARE = 0.2;

/** How long a collection due at `now` waits: until the last one's cost is at most COLLECTION_SHARE of the time since it began. */
export function collectionDelay(now: number, last: { end: number; cost: number }): number {
  const earliest = last.end + (last.cost * (1 - COLLECTION_SHARE)) / COLLECTION_SHARE;
  return Math.max(0, earliest - now);
}

export type CollectionType = 'major' | 'minor';

export interface CollectionPacer {
  /**
   * A collection of that kind is due: runs it now and returns undefined, or returns what resolves once it ran (shared
   * by all waiting; a full one if any of them asked for one).
   */
  due(type: CollectionType): Promise<void> | undefined;
}

/** Paces the collections of one thread; `collect` runs one synchronously. */
export function createCollectionPacer(deps: {
  now: () => number;
  collect: (type: CollectionType) => void;
  after: (ms: number, fn: () => void) => void;
}): CollectionPacer {
  const last = { end: Number.NEGATIVE_INFINITY, cost: 0 };
  let waiting: { done: Promise<void>; type: CollectionType } | null = null;
  const run = (type: CollectionType) => {
    const start = deps.now();
    deps.collect(type);
    last.end = deps.now();
    last.cost = last.end - start;
  };
  return {
    due(type) {
      if (waiting) {
        if (type === 'major') waiting.type = 'major';
        return waiting.done;
      }
      const delay = collectionDelay(deps.now(), last);
      if (delay === 0) return void run(type);
      const next: { done: Promise<void>; type: CollectionType } = { done: Promise.resolve(), type };
      next.done = new Promise((resolve) => {
        deps.after(delay, () => {
          waiting = null;
          run(next.type);
          resolve();
        });
      });
      waiting = next;
      return next.done;
    },
  };
}

/**
 * Of the collections a payload asks for, every FULL_EVERY-th is a full one once it passed FULL_FROM_BYTES; the others
 * are minor (a scavenge of the young generation, 1-3 ms), which frees the copies made since the last one unless they
 * were still in use. The full ones free the rest.
 */
export const FULL_EVERY = 2;
export const FULL_FROM_BYTES = 4 * 1024 * 1024;

/** When a payload streamed through a thread asks for collections, and of which kind. */
export interface CollectionPolicy {
  /** A collection each time the payload has streamed this many bytes more. */
  everyBytes: number;
  /** Full collections only once the payload has streamed past this many bytes, */
  fullFromBytes: number;
  /** and then every this many-th collection (the others are scavenges). */
  fullEvery: number;
}

/**
 * The main thread serves every session and request: few collections, paced, and full ones only for large payloads.
 * A worker thread (a parse thread holding one large message) stops only itself, and its heap is small: every
 * collection is a full one, twice as often. Its parse keeps what it streams in stream buffers across scavenges (the
 * scavenges freed little of it), and the copies it makes (3-4 for each byte) grew the resident set by 9-14 MiB for a 25
 * MB message, that thread's malloc arena alone by 9 of them; so collected, 7-10 MiB, in 10% more time.
 */
export const COLLECTION_POLICY = {
  main: { everyBytes: COLLECT_EVERY_BYTES, fullFromBytes: FULL_FROM_BYTES, fullEvery: FULL_EVERY },
  worker: { everyBytes: COLLECT_EVERY_BYTES / 2, fullFromBytes: 0, fullEvery: 1 },
} as const satisfies Record<'main' | 'worker', CollectionPolicy>;

/** This thread's policy. */
const threadPolicy: CollectionPolicy = isMainThread ? COLLECTION_POLICY.main : COLLECTION_POLICY.worker;

/** The kind of the n-th collection (from 1) a payload asks for, having streamed `bytes` so far. */
export function collectionType(n: number, bytes: number, policy: CollectionPolicy = COLLECTION_POLICY.main): CollectionType {
  return bytes > policy.fullFromBytes && n % policy.fullEvery === 0 ? 'major' : 'minor';
}

setFlagsFromString('--expose-gc');
const gcOf = runInNewContext('gc') as (options?: { type: 'minor' }) => void;

/**
 * Runs a collection of that kind on this thread, now. A full one is `gc()` without arguments: Node 20's V8 takes any
 * options object, even `{ type: 'major' }`, as a scavenge, and Node 24's takes `gc(undefined)` as one.
 * `{ type: 'minor' }` is a scavenge on both.
 */
export function collectNow(type: CollectionType): void {
  if (type === 'major') gcOf();
  else gcOf({ type: 'minor' });
}

/**
 * This thread's pacer (each thread loads its own copy of this module, and collects its own heap). Only the main thread
 * is paced: a worker's collection stops that worker alone (the parse of the one large message it holds).
 */
const pacer: CollectionPacer = isMainThread
  ? createCollectionPacer({ now: () => performance.now(), collect: collectNow, after: (ms, fn) => void setTimeout(fn, ms) })
  : { due: (type) => void collectNow(type) };

export interface Collector {
  /** Counts `bytes` streamed; returns what to wait for before reading on, if anything. */
  streamed(bytes: number): Promise<void> | undefined;
}

export function createCollector(threadPacer: CollectionPacer = pacer, policy: CollectionPolicy = threadPolicy): Collector {
  let since = 0;
  let total = 0;
  let asked = 0;
  return {
    streamed(bytes) {
      since += bytes;
      total += bytes;
      if (since < policy.everyBytes) return undefined;
      since = 0;
      return threadPacer.due(collectionType(++asked, total, policy));
    },
  };
}

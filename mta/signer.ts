import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { KeyObject } from 'node:crypto';
import type { OutboundMessageRow } from '../db/schema/index.js';
import type { SigningKey } from './dkim.js';

/**
 * Builds and DKIM-signs outbound messages (mta/message.ts buildSignedMessage) in worker threads, so the event loop
 * that answers the API and speaks SMTP never spends the RSA signature (about a millisecond of CPU per message) and a
 * second core does the work. Requests made in the same turn of the event loop cross to a thread in one message, and
 * their answers come back in one; the bytes come back moved, not copied. A thread that crashes is started again; the
 * messages it held are refused with an error (the engine defers those recipients like any failed attempt).
 */

/** A domain key as the thread receives it: sent once per thread, then named by id. */
export interface SignerKey {
  id: string;
  domain: string;
  selector: string;
  privateKey: KeyObject;
}

export type SignRequest = { id: number; message: OutboundMessageRow; to: string[]; keyId: string; signTime: number };
export type SignBatch = { keys: SignerKey[]; requests: SignRequest[] };
export type SignReply = { id: number; raw: Uint8Array } | { id: number; error: string };

/**
 * The thread's heap: a message is built and signed in a few hundred kilobytes of short-lived allocations, so a small
 * young generation keeps the thread's memory small at no cost in speed (V8 would otherwise grow it to 32 MB).
 */
const SIGNER_HEAP = { maxYoungGenerationSizeMb: 2 };

/** Threads at most: one per core beyond the event loop's, and never more than four. */
export function signerThreads(): number {
  return Math.max(1, Math.min(4, availableParallelism() - 1));
}

/** The compiled worker: beside this file in dist/, or in dist/ when this file runs from source (the tests). */
function workerFile(): URL {
  const here = new URL('./sign-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(here))) return here;
  return new URL('../dist/mta/sign-worker.js', import.meta.url);
}

interface Thread {
  worker: Worker;
  keys: Set<string>;
  inFlight: number;
}

export function createSigner(options: { threads?: number; onCrash?: (err: Error) => void; workerUrl?: URL } = {}) {
  const size = options.threads ?? signerThreads();
  const threads: (Thread | null)[] = Array.from({ length: size }, () => null);
  /** Every request not yet answered, with the thread it went to (null while it waits for this turn's batch). */
  const waiting = new Map<number, { thread: Thread | null; resolve: (raw: Buffer) => void; reject: (err: Error) => void }>();
  let queued: { request: SignRequest; key: SigningKey & { id: string } }[] = [];
  let nextId = 0;
  let flushScheduled = false;

  function start(index: number): Thread {
    const worker = new Worker(options.workerUrl ?? workerFile(), { resourceLimits: SIGNER_HEAP });
    const thread: Thread = { worker, keys: new Set(), inFlight: 0 };
    worker.on('message', (replies: SignReply[]) => {
      for (const reply of replies) {
        const job = waiting.get(reply.id);
        if (!job) continue;
        waiting.delete(reply.id);
        if (--thread.inFlight === 0) worker.unref();
        if ('error' in reply) job.reject(new Error(reply.error));
        else job.resolve(Buffer.from(reply.raw.buffer, reply.raw.byteOffset, reply.raw.byteLength));
      }
    });
    const lost = (err: Error) => {
      if (threads[index] !== thread) return;
      threads[index] = null;
      for (const [id, job] of waiting) {
        if (job.thread !== thread) continue;
        waiting.delete(id);
        job.reject(err);
      }
    };
    worker.on('error', (err) => {
      options.onCrash?.(err);
      lost(err);
    });
    worker.on('exit', (code) => lost(new Error(`the signing thread stopped (exit ${code})`)));
    // Idle, it does not hold the process open.
    worker.unref();
    threads[index] = thread;
    return thread;
  }

  /** The thread with the least in flight (started on first use). */
  function pick(): Thread {
    let best: Thread | null = null;
    for (let i = 0; i < size; i++) {
      const t = threads[i] ?? start(i);
      if (!best || t.inFlight < best.inFlight) best = t;
    }
    return best!;
  }

  function flush(): void {
    flushScheduled = false;
    const batch = queued;
    queued = [];
    if (batch.length === 0) return;
    const thread = pick();
    const keys: SignerKey[] = [];
    for (const { key } of batch) {
      if (thread.keys.has(key.id)) continue;
      thread.keys.add(key.id);
      keys.push({ id: key.id, domain: key.domain, selector: key.selector, privateKey: key.privateKey });
    }
    for (const { request } of batch) {
      const job = waiting.get(request.id);
      if (job) job.thread = thread;
    }
    if (thread.inFlight === 0) thread.worker.ref();
    thread.inFlight += batch.length;
    const message: SignBatch = { keys, requests: batch.map((b) => b.request) };
    thread.worker.postMessage(message);
  }

  return {
    /** The message as sent, DKIM-signed with `key` (prepared once per domain key, named by `key.id`). */
    build(message: OutboundMessageRow, to: string[], key: SigningKey & { id: string }, signTime: Date): Promise<Buffer> {
      const id = nextId++;
      return new Promise<Buffer>((resolve, reject) => {
        waiting.set(id, { thread: null, resolve, reject });
        queued.push({ request: { id, message, to, keyId: key.id, signTime: signTime.getTime() }, key });
        if (!flushScheduled) {
          flushScheduled = true;
          setImmediate(flush);
        }
      });
    },
    /** Stops the threads (a later build starts them again); whatever they held is refused. */
    async close(): Promise<void> {
      queued = [];
      const all = threads.filter((t): t is Thread => t !== null);
      threads.fill(null);
      for (const [id, job] of waiting) {
        waiting.delete(id);
        job.reject(new Error('the signer is closed'));
      }
      await Promise.all(all.map((t) => t.worker.terminate()));
    },
  };
}

export type Signer = ReturnType<typeof createSigner>;

import { readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import type { InboundWrite } from '../../../db/customer/writes.js';
import type { SpooledInboundWrite } from '../../core/customer-db-outbox.js';
import type { DnsServer } from '../../shared/config.js';
import type { LogFields, Logger } from '../../shared/logger.js';
import type { SpooledEvent } from './parse-message.js';
import type { SpoolPage } from '../../../db/inbound-spool-store.js';
import { SPOOL_PAGE_RECORDS } from '../../../db/inbound-spool.js';
import { type Collector, createCollector } from '../../shared/memory.js';

/**
 * One parse thread as the parser (parser.ts) sees it: what goes over to it and comes back (parse-worker.ts answers),
 * and the watchdog that stops it when one message holds its event loop: the thread counts a heartbeat into shared
 * memory while its loop turns, and a thread that spends PARSE_STALL_MS of its own CPU time without one is held.
 */

export interface ParserSettings {
  mailHostname: string;
  dnsServers: DnsServer[] | null;
  /** How much lower the parse thread's scheduling priority is than the process's (Linux nice, capped at 19). */
  nice: number;
  /**
   * Where the spool of large messages is (db/inbound-spool-store.ts): files the thread reads itself, or rows of the
   * state, which it asks the event loop for a page at a time (`spoolPage`); and the key that opens it.
   */
  spool: { kind: 'files'; dataDir: string } | { kind: 'rows' };
  secretKey: Uint8Array | null;
  /** The heartbeat the thread counts up every BEAT_MS while its event loop turns (an Int32 at 0). */
  beat: SharedArrayBuffer;
}

/** One message to parse; without `withVerdicts`, its checks are skipped (they held a thread once). */
export interface ParseJob {
  write: SpooledInboundWrite;
  withVerdicts: boolean;
}

/** One message's outcome: its rows, or why it cannot be parsed. */
export type ParseOutcome = { value: InboundWrite } | { error: string };

/** A batch goes over in one message and comes back in one: each crossing wakes the other thread, which costs. */
export type ParseRequest =
  | { id: number; jobs: ParseJob[] }
  | { id: number; spooled: ParseJob }
  | { id: number; signersOf: Uint8Array }
  | { ack: true }
  | { spoolPage: number; records: { seq: number; record: Uint8Array }[] }
  | { spoolPage: number; error: string };
export type ParseReply =
  | { id: number; outcomes: ParseOutcome[] }
  | { id: number; event: SpooledEvent }
  | { id: number; failed: string }
  | { id: number; signers: string[] }
  | { log: { level: keyof Logger; event: string; fields: LogFields } }
  | { tid: number }
  | { spoolRead: { page: number; spoolId: string; from: number } };

/** Messages of a batch the thread parses at once (their DNS checks overlap). */
export const PARSE_CONCURRENCY = 8;

/** Below the SMTP server and the API, above idle work. */
export const PARSE_NICE = 10;

/** Threads that parse small messages in batches, and threads that parse one message at a time. */
export const PARSE_THREADS = 2;
export const SOLO_THREADS = 2;

/** How often a parse thread counts its heartbeat. */
export const BEAT_MS = 100;

/** CPU time a thread may spend without its heartbeat before it is taken to be held by one message, and stopped. */
export const PARSE_STALL_MS = 2000;

/** The parse thread stopped (it crashed, or the parser was closed) with a batch in it: worth another try later. */
export class ParserStoppedError extends Error {
  override name = 'ParserStoppedError';
}

/** The thread was stopped because one of the messages it held did not let it turn. */
export class ThreadStalled extends Error {
  override name = 'ThreadStalled';
}

const TICKS_PER_SECOND = 100;

/** CPU time (ms) a thread of this process has used (Linux: /proc/self/task/<tid>/stat), or null where unknown. */
function threadCpuMs(tid: number): number | null {
  try {
    const fields = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return null;
  }
}

export interface ParseThread {
  post(request: ParseRequest, transfer?: ArrayBuffer[]): void;
  /** Sends one request and waits for the replies `handle` says end it. */
  request(request: { id: number } & ParseRequest, transfer: ArrayBuffer[], handle: (reply: ParseReply) => boolean): Promise<void>;
  readonly alive: boolean;
  readonly pending: number;
  terminate(): Promise<void>;
}

export interface ThreadOptions {
  url: URL;
  settings: Omit<ParserSettings, 'beat'>;
  logger: Logger;
  stallMs: number;
  /** The rows of a spool on Postgres, a page at a time, for a thread's `spoolRead`. */
  spoolPage?: SpoolPage;
}

export function startThread(opts: ThreadOptions, onLost: (thread: ParseThread) => void): ParseThread {
  const beat = new Int32Array(new SharedArrayBuffer(4));
  const w = new Worker(opts.url, { workerData: { ...opts.settings, beat: beat.buffer } satisfies ParserSettings });
  const waiting = new Map<number, { handle: (reply: ParseReply) => boolean; resolve: () => void; reject: (err: Error) => void }>();
  let alive = true;
  /** The thread's Linux id, which it reports as it starts: its CPU time is read by it. */
  let tid: number | null = null;
  /** The heartbeat last seen, and the thread's CPU time (or the wall clock where that is unknown) when it was. */
  let seen = { beat: 0, at: 0, byCpu: false };
  let watchdog: NodeJS.Timeout | null = null;

  const lost = (err: Error) => {
    if (!alive) return;
    alive = false;
    if (watchdog) clearInterval(watchdog);
    for (const job of waiting.values()) job.reject(err);
    waiting.clear();
    onLost(thread);
  };
  const clock = () => (tid !== null ? threadCpuMs(tid) : null) ?? performance.now();
  const watch = () => {
    const now = Atomics.load(beat, 0);
    // Not started yet (loading its modules), or turning: not held. A thread starved of CPU by other work spends
    // none, so it is not taken for held (where its CPU time cannot be read, the wall clock stands in).
    if (now === 0 || now !== seen.beat || seen.byCpu !== (tid !== null)) {
      seen = { beat: now, at: clock(), byCpu: tid !== null };
      return;
    }
    if (clock() - seen.at < opts.stallMs) return;
    opts.logger.warn('inbound.parse_stalled', { stallMs: opts.stallMs, messages: waiting.size });
    lost(new ThreadStalled('the parse thread was held by one message past its budget'));
    void w.terminate();
  };

  w.on('message', (reply: ParseReply) => {
    if ('log' in reply) return opts.logger[reply.log.level](reply.log.event, reply.log.fields);
    if ('tid' in reply) return void (tid = reply.tid);
    if ('spoolRead' in reply) return void readSpoolPage(reply.spoolRead);
    const job = waiting.get(reply.id);
    if (!job) return;
    if (!job.handle(reply)) return;
    waiting.delete(reply.id);
    job.resolve();
    if (waiting.size === 0) idle();
  });
  /**
   * The collectors of the spools being read (server/shared/memory.ts): each page passes through this thread's heap as
   * the protocol's text and its Buffers, garbage at once, and a 25 MB message's pages grew the resident set by 10-18
   * MiB before V8 collected on its own. Dropped at a spool's last page (or a failure).
   */
  const pageCollectors = new Map<string, Collector>();
  /** A page of a spool's rows for the thread, moved over (not copied where the row owns its memory), or why it could not be read. */
  async function readSpoolPage({ page, spoolId, from }: { page: number; spoolId: string; from: number }): Promise<void> {
    let answer: ParseRequest;
    const moved: ArrayBuffer[] = [];
    try {
      if (!opts.spoolPage) throw new Error('no spool rows here');
      const rows = await opts.spoolPage(spoolId, from);
      let collector = pageCollectors.get(spoolId);
      if (!collector) pageCollectors.set(spoolId, (collector = createCollector()));
      if (rows.length < SPOOL_PAGE_RECORDS) pageCollectors.delete(spoolId);
      const collecting = collector.streamed(rows.reduce((n, r) => n + r.record.length, 0));
      if (collecting) await collecting;
      answer = {
        spoolPage: page,
        records: rows.map((r) => {
          const owned = r.record.byteOffset === 0 && r.record.byteLength === r.record.buffer.byteLength;
          const record = owned ? new Uint8Array(r.record.buffer, 0, r.record.byteLength) : new Uint8Array(r.record);
          moved.push(record.buffer as ArrayBuffer);
          return { seq: r.seq, record };
        }),
      };
    } catch (err) {
      pageCollectors.delete(spoolId);
      answer = { spoolPage: page, error: err instanceof Error ? err.message : String(err) };
    }
    if (alive) w.postMessage(answer, moved);
  }

  w.on('error', (err) => {
    opts.logger.error('inbound.parser_failed', { err });
    lost(new ParserStoppedError(`the inbound parser stopped (${err.message})`));
  });
  w.on('exit', (code) => lost(new ParserStoppedError(`the inbound parser stopped (exit ${code})`)));
  // Idle, it does not hold the process open, and nothing watches it.
  const idle = () => {
    w.unref();
    if (watchdog) clearInterval(watchdog);
    watchdog = null;
  };
  idle();

  const thread: ParseThread = {
    post: (request, transfer = []) => w.postMessage(request, transfer),
    request(request, transfer, handle) {
      if (!alive) return Promise.reject(new ParserStoppedError('the inbound parser stopped'));
      return new Promise<void>((resolve, reject) => {
        if (waiting.size === 0) {
          w.ref();
          seen = { beat: Atomics.load(beat, 0), at: clock(), byCpu: tid !== null };
          watchdog = setInterval(watch, Math.max(10, Math.floor(opts.stallMs / 4)));
          watchdog.unref();
        }
        waiting.set(request.id, { handle, resolve, reject });
        w.postMessage(request, transfer);
      });
    },
    get alive() {
      return alive;
    },
    get pending() {
      return waiting.size;
    },
    async terminate() {
      lost(new ParserStoppedError('the inbound parser was closed'));
      await w.terminate();
    },
  };
  return thread;
}

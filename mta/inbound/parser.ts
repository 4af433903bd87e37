import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { InboundWrite } from '../../db/customer/writes.js';
import type { SpooledInboundWrite } from '../../server/customer-db/outbox.js';
import type { DnsServer } from '../../server/config.js';
import type { Deps } from '../../server/deps.js';
import type { LogFields, Logger } from '../../server/logger.js';
import { type SpooledEvent, rawOf, unparsableInbound } from './parse-message.js';

/**
 * The inbound parser: every received message's checks (mailauth) and parse (mailparser) run in worker threads, never
 * on the event loop that answers SMTP and HTTP. Small messages, in batches, go to the shared threads (PARSE_THREADS,
 * the least loaded first, so one account's batch does not queue another's behind it); a large one is streamed from its
 * spool by a solo thread, one message at a time.
 *
 * Each parse has a time budget. Its checks have VERDICT_BUDGET_MS (verdicts.ts) for DNS. A thread whose event loop
 * is held by one message (a parse that spends PARSE_STALL_MS of CPU without yielding: a pathological input past what
 * the limits of auth-limits.ts foresee) is stopped; the messages it held are then parsed again one at a time in solo
 * threads, where the one that holds a thread again is parsed without its checks, and stored as received (whole, as
 * one attachment) if even that holds it. The others are parsed as before, so one account's hostile message costs
 * another account's mail at most one stall. A thread that crashes fails the parses it held (ParserStoppedError): the
 * writer tries those again later.
 */

export interface ParserSettings {
  mailHostname: string;
  dnsServers: DnsServer[] | null;
  /** How much lower the parse thread's scheduling priority is than the process's (Linux nice, capped at 19). */
  nice: number;
  /** Where the spool of large messages is, and the key that opens it. */
  dataDir: string;
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
export type ParseRequest = { id: number; jobs: ParseJob[] } | { id: number; spooled: ParseJob } | { id: number; signersOf: Uint8Array } | { ack: true };
export type ParseReply =
  | { id: number; outcomes: ParseOutcome[] }
  | { id: number; event: SpooledEvent }
  | { id: number; failed: string }
  | { id: number; signers: string[] }
  | { log: { level: keyof Logger; event: string; fields: LogFields } }
  | { tid: number };

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
class ThreadStalled extends Error {
  override name = 'ThreadStalled';
}

/** The compiled worker: beside this file in dist/, or in dist/ when this file runs from source (the tests). */
function workerFile(): URL {
  const here = new URL('./parse-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(here))) return here;
  return new URL('../../dist/mta/inbound/parse-worker.js', import.meta.url);
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

interface ParseThread {
  post(request: ParseRequest, transfer?: ArrayBuffer[]): void;
  /** Sends one request and waits for the replies `handle` says end it. */
  request(request: { id: number } & ParseRequest, transfer: ArrayBuffer[], handle: (reply: ParseReply) => boolean): Promise<void>;
  readonly alive: boolean;
  readonly pending: number;
  terminate(): Promise<void>;
}

interface ThreadOptions {
  url: URL;
  settings: Omit<ParserSettings, 'beat'>;
  logger: Logger;
  stallMs: number;
}

function startThread(opts: ThreadOptions, onLost: (thread: ParseThread) => void): ParseThread {
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
    const job = waiting.get(reply.id);
    if (!job) return;
    if (!job.handle(reply)) return;
    waiting.delete(reply.id);
    job.resolve();
    if (waiting.size === 0) idle();
  });
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

/** A queue of one request's replies, read in order by an async consumer. */
function replyQueue() {
  const items: ParseReply[] = [];
  let wake: (() => void) | null = null;
  let failure: Error | null = null;
  return {
    push(reply: ParseReply): void {
      items.push(reply);
      wake?.();
    },
    fail(err: Error): void {
      failure = err;
      wake?.();
    },
    async next(): Promise<ParseReply> {
      for (;;) {
        const item = items.shift();
        if (item) return item;
        if (failure) throw failure;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = null;
      }
    },
  };
}

/** A write whose bytes go to a thread in an ArrayBuffer of their own, moved rather than cloned. */
function movable(job: ParseJob, moved: ArrayBuffer[]): ParseJob {
  if (!job.write.raw) return job;
  // A Buffer can be a view on a larger allocation, which a clone would copy whole; the copy here is moved.
  const raw = new Uint8Array(job.write.raw);
  moved.push(raw.buffer);
  return { ...job, write: { ...job.write, raw: raw as Buffer } };
}

export function createInboundParser(
  deps: Pick<Deps, 'config' | 'logger'> & Partial<Pick<Deps, 'secretKey'>>,
  options: { workerUrl?: URL; threads?: number; soloThreads?: number; stallMs?: number } = {},
) {
  const threadOptions: ThreadOptions = {
    url: options.workerUrl ?? workerFile(),
    settings: {
      mailHostname: deps.config.mailHostname,
      dnsServers: deps.config.dnsServers,
      nice: PARSE_NICE,
      dataDir: deps.config.dataDir,
      secretKey: deps.secretKey ? new Uint8Array(deps.secretKey) : null,
    },
    logger: deps.logger,
    stallMs: options.stallMs ?? PARSE_STALL_MS,
  };
  let nextId = 0;
  /** While close() runs: threads given back are not kept. */
  let closing = false;
  const shared: ParseThread[] = [];
  const soloIdle: ParseThread[] = [];
  const soloBusy = new Set<ParseThread>();
  const soloWaiting: (() => void)[] = [];
  const soloLimit = options.soloThreads ?? SOLO_THREADS;

  const start = (): ParseThread =>
    startThread(threadOptions, (gone) => {
      const i = shared.indexOf(gone);
      if (i >= 0) shared.splice(i, 1);
      const j = soloIdle.indexOf(gone);
      if (j >= 0) soloIdle.splice(j, 1);
    });

  /** The least loaded shared thread, started when there are fewer than PARSE_THREADS and all are busy. */
  function sharedThread(): ParseThread {
    const free = shared.filter((t) => t.alive).sort((a, b) => a.pending - b.pending)[0];
    if (free && (free.pending === 0 || shared.length >= (options.threads ?? PARSE_THREADS))) return free;
    const t = start();
    shared.push(t);
    return t;
  }

  /** A solo thread to itself until it is released. */
  async function acquireSolo(): Promise<ParseThread> {
    while (soloIdle.length === 0 && soloBusy.size >= soloLimit) await new Promise<void>((resolve) => soloWaiting.push(resolve));
    const thread = soloIdle.pop() ?? start();
    soloBusy.add(thread);
    return thread;
  }

  function releaseSolo(thread: ParseThread): void {
    soloBusy.delete(thread);
    if (thread.alive && !closing) soloIdle.push(thread);
    soloWaiting.shift()?.();
  }

  async function withSolo<T>(use: (thread: ParseThread) => Promise<T>): Promise<T> {
    const thread = await acquireSolo();
    try {
      return await use(thread);
    } finally {
      releaseSolo(thread);
    }
  }

  /** A batch's outcomes from one thread. */
  async function runBatch(thread: ParseThread, jobs: ParseJob[]): Promise<ParseOutcome[]> {
    const moved: ArrayBuffer[] = [];
    const request = { id: nextId++, jobs: jobs.map((j) => movable(j, moved)) };
    let outcomes: ParseOutcome[] = [];
    await thread.request(request, moved, (reply) => {
      if ('outcomes' in reply) outcomes = reply.outcomes;
      return true;
    });
    return outcomes;
  }

  /**
   * One message alone in a solo thread: parsed again without its checks when it holds the thread, and stored as
   * received when it holds it even so.
   */
  async function runAlone(write: SpooledInboundWrite): Promise<ParseOutcome> {
    for (const withVerdicts of [true, false]) {
      try {
        return (await withSolo((thread) => runBatch(thread, [{ write, withVerdicts }])))[0]!;
      } catch (err) {
        if (!(err instanceof ThreadStalled)) throw err;
        deps.logger.warn('inbound.parse_over_budget', { id: write.id, accountId: write.accountId, withVerdicts });
      }
    }
    return { value: unparsableInbound(write, rawOf(write)) };
  }

  /** A large message's parse, from a solo thread, one event at a time (parse-message.ts SpooledEvent). */
  async function* parseSpooled(write: SpooledInboundWrite): AsyncGenerator<SpooledEvent, void> {
    for (const withVerdicts of [true, false]) {
      let verdictsSeen = false;
      const outcome = yield* withSoloStream(write, withVerdicts, () => (verdictsSeen = true));
      if (outcome === 'done') return;
      deps.logger.warn('inbound.parse_over_budget', { id: write.id, accountId: write.accountId, withVerdicts });
      // Held before its verdicts came: again without them. Held later, while its parts were being written: the
      // writer stores it whole.
      if (verdictsSeen) {
        yield { unparsable: 'its parse went past its time budget' };
        return;
      }
    }
    yield { verdicts: { spf: null, dkim: null, dmarc: null } };
    yield { unparsable: 'its parse went past its time budget' };
  }

  /** One run of a large message's parse in a solo thread: 'stalled' when the thread was held and stopped. */
  async function* withSoloStream(write: SpooledInboundWrite, withVerdicts: boolean, onVerdicts: () => void): AsyncGenerator<SpooledEvent, 'done' | 'stalled'> {
    const thread = await acquireSolo();
    const queue = replyQueue();
    let finished = false;
    const isLast = (event: SpooledEvent) => 'parsed' in event || 'unparsable' in event || 'spoolFailed' in event;
    const running = thread
      .request({ id: nextId++, spooled: { write, withVerdicts } }, [], (reply) => {
        queue.push(reply);
        return 'failed' in reply || ('event' in reply && isLast(reply.event));
      })
      .catch((err: Error) => queue.fail(err));
    try {
      for (;;) {
        let reply: ParseReply;
        try {
          reply = await queue.next();
        } catch (err) {
          if (err instanceof ThreadStalled) return 'stalled';
          throw err;
        }
        if ('failed' in reply) throw new ParserStoppedError(`the parse failed: ${reply.failed}`);
        if (!('event' in reply)) continue;
        if ('verdicts' in reply.event) onVerdicts();
        yield reply.event;
        if (isLast(reply.event)) {
          finished = true;
          return 'done';
        }
        thread.post({ ack: true });
      }
    } finally {
      // Left before its end (the writer failed): the thread waits for an acknowledgement that will not come.
      if (!finished && thread.alive) await thread.terminate();
      await running;
      releaseSolo(thread);
    }
  }

  return {
    /**
     * Each write's rows, or the Error it cannot be parsed for (no retry will help), in order; rejects with
     * ParserStoppedError when the thread stops with the batch in it (worth another try).
     */
    async parseAll(writes: readonly SpooledInboundWrite[]): Promise<(InboundWrite | Error)[]> {
      if (writes.length === 0) return [];
      let outcomes: ParseOutcome[];
      try {
        outcomes = await runBatch(sharedThread(), writes.map((write) => ({ write, withVerdicts: true })));
      } catch (err) {
        if (!(err instanceof ThreadStalled)) throw err;
        // One of the messages the thread held (of this batch or another) did not let it turn: each alone now.
        outcomes = await Promise.all(writes.map((w) => runAlone(w)));
      }
      return outcomes.map((o) => ('value' in o ? o.value : new Error(o.error)));
    },
    parseSpooled,
    /**
     * The domains whose DKIM signatures of a (small) message pass, checked in a shared thread; none when the check
     * cannot be made (the thread stopped, or was held by it).
     */
    async signersOf(raw: Buffer): Promise<string[]> {
      const copy = new Uint8Array(raw);
      let signers: string[] = [];
      try {
        await sharedThread().request({ id: nextId++, signersOf: copy }, [copy.buffer], (reply) => {
          if ('signers' in reply) signers = reply.signers;
          return true;
        });
      } catch (err) {
        if (!(err instanceof ThreadStalled) && !(err instanceof ParserStoppedError)) throw err;
        deps.logger.warn('inbound.authenticate_failed', { err });
      }
      return signers;
    },
    /** Stops every thread; the parses they held fail with ParserStoppedError. A later parse starts new ones. */
    async close(): Promise<void> {
      closing = true;
      try {
        const all = [...shared, ...soloIdle, ...soloBusy];
        shared.length = 0;
        soloIdle.length = 0;
        await Promise.all(all.map((t) => t.terminate()));
      } finally {
        closing = false;
      }
    },
  };
}

export type InboundParser = ReturnType<typeof createInboundParser>;

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { InboundWrite } from '../../../db/customer/writes.js';
import type { SpooledInboundWrite } from '../../core/customer-db-outbox.js';
import type { Deps } from '../../core/deps.js';
import { type SpooledEvent, rawOf, unparsableInbound } from './parse-message.js';
import {
  PARSE_NICE,
  PARSE_STALL_MS,
  PARSE_THREADS,
  type ParseJob,
  type ParseOutcome,
  type ParseReply,
  type ParseThread,
  ParserStoppedError,
  SOLO_THREADS,
  ThreadStalled,
  type ThreadOptions,
  startThread,
} from './parse-thread.js';

export { PARSE_NICE, ParserStoppedError } from './parse-thread.js';

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

/** The compiled worker: beside this file in dist/, or in dist/ when this file runs from source (the tests). */
function workerFile(): URL {
  const here = new URL('./parse-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(here))) return here;
  return new URL('../../../dist/server/customer-db/inbound/parse-worker.js', import.meta.url);
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
  deps: Pick<Deps, 'config' | 'logger'> & Partial<Pick<Deps, 'secretKey' | 'inboundSpool'>>,
  options: { workerUrl?: URL; threads?: number; soloThreads?: number; stallMs?: number } = {},
) {
  const threadOptions: ThreadOptions = {
    url: options.workerUrl ?? workerFile(),
    settings: {
      mailHostname: deps.config.mailHostname,
      dnsServers: deps.config.dnsServers,
      nice: PARSE_NICE,
      // Without a spool given (a test's parser), the files of DATA_DIR.
      spool: deps.inboundSpool?.kind === 'rows' ? { kind: 'rows' } : { kind: 'files', dataDir: deps.inboundSpool?.dataDir ?? deps.config.dataDir },
      secretKey: deps.secretKey ? new Uint8Array(deps.secretKey) : null,
    },
    logger: deps.logger,
    stallMs: options.stallMs ?? PARSE_STALL_MS,
    ...(deps.inboundSpool?.kind === 'rows' ? { spoolPage: deps.inboundSpool.page } : {}),
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
        // Finished once the last event is here: a reader that stops at it (the writer does) leaves the thread whole.
        finished = isLast(reply.event);
        yield reply.event;
        if (finished) return 'done';
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
        outcomes = await runBatch(
          sharedThread(),
          writes.map((write) => ({ write, withVerdicts: true })),
        );
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

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { InboundWrite } from '../../db/customer/writes.js';
import type { SpooledInboundWrite } from '../../server/customer-db/outbox.js';
import type { DnsServer } from '../../server/config.js';
import type { Deps } from '../../server/deps.js';
import type { LogFields, Logger } from '../../server/logger.js';

/**
 * Parses the small received messages the customer-database writer takes from the outbox (their mailauth verdicts
 * and mailparser's parse: store.ts parseInlineInbound) in a worker thread, so the event loop that answers SMTP and
 * HTTP never waits for them and the parse can use the second core. The thread starts on first use, runs at a lower
 * priority (parse-worker.ts), and is started again after a crash; the messages it was parsing are then refused with
 * an error and tried again by the writer like any failed write.
 */

export interface ParserSettings {
  mailHostname: string;
  dnsServers: DnsServer[] | null;
  /** How much lower the parse thread's scheduling priority is than the process's (Linux nice, capped at 19). */
  nice: number;
}

/** One message's outcome: its rows, or why it cannot be parsed. */
export type ParseOutcome = { value: InboundWrite } | { error: string };

/** A batch goes over in one message and comes back in one: each crossing wakes the other thread, which costs. */
export type ParseRequest = { id: number; writes: SpooledInboundWrite[] };
export type ParseReply = { id: number; outcomes: ParseOutcome[] } | { log: { level: keyof Logger; event: string; fields: LogFields } };

/** Messages of a batch the thread parses at once (their DNS checks overlap). */
export const PARSE_CONCURRENCY = 8;

/** The parse thread stopped (it crashed, or the parser was closed) with a batch in it: worth another try later. */
export class ParserStoppedError extends Error {
  override name = 'ParserStoppedError';
}

/** Below the SMTP server and the API, above idle work. */
export const PARSE_NICE = 10;

/** The compiled worker: beside this file in dist/, or in dist/ when this file runs from source (the tests). */
function workerFile(): URL {
  const here = new URL('./parse-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(here))) return here;
  return new URL('../../dist/mta/inbound/parse-worker.js', import.meta.url);
}

export function createInboundParser(deps: Pick<Deps, 'config' | 'logger'>, options: { workerUrl?: URL } = {}) {
  let worker: Worker | null = null;
  let nextId = 0;
  const waiting = new Map<number, { resolve: (outcomes: ParseOutcome[]) => void; reject: (err: Error) => void }>();

  function start(): Worker {
    const settings: ParserSettings = { mailHostname: deps.config.mailHostname, dnsServers: deps.config.dnsServers, nice: PARSE_NICE };
    const w = new Worker(options.workerUrl ?? workerFile(), { workerData: settings });
    w.on('message', (reply: ParseReply) => {
      if ('log' in reply) return deps.logger[reply.log.level](reply.log.event, reply.log.fields);
      const job = waiting.get(reply.id);
      if (!job) return;
      waiting.delete(reply.id);
      job.resolve(reply.outcomes);
    });
    const lost = (why: string) => {
      if (worker !== w) return;
      worker = null;
      for (const job of waiting.values()) job.reject(new ParserStoppedError(`the inbound parser stopped (${why})`));
      waiting.clear();
    };
    w.on('error', (err) => {
      deps.logger.error('inbound.parser_failed', { err });
      lost(err.message);
    });
    w.on('exit', (code) => lost(`exit ${code}`));
    // Idle, it does not hold the process open (parseAll() refs it while a batch is in flight).
    w.unref();
    return w;
  }

  return {
    /**
     * Each write's rows, or the Error it cannot be parsed for (no retry will help), in order; rejects with
     * ParserStoppedError when the thread stops with the batch in it (worth another try).
     */
    async parseAll(writes: readonly SpooledInboundWrite[]): Promise<(InboundWrite | Error)[]> {
      if (writes.length === 0) return [];
      worker ??= start();
      const id = nextId++;
      const w = worker;
      if (waiting.size === 0) w.ref();
      const outcomes = await new Promise<ParseOutcome[]>((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        // The bytes go over in ArrayBuffers of their own, moved rather than cloned (a Buffer can be a view on a
        // larger allocation, which a clone would copy whole).
        const moved: ArrayBuffer[] = [];
        const request: ParseRequest = {
          id,
          writes: writes.map((write) => {
            if (!write.raw) return write;
            const raw = new Uint8Array(write.raw);
            moved.push(raw.buffer);
            return { ...write, raw: raw as Buffer };
          }),
        };
        w.postMessage(request, moved);
      }).finally(() => {
        if (waiting.size === 0 && worker === w) w.unref();
      });
      return outcomes.map((o) => ('value' in o ? o.value : new Error(o.error)));
    },
    async close(): Promise<void> {
      const w = worker;
      worker = null;
      if (w) await w.terminate();
      for (const job of waiting.values()) job.reject(new ParserStoppedError('the inbound parser was closed'));
      waiting.clear();
    },
  };
}

export type InboundParser = ReturnType<typeof createInboundParser>;

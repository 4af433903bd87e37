import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { InboundWrite } from '../../db/customer/writes.js';
import type { SpooledInboundWrite } from '../../server/customer-db/outbox.js';
import type { DnsServer } from '../../server/config.js';
import type { Deps } from '../../server/deps.js';
import type { LogFields, Logger } from '../../server/logger.js';
import { SpoolError } from './store.js';

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
  /** Scheduling priority of the parse thread (Linux nice: 0 normal, 19 lowest). */
  nice: number;
}

export type ParseReply =
  | { id: number; value: InboundWrite }
  | { id: number; error: { message: string; spool: boolean } }
  | { log: { level: keyof Logger; event: string; fields: LogFields } };

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
  const waiting = new Map<number, { resolve: (w: InboundWrite) => void; reject: (err: Error) => void }>();

  function start(): Worker {
    const settings: ParserSettings = { mailHostname: deps.config.mailHostname, dnsServers: deps.config.dnsServers, nice: PARSE_NICE };
    const w = new Worker(options.workerUrl ?? workerFile(), { workerData: settings });
    w.on('message', (reply: ParseReply) => {
      if ('log' in reply) return deps.logger[reply.log.level](reply.log.event, reply.log.fields);
      const job = waiting.get(reply.id);
      if (!job) return;
      waiting.delete(reply.id);
      if ('value' in reply) job.resolve(reply.value);
      else job.reject(reply.error.spool ? new SpoolError(reply.error.message) : new Error(reply.error.message));
    });
    const lost = (why: string) => {
      if (worker !== w) return;
      worker = null;
      for (const job of waiting.values()) job.reject(new Error(`the inbound parser stopped (${why})`));
      waiting.clear();
    };
    w.on('error', (err) => {
      deps.logger.error('inbound.parser_failed', { err });
      lost(err.message);
    });
    w.on('exit', (code) => lost(`exit ${code}`));
    // Idle, it does not hold the process open (parse() refs it while a parse is in flight).
    w.unref();
    return w;
  }

  return {
    parse(write: SpooledInboundWrite): Promise<InboundWrite> {
      worker ??= start();
      const id = nextId++;
      const w = worker;
      if (waiting.size === 0) w.ref();
      const settle = () => {
        if (waiting.size === 0 && worker === w) w.unref();
      };
      return new Promise<InboundWrite>((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        w.postMessage({ id, write });
      }).finally(settle);
    },
    async close(): Promise<void> {
      const w = worker;
      worker = null;
      if (w) await w.terminate();
      for (const job of waiting.values()) job.reject(new Error('the inbound parser was closed'));
      waiting.clear();
    },
  };
}

export type InboundParser = ReturnType<typeof createInboundParser>;

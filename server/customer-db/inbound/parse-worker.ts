import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { cachingResolver } from '../../shared/dns/cache.js';
import { createResolver } from '../../shared/dns/resolver.js';
import type { LogFields, Logger } from '../../shared/logger.js';
import { sealedFile, sealedFromPages, spoolPath } from '../../../db/inbound-spool.js';
import type { SpoolPage } from '../../../db/inbound-spool-store.js';
import { parseInlineInbound, parseSpooled, spooledSource } from './parse-message.js';
import { BEAT_MS, PARSE_CONCURRENCY, type ParseJob, type ParseOutcome, type ParseReply, type ParseRequest, type ParserSettings } from './parse-thread.js';
import { type ParseDeps, passingSigners } from './verdicts.js';

/**
 * A parse thread (server/customer-db/inbound/parser.ts): mailauth's checks and mailparser's parse of received messages, off the
 * event loop that answers SMTP and HTTP. It runs at a lower scheduling priority (Linux: nice is per thread), so under
 * load the CPU goes first to taking mail and requests, and the parse catches up after. It counts a heartbeat into
 * shared memory while its event loop turns, so the parser can tell a thread held by one message from a busy one.
 */

const settings = workerData as ParserSettings;

/** SPF and DMARC answers are shared by a sender's mail for a minute (server/shared/dns/cache.ts). */
const INBOUND_DNS_CACHE = { maxAgeMs: 60_000, maxEntries: 10_000 };

const port = parentPort!;

try {
  // /proc/thread-self names this thread; setpriority on a thread id renices that thread alone.
  const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
  if (Number.isInteger(tid) && tid > 0) {
    // The parser reads this thread's CPU time by its id (a thread held by one message spends it without a heartbeat).
    port.postMessage({ tid } satisfies ParseReply);
    // Relative to the process's own priority: a server started with `nice` keeps its parse thread below it.
    setPriority(tid, Math.min(19, getPriority(tid) + settings.nice));
  }
} catch {
  // Not Linux, or not allowed: the parse runs at the process's priority.
}

// mailauth writes debugging lines with console.log (its DKIM verifier, for a signature's l=): anyone can make a
// message that prints them, and they would go out on stdout between the structured log's lines. Nothing here prints.
for (const method of ['log', 'info', 'warn', 'error', 'debug', 'trace'] as const) console[method] = () => undefined;

// Counted from 1 at once (0 is a thread still loading), so a message that holds the thread from its first parse on
// is seen to.
const beat = new Int32Array(settings.beat);
Atomics.store(beat, 0, 1);
setInterval(() => Atomics.add(beat, 0, 1), BEAT_MS);

const forward =
  (level: keyof Logger) =>
  (event: string, fields: LogFields = {}) =>
    port.postMessage({ log: { level, event, fields } } satisfies ParseReply);
const logger: Logger = { debug: forward('debug'), info: forward('info'), warn: forward('warn'), error: forward('error') };
const deps: ParseDeps = {
  config: { mailHostname: settings.mailHostname },
  resolver: cachingResolver(createResolver({ servers: settings.dnsServers }), Date.now, INBOUND_DNS_CACHE),
  logger,
};
const secretKey = settings.secretKey ? Buffer.from(settings.secretKey) : null;

/** Pages of a spool's rows asked of the event loop (parse-thread.ts answers them from the state), by request. */
const pages = new Map<number, { resolve: (rows: { seq: number; record: Buffer }[]) => void; reject: (err: Error) => void }>();
let nextPage = 0;
const relayedPage: SpoolPage = (spoolId, from) =>
  new Promise((resolve, reject) => {
    const page = nextPage++;
    pages.set(page, { resolve, reject });
    port.postMessage({ spoolRead: { page, spoolId, from } } satisfies ParseReply);
  });
const spool = settings.spool;
/** The sealed records of a spooled message: its file, read here, or its rows, read by the event loop. */
const sealed = (spoolId: string) => (spool.kind === 'files' ? sealedFile(spoolPath(spool.dataDir, spoolId)) : sealedFromPages(relayedPage, spoolId));

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

async function parseOne(job: ParseJob): Promise<ParseOutcome> {
  try {
    return { value: await parseInlineInbound(deps, job.write, job.withVerdicts) };
  } catch (err) {
    return { error: message(err) };
  }
}

/** The writer's acknowledgement of the last event of a spooled parse (it has written that chunk). */
let acknowledged: (() => void) | null = null;

async function streamSpooled(id: number, job: ParseJob): Promise<void> {
  if (!secretKey) return port.postMessage({ id, event: { spoolFailed: 'no secret key to open the spooled message' } } satisfies ParseReply);
  const emit = (event: Parameters<Parameters<typeof parseSpooled>[4]>[0]) =>
    new Promise<void>((resolve) => {
      acknowledged = resolve;
      if (!('chunk' in event)) return port.postMessage({ id, event } satisfies ParseReply);
      // A chunk that is all of its memory is moved to the writer's thread; a view on a larger one is copied first.
      const whole = event.chunk.byteOffset === 0 && event.chunk.byteLength === event.chunk.buffer.byteLength;
      const chunk = whole ? event.chunk : new Uint8Array(event.chunk);
      port.postMessage({ id, event: { chunk } } satisfies ParseReply, [chunk.buffer as ArrayBuffer]);
    });
  try {
    await parseSpooled(deps, spooledSource(sealed, secretKey, job.write), job.write, job.withVerdicts, emit);
  } catch (err) {
    port.postMessage({ id, failed: message(err) } satisfies ParseReply);
  }
}

port.on('message', async (msg: ParseRequest) => {
  if ('spoolPage' in msg) {
    const waiting = pages.get(msg.spoolPage);
    pages.delete(msg.spoolPage);
    if ('error' in msg) return waiting?.reject(new Error(msg.error));
    return waiting?.resolve(msg.records.map((r) => ({ seq: r.seq, record: Buffer.from(r.record.buffer, r.record.byteOffset, r.record.byteLength) })));
  }
  if ('ack' in msg) {
    const go = acknowledged;
    acknowledged = null;
    return go?.();
  }
  if ('spooled' in msg) return streamSpooled(msg.id, msg.spooled);
  if ('signersOf' in msg) {
    const raw = Buffer.from(msg.signersOf.buffer, msg.signersOf.byteOffset, msg.signersOf.byteLength);
    return port.postMessage({ id: msg.id, signers: await passingSigners(deps, raw) } satisfies ParseReply);
  }
  const outcomes: ParseOutcome[] = new Array(msg.jobs.length);
  let next = 0;
  const lane = async () => {
    while (next < msg.jobs.length) {
      const i = next++;
      outcomes[i] = await parseOne(msg.jobs[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARSE_CONCURRENCY, msg.jobs.length) }, lane));
  port.postMessage({ id: msg.id, outcomes } satisfies ParseReply);
});

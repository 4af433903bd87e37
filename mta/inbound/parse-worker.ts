import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import type { SpooledInboundWrite } from '../../server/customer-db/outbox.js';
import { cachingResolver } from '../../server/dns/cache.js';
import { createResolver } from '../../server/dns/resolver.js';
import type { LogFields, Logger } from '../../server/logger.js';
import { PARSE_CONCURRENCY, type ParseOutcome, type ParseReply, type ParseRequest, type ParserSettings } from './parser.js';
import { type ParseDeps, parseInlineInbound } from './store.js';

/**
 * The inbound parser's thread (mta/inbound/parser.ts): mailauth's checks and mailparser's parse of small received
 * messages, off the event loop that answers SMTP and HTTP. It runs at a lower scheduling priority (Linux: nice is per
 * thread), so under load the CPU goes first to taking mail and requests, and the parse catches up after.
 */

const settings = workerData as ParserSettings;

/** SPF and DMARC answers are shared by a sender's mail for a minute (server/dns/cache.ts). */
const INBOUND_DNS_CACHE = { maxAgeMs: 60_000, maxEntries: 10_000 };

try {
  // /proc/thread-self names this thread; setpriority on a thread id renices that thread alone.
  const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
  // Relative to the process's own priority: a server started with `nice` keeps its parse thread below it.
  if (Number.isInteger(tid) && tid > 0) setPriority(tid, Math.min(19, getPriority(tid) + settings.nice));
} catch {
  // Not Linux, or not allowed: the parse runs at the process's priority.
}

const port = parentPort!;
const forward = (level: keyof Logger) => (event: string, fields: LogFields = {}) => port.postMessage({ log: { level, event, fields } } satisfies ParseReply);
const logger: Logger = { debug: forward('debug'), info: forward('info'), warn: forward('warn'), error: forward('error') };
const deps: ParseDeps = {
  config: { mailHostname: settings.mailHostname },
  resolver: cachingResolver(createResolver({ servers: settings.dnsServers }), Date.now, INBOUND_DNS_CACHE),
  logger,
};

async function parseOne(write: SpooledInboundWrite): Promise<ParseOutcome> {
  try {
    return { value: await parseInlineInbound(deps, write) };
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
}

port.on('message', async (msg: ParseRequest) => {
  const outcomes: ParseOutcome[] = new Array(msg.writes.length);
  let next = 0;
  const lane = async () => {
    while (next < msg.writes.length) {
      const i = next++;
      outcomes[i] = await parseOne(msg.writes[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARSE_CONCURRENCY, msg.writes.length) }, lane));
  port.postMessage({ id: msg.id, outcomes } satisfies ParseReply);
});

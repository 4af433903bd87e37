import { isIP } from 'node:net';
import type { Readable } from 'node:stream';
import { dkimVerify, dmarc, spf } from 'mailauth';
import type { SpooledInboundWrite } from '../../core/customer-db-outbox.js';
import type { Config } from '../../shared/config.js';
import { type DnsResolver, mailauthResolver } from '../../shared/dns/resolver.js';
import type { Logger } from '../../shared/logger.js';
import { AUTH_LIMITS, scanHeaderBlock } from './auth-limits.js';

/**
 * A received message's SPF, DKIM and DMARC verdicts, from mailauth through the service's resolver, bounded in what
 * reaches mailauth (auth-limits.ts), in DNS lookups and in time. Run in the parse threads (parser.ts), never on the
 * event loop that answers SMTP and HTTP.
 */

/** What the checks and the parse read: the host name mailauth reports as, DNS, and where to warn. */
export interface ParseDeps {
  config: Pick<Config, 'mailHostname'>;
  resolver: DnsResolver;
  logger: Logger;
}

export interface Verdicts {
  spf: string | null;
  dkim: string | null;
  dmarc: string | null;
}

/** A message whole in memory, or a way to read it from its start (a spooled one). */
export type MessageSource = Buffer | (() => Readable);

/**
 * The header block of a message (up to and including the blank line that ends it), read up to `limit` bytes: a block
 * longer than that comes back cut at `limit + 1` bytes, so the caller sees it is too long.
 */
function headerBlock(source: MessageSource, limit: number): Promise<Buffer> {
  const cut = (b: Buffer) => {
    const end = b.indexOf('\r\n\r\n');
    return end >= 0 && end + 4 <= limit + 1 ? b.subarray(0, end + 4) : b.subarray(0, limit + 1);
  };
  if (Buffer.isBuffer(source)) return Promise.resolve(cut(source));
  const message = source();
  return new Promise((resolve, reject) => {
    let held: Buffer = Buffer.alloc(0);
    const done = (block: Buffer) => {
      message.off('data', onData);
      message.destroy();
      resolve(block);
    };
    const onData = (chunk: Buffer) => {
      held = held.length === 0 ? chunk : Buffer.concat([held, chunk]);
      if (held.indexOf('\r\n\r\n') >= 0 || held.length > limit) done(cut(held));
    };
    message.on('data', onData);
    message.once('end', () => resolve(cut(held)));
    message.once('error', reject);
  });
}

/**
 * DKIM keys looked up per received message, at most. Each lookup may take the resolver's whole timeout, mailauth makes
 * them one after another, and a message may carry hundreds of signatures: past this many, a signature's key lookup
 * fails at once (its result is temperror), so one message cannot hold its account's writes for minutes.
 */
export const MAX_DKIM_KEY_LOOKUPS = 5;

/**
 * How long a message's checks may take (DNS included) before its parse goes on without them: its verdicts are then
 * null, as when they cannot be had, and the parse of the rest of the batch is not held.
 */
export const VERDICT_BUDGET_MS = 15_000;

type MailauthResolver = ReturnType<typeof mailauthResolver>;

function withLookupLimit(resolve: MailauthResolver, limit: number): MailauthResolver {
  let made = 0;
  return (name, type) => {
    if (made >= limit) return Promise.reject(Object.assign(new Error(`not looked up: over ${limit} DKIM key lookups for one message`), { code: 'ESERVFAIL' }));
    made++;
    return resolve(name, type);
  };
}

export const NO_VERDICTS: Verdicts = { spf: null, dkim: null, dmarc: null };

/**
 * SPF, DKIM (the first signature's result, `none` when unsigned) and DMARC results, or nulls when they cannot be had
 * within `budgetMs`: what mailauth's `authenticate` answers without ARC and BIMI, composed from its parts so that a
 * message without a DKIM-Signature is not read through a DKIM verifier (most of authenticate's cost for a small
 * message). A message past AUTH_LIMITS (auth-limits.ts) is not given to mailauth at all: DKIM and DMARC are
 * `temperror`. tests/inbound-verdicts.test.ts holds it to authenticate's answers.
 */
export async function verdictsOf(
  deps: ParseDeps,
  message: MessageSource,
  w: Pick<SpooledInboundWrite, 'remoteAddress' | 'helo' | 'mailFrom'>,
  budgetMs = VERDICT_BUDGET_MS,
): Promise<Verdicts> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), budgetMs)));
  try {
    const verdicts = await Promise.race([checkMessage(deps, message, w), late]);
    if (verdicts !== 'late') return verdicts;
    deps.logger.warn('inbound.authenticate_timed_out', { budgetMs });
    return NO_VERDICTS;
  } finally {
    clearTimeout(timer);
  }
}

async function checkMessage(deps: ParseDeps, message: MessageSource, w: Pick<SpooledInboundWrite, 'remoteAddress' | 'helo' | 'mailFrom'>): Promise<Verdicts> {
  const lookup = mailauthResolver(deps.resolver);
  const resolver = lookup as never;
  try {
    const scan = scanHeaderBlock(await headerBlock(message, AUTH_LIMITS.headerBytes));
    if (!scan.within) deps.logger.warn('inbound.authenticate_limited', { reason: scan.reason });
    let dkim: Awaited<ReturnType<typeof dkimVerify>> | null = null;
    let headerFrom: string[] = [];
    if (scan.within && scan.dkimSignatures > 0) {
      dkim = await dkimVerify(Buffer.isBuffer(message) ? message : message(), {
        resolver: withLookupLimit(lookup, MAX_DKIM_KEY_LOOKUPS) as never,
        sender: w.mailFrom,
      });
      headerFrom = dkim.headerFrom;
    } else if (scan.within) headerFrom = scan.from;
    // As authenticate does: the IP for a missing HELO, an address literal bracketed.
    const helo = w.helo || w.remoteAddress;
    const spfResult = await spf({ sender: w.mailFrom, ip: w.remoteAddress, helo: isIP(helo) ? `[${helo}]` : helo, mta: deps.config.mailHostname, resolver });
    const spfVerdict = spfResult ? String(spfResult.status?.result ?? 'none') : null;
    if (!scan.within) return { spf: spfVerdict, dkim: 'temperror', dmarc: 'temperror' };
    const dkimResults = dkim?.results ?? [];
    const dmarcResult =
      headerFrom.length > 0
        ? await dmarc({
            headerFrom,
            spfDomains: spfResult?.status.result === 'pass' && spfResult.domain ? [spfResult.domain] : [],
            dkimDomains: dkimResults
              .filter((r) => r.status.result === 'pass')
              .map((r) => ({ id: r.id, domain: r.signingDomain, aligned: r.status.aligned, underSized: r.status.underSized })) as never,
            resolver,
          })
        : null;
    return {
      spf: spfVerdict,
      dkim: String(dkimResults[0]?.status?.result ?? 'none'),
      dmarc: dmarcResult ? String(dmarcResult.status?.result ?? 'none') : null,
    };
  } catch (err) {
    deps.logger.warn('inbound.authenticate_failed', { err });
    return NO_VERDICTS;
  }
}

/**
 * The domains whose DKIM signatures of `raw` pass (lower-cased), within AUTH_LIMITS and `budgetMs`: nothing past
 * them. What a feedback-loop complaint is trusted by (report-matching.ts).
 */
export async function passingSigners(deps: ParseDeps, raw: Buffer, budgetMs = VERDICT_BUDGET_MS): Promise<string[]> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<string[]>((resolve) => (timer = setTimeout(() => resolve([]), budgetMs)));
  const check = async (): Promise<string[]> => {
    const scan = scanHeaderBlock(await headerBlock(raw, AUTH_LIMITS.headerBytes));
    if (!scan.within || scan.dkimSignatures === 0) return [];
    const dkim = await dkimVerify(raw, { resolver: withLookupLimit(mailauthResolver(deps.resolver), MAX_DKIM_KEY_LOOKUPS) as never });
    return dkim.results.filter((r) => r.status?.result === 'pass' && r.signingDomain).map((r) => String(r.signingDomain).toLowerCase());
  };
  try {
    return await Promise.race([check(), late]);
  } catch (err) {
    deps.logger.warn('inbound.authenticate_failed', { err });
    return [];
  } finally {
    clearTimeout(timer);
  }
}

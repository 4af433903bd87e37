import { and, eq } from 'drizzle-orm';
import { emailEvents, emails } from '../../db/schema/index.js';
import type { Deps } from '../../server/core/deps.js';
import { accountLock, countsOnAccount, writeOutcome } from '../../server/core/outcomes.js';
import type { WriteLock } from '../../db/group-commit.js';
import { type Verp, parseVerp, verpTrusted } from '../verp.js';
import type { Recipient } from './recipients.js';
import type { InboundReport } from './reports.js';
import { lockRows, one } from '../../db/sql.js';
import { isPostgres } from '../../db/pg/state.js';

/**
 * Bounce and complaint reports that arrive by SMTP, once received (receive.ts holds their first REPORT_BYTES and
 * calls here): whether a report is trusted, which outbound email and recipient it is about, and the event it
 * records, inside the receiving transaction.
 */

/**
 * What of a report is read: DSNs and ARF reports say what they have to say near the top (the human-readable part,
 * then the machine-readable one, then the returned headers or message, whose rest is not needed). Held in memory
 * per session, and anyone may send a report (fbl@ takes mail from everyone): 256 KB across the cap on concurrent
 * clients stays tens of megabytes.
 */
export const REPORT_BYTES = 256 * 1024;

/** What a report is trusted by: the domains whose DKIM signatures of a message pass (checked in a parse thread). */
export interface ReportChecks {
  signersOf(raw: Buffer): Promise<string[]>;
}

/** Whether `domain` is one of `reporters` or a subdomain of one. */
export function isFblReporter(domain: string, reporters: readonly string[]): boolean {
  const d = domain.toLowerCase().replace(/\.$/, '');
  return reporters.some((r) => d === r || d.endsWith(`.${r}`));
}

/**
 * The report, when it can be trusted (docs/api/decisions.md section 13), else null and a log line saying why. Anyone can send
 * mail to fbl@ and to a VERP address they were sent: a delivery report (DSN) is read only at a VERP address (signed,
 * so it can only be about that recipient's copy), never at fbl@; a complaint (ARF `abuse`) only when it passes DKIM
 * for one of FBL_REPORTERS (the feedback loops sign their reports), wherever it arrives. A complaint is checked whole:
 * one past REPORT_BYTES cannot be, and is not trusted.
 */
export async function trustedReport(
  deps: Pick<Deps, 'config' | 'logger'>,
  report: InboundReport,
  arrivedAt: Recipient[],
  raw: Buffer,
  size: number,
  checks: ReportChecks,
): Promise<InboundReport> {
  if (!report) return null;
  if (report.kind === 'dsn') {
    if (arrivedAt.some((r) => r.kind === 'bounce')) return report;
    deps.logger.info('inbound.report_ignored', { kind: report.kind, reason: 'a delivery report is read only at a VERP address' });
    return null;
  }
  // Other feedback types record nothing whoever sends them.
  if (report.feedbackType !== 'abuse') return report;
  const signers = size <= raw.length ? await checks.signersOf(raw) : [];
  const reporter = signers.find((d) => isFblReporter(d, deps.config.fblReporters));
  if (reporter) return report;
  deps.logger.warn('inbound.report_unauthenticated', {
    kind: report.kind,
    signedBy: signers.slice(0, 5),
    reason:
      size > raw.length
        ? `a complaint over ${REPORT_BYTES} bytes cannot be checked`
        : signers.length > 0
          ? 'not signed by a domain of FBL_REPORTERS'
          : 'no DKIM signature passes',
  });
  return null;
}

interface SentEmail {
  id: string;
  accountId: string;
  to: string[];
}

/** A send that went out: a sandboxed or failed one has no events (docs/api/contract.md, Email), whatever a report quotes. */
const findEmail = async (deps: Pick<Deps, 'db'>, id: string): Promise<SentEmail | undefined> =>
  await one(
    deps.db
      .select({ id: emails.id, accountId: emails.accountId, to: emails.to })
      .from(emails)
      .where(and(eq(emails.id, id), eq(emails.status, 'sent'))),
  );

/** The email a report is about: the VERP address it came to, else the reported message's return path, else its Message-ID. */
async function reportedEmail(
  deps: Pick<Deps, 'db' | 'config' | 'secretKey'>,
  report: Exclude<InboundReport, null>,
  arrivedAt: Recipient[],
): Promise<{ email: SentEmail; index: number | null } | null> {
  const host = deps.config.mailHostname;
  const candidates: { emailId: string; recipientIndex: number | null; verp?: Verp }[] = [];
  // The address it came to was judged at RCPT (recipients.ts), a VERP address quoted in it is judged here.
  for (const r of arrivedAt) if (r.kind === 'bounce') candidates.push({ emailId: r.emailId, recipientIndex: r.recipientIndex });
  for (const path of [report.originalReturnPath, report.kind === 'arf' ? report.originalMailFrom : null]) {
    const verp = path ? parseVerp(path.replace(/^<|>$/g, ''), host, deps.secretKey) : null;
    if (verp) candidates.push({ emailId: verp.emailId, recipientIndex: verp.recipientIndex, verp });
  }
  const messageId = report.originalMessageId
    ? new RegExp(`^<?([0-9a-f-]{36})@${host.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}>?$`, 'i').exec(report.originalMessageId.trim())
    : null;
  if (messageId) candidates.push({ emailId: messageId[1]!.toLowerCase(), recipientIndex: null });
  for (const c of candidates) {
    const email = await findEmail(deps, c.emailId);
    if (email && (!c.verp || verpTrusted(c.verp, email.to.length, deps.secretKey))) return { email, index: c.recipientIndex };
  }
  return null;
}

/**
 * The recipient a report is about. A VERP address (signed, so each recipient holds only its own) decides: whatever
 * address the report names, it can only be about that recipient's copy (a forwarded address it names is not in `to`
 * anyway). Matched through the Message-ID alone, which every recipient of the email sees, only an email to one
 * recipient has a recipient the report can be about: naming another address of a message to several would let one
 * recipient bounce or complain in another's name, so such a report records nothing.
 */
function recipientOf(email: SentEmail, index: number | null): string | null {
  if (index !== null) return email.to[index] ?? null;
  return email.to.length === 1 ? email.to[0]! : null;
}

/** Delay reports recorded for one recipient at most, counting the engine's own deferrals. */
export const MAX_DEFERRED_EVENTS = 10;

type ReportStatus = 'bounced' | 'deferred' | 'complained';

/**
 * Whether a report says something the recipient's events do not already say. Anyone can send a report, and send it
 * again: a replayed complaint or bounce would count until the reputation breaker suspends the account, a stream of
 * delay reports would flood the account's webhooks. So a complaint is recorded once; a bounce once, or once more when
 * a 5.x.x one follows one that did not suppress (a 4.x.x failure, the engine's 4.4.7 give-up); a delay only before
 * any bounce or complaint, when its status code is new, and while the recipient has fewer than MAX_DEFERRED_EVENTS
 * deferrals.
 */
export function reportIsNews(earlier: readonly { status: string; dsn: string }[], status: ReportStatus, dsn: string): boolean {
  const of = (s: string) => earlier.filter((e) => e.status === s);
  if (status === 'complained') return of('complained').length === 0;
  if (status === 'bounced') return dsn.startsWith('5.') ? !of('bounced').some((e) => e.dsn.startsWith('5.')) : of('bounced').length === 0;
  const deferred = of('deferred');
  return of('bounced').length === 0 && of('complained').length === 0 && deferred.length < MAX_DEFERRED_EVENTS && !deferred.some((e) => e.dsn === dsn);
}

const recipientEvents = async (deps: Pick<Deps, 'db'>, emailId: string, recipient: string) =>
  await deps.db
    .select({ status: emailEvents.status, dsn: emailEvents.dsn })
    .from(emailEvents)
    .where(and(eq(emailEvents.emailId, emailId), eq(emailEvents.recipient, recipient)));

/**
 * The block of a DSN that speaks for its recipient: every block is about the one copy its VERP address names, so one
 * event is recorded, the most severe: a 5.x.x failure, else any failure, else a delay.
 */
function decisiveBlock<B extends { action: string; status: string }>(blocks: readonly B[]): B | null {
  const failed = blocks.filter((b) => b.action.toLowerCase() === 'failed');
  return failed.find((b) => b.status.startsWith('5.')) ?? failed[0] ?? blocks.find((b) => b.action.toLowerCase() === 'delayed') ?? null;
}

/** What a report says of its recipient's copy, or null when it says nothing about a delivery. */
function reportSays(report: Exclude<InboundReport, null>): { status: ReportStatus; dsn: string; detail: string } | null {
  // A DSN's blocks are all about the one copy; an ARF report other than abuse says nothing about a delivery.
  if (report.kind === 'dsn') {
    const block = decisiveBlock(report.recipients);
    return (
      block && {
        status: block.action.toLowerCase() === 'delayed' ? 'deferred' : 'bounced',
        dsn: block.status,
        detail: block.diagnostic || `Action: ${block.action.toLowerCase()}`,
      }
    );
  }
  return report.feedbackType === 'abuse' ? { status: 'complained', dsn: '5.7.1', detail: 'Complaint (feedback report: abuse)' } : null;
}

/**
 * The lock a trusted report that counts on its account declares (server/core/outcomes.ts accountLock), read before
 * the receiving transaction: the account of the email it is about. An email's account never changes, so this reading
 * names the account the transaction's own match (recordReport) counts on; one it misses (an email sent since) locks
 * in its turn, as without it.
 */
export async function reportLock(
  deps: Pick<Deps, 'db' | 'config' | 'secretKey'>,
  report: Exclude<InboundReport, null>,
  arrivedAt: Recipient[],
): Promise<WriteLock | undefined> {
  // Only Postgres's batches take declared locks (SQLite's one connection writes alone): no reading for nothing there.
  if (!isPostgres(deps.db)) return undefined;
  const said = reportSays(report);
  if (!said || !countsOnAccount(said.status, said.dsn)) return undefined;
  const target = await reportedEmail(deps, report, arrivedAt);
  return target && recipientOf(target.email, target.index) ? accountLock(target.email.accountId) : undefined;
}

/** What a report recorded: its event (and the outcome, for the caller to count on /metrics once committed), or nothing. */
export interface RecordedReport {
  events: number;
  webhooks: number;
  written: number;
  outcome: ReportStatus | null;
}

export const NOTHING_RECORDED: RecordedReport = { events: 0, webhooks: 0, written: 0, outcome: null };

/**
 * The event a report records, inside the receiving transaction, on the recipient whose copy it reports (when it is
 * news: reportIsNews): for a DSN its decisive block's `bounced` (suppressing when 5.x.x) or `deferred`; for an ARF
 * `abuse` report a `complained` event with its suppression and counter. Through the engine's own writeOutcome, so
 * webhooks, the customer database and the reputation breaker see it like any other outcome.
 */
export async function recordReport(
  deps: Pick<Deps, 'config' | 'db' | 'logger' | 'metrics' | 'secretKey'>,
  report: Exclude<InboundReport, null>,
  arrivedAt: Recipient[],
  now: number,
): Promise<RecordedReport> {
  const target = await reportedEmail(deps, report, arrivedAt);
  if (!target) {
    deps.logger.info('inbound.report_unmatched', { kind: report.kind });
    return NOTHING_RECORDED;
  }
  const { email, index } = target;
  const recipient = recipientOf(email, index);
  if (!recipient) {
    deps.logger.info('inbound.report_unmatched', { kind: report.kind, emailId: email.id, reason: 'several recipients, no VERP address' });
    return NOTHING_RECORDED;
  }
  const said = reportSays(report);
  if (!said) return NOTHING_RECORDED;
  // The email held (on Postgres) from the read of its events to the write of this one: two copies of one report
  // arriving at once record it once.
  await lockRows(deps.db, emails, emails.id, [email.id]);
  if (!reportIsNews(await recipientEvents(deps, email.id, recipient), said.status, said.dsn)) {
    deps.logger.info('inbound.report_repeated', { emailId: email.id, status: said.status, dsn: said.dsn });
    return NOTHING_RECORDED;
  }
  const out = await writeOutcome(deps, { emailId: email.id, accountId: email.accountId, recipient, ...said, occurredAt: now });
  return { events: 1, webhooks: out.webhooks, written: out.written ? 1 : 0, outcome: said.status };
}

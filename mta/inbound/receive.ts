import type { Readable } from 'node:stream';
import { and, eq } from 'drizzle-orm';
import { emailEvents, emails } from '../../db/schema/index.js';
import { queueCustomerDbWrite } from '../../server/core/customer-db-outbox.js';
import type { Deps } from '../../server/core/deps.js';
import { newId } from '../../server/shared/ids.js';
import { createCollector } from '../../server/shared/memory.js';
import { writeOutcome } from '../../server/core/outcomes.js';
import { type Verp, parseVerp, verpTrusted } from '../verp.js';
import { type Recipient, judgeRecipient } from './recipients.js';
import { type InboundReport, parseReport } from './reports.js';
import { createSpoolWriter } from '../../db/inbound-spool.js';
import { createOperatorHolder, prepareOperatorMessage, storeOperatorMessage } from '../../server/core/operator-mail.js';
import { logFailure } from '../../server/shared/store-health.js';
import { FlushFailedError } from '../../db/group-commit.js';

/**
 * One received message, from the DATA stream to durable: checked for bare CR and LF as it
 * streams, sealed into the spool when it is for customers' domains, kept (its first REPORT_BYTES) in memory when it
 * is a bounce or complaint report, kept (its first bytes) for the operator when it is for postmaster@ or abuse@; then,
 * in one durable commit, a customer-database write per account it is for, the events its reports record and the
 * operator's copy. Only then is the answer 250; a failure to store is 451 and stores nothing.
 */

/**
 * Messages up to this size travel sealed inside their outbox row, made durable by the group commit that many
 * messages share; a larger one moves to its own spool file (fsynced) as soon as it passes it.
 */
export const INLINE_BYTES = 256 * 1024;

/** Holds a message being received: in memory while small, else in a spool file. */
function createMessageHolder(dataDir: string, key: Buffer, id: string) {
  let chunks: Buffer[] = [];
  let bytes = 0;
  let spool: ReturnType<typeof createSpoolWriter> | null = null;
  return {
    append(chunk: Buffer): void {
      if (spool) return spool.append(chunk);
      chunks.push(chunk);
      bytes += chunk.length;
      if (bytes <= INLINE_BYTES) return;
      spool = createSpoolWriter(dataDir, key, id);
      for (const c of chunks) spool.append(c);
      chunks = [];
    },
    /** Durable (the spool file fsynced), or the bytes to seal into the outbox. */
    async finish(): Promise<{ spoolId: string; raw: null } | { spoolId: null; raw: Buffer }> {
      if (spool) {
        await spool.finish();
        return { spoolId: id, raw: null };
      }
      return { spoolId: null, raw: Buffer.concat(chunks) };
    },
    discard(): void {
      spool?.discard();
      chunks = [];
    },
  };
}

/**
 * What of a report is read: DSNs and ARF reports say what they have to say near the top (the human-readable part,
 * then the machine-readable one, then the returned headers or message, whose rest is not needed). Held in memory
 * per session, and anyone may send a report (fbl@ takes mail from everyone): 256 KB across the cap on concurrent
 * clients stays tens of megabytes.
 */
export const REPORT_BYTES = 256 * 1024;

/** An SMTP reply for the transaction: smtp-server sends `responseCode` and the message. */
export class SmtpReply extends Error {
  constructor(
    readonly responseCode: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * A bare CR or LF in DATA: a line end that is not CRLF. Mail servers disagree about where such a message ends (SMTP
 * smuggling, `\n.\n`, `\r.\r`...), so none is accepted. The state carries over chunk boundaries.
 */
export function createLineEndingCheck() {
  let previousCr = false;
  let bad = false;
  return {
    feed(chunk: Buffer): void {
      if (bad || chunk.length === 0) return;
      // Searched with indexOf (native, a few calls a line) rather than byte by byte in JavaScript.
      let from = 0;
      if (previousCr) {
        if (chunk[0] !== 0x0a) return void (bad = true);
        from = 1;
      }
      for (let i = chunk.indexOf(0x0a, from); i !== -1; i = chunk.indexOf(0x0a, i + 1)) {
        if (i === 0 || chunk[i - 1] !== 0x0d) return void (bad = true);
      }
      for (let i = chunk.indexOf(0x0d, from); i !== -1 && i < chunk.length - 1; i = chunk.indexOf(0x0d, i + 1)) {
        if (chunk[i + 1] !== 0x0a) return void (bad = true);
      }
      previousCr = chunk[chunk.length - 1] === 0x0d;
    },
    /**
     * True once a bare CR or LF was seen, whatever follows: what comes after it is not kept. A chunk that ends in
     * the CR of a CRLF whose LF opens the next chunk is not one yet (TCP splits a line end anywhere).
     */
    get sawBare(): boolean {
      return bad;
    },
    /** The verdict once the data has ended: a bare CR or LF was seen, or a CR was left dangling at the very end. */
    get bad(): boolean {
      return bad || previousCr;
    },
  };
}

/** Thrown inside the storing transaction when some of the message's mailboxes no longer receive: it rolls back. */
class RecipientsChanged extends Error {
  constructor(readonly gone: number) {
    super(`${gone} recipient(s) stopped receiving since RCPT`);
  }
}

export interface Envelope {
  mailFrom: string;
  recipients: Recipient[];
  remoteAddress: string;
  helo: string;
}

export interface Received {
  id: string;
  size: number;
  /** Customer-database writes queued (one per account the message is for). */
  stored: number;
  /** Events recorded from the reports it carried. */
  events: number;
  /** Whether it was kept for the operator (postmaster@, abuse@). */
  operator: boolean;
}

/**
 * Reads the DATA stream to its end and makes the message durable; resolves with what was stored, or rejects with
 * the SmtpReply to send (a client gone mid-DATA rejects too, and nothing stays).
 */
/** What a report is trusted by: the domains whose DKIM signatures of a message pass (checked in a parse thread). */
export interface ReportChecks {
  signersOf(raw: Buffer): Promise<string[]>;
}

export async function receiveMessage(deps: Deps, stream: Readable & { sizeExceeded?: boolean }, envelope: Envelope, checks: ReportChecks): Promise<Received> {
  const now = deps.clock.now();
  const id = newId(now);
  const mailboxes = envelope.recipients.filter((r): r is Extract<Recipient, { kind: 'mailbox' }> => r.kind === 'mailbox');
  const reports = envelope.recipients.filter((r) => r.kind === 'bounce' || r.kind === 'feedback');
  const operators = [...new Set(envelope.recipients.flatMap((r) => (r.kind === 'operator' ? [r.address] : [])))];
  const operatorCopy = operators.length > 0 ? createOperatorHolder() : null;
  const spool = mailboxes.length > 0 && deps.secretKey ? createMessageHolder(deps.config.dataDir, deps.secretKey, id) : null;
  const head: Buffer[] = [];
  let headBytes = 0;
  let size = 0;
  const lineEnds = createLineEndingCheck();
  const collector = createCollector();
  /** A write to the spool that failed (a full disk): the rest is drained and the answer is 451. */
  let spoolFailure: unknown = null;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      size += chunk.length;
      collector.streamed(chunk.length);
      lineEnds.feed(chunk);
      if (lineEnds.sawBare || stream.sizeExceeded || spoolFailure !== null) continue; // drained, never kept
      try {
        spool?.append(chunk);
      } catch (err) {
        spoolFailure = err;
        continue;
      }
      operatorCopy?.append(chunk);
      if (reports.length > 0 && headBytes < REPORT_BYTES) {
        head.push(chunk);
        headBytes += chunk.length;
      }
    }
  } catch (err) {
    spool?.discard();
    throw err;
  }
  if (spoolFailure !== null) {
    spool?.discard();
    logFailure(deps, 'inbound.store_failed', spoolFailure, { id });
    throw new SmtpReply(451, '4.3.0 The message could not be stored; try again later');
  }
  if (stream.sizeExceeded) {
    spool?.discard();
    throw new SmtpReply(552, `5.3.4 Message exceeds the fixed maximum message size of ${deps.config.smtpMaxMessageBytes} bytes`);
  }
  if (lineEnds.bad) {
    spool?.discard();
    throw new SmtpReply(550, '5.6.0 Bare CR or LF in the message data is not accepted; lines must end with CRLF');
  }
  const reportBytes = reports.length > 0 ? Buffer.concat(head) : null;
  const report = reportBytes ? await trustedReport(deps, parseReport(reportBytes), reports, reportBytes, size, checks) : null;
  let queued: { stored: number; events: number; webhooks: number; written: number };
  try {
    const held = await spool?.finish();
    const raw = held?.raw ?? undefined;
    const { mailFrom, remoteAddress, helo } = envelope;
    const forOperator = operatorCopy && deps.secretKey ? prepareOperatorMessage(deps.secretKey, { id, recipients: operators, mailFrom, remoteAddress, helo, size, receivedAt: now, ...operatorCopy.take() }) : null;
    queued = await deps.commits.run(() => {
      let stored = 0;
      const byAccount = new Map<string, string[]>();
      // Judged again here, in the transaction that stores the message: a domain, or a database, removed since RCPT no
      // longer receives (and the read costs little inside a transaction).
      let gone = 0;
      for (const m of mailboxes) {
        const current = judgeRecipient(deps, m.address);
        if (current.kind === 'mailbox') byAccount.set(current.accountId, [...(byAccount.get(current.accountId) ?? []), current.address]);
        else gone++;
      }
      // Some of its mailboxes stopped receiving, not all (or it also carries a report, or is for the operator too): a
      // 250 would drop their copies unsaid, and SMTP has one answer for the whole message. Nothing is kept (the
      // savepoint rolls back); the retry hears 550 for those at RCPT, and the rest is stored then.
      if (gone > 0 && (gone < mailboxes.length || reports.length > 0 || operators.length > 0)) throw new RecipientsChanged(gone);
      for (const [accountId, toAddresses] of byAccount) {
        const written = queueCustomerDbWrite(
          deps,
          accountId,
          {
            kind: 'inbound',
            id: newId(now),
            spoolId: held?.spoolId ?? null,
            ...(raw === undefined ? {} : { raw }),
            accountId,
            toAddresses,
            mailFrom: envelope.mailFrom,
            remoteAddress: envelope.remoteAddress,
            helo: envelope.helo,
            receivedAt: now,
            size,
          },
          now,
        );
        if (written) stored++;
      }
      // Dated when it is recorded, not when its DATA began (a slow report would land behind events an API consumer
      // has already read past with GET /events?since=).
      const recorded = report ? recordReport(deps, report, reports, deps.clock.now()) : { events: 0, webhooks: 0, written: 0 };
      if (forOperator) storeOperatorMessage(deps.db, forOperator);
      return { stored, ...recorded };
    });
  } catch (err) {
    if (err instanceof RecipientsChanged) {
      spool?.discard();
      deps.logger.info('inbound.recipients_changed', { id, recipients: mailboxes.length, gone: err.gone });
      throw new SmtpReply(451, '4.3.0 A recipient stopped receiving mail here during the transaction; try again');
    }
    // Committed but not known durable: its outbox rows name the spool file, which stays (the 451 may bring a copy).
    if (!(err instanceof FlushFailedError)) spool?.discard();
    logFailure(deps, 'inbound.store_failed', err, { id });
    throw new SmtpReply(451, '4.3.0 The message could not be stored; try again later');
  }
  if (spool && queued.stored === 0) spool.discard();
  // Every mailbox it was for stopped receiving between RCPT and now, and it carries no report: nothing was kept, so
  // it is refused as RCPT would refuse it now, never answered 250.
  if (mailboxes.length > 0 && queued.stored === 0 && reports.length === 0 && operators.length === 0) {
    throw new SmtpReply(550, '5.7.1 Relaying denied: this server does not accept mail for that address');
  }
  // Pokes only once the commit is durable: the writer and the dispatcher never see a write that could still roll back.
  if (reports.length > 0 && !report) deps.logger.info('inbound.report_unparsed', { id, recipients: reports.length });
  return { id, size, stored: queued.stored, events: queued.events, operator: operators.length > 0 };
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
async function trustedReport(deps: Deps, report: InboundReport, arrivedAt: Recipient[], raw: Buffer, size: number, checks: ReportChecks): Promise<InboundReport> {
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
    reason: size > raw.length ? `a complaint over ${REPORT_BYTES} bytes cannot be checked` : signers.length > 0 ? 'not signed by a domain of FBL_REPORTERS' : 'no DKIM signature passes',
  });
  return null;
}

interface SentEmail {
  id: string;
  accountId: string;
  to: string[];
}

/** A send that went out: a sandboxed or failed one has no events (docs/api/contract.md, Email), whatever a report quotes. */
const findEmail = (deps: Pick<Deps, 'db'>, id: string): SentEmail | undefined =>
  deps.db
    .select({ id: emails.id, accountId: emails.accountId, to: emails.to })
    .from(emails)
    .where(and(eq(emails.id, id), eq(emails.status, 'sent')))
    .get();

/** The email a report is about: the VERP address it came to, else the reported message's return path, else its Message-ID. */
function reportedEmail(deps: Pick<Deps, 'db' | 'config' | 'secretKey'>, report: Exclude<InboundReport, null>, arrivedAt: Recipient[]): { email: SentEmail; index: number | null } | null {
  const host = deps.config.mailHostname;
  const candidates: { emailId: string; recipientIndex: number | null; verp?: Verp }[] = [];
  // The address it came to was judged at RCPT (recipients.ts), a VERP address quoted in it is judged here.
  for (const r of arrivedAt) if (r.kind === 'bounce') candidates.push({ emailId: r.emailId, recipientIndex: r.recipientIndex });
  for (const path of [report.originalReturnPath, report.kind === 'arf' ? report.originalMailFrom : null]) {
    const verp = path ? parseVerp(path.replace(/^<|>$/g, ''), host, deps.secretKey) : null;
    if (verp) candidates.push({ emailId: verp.emailId, recipientIndex: verp.recipientIndex, verp });
  }
  const messageId = report.originalMessageId ? new RegExp(`^<?([0-9a-f-]{36})@${host.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}>?$`, 'i').exec(report.originalMessageId.trim()) : null;
  if (messageId) candidates.push({ emailId: messageId[1]!.toLowerCase(), recipientIndex: null });
  for (const c of candidates) {
    const email = findEmail(deps, c.emailId);
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

const recipientEvents = (deps: Pick<Deps, 'db'>, emailId: string, recipient: string) =>
  deps.db
    .select({ status: emailEvents.status, dsn: emailEvents.dsn })
    .from(emailEvents)
    .where(and(eq(emailEvents.emailId, emailId), eq(emailEvents.recipient, recipient)))
    .all();

/**
 * The block of a DSN that speaks for its recipient: every block is about the one copy its VERP address names, so one
 * event is recorded, the most severe: a 5.x.x failure, else any failure, else a delay.
 */
function decisiveBlock<B extends { action: string; status: string }>(blocks: readonly B[]): B | null {
  const failed = blocks.filter((b) => b.action.toLowerCase() === 'failed');
  return failed.find((b) => b.status.startsWith('5.')) ?? failed[0] ?? blocks.find((b) => b.action.toLowerCase() === 'delayed') ?? null;
}

/**
 * The event a report records, inside the receiving transaction, on the recipient whose copy it reports (when it is
 * news: reportIsNews): for a DSN its decisive block's `bounced` (suppressing when 5.x.x) or `deferred`; for an ARF
 * `abuse` report a `complained` event with its suppression and counter. Through the engine's own writeOutcome, so
 * webhooks, the customer database and the reputation breaker see it like any other outcome.
 */
function recordReport(deps: Deps, report: Exclude<InboundReport, null>, arrivedAt: Recipient[], now: number): { events: number; webhooks: number; written: number } {
  const target = reportedEmail(deps, report, arrivedAt);
  if (!target) {
    deps.logger.info('inbound.report_unmatched', { kind: report.kind });
    return { events: 0, webhooks: 0, written: 0 };
  }
  const { email, index } = target;
  const recipient = recipientOf(email, index);
  if (!recipient) {
    deps.logger.info('inbound.report_unmatched', { kind: report.kind, emailId: email.id, reason: 'several recipients, no VERP address' });
    return { events: 0, webhooks: 0, written: 0 };
  }
  // A DSN's blocks are all about the one copy; an ARF report other than abuse says nothing about a delivery.
  const block = report.kind === 'dsn' ? decisiveBlock(report.recipients) : null;
  const said: { status: ReportStatus; dsn: string; detail: string } | null =
    report.kind === 'dsn'
      ? block && { status: block.action.toLowerCase() === 'delayed' ? 'deferred' : 'bounced', dsn: block.status, detail: block.diagnostic || `Action: ${block.action.toLowerCase()}` }
      : report.feedbackType === 'abuse'
        ? { status: 'complained', dsn: '5.7.1', detail: 'Complaint (feedback report: abuse)' }
        : null;
  if (!said) return { events: 0, webhooks: 0, written: 0 };
  if (!reportIsNews(recipientEvents(deps, email.id, recipient), said.status, said.dsn)) {
    deps.logger.info('inbound.report_repeated', { emailId: email.id, status: said.status, dsn: said.dsn });
    return { events: 0, webhooks: 0, written: 0 };
  }
  const out = writeOutcome(deps, { emailId: email.id, accountId: email.accountId, recipient, ...said, occurredAt: now });
  return { events: 1, webhooks: out.webhooks, written: out.written ? 1 : 0 };
}

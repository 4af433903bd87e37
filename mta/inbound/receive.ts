import type { Readable } from 'node:stream';
import { queueCustomerDbWrite } from '../../server/core/customer-db-outbox.js';
import type { Deps } from '../../server/core/deps.js';
import { newId } from '../../server/shared/ids.js';
import { createCollector } from '../../server/shared/memory.js';
import { type Recipient, judgeRecipient } from './recipients.js';
import { parseReport } from './reports.js';
import { NOTHING_RECORDED, REPORT_BYTES, type RecordedReport, type ReportChecks, recordReport, reportLock, trustedReport } from './report-matching.js';
import type { InboundSpool, SpoolWriter } from '../../db/inbound-spool-store.js';
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

/** Holds a message being received: in memory while small, else in the spool (a file, or rows on Postgres). */
function createMessageHolder(inboundSpool: InboundSpool, key: Buffer, id: string) {
  let chunks: Buffer[] = [];
  let bytes = 0;
  let spool: SpoolWriter | null = null;
  return {
    /** A promise when the spool is behind: the caller reads no more of the socket until it resolves. */
    append(chunk: Buffer): void | Promise<void> {
      if (spool) return spool.append(chunk);
      chunks.push(chunk);
      bytes += chunk.length;
      if (bytes <= INLINE_BYTES) return;
      spool = inboundSpool.create(key, id);
      let behind: Promise<void> | undefined;
      for (const c of chunks) behind = spool.append(c) || behind;
      chunks = [];
      return behind;
    },
    /** Durable (the spool file fsynced, its rows committed), or the bytes to seal into the outbox. */
    async finish(): Promise<{ spoolId: string; raw: null } | { spoolId: null; raw: Buffer }> {
      if (spool) {
        await spool.finish();
        return { spoolId: id, raw: null };
      }
      return { spoolId: null, raw: Buffer.concat(chunks) };
    },
    async discard(): Promise<void> {
      chunks = [];
      await spool?.discard();
    },
  };
}

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
export async function receiveMessage(
  deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'inboundSpool' | 'logger' | 'metrics' | 'secretKey' | 'storeHealth'>,
  stream: Readable & { sizeExceeded?: boolean },
  envelope: Envelope,
  checks: ReportChecks,
): Promise<Received> {
  const now = deps.clock.now();
  const id = newId(now);
  const mailboxes = envelope.recipients.filter((r): r is Extract<Recipient, { kind: 'mailbox' }> => r.kind === 'mailbox');
  const reports = envelope.recipients.filter((r) => r.kind === 'bounce' || r.kind === 'feedback');
  const operators = [...new Set(envelope.recipients.flatMap((r) => (r.kind === 'operator' ? [r.address] : [])))];
  const operatorCopy = operators.length > 0 ? createOperatorHolder() : null;
  const spool = mailboxes.length > 0 && deps.secretKey ? createMessageHolder(deps.inboundSpool, deps.secretKey, id) : null;
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
      // The socket is not read while a collection this stream asked for waits its turn (server/shared/memory.ts).
      const collecting = collector.streamed(chunk.length);
      if (collecting) await collecting;
      lineEnds.feed(chunk);
      if (lineEnds.sawBare || stream.sizeExceeded || spoolFailure !== null) continue; // drained, never kept
      try {
        const behind = spool?.append(chunk);
        if (behind) await behind;
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
    await spool?.discard();
    throw err;
  }
  if (spoolFailure !== null) {
    await spool?.discard();
    logFailure(deps, 'inbound.store_failed', spoolFailure, { id });
    throw new SmtpReply(451, '4.3.0 The message could not be stored; try again later');
  }
  if (stream.sizeExceeded) {
    await spool?.discard();
    throw new SmtpReply(552, `5.3.4 Message exceeds the fixed maximum message size of ${deps.config.smtpMaxMessageBytes} bytes`);
  }
  if (lineEnds.bad) {
    await spool?.discard();
    throw new SmtpReply(550, '5.6.0 Bare CR or LF in the message data is not accepted; lines must end with CRLF');
  }
  const reportBytes = reports.length > 0 ? Buffer.concat(head) : null;
  const report = reportBytes ? await trustedReport(deps, parseReport(reportBytes), reports, reportBytes, size, checks) : null;
  let queued: { stored: number } & RecordedReport;
  try {
    const held = await spool?.finish();
    const raw = held?.raw ?? undefined;
    const { mailFrom, remoteAddress, helo } = envelope;
    const forOperator =
      operatorCopy && deps.secretKey
        ? prepareOperatorMessage(deps.secretKey, { id, recipients: operators, mailFrom, remoteAddress, helo, size, receivedAt: now, ...operatorCopy.take() })
        : null;
    // A report that counts on its account locks it with the batch's sends, in one order (report-matching.ts reportLock).
    const lock = report ? await reportLock(deps, report, reports) : undefined;
    queued = await deps.commits.run(
      async () => {
        let stored = 0;
        const byAccount = new Map<string, string[]>();
        // Judged again here, in the transaction that stores the message: a domain, or a database, removed since RCPT no
        // longer receives (and the read costs little inside a transaction).
        let gone = 0;
        for (const m of mailboxes) {
          const current = await judgeRecipient(deps, m.address);
          if (current.kind === 'mailbox') byAccount.set(current.accountId, [...(byAccount.get(current.accountId) ?? []), current.address]);
          else gone++;
        }
        // Some of its mailboxes stopped receiving, not all (or it also carries a report, or is for the operator too): a
        // 250 would drop their copies unsaid, and SMTP has one answer for the whole message. Nothing is kept (the
        // savepoint rolls back); the retry hears 550 for those at RCPT, and the rest is stored then.
        if (gone > 0 && (gone < mailboxes.length || reports.length > 0 || operators.length > 0)) throw new RecipientsChanged(gone);
        for (const [accountId, toAddresses] of byAccount) {
          const written = await queueCustomerDbWrite(
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
        const recorded = report ? await recordReport(deps, report, reports, deps.clock.now()) : NOTHING_RECORDED;
        if (forOperator) await storeOperatorMessage(deps.db, forOperator);
        return { stored, ...recorded };
      },
      undefined,
      lock,
    );
  } catch (err) {
    if (err instanceof RecipientsChanged) {
      await spool?.discard();
      deps.logger.info('inbound.recipients_changed', { id, recipients: mailboxes.length, gone: err.gone });
      throw new SmtpReply(451, '4.3.0 A recipient stopped receiving mail here during the transaction; try again');
    }
    // Committed but not known durable: its outbox rows name the spool file, which stays (the 451 may bring a copy).
    if (!(err instanceof FlushFailedError)) await spool?.discard();
    logFailure(deps, 'inbound.store_failed', err, { id });
    throw new SmtpReply(451, '4.3.0 The message could not be stored; try again later');
  }
  // The report's outcome counted on /metrics once committed (server/core/outcomes.ts writeOutcome).
  if (queued.outcome) deps.metrics.deliveryOutcome(queued.outcome);
  if (spool && queued.stored === 0) await spool.discard();
  // Every mailbox it was for stopped receiving between RCPT and now, and it carries no report: nothing was kept, so
  // it is refused as RCPT would refuse it now, never answered 250.
  if (mailboxes.length > 0 && queued.stored === 0 && reports.length === 0 && operators.length === 0) {
    throw new SmtpReply(550, '5.7.1 Relaying denied: this server does not accept mail for that address');
  }
  // Pokes only once the commit is durable: the writer and the dispatcher never see a write that could still roll back.
  if (reports.length > 0 && !report) deps.logger.info('inbound.report_unparsed', { id, recipients: reports.length });
  return { id, size, stored: queued.stored, events: queued.events, operator: operators.length > 0 };
}

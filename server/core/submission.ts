import { type SQL, sql } from 'drizzle-orm';
import { type Db, unsynced } from '../../db/client.js';
import { DAY_MS } from '../shared/clock.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { storeUnavailable } from '../shared/store-health.js';
import { parseAddress } from './addresses.js';
import { assertCredit, assertMaySend, assertQuotaFor, type Sender } from './sending-policy.js';
import { type SendReading, fromDomainKey, listedRecipients, lockSenders, queueSend, readForSend } from './sending.js';
import type { Deps } from './deps.js';
import { type SubmissionAuth, assertStillAuthenticated } from './submission-auth.js';
import type { SubmittedHeader } from './submitted-message.js';
import { isAlwaysSuppressed } from './simulator.js';
import { rateLimited } from './rate-limit.js';
import { suppressionReasons } from './suppressions.js';
import { execute, queryRow, skipLocked, together } from '../../db/sql.js';
import type { ReadAhead } from '../../db/group-commit.js';
import { nowAndThen } from '../shared/now-and-then.js';

/**
 * A message submitted over SMTP (docs/api/decisions.md section 10), through the rules of `POST /emails` that apply to
 * it, each where SMTP can answer it: the key and its rate limits at MAIL FROM (one request per message); suppression
 * per recipient at RCPT; once the message has arrived, in the order of POST /emails, the Message-ID seen before (as
 * an Idempotency-Key), suspension and quota, credits (one per message), the From domain and suppression again, then
 * queued in one durable commit, as an API send is.
 * Each refusal is the API's ApiError; the SMTP edge words it as a reply (mta/submission/replies.ts).
 */

const MESSAGE_ID_WINDOW_MS = DAY_MS;

/**
 * MAIL FROM: the session's key still live, and one request against the key's and the account's rate limits (check 1
 * of POST /emails). The account's own state (suspension, quota, credits) is judged at the end of DATA, after the
 * Message-ID: a client retrying a message whose reply it lost, after that message spent the last credit or quota,
 * hears the id it was sent as, as a retried Idempotency-Key is answered before checks 3 and 4.
 */
export async function beginSubmission(
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'rateLimiter' | 'storeHealth'>,
  auth: SubmissionAuth,
): Promise<void> {
  if (deps.storeHealth.unsafe()) throw storeUnavailable(null, { closed: true, outcome: 'Nothing was sent' })!;
  await assertStillAuthenticated(deps, auth);
  const rate = await deps.rateLimiter.take(auth.keyId, auth.keyAccountId);
  if (!rate.ok) throw rateLimited(deps.config, rate);
  deps.keyUsage.touch(auth.keyId, deps.clock.now());
}

/**
 * RCPT TO (the edge refuses past MAX_RECIPIENTS): an address, not on the account's suppression list or its parent's
 * (refused alone: the others proceed).
 */
export async function checkSubmissionRecipient(deps: Pick<Deps, 'db'>, auth: SubmissionAuth, address: string): Promise<{ address: string; domain: string }> {
  const parsed = parseAddress(address);
  if (!parsed.ok) throw new ApiError('invalid_request', `${address}: ${parsed.reason}.`);
  // The session's accounts as AUTH found them (an account's parent never changes): no account row is read per RCPT.
  const reasons = await suppressionReasons(deps.db, { id: auth.actingAccountId, parentId: auth.parentId }, parsed.value.address);
  if (reasons.length > 0 || isAlwaysSuppressed(parsed.value.address)) {
    throw new ApiError('recipient_suppressed', `${parsed.value.address} is on the suppression list (${reasons[0] ?? 'simulator'}); not sent to it.`);
  }
  return parsed.value;
}

export interface Submission {
  header: SubmittedHeader;
  /** The message to queue: the rebuilt header and the body as submitted. */
  raw: Buffer;
  recipients: readonly { address: string; domain: string }[];
  /** The email id the message takes (and its Message-ID, when the client wrote none). */
  id: string;
}

export interface Submitted {
  id: string;
  /** True when the Message-ID was seen from this account in the last 24 hours: nothing was queued again. */
  duplicate: boolean;
}

/**
 * The message queued, once durable: checks 3 to 7 of POST /emails as they apply, on fresh rows inside the send's
 * transaction of the group commit (so the quota or the last credit cannot be spent twice), then the log entry with
 * `source: "smtp"`, the queue, the counters, the charge and the Message-ID remembered. A Message-ID seen from the
 * account in the last 24 hours answers with the email it was sent as.
 * On Postgres its reading leaves ahead with the batch's other writes' (one round trip for the lot, as an API send's:
 * db/group-commit.ts ReadAhead), and submissions of the same account follow one another in the batch without reading
 * again (carrySubmission).
 */
export async function commitSubmission(
  deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'logger' | 'secretKey' | 'storeHealth'>,
  auth: SubmissionAuth,
  submission: Submission,
): Promise<Submitted> {
  if (deps.storeHealth.unsafe()) throw storeUnavailable(null, { closed: true, outcome: 'Nothing was sent' })!;
  const { header, id } = submission;
  const messageId = header.clientMessageId;
  const recipients = submission.recipients.map((r) => r.address);
  // The account rows (locked on Postgres, held to the commit: two submissions of one Message-ID take turns, so the
  // second sees the first's and is answered as its duplicate, and credits and quota are spent once), with what checks
  // 6 and 7 and the customer-database write read, and the Message-ID's email if the window holds it: one read.
  const read = async (tx: Db): Promise<SubmissionReading> => {
    const [send, seen] = await together(tx, [
      () => readForSend(deps, auth.actingAccountId, header.from.domain, recipients),
      () => (messageId === null ? Promise.resolve(undefined) : seenMessageId(tx, auth.actingAccountId, messageId, deps.clock.now())),
    ]);
    return { send, messageId, seen, queued: NONE_QUEUED };
  };
  const readAhead: ReadAhead<SubmissionReading> = {
    read,
    keys: ({ send: { sender } }) => [sender.acting.id, ...(sender.parent ? [sender.parent.id] : [])],
    carry: carrySubmission,
    // Its account (and parent) locked with the batch's other sends' in one order (db/group-commit.ts WriteLock).
    lock: { keys: [auth.actingAccountId], take: lockSenders },
  };
  const submitted = await deps.commits.run(async (tx, ahead, handOn) => {
    const now = deps.clock.now();
    const reading = await (ahead ?? read(tx));
    const { sender } = reading.send;
    if (reading.seen !== undefined) {
      // Nothing written: the next submission of the batch reads as this one did.
      handOn?.({ sender, queued: reading.queued } satisfies SubmissionHanded);
      return { id: reading.seen, duplicate: true };
    }
    assertMaySend(sender, now);
    assertCredit(sender, deps.config, now);
    assertQuotaFor(sender, submission.recipients.length, now);
    const domainKeyId = fromDomainKey(deps, header.from.domain, reading.send.domain);
    // Suppressed since RCPT: refused whole, as the API refuses it; the client may send again to the others. Named
    // only when some recipient is on a list now (the RCPT checks refused those listed then).
    const listed = reading.send.onLists === 0 ? [] : await listedRecipients(deps, sender, recipients);
    if (listed.length > 0) throw new ApiError('recipient_suppressed', `Suppressed recipients, nothing was sent: ${listed.join(', ')}.`);
    await queueSend(deps, sender, {
      id,
      log: {
        accountId: sender.acting.id,
        fromAddress: header.from.address,
        to: recipients,
        subject: header.subject,
        template: '',
        templateVersion: null,
        attachments: null,
        tags: null,
        sandbox: false,
        source: 'smtp',
      },
      message: {
        domainKeyId,
        fromHeader: '',
        fromAddress: header.from.address,
        replyToHeader: null,
        messageId: header.messageId,
        subject: header.subject,
        html: '',
        text: '',
        attachments: null,
        raw: submission.raw,
      },
      content: { html: null, text: null, raw: submission.raw },
      recipients: submission.recipients,
      databaseOwner: reading.send.databaseOwner,
      now,
      // The rows as this submission leaves them, and its Message-ID, for the next of the batch (carrySubmission).
      ...(handOn
        ? {
            handOn: (after: Sender) =>
              handOn({ sender: after, queued: messageId === null ? reading.queued : new Map(reading.queued).set(messageId, id) } satisfies SubmissionHanded),
          }
        : {}),
    });
    if (messageId !== null) {
      // An older entry of the same Message-ID (past the window) makes way.
      await execute(
        deps.db,
        sql`insert into submitted_messages (account_id, message_id, email_id, created_at) values (${sender.acting.id}, ${messageId}, ${id}, ${now})
     on conflict (account_id, message_id) do update set email_id = excluded.email_id, created_at = excluded.created_at`,
      );
    }
    return { id, duplicate: false };
  }, readAhead);
  if (messageId !== null && !submitted.duplicate) await pruneAfter(deps);
  return submitted;
}

/** What a submission reads before its checks (commitSubmission). */
interface SubmissionReading {
  /** The send's reading (server/core/sending.ts readForSend): the accounts, the from-domain, the lists, the database. */
  send: SendReading;
  /** The client's Message-ID, if it wrote one. */
  messageId: string | null;
  /** The email that Message-ID was sent as from this account within the window, if it was. */
  seen: string | undefined;
  /** The Message-IDs queued before it in its batch under the same accounts, with their emails (carrySubmission). */
  queued: ReadonlyMap<string, string>;
}

/** What a submission hands on to the next of its batch under the same accounts (db/group-commit.ts HandOn). */
interface SubmissionHanded {
  sender: Sender;
  queued: ReadonlyMap<string, string>;
}

const NONE_QUEUED: ReadonlyMap<string, string> = new Map();

/**
 * A submission's reading after one before it of the same accounts in the same batch (db/group-commit.ts
 * ReadAhead.carry): its own, taken ahead, with the account rows as that one handed them on and the Message-IDs queued
 * before it in the batch (which its reading, taken before them, could not see). A submission changes nothing else it
 * reads (the from-domain, the lists, the customer database).
 */
function carrySubmission(reading: SubmissionReading, handed: unknown): SubmissionReading | undefined {
  const before = handed as SubmissionHanded | undefined;
  const { sender } = reading.send;
  if (!before || before.sender.acting.id !== sender.acting.id || before.sender.parent?.id !== sender.parent?.id) return undefined;
  const seen = reading.seen ?? (reading.messageId === null ? undefined : before.queued.get(reading.messageId));
  return { ...reading, send: { ...reading.send, sender: before.sender }, seen, queued: before.queued };
}

/** The email a Message-ID was sent as from the account within the de-duplication window, if it was. */
async function seenMessageId(db: Db, accountId: string, messageId: string, now: number): Promise<string | undefined> {
  const seen = await queryRow<{ emailId: string }>(
    db,
    sql`select email_id as "emailId" from submitted_messages where account_id = ${accountId} and message_id = ${messageId} and created_at > ${now - MESSAGE_ID_WINDOW_MS}`,
  );
  return seen?.emailId;
}

/**
 * After a submission's commit, outside its batch (which holds the accounts' rows on Postgres and the one writer on
 * SQLite): once a PRUNE_EVERY_MS per store (and after the first submission), the Message-IDs past the window are
 * forgotten, a bounded batch at a time; a full batch leaves more, forgotten after the next submission. So a backlog
 * costs each submission at most one such delete, and no other submission's commit waits for it. Without an fsync of
 * its own (a lost delete is done again), and never failing the submission it follows: its message is already queued.
 */
async function pruneAfter(deps: Pick<Deps, 'clock' | 'db' | 'logger'>): Promise<void> {
  const now = deps.clock.now();
  if (!pruning.due(deps.db, now)) return;
  try {
    if ((await unsynced(deps.db, async () => await pruneSubmittedMessageIds(deps, now))) >= PRUNE_BATCH) pruning.again(deps.db);
  } catch (err) {
    deps.logger.warn('submission.prune_failed', { error: err instanceof Error ? err.message : String(err) });
  }
}

/** How often a submission also forgets the Message-IDs past the window, and how many at most each time (oldest first). */
export const PRUNE_EVERY_MS = 60 * 60_000;
export const PRUNE_BATCH = 1000;
const pruning = nowAndThen(PRUNE_EVERY_MS);

/**
 * Forgets Message-IDs older than the de-duplication window, at most `limit` of them, oldest first (by the index on
 * created_at): a backlog (an hour of a busy account's submissions) is worked off a bounded batch at a time, after
 * one submission each (pruneAfter), never in one long delete. On Postgres a row another node is forgetting at the
 * same moment is left to it (SKIP LOCKED), never waited for. Returns how many.
 */
export async function pruneSubmittedMessageIds(deps: Pick<Deps, 'db'>, now: number, limit: number = PRUNE_BATCH): Promise<number> {
  return await execute(deps.db, pruneStatement(deps.db, now, limit));
}

/** pruneSubmittedMessageIds's statement (its plan is tested: the index, never a scan of the table). */
export function pruneStatement(db: Db, now: number, limit: number): SQL {
  // The window's condition outside too: whichever way the planner joins the two, each side reads the index's old end.
  const before = now - MESSAGE_ID_WINDOW_MS;
  return sql`delete from submitted_messages where created_at < ${before} and (account_id, message_id) in (
      select account_id, message_id from submitted_messages where created_at < ${before}
      order by created_at limit ${limit}${skipLocked(db)})`;
}

export const newSubmissionId = (deps: Pick<Deps, 'clock'>): string => newId(deps.clock.now());

import { type SQL, sql } from 'drizzle-orm';
import { type Db, unsynced } from '../../db/client.js';
import { DAY_MS } from '../shared/clock.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { storeUnavailable } from '../shared/store-health.js';
import { parseAddress } from './addresses.js';
import { assertCredit, assertMaySend, assertQuotaFor, type Sender } from './sending-policy.js';
import { checkFromDomain, listedRecipients, loadSender, lockSenders, queueSend } from './sending.js';
import type { Deps } from './deps.js';
import { type SubmissionAuth, assertStillAuthenticated } from './submission-auth.js';
import type { SubmittedHeader } from './submitted-message.js';
import { isAlwaysSuppressed } from './simulator.js';
import { rateLimited } from './rate-limit.js';
import { suppressionReasons, suppressionsStamp } from './suppressions.js';
import { execute, queryRow, skipLocked } from '../../db/sql.js';
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

const senderOf = async (deps: Pick<Deps, 'db'>, auth: SubmissionAuth): Promise<Sender> => await loadSender(deps, auth.actingAccountId);

/** What MAIL FROM began a transaction with: the `suppressions` change counter, read before any of its RCPT checks. */
export interface Begun {
  suppressionStamp: number;
}

/**
 * MAIL FROM: the session's key still live, and one request against the key's and the account's rate limits (check 1
 * of POST /emails). The account's own state (suspension, quota, credits) is judged at the end of DATA, after the
 * Message-ID: a client retrying a message whose reply it lost, after that message spent the last credit or quota,
 * hears the id it was sent as, as a retried Idempotency-Key is answered before checks 3 and 4.
 */
export async function beginSubmission(
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'rateLimiter' | 'storeHealth'>,
  auth: SubmissionAuth,
): Promise<Begun> {
  if (deps.storeHealth.unsafe()) throw storeUnavailable(null, { closed: true, outcome: 'Nothing was sent' })!;
  await assertStillAuthenticated(deps, auth);
  const rate = await deps.rateLimiter.take(auth.keyId, auth.keyAccountId);
  if (!rate.ok) throw rateLimited(deps.config, rate);
  deps.keyUsage.touch(auth.keyId, deps.clock.now());
  // Read before the transaction's RCPT checks: a list changed after it raises the counter past this stamp.
  return { suppressionStamp: await suppressionsStamp(deps.db) };
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
  /** As MAIL FROM began the transaction. */
  begun: Begun;
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
 */
export async function commitSubmission(
  deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'logger' | 'secretKey' | 'storeHealth'>,
  auth: SubmissionAuth,
  submission: Submission,
): Promise<Submitted> {
  if (deps.storeHealth.unsafe()) throw storeUnavailable(null, { closed: true, outcome: 'Nothing was sent' })!;
  const { header, id } = submission;
  const submitted = await deps.commits.run(
    async () => {
      const now = deps.clock.now();
      // The account rows first, held to the commit (locked on Postgres): two submissions of one Message-ID take turns,
      // so the second sees the first's and is answered as its duplicate, and credits and quota are spent once.
      const sender = await senderOf(deps, auth);
      if (header.clientMessageId !== null) {
        const seen = await queryRow<{ emailId: string }>(
          deps.db,
          sql`select email_id as "emailId" from submitted_messages where account_id = ${auth.actingAccountId} and message_id = ${header.clientMessageId} and created_at > ${now - MESSAGE_ID_WINDOW_MS}`,
        );
        if (seen !== undefined) return { id: seen.emailId, duplicate: true };
      }
      assertMaySend(sender, now);
      assertCredit(sender, deps.config, now);
      assertQuotaFor(sender, submission.recipients.length, now);
      const domainKeyId = await checkFromDomain(deps, sender.acting, header.from.domain);
      // Suppressed since RCPT: refused whole, as the API refuses it; the client may send again to the others. Read
      // again only when some list changed since MAIL FROM, before the RCPT checks.
      const listed =
        (await suppressionsStamp(deps.db)) === submission.begun.suppressionStamp
          ? []
          : await listedRecipients(
              deps,
              sender,
              submission.recipients.map((r) => r.address),
            );
      if (listed.length > 0) throw new ApiError('recipient_suppressed', `Suppressed recipients, nothing was sent: ${listed.join(', ')}.`);
      await queueSend(deps, sender, {
        id,
        log: {
          accountId: sender.acting.id,
          fromAddress: header.from.address,
          to: submission.recipients.map((r) => r.address),
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
        now,
      });
      if (header.clientMessageId !== null) {
        // An older entry of the same Message-ID (past the window) makes way.
        await execute(
          deps.db,
          sql`insert into submitted_messages (account_id, message_id, email_id, created_at) values (${sender.acting.id}, ${header.clientMessageId}, ${id}, ${now})
     on conflict (account_id, message_id) do update set email_id = excluded.email_id, created_at = excluded.created_at`,
        );
      }
      return { id, duplicate: false };
      // Its account (and parent) locked with the batch's other sends' in one order (db/group-commit.ts WriteLock).
    },
    undefined,
    { keys: [auth.actingAccountId], take: lockSenders },
  );
  if (header.clientMessageId !== null && !submitted.duplicate) await pruneAfter(deps);
  return submitted;
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

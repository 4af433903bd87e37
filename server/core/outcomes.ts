import { and, eq, isNull, notExists, sql } from 'drizzle-orm';
import {
  type OutboundMessageRow,
  type OutboundRecipientRow,
  accounts,
  emailEvents,
  emails,
  outboundMessages,
  outboundRecipients,
  webhookEndpoints,
} from '../../db/schema/index.js';
import { definePrepared } from '../../db/prepared.js';
import type { Deps } from './deps.js';
import { findAccount } from './accounts.js';
import { tripBreakerIfPaused } from './reputation.js';
import { suppress } from './suppressions.js';
import { newId } from '../shared/ids.js';
import { type OutcomeStatus, fanOutOutcome } from './webhook-fanout.js';
import { OWNER_SQL, type QueuedWrite, queueCustomerDbWrite } from './customer-db-outbox.js';
import { type Capture, storeCapture } from './capture-store.js';
import type { Classified } from './dsn.js';
import { nextAttemptAt } from './delivery-schedule.js';
import { isSimulatorAddress } from './simulator.js';
import { changes, lockRows, statementsAreRoundTrips, together } from '../../db/sql.js';
import type { ReadAhead, WriteLock } from '../../db/group-commit.js';
import { lockSenders } from './sending.js';

/** A recipient leased from the outbound queue, with its message: what one delivery attempt works on. */
export interface Claimed {
  recipient: OutboundRecipientRow;
  message: OutboundMessageRow;
  /** The email's whole `to` list, its message's To header (read with the claim). */
  to: readonly string[];
}

/** The claim recording an outcome no longer holds its recipient (thrown inside the transaction, to roll it back). */
class LeaseLost extends Error {
  constructor() {
    super('the claim no longer holds the recipient');
  }
}

export interface Recorded {
  status: 'delivered' | 'bounced' | 'deferred';
  dsn: string;
  detail: string;
  nextAttemptAt: number | null;
}

/** What else an attempt leaves, written in the same transaction as its outcome. */
export interface AttemptExtras {
  /** The message as it would have gone out (DELIVERY_MODE=capture), kept in the capture store. */
  capture?: Capture | null;
  /** A complaint that follows the delivery (the mailbox simulator's complaint@): recorded as the inbound ARF one is. */
  complaint?: { dsn: string; detail: string } | null;
}

/**
 * Records one attempt's outcome for one recipient, durably, before the engine takes its next step: the
 * event, the queue row (done, or due again on the retry schedule, or bounced 4.4.7 once 5 days have passed), the
 * Email's first deliveredAt/bouncedAt, and for a 5.x.x bounce the suppression (the account's list and its parent's)
 * and the reputation counters, tripping the breaker when they grade as paused. With `extras`, in the same
 * transaction, the captured message and a complaint after the delivery.
 *
 * Only the claim that made the attempt records it: the recipient's row must still carry the claim's holder and no
 * outcome recorded since (its attempts as claimed). A claim whose lease ran out and was taken by another holder, or
 * whose recipient was given an outcome meanwhile, records nothing at all and gets null (docs/design/queues.md).
 */
export async function recordOutcome(
  deps: Pick<Deps, 'db' | 'clock' | 'logger' | 'commits' | 'secretKey' | 'metrics'>,
  job: Claimed,
  outcome: Classified,
  extras: AttemptExtras = {},
): Promise<Recorded | null> {
  const { db, clock } = deps;
  const now = clock.now();
  const attempts = job.recipient.attempts + 1;
  let recorded: Recorded = { ...outcome, nextAttemptAt: null };
  if (outcome.status === 'deferred') {
    const next = nextAttemptAt(attempts, now, job.message.expiresAt);
    recorded =
      next === null
        ? { status: 'bounced', dsn: '4.4.7', detail: `Delivery gave up 5 days after the send; last reply: ${outcome.detail}`, nextAttemptAt: null }
        : { ...outcome, nextAttemptAt: next };
  }
  // Through the group commit: outcomes of concurrent connections share one fsync, and the caller's next step waits
  // until this one is durable.
  const complaint = recorded.status === 'delivered' ? (extras.complaint ?? null) : null;
  // An outcome that adds no suppression and counts nothing on the account (a delivery, a deferral, a soft bounce)
  // writes nothing a send reads, nor anything another message's outcome writes: on Postgres it runs at once with the
  // batch's others (db/pg/state.ts PgUnits.atOnce), kept apart from the outcomes of its own message. It has nothing to
  // read ahead.
  const confined = complaint === null && !countsOnAccount(recorded.status, recorded.dsn);
  const apart: ReadAhead<null> | undefined = confined ? { keys: () => [`message:${job.message.id}`] } : undefined;
  try {
    await deps.commits.run(
      async () => {
        const q = statements(db);
        const of = { emailId: job.message.id, accountId: job.message.accountId, recipient: job.recipient.recipient, occurredAt: now };
        // The message first: outcomes of one message take turns, so the last one to close a recipient sees the others
        // closed and deletes the content (on Postgres; on SQLite every transaction takes turns). Then the recipient, only
        // while this claim still holds it; the outcome's writes; and the content's deletion once every recipient has its
        // final outcome (one statement, which sees the recipients as the outcomes committed before this one's lock on
        // the message left them). Issued together, in that order: one round trip on Postgres.
        const [, updated, , written] = await together(db, [
          () => lockRows(db, outboundMessages, outboundMessages.id, [job.message.id]),
          () =>
            q.updateRecipient.execute({
              id: job.recipient.id,
              lockedBy: job.recipient.lockedBy ?? '',
              claimedAttempts: job.recipient.attempts,
              status: recorded.status === 'deferred' ? 'queued' : recorded.status,
              attempts,
              nextAttemptAt: recorded.nextAttemptAt ?? now,
            }),
          () => (extras.capture ? storeCapture(db, extras.capture) : Promise.resolve()),
          () => writeOutcome(deps, { ...of, status: recorded.status, dsn: recorded.dsn, detail: recorded.detail }),
          () => q.deleteIfClosed.execute({ id: job.message.id }),
        ]);
        // The claim no longer held: the whole outcome rolls back (a lease lost is rare; its writes went with the update).
        if (changes(updated) !== 1) throw new LeaseLost();
        if (complaint) {
          const complained = await writeOutcome(deps, { ...of, status: 'complained', ...complaint });
          written.webhooks += complained.webhooks;
          written.written ||= complained.written;
        }
        return written;
        // One that counts on its account (a bounce, a complaint) locks it with the batch's sends, in one order
        // (db/group-commit.ts WriteLock).
      },
      apart,
      confined ? undefined : accountLock(job.message.accountId),
    );
  } catch (err) {
    if (!(err instanceof LeaseLost)) throw err;
    deps.logger.info('delivery.lease_lost', { emailId: job.message.id, recipientId: job.recipient.id, holder: job.recipient.lockedBy });
    return null;
  }
  // Counted once committed: an outcome rolled back (a lease lost, a failed batch) counts nothing.
  deps.metrics.deliveryOutcome(recorded.status);
  if (complaint) deps.metrics.deliveryOutcome('complained');
  if (recorded.status !== 'deferred') deps.metrics.deliveryLatency(recorded.status, (now - job.message.createdAt) / 1000);
  deps.logger.info(`delivery.${recorded.status}`, {
    emailId: job.message.id,
    recipient: job.recipient.recipient,
    dsn: recorded.dsn,
    detail: recorded.detail,
    attempts,
  });
  if (complaint)
    deps.logger.info('delivery.complained', { emailId: job.message.id, recipient: job.recipient.recipient, dsn: complaint.dsn, detail: complaint.detail });
  return recorded;
}

export interface OutcomeToRecord {
  emailId: string;
  accountId: string;
  recipient: string;
  status: OutcomeStatus;
  dsn: string;
  detail: string;
  occurredAt: number;
}

/** What suppresses: a 5.x.x bounce (not a 4.4.7 give-up) and every complaint, each under its own reason and counter. */
const SUPPRESSING: Readonly<Record<OutcomeStatus, ((dsn: string) => boolean) | null>> = {
  bounced: (dsn) => dsn.startsWith('5.'),
  complained: () => true,
  delivered: null,
  deferred: null,
};

/** Whether an outcome counts on its account (and suppresses): writeOutcome then updates the account's row. */
export function countsOnAccount(status: OutcomeStatus, dsn: string): boolean {
  return SUPPRESSING[status]?.(dsn) ?? false;
}

/**
 * The lock an outcome that counts on its account declares (db/group-commit.ts WriteLock): taken with the batch's
 * sends' in one sorted statement, so two nodes' batches that count and send for two accounts in opposite orders do not
 * deadlock.
 */
export function accountLock(accountId: string): WriteLock {
  return { keys: [accountId], take: lockSenders };
}

/**
 * The writes of one recorded outcome, inside the caller's transaction (the engine's reply, or an asynchronous bounce
 * or complaint received on inbound SMTP): the event, its webhook deliveries, the customer database's copy, the
 * email's first deliveredAt/bouncedAt/complainedAt, and for a 5.x.x bounce or a complaint the suppression on the
 * account's list and its parent's, the reputation counter and the breaker (never for a mailbox simulator address:
 * the simulator does not count toward reputation). Returns what was queued; the fan-out and the outbox marked their
 * queues (db/queue-wake.ts), so the dispatcher and the writer wake once the transaction is durable. The caller counts
 * the outcome on /metrics once its transaction has committed.
 */
export async function writeOutcome(deps: Pick<Deps, 'db' | 'logger' | 'secretKey'>, o: OutcomeToRecord): Promise<{ webhooks: number; written: boolean }> {
  const { db } = deps;
  const q = statements(db);
  const eventId = newId(o.occurredAt);
  const first = { delivered: q.firstDelivered, bounced: q.firstBounced, complained: q.firstComplained, deferred: null }[o.status];
  // On Postgres, where each statement is a round trip and a batch's statements run one after the other, the account's
  // endpoints and its customer database's owner are read in one statement, which the fan-out and the copy share.
  const folded = statementsAreRoundTrips(db);
  let reading: Promise<{ id: string | null; events: string[] | null; owner: string | null }[]> | undefined;
  const readOnce = () => (reading ??= q.endpointsAndOwner.execute({ accountId: o.accountId }));
  const endpointsOf = (rows: Awaited<NonNullable<typeof reading>>) =>
    rows.flatMap((r) => (r.id !== null && r.events !== null ? [{ id: r.id, events: r.events }] : []));
  const copy: QueuedWrite = {
    kind: 'event',
    id: eventId,
    emailId: o.emailId,
    recipient: o.recipient,
    status: o.status,
    dsn: o.dsn,
    detail: o.detail,
    occurredAt: o.occurredAt,
  };
  // Issued together (one round trip on Postgres): the event; the account's webhook deliveries of it, in the same
  // transaction, so no event is lost between the two; the customer database's copy; the email's first time.
  const [, webhooks, written] = await together(db, [
    () =>
      q.insertEvent.execute({
        id: eventId,
        emailId: o.emailId,
        accountId: o.accountId,
        recipient: o.recipient,
        status: o.status,
        dsn: o.dsn,
        detail: o.detail,
        occurredAt: o.occurredAt,
      }),
    (): Promise<number> => (folded ? readOnce().then((rows) => fanOutOutcome(db, o, endpointsOf(rows))) : fanOutOutcome(db, o)),
    (): Promise<boolean> =>
      folded
        ? readOnce().then((rows) => queueCustomerDbWrite(deps, o.accountId, copy, o.occurredAt, rows[0]?.owner ?? null))
        : queueCustomerDbWrite(deps, o.accountId, copy, o.occurredAt),
    () => (first ? first.execute({ id: o.emailId, now: o.occurredAt }) : Promise.resolve(null)),
  ]);
  if (SUPPRESSING[o.status]?.(o.dsn)) {
    const account = await findAccount(db, o.accountId);
    if (account) {
      const reason = o.status === 'complained' ? 'complaint' : 'bounce';
      for (const id of [account.id, account.parentId]) {
        if (id) await suppress(db, id, o.recipient, reason, o.detail, o.occurredAt);
      }
      if (!isSimulatorAddress(o.recipient)) {
        if (o.status === 'complained') await q.countComplaint.execute({ id: account.id });
        else await q.countBounce.execute({ id: account.id });
        await tripBreakerIfPaused(deps, account.id, o.occurredAt);
      }
    }
  }
  return { webhooks, written };
}

const p = sql.placeholder;

/** The writes of one outcome, compiled once per database (they run on the root connection, inside the commit). */
const statements = definePrepared((db) => ({
  insertEvent: db
    .insert(emailEvents)
    .values({
      id: p('id'),
      emailId: p('emailId'),
      accountId: p('accountId'),
      recipient: p('recipient'),
      status: p('status'),
      dsn: p('dsn'),
      detail: p('detail'),
      occurredAt: p('occurredAt'),
    })
    .prepare(),
  updateRecipient: db
    .update(outboundRecipients)
    .set({ status: sql`${p('status')}`, attempts: sql`${p('attempts')}`, nextAttemptAt: sql`${p('nextAttemptAt')}`, lockedBy: null, lockedUntil: null })
    // Only while the claim that attempted it still holds it: the same holder, and no outcome recorded since the claim.
    .where(and(eq(outboundRecipients.id, p('id')), eq(outboundRecipients.lockedBy, p('lockedBy')), eq(outboundRecipients.attempts, p('claimedAttempts'))))
    .prepare(),
  firstDelivered: db
    .update(emails)
    .set({ deliveredAt: sql`${p('now')}` })
    .where(and(eq(emails.id, p('id')), isNull(emails.deliveredAt)))
    .prepare(),
  firstBounced: db
    .update(emails)
    .set({ bouncedAt: sql`${p('now')}` })
    .where(and(eq(emails.id, p('id')), isNull(emails.bouncedAt)))
    .prepare(),
  firstComplained: db
    .update(emails)
    .set({ complainedAt: sql`${p('now')}` })
    .where(and(eq(emails.id, p('id')), isNull(emails.complainedAt)))
    .prepare(),
  /** The account's webhook endpoints (in id order; one row of nulls when it has none), each row with the owner of
   * the customer database its writes go to (customer-db-outbox.ts OWNER_SQL). */
  endpointsAndOwner: db
    .select({ id: webhookEndpoints.id, events: webhookEndpoints.events, owner: sql<string | null>`${sql.raw(OWNER_SQL)}` })
    .from(sql`(select cast(${p('accountId')} as text) as account_id) d`)
    .leftJoin(webhookEndpoints, eq(webhookEndpoints.accountId, sql`d.account_id`))
    .orderBy(webhookEndpoints.id)
    .prepare(),
  countBounce: db
    .update(accounts)
    .set({ totalBounced: sql`${accounts.totalBounced} + 1` })
    .where(eq(accounts.id, p('id')))
    .prepare(),
  countComplaint: db
    .update(accounts)
    .set({ totalComplained: sql`${accounts.totalComplained} + 1` })
    .where(eq(accounts.id, p('id')))
    .prepare(),
  /** The message, once none of its recipients is still queued. */
  deleteIfClosed: db
    .delete(outboundMessages)
    .where(
      and(
        eq(outboundMessages.id, p('id')),
        notExists(
          db
            .select({ one: sql`1` })
            .from(outboundRecipients)
            .where(and(eq(outboundRecipients.messageId, outboundMessages.id), eq(outboundRecipients.status, 'queued'))),
        ),
      ),
    )
    .prepare(),
}));

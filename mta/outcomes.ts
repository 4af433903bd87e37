import { and, eq, isNull, sql } from 'drizzle-orm';
import { type AccountRow, accounts, emailEvents, emails, outboundMessages, outboundRecipients } from '../db/schema/index.js';
import type { Deps } from '../server/deps.js';
import { findAccount } from '../server/core/accounts.js';
import { suppress } from '../server/core/suppressions.js';
import { gradeTier } from '../server/core/tiers.js';
import { newId } from '../server/ids.js';
import type { Claimed } from './delivery-queue.js';
import type { Classified } from './dsn.js';
import { nextAttemptAt } from './retry-schedule.js';

export interface Recorded {
  status: 'delivered' | 'bounced' | 'deferred';
  dsn: string;
  detail: string;
  nextAttemptAt: number | null;
}

/** The reason the reputation breaker writes when it suspends an account. */
export function breakerReason(a: Pick<AccountRow, 'totalSent' | 'totalBounced' | 'totalComplained'>): string {
  const pct = (n: number) => `${((n / a.totalSent) * 100).toFixed(2)}%`;
  return `Sending paused automatically by the reputation breaker: bounce rate ${pct(a.totalBounced)} and complaint rate ${pct(a.totalComplained)} over ${a.totalSent} recipients reached the paused tier (10% bounces or 0.5% complaints).`;
}

/**
 * Records one attempt's outcome for one recipient, durably, before the engine takes its next step: the
 * event, the queue row (done, or due again on the retry schedule, or bounced 4.4.7 once 5 days have passed), the
 * Email's first deliveredAt/bouncedAt, and for a 5.x.x bounce the suppression (the account's list and its parent's)
 * and the reputation counters, tripping the breaker when they grade as paused.
 */
export async function recordOutcome(deps: Pick<Deps, 'db' | 'clock' | 'logger' | 'commits'>, job: Claimed, outcome: Classified): Promise<Recorded> {
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
  const permanent = recorded.status === 'bounced' && recorded.dsn.startsWith('5.');

  // Through the group commit: outcomes of concurrent connections share one fsync, and the caller's next step waits
  // until this one is durable.
  await deps.commits.run((tx) => {
    tx.insert(emailEvents)
      .values({ id: newId(now), emailId: job.message.id, recipient: job.recipient.recipient, status: recorded.status, dsn: recorded.dsn, detail: recorded.detail, occurredAt: now })
      .run();
    tx.update(outboundRecipients)
      .set({
        status: recorded.status === 'deferred' ? 'queued' : recorded.status,
        attempts,
        nextAttemptAt: recorded.nextAttemptAt ?? now,
        lockedBy: null,
        lockedUntil: null,
      })
      .where(eq(outboundRecipients.id, job.recipient.id))
      .run();
    if (recorded.status === 'delivered') {
      tx.update(emails).set({ deliveredAt: now }).where(and(eq(emails.id, job.message.id), isNull(emails.deliveredAt))).run();
    }
    if (recorded.status === 'bounced') {
      tx.update(emails).set({ bouncedAt: now }).where(and(eq(emails.id, job.message.id), isNull(emails.bouncedAt))).run();
    }
    if (permanent) {
      const account = findAccount(db, job.message.accountId);
      if (account) {
        for (const id of [account.id, account.parentId]) {
          if (id) suppress(db, id, job.recipient.recipient, 'bounce', recorded.detail, now);
        }
        tx.update(accounts).set({ totalBounced: sql`${accounts.totalBounced} + 1` }).where(eq(accounts.id, account.id)).run();
        tripBreakerIfPaused(deps, account.id, now);
      }
    }
    // Once every recipient has its final outcome the content is no longer needed: it goes.
    const open = tx
      .select({ n: sql<number>`count(*)` })
      .from(outboundRecipients)
      .where(and(eq(outboundRecipients.messageId, job.message.id), eq(outboundRecipients.status, 'queued')))
      .get();
    if ((open?.n ?? 0) === 0) tx.delete(outboundMessages).where(eq(outboundMessages.id, job.message.id)).run();
  });
  deps.logger.info(`delivery.${recorded.status}`, { emailId: job.message.id, recipient: job.recipient.recipient, dsn: recorded.dsn, detail: recorded.detail, attempts });
  return recorded;
}

/** The reputation breaker: an account whose own rates grade as paused is suspended, with a reason naming them. */
function tripBreakerIfPaused(deps: Pick<Deps, 'db' | 'logger'>, accountId: string, now: number): void {
  const row = findAccount(deps.db, accountId);
  if (!row || row.suspendedBy !== null || gradeTier(row) !== 'paused') return;
  const reason = breakerReason(row);
  deps.db.update(accounts).set({ suspendedBy: 'breaker', suspendedReason: reason, suspendedAt: now }).where(eq(accounts.id, accountId)).run();
  deps.logger.warn('account.breaker_tripped', { accountId, reason });
}

import { type SQL, eq, sql } from 'drizzle-orm';
import { type Db, takesLateWrites, writeLate } from '../../db/client.js';
import type { LateKind } from '../../db/late-writes.js';
import { definePrepared } from '../../db/prepared.js';
import { changes, together } from '../../db/sql.js';
import { type AccountRow, accounts } from '../../db/schema/index.js';
import { iso, utcDay } from '../shared/clock.js';
import { ApiError } from '../shared/errors.js';
import { type CreditPolicy, type CreditState, type CreditStatus, creditStatus } from './credits.js';
import { effectiveQuota, sentToday } from './quota.js';
import { TIER_MIN_SENT, gradeTier } from './tiers.js';

/** The account rules of a send (docs/api/contract.md checks 3 and 4; docs/api/decisions.md section 4), as plain functions over rows. */

export interface Sender {
  acting: AccountRow;
  /** The acting account's parent, for a sub-account. */
  parent: AccountRow | null;
}

/** The account whose credits pay: the parent for a sub-account. */
export const payerOf = (s: Sender): AccountRow => s.parent ?? s.acting;

const p = sql.placeholder;

// A send's update of one account row, compiled once (it runs inside every send's transaction): the columns a send
// counts, written as afterSend worked them out from the row the transaction holds.
const statements = definePrepared((db) => ({
  recordSend: db
    .update(accounts)
    .set({
      sentTodayCount: sql`${p('sentTodayCount')}`,
      sentTodayDay: sql`${p('sentTodayDay')}`,
      totalSent: sql`${p('totalSent')}`,
      creditsBalance: sql`${p('creditsBalance')}`,
      creditsTotalUsed: sql`${p('creditsTotalUsed')}`,
      graceStartedAt: sql`${p('graceStartedAt')}`,
      graceEmailsUsed: sql`${p('graceEmailsUsed')}`,
    })
    .where(eq(accounts.id, p('id')))
    .prepare(),
}));

export const PARENT_CANNOT_SEND = 'The parent account cannot send.';

function remainingQuota(row: AccountRow, now: number): number {
  return Math.max(0, effectiveQuota(row.dailyQuota, gradeTier(row)) - sentToday(row, now));
}

/** Check 3: neither the account nor its parent is suspended or out of today's quota. */
export function assertMaySend(s: Sender, now: number): void {
  if (s.acting.suspendedBy !== null) throw new ApiError('suspended', s.acting.suspendedReason ?? 'Sending is paused on this account.');
  if (s.parent && s.parent.suspendedBy !== null) throw new ApiError('suspended', `${PARENT_CANNOT_SEND} ${s.parent.suspendedReason ?? ''}`.trim());
  assertQuotaFor(s, 1, now);
}

/** Quota for `recipients` more today, on the account and on its parent; resets at midnight UTC. */
export function assertQuotaFor(s: Sender, recipients: number, now: number): void {
  for (const [row, whose] of [
    [s.acting, 'this account'],
    [s.parent, 'the parent account'],
  ] as const) {
    if (!row) continue;
    const left = remainingQuota(row, now);
    if (recipients > left) {
      const reset = iso(Date.parse(`${utcDay(now)}T00:00:00.000Z`) + 86_400_000);
      throw new ApiError('quota_exceeded', `The daily quota of ${whose} has ${left} recipients left today; it resets at ${reset}.`);
    }
  }
}

/** Check 4: the paying account has credit (or is on its trial or in its grace window). */
export function assertCredit(s: Sender, policy: CreditPolicy, now: number): void {
  if (creditStatus(payerOf(s), policy, now).state === 'exhausted') {
    throw new ApiError(
      'no_credits',
      s.parent
        ? 'The parent account has no credits left and its grace window has closed.'
        : 'This account has no credits left and its grace window has closed.',
    );
  }
}

export interface Warning {
  code: 'trial' | 'grace';
  message: string;
  freeUntil?: string;
  graceDaysLeft?: number;
  graceEmailsLeft?: number;
}

/** The warning a send answer carries while the paying account is on its trial or in its grace window. */
export function creditWarning(payer: AccountRow, status: CreditStatus): Warning | undefined {
  if (status.state === 'trial') {
    return {
      code: 'trial',
      message: 'This account is on its free trial; buy credits to keep sending after it ends.',
      freeUntil: iso(payer.freeUntil ?? payer.createdAt),
    };
  }
  if (status.state === 'grace') {
    return {
      code: 'grace',
      message: `Credits have run out: ${status.graceDaysLeft} days or ${status.graceEmailsLeft} more emails of grace remain, whichever ends first. Buy credits to keep sending.`,
      graceDaysLeft: status.graceDaysLeft,
      graceEmailsLeft: status.graceEmailsLeft,
    };
  }
  return undefined;
}

/** What a send costs its paying account: nothing on the trial, a credit, or a grace email. */
export type Charge = 'none' | 'credit' | 'grace';

/**
 * The charge of one send to the paying account (after assertCredit on the same fresh row, inside the send's
 * transaction) and the warning the answer carries: free with a warning on the trial, one credit when `ok`, one grace
 * email with a warning in the grace window. The credit rule itself is assertCredit's alone: an exhausted payer here
 * means the commit skipped it, a defect, not a `402`.
 */
export function chargeOf(payer: AccountRow, policy: CreditPolicy, now: number): { charge: Charge; warning: Warning | undefined } {
  const status = creditStatus(payer, policy, now);
  switch (status.state) {
    case 'trial':
      return { charge: 'none', warning: creditWarning(payer, status) };
    case 'ok':
      return { charge: 'credit', warning: undefined };
    case 'grace':
      return { charge: 'grace', warning: creditWarning(payer, { ...status, graceEmailsLeft: status.graceEmailsLeft - 1 }) };
    case 'exhausted':
      throw new Error('chargeOf: the paying account has no credit; assertCredit must run first in the same transaction');
  }
}

/** What a send counts: `recipients` against today's quota, `reputed` of them toward the tiers, `charge` on the payer. */
export interface SendCount {
  recipients: number;
  reputed: number;
  charge: Charge;
  now: number;
}

/**
 * The rows as a send leaves them: `recipients` counted against today's quota of the account and of its parent (a
 * count of another day starts again), `reputed` of them (the mailbox simulator's are not) in the account's lifetime
 * total, which the tiers grade, and `charge` on the paying account (the parent for a sub-account); the last credit
 * opens the grace window. Worked out from the rows the send's transaction holds (read locked, in id order), so no
 * other send changes them before it commits; or, read unlocked in a batch that writes them late, counted at its commit
 * on the rows as they stand then, under a guard that what was worked out here still holds (COUNTED_LATE).
 */
export function afterSend(s: Sender, send: SendCount): Sender {
  const day = utcDay(send.now);
  const count = (row: AccountRow, own: number, paying: boolean): AccountRow => {
    const credit = paying && send.charge === 'credit' ? 1 : 0;
    return {
      ...row,
      sentTodayCount: row.sentTodayDay === day ? row.sentTodayCount + send.recipients : send.recipients,
      sentTodayDay: day,
      totalSent: row.totalSent + own,
      creditsBalance: row.creditsBalance - credit,
      creditsTotalUsed: row.creditsTotalUsed + credit,
      graceStartedAt: credit === 1 && row.creditsBalance === 1 ? send.now : row.graceStartedAt,
      graceEmailsUsed: row.graceEmailsUsed + (paying && send.charge === 'grace' ? 1 : 0),
    };
  };
  return s.parent
    ? { acting: count(s.acting, send.reputed, false), parent: count(s.parent, 0, true) }
    : { acting: count(s.acting, send.reputed, true), parent: null };
}

/**
 * Writes a send's counts to its account rows: `after`, from afterSend on `before` as the send read them. In a batch that
 * takes late writes (db/late-writes.ts: the group commit on Postgres), at the batch's end, added to the rows as they
 * stand then under the guard that the send's decisions still hold (COUNTED_LATE); else now, one update a row, in the
 * same round trip.
 */
export async function recordSend(db: Db, before: Sender, after: Sender, send: SendCount): Promise<void> {
  if (takesLateWrites(db)) {
    writeLate(db, COUNTED_LATE, before.acting.id, countedSend(before.acting, after.acting, send, !before.parent));
    if (before.parent && after.parent) writeLate(db, COUNTED_LATE, before.parent.id, countedSend(before.parent, after.parent, send, true));
    return;
  }
  const q = statements(db);
  const write = (row: AccountRow) => () =>
    q.recordSend.execute({
      id: row.id,
      sentTodayCount: row.sentTodayCount,
      sentTodayDay: row.sentTodayDay,
      totalSent: row.totalSent,
      creditsBalance: row.creditsBalance,
      creditsTotalUsed: row.creditsTotalUsed,
      graceStartedAt: row.graceStartedAt,
      graceEmailsUsed: row.graceEmailsUsed,
    });
  const updated = await together(db, after.parent ? [write(after.acting), write(after.parent)] : [write(after.acting)]);
  if (updated.some((u) => changes(u) !== 1)) throw new Error('recordSend: an account is gone; loadSender holds it for the whole transaction');
}

/** One send's counts on one of its account rows, as a late write of the row's counters takes them (COUNTED_LATE). */
interface CountedSend {
  /** The row as the send read it, and as it leaves it. */
  before: AccountRow;
  after: AccountRow;
  day: string;
  /** Recipients counted against today's quota. */
  recipients: number;
  /** Added to the row's lifetime total, which the tiers grade. */
  own: number;
  /** The row pays for the send: its credit state then, and what it was charged. */
  paying: { state: CreditState; credits: number } | null;
}

function countedSend(before: AccountRow, after: AccountRow, send: SendCount, paying: boolean): CountedSend {
  return {
    before,
    after,
    day: utcDay(send.now),
    recipients: send.recipients,
    own: after.totalSent - before.totalSent,
    paying: paying
      ? { state: send.charge === 'credit' ? 'ok' : send.charge === 'grace' ? 'grace' : 'trial', credits: before.creditsBalance - after.creditsBalance }
      : null,
  };
}

/** The columns a send's decisions read that no send changes: alike in every send of a batch written late. */
const STEADY = ['dailyQuota', 'totalBounced', 'totalComplained', 'freeUntil', 'creditsTotalPurchased', 'suspendedBy'] as const;

/** Tiers in which a send's quota is the daily quota and the breaker stays shut. */
const sendsFreely = (row: AccountRow) => {
  const tier = gradeTier(row);
  return tier === 'healthy' || tier === 'warning';
};

/**
 * The late write of an account row's counters (db/late-writes.ts): a batch's sends of the row, added to it as it stands
 * at the batch's end, under a guard that each send's decisions hold on it as they did on the row it read (unlocked).
 * - Still not suspended; the same daily quota, bounces and complaints; today's count with the batch's within the quota.
 * - The tier still lets it send freely: a lifetime total already graded (TIER_MIN_SENT) can only improve as more is
 *   sent with the same bounces and complaints; one that was not stays below grading with the batch's sends, or, if
 *   the batch's sends take it there, is still the total they were graded from.
 * - Paying in credits: more credits than the batch spends (the last credit, which opens the grace window, is never
 *   spent late), and the trial still over (free_until unchanged). On the trial: still on it, nothing bought.
 * Near a limit in any of these, and in the grace window, a batch's sends are not written late at all (null): the batch
 * runs again, locking and reading the row in its turn.
 */
export const COUNTED_LATE: LateKind = {
  statement(id, entries): SQL | null {
    const sends = entries as readonly CountedSend[];
    const first = sends[0]!;
    const day = first.day;
    if (sends.some((s) => s.day !== day || STEADY.some((c) => s.before[c] !== first.before[c]))) return null;
    if (first.before.suspendedBy !== null || sends.some((s) => !sendsFreely(s.before) || !sendsFreely(s.after))) return null;
    const recipients = sends.reduce((n, s) => n + s.recipients, 0);
    const own = sends.reduce((n, s) => n + s.own, 0);
    const graded = Math.min(...sends.map((s) => s.before.totalSent));
    let tierGuard: SQL;
    if (graded >= TIER_MIN_SENT) tierGuard = sql`total_sent >= ${graded}`;
    else if (graded + own < TIER_MIN_SENT) tierGuard = sql`total_sent + ${own} < ${TIER_MIN_SENT}`;
    else tierGuard = sql`total_sent = ${graded}`;
    const paying = sends.map((s) => s.paying);
    let credits = 0;
    let creditGuard = sql`true`;
    if (paying.some((p) => p !== null)) {
      if (paying.some((p) => p === null)) return null;
      const states = new Set(paying.map((p) => p!.state));
      if (states.size !== 1) return null;
      credits = paying.reduce((n, p) => n + p!.credits, 0);
      const f = first.before.freeUntil;
      if (states.has('ok')) creditGuard = sql`credits_balance > ${credits} and free_until is not distinct from ${f}::bigint`;
      else if (states.has('trial') && credits === 0 && f !== null) creditGuard = sql`credits_total_purchased = 0 and free_until = ${f}::bigint`;
      else return null;
    }
    return sql`with counted as (
  update accounts set
    sent_today_count = case when sent_today_day = ${day} then sent_today_count + ${recipients}::integer else ${recipients}::integer end,
    sent_today_day = ${day},
    total_sent = total_sent + ${own}::integer,
    credits_balance = credits_balance - ${credits}::integer,
    credits_total_used = credits_total_used + ${credits}::integer
  where id = ${id} and suspended_by is null and daily_quota = ${first.before.dailyQuota}::integer
    and total_bounced = ${first.before.totalBounced}::integer and total_complained = ${first.before.totalComplained}::integer
    and (case when sent_today_day = ${day} then sent_today_count else 0 end) + ${recipients}::integer <= daily_quota
    and ${tierGuard} and ${creditGuard}
  returning 1
)
select 1 / count(*) from counted`;
  },
};

import { eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { changes, together } from '../../db/sql.js';
import { type AccountRow, accounts } from '../../db/schema/index.js';
import { iso, utcDay } from '../shared/clock.js';
import { ApiError } from '../shared/errors.js';
import { type CreditPolicy, type CreditStatus, creditStatus } from './credits.js';
import { effectiveQuota, sentToday } from './quota.js';
import { gradeTier } from './tiers.js';

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
 * other send changes them before it commits.
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

/** Writes a send's counts (`after`, from afterSend) to its account rows: one update a row, in the same round trip. */
export async function recordSend(db: Db, after: Sender): Promise<void> {
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

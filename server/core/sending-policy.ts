import { eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { together } from '../../db/sql.js';
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

// A send's update of one account row, compiled once (it runs inside every send's transaction): the recipients counted
// against today's quota (`n`) and in the lifetime total the tiers grade (`own`), and the charge on the paying account
// (`credit` or `grace`, 0 or 1). The row comes back as the update left it.
const statements = definePrepared((db) => ({
  recordSend: db
    .update(accounts)
    .set({
      sentTodayCount: sql`case when ${accounts.sentTodayDay} = ${p('day')} then ${accounts.sentTodayCount} + ${p('n')} else ${p('n')} end`,
      sentTodayDay: sql`${p('day')}`,
      totalSent: sql`${accounts.totalSent} + ${p('own')}`,
      creditsBalance: sql`${accounts.creditsBalance} - ${p('credit')}`,
      creditsTotalUsed: sql`${accounts.creditsTotalUsed} + ${p('credit')}`,
      // The last credit opens the grace window now.
      graceStartedAt: sql`case when ${p('credit')} = 1 and ${accounts.creditsBalance} = 1 then ${p('now')} else ${accounts.graceStartedAt} end`,
      graceEmailsUsed: sql`${accounts.graceEmailsUsed} + ${p('grace')}`,
    })
    .where(eq(accounts.id, p('id')))
    .returning()
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

/**
 * Records a send on its accounts, one update per row: `recipients` counted against today's quota of the account and
 * of its parent, `reputed` of them (the mailbox simulator's are not) in the account's lifetime total, which the tiers
 * grade, and `charge` on the paying account (the parent for a sub-account). Returns the acting account's row as the
 * update left it (still held by the caller's transaction).
 */
export async function recordSend(db: Db, s: Sender, send: { recipients: number; reputed: number; charge: Charge; now: number }): Promise<AccountRow> {
  const day = utcDay(send.now);
  const credit = send.charge === 'credit' ? 1 : 0;
  const grace = send.charge === 'grace' ? 1 : 0;
  const paying = { credit, grace, now: send.now };
  const free = { credit: 0, grace: 0, now: send.now };
  const q = statements(db);
  const updates = [() => q.recordSend.execute({ id: s.acting.id, day, n: send.recipients, own: send.reputed, ...(s.parent ? free : paying) })];
  // A sub-account's parent is counted and charged in the same round trip (both rows are locked already: loadSender).
  const parent = s.parent;
  if (parent) updates.push(() => q.recordSend.execute({ id: parent.id, day, n: send.recipients, own: 0, ...paying }));
  const [[acting] = []] = await together(db, updates);
  if (!acting) throw new Error('recordSend: the acting account is gone; loadSender holds it for the whole transaction');
  return acting;
}

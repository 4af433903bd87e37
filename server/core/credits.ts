import { DAY_MS, isoOrNull } from '../shared/clock.js';

/** Credit policy of docs/api/decisions.md section 4, from config. */
export interface CreditPolicy {
  trialDays: number;
  graceDays: number;
  graceEmails: number;
}

export type CreditState = 'trial' | 'ok' | 'grace' | 'exhausted';

export interface CreditRecord {
  createdAt: number;
  creditsBalance: number;
  creditsTotalPurchased: number;
  creditsTotalUsed: number;
  freeUntil: number | null;
  graceStartedAt: number | null;
  graceEmailsUsed: number;
}

export interface CreditStatus {
  state: CreditState;
  graceDaysLeft: number;
  graceEmailsLeft: number;
}

/**
 * The credit state of a top-level account at `now`: `trial` before freeUntil while nothing was bought, `ok` with a
 * positive balance, then `grace` for graceDays or graceEmails sends (whichever ends first), then `exhausted`.
 */
export function creditStatus(r: CreditRecord, policy: CreditPolicy, now: number): CreditStatus {
  const full = { graceDaysLeft: policy.graceDays, graceEmailsLeft: policy.graceEmails };
  if (r.creditsTotalPurchased === 0 && r.freeUntil !== null && now < r.freeUntil) return { state: 'trial', ...full };
  if (r.creditsBalance > 0) return { state: 'ok', ...full };
  const graceStart = r.graceStartedAt ?? r.freeUntil ?? r.createdAt;
  const graceEnd = graceStart + policy.graceDays * DAY_MS;
  const graceDaysLeft = Math.max(0, Math.ceil((graceEnd - now) / DAY_MS));
  const graceEmailsLeft = Math.max(0, policy.graceEmails - r.graceEmailsUsed);
  const state = now < graceEnd && graceEmailsLeft > 0 ? 'grace' : 'exhausted';
  return { state, graceDaysLeft: state === 'grace' ? graceDaysLeft : 0, graceEmailsLeft: state === 'grace' ? graceEmailsLeft : 0 };
}

export interface CreditsView {
  balance: number;
  state: CreditState;
  freeUntil: string | null;
  graceDaysLeft: number;
  graceEmailsLeft: number;
  totalPurchased: number;
  totalUsed: number;
}

export function creditsView(r: CreditRecord, status: CreditStatus): CreditsView {
  return {
    balance: r.creditsBalance,
    state: status.state,
    freeUntil: isoOrNull(r.freeUntil),
    graceDaysLeft: status.graceDaysLeft,
    graceEmailsLeft: status.graceEmailsLeft,
    totalPurchased: r.creditsTotalPurchased,
    totalUsed: r.creditsTotalUsed,
  };
}

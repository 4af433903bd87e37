import { eq } from 'drizzle-orm';
import { type AccountRow, accounts } from '../../db/schema/index.js';
import type { Deps } from './deps.js';
import { findAccount } from './accounts.js';
import { gradeTier } from './tiers.js';

/** The reason the reputation breaker writes when it suspends an account. */
export function breakerReason(a: Pick<AccountRow, 'totalSent' | 'totalBounced' | 'totalComplained'>): string {
  const pct = (n: number) => `${((n / a.totalSent) * 100).toFixed(2)}%`;
  return `Sending paused automatically by the reputation breaker: bounce rate ${pct(a.totalBounced)} (${a.totalBounced} bounced) and complaint rate ${pct(a.totalComplained)} (${a.totalComplained} complained) over ${a.totalSent} recipients reached the paused tier (10% bounces with at least 10 bounced, or 0.5% complaints with at least 3).`;
}

/**
 * The reputation breaker: an account whose own rates grade as paused is suspended, with a reason naming them. Looked
 * at whenever a counter moves: a bounce or complaint, and a send of `sentNow` counted recipients. A send only lowers
 * the rates, so it trips the breaker only when grading starts with it (the 50th recipient can be what reaches
 * `paused`), never for an account already graded paused before it: one the operator let send again after the breaker
 * stopped it (docs/api/decisions.md section 4: only the operator lifts that) stays lifted until a new bounce or complaint. An
 * account already suspended, by anyone, is left as it is.
 */
export async function tripBreakerIfPaused(deps: Pick<Deps, 'db' | 'logger'>, accountId: string, now: number, sentNow = 0): Promise<void> {
  const row = await findAccount(deps.db, accountId);
  if (row) await tripBreakerOn(deps, row, now, sentNow);
}

/** Whether the breaker suspends an account whose row stands as `row`, `sentNow` counted recipients after its last grading. */
export function breakerTrips(row: AccountRow, sentNow = 0): boolean {
  if (row.suspendedBy !== null || gradeTier(row) !== 'paused') return false;
  return !(sentNow > 0 && gradeTier({ ...row, totalSent: row.totalSent - sentNow }) === 'paused');
}

/** As tripBreakerIfPaused, on the account's row as the caller's transaction holds it (a send's, just counted). */
export async function tripBreakerOn(deps: Pick<Deps, 'db' | 'logger'>, row: AccountRow, now: number, sentNow = 0): Promise<void> {
  if (breakerTrips(row, sentNow)) await suspendByBreaker(deps, row, now);
}

/** Suspends the account by the breaker (breakerTrips said so), with a reason naming its rates. */
export async function suspendByBreaker(deps: Pick<Deps, 'db' | 'logger'>, row: AccountRow, now: number): Promise<void> {
  const suspension = breakerSuspension(row, now);
  await deps.db.update(accounts).set(suspension).where(eq(accounts.id, row.id));
  deps.logger.warn('account.breaker_tripped', { accountId: row.id, reason: suspension.suspendedReason });
}

/** What the breaker writes on the account it suspends. */
export function breakerSuspension(row: AccountRow, now: number): Pick<AccountRow, 'suspendedBy' | 'suspendedReason' | 'suspendedAt'> {
  return { suspendedBy: 'breaker', suspendedReason: breakerReason(row), suspendedAt: now };
}

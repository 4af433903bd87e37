const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

/**
 * Gaps before the 2nd, 3rd, ... attempt of a webhook delivery, each counted from the previous attempt (docs/api/contract.md limits,
 * docs/api/decisions.md section 7): 1 min, 5 min, 30 min, 2 h, 12 h. Six attempts in all; a delivery that used them is final.
 */
export const WEBHOOK_RETRY_GAPS_MS: readonly number[] = [1 * MINUTE, 5 * MINUTE, 30 * MINUTE, 2 * HOUR, 12 * HOUR];

export const WEBHOOK_MAX_ATTEMPTS = WEBHOOK_RETRY_GAPS_MS.length + 1;

/** Consecutive failed attempts (pings aside) that switch an endpoint off. */
export const WEBHOOK_DISABLE_AFTER_FAILURES = 10;

/** When to try again after the `attempts`-th attempt (counting from 1) failed at `now`; null when it was the last. */
export function nextWebhookAttemptAt(attempts: number, now: number): number | null {
  const gap = WEBHOOK_RETRY_GAPS_MS[attempts - 1];
  return gap === undefined ? null : now + gap;
}

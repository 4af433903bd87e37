import { DAY_MS } from '../shared/clock.js';

const MINUTE = 60_000;

/** Gaps before the 1st, 2nd, ... retry of a deferred recipient (docs/api/decisions.md section 3); the last repeats. */
export const RETRY_GAPS_MS: readonly number[] = [5 * MINUTE, 10 * MINUTE, 20 * MINUTE, 40 * MINUTE, 80 * MINUTE, 120 * MINUTE];

/** A recipient still deferred this long after the send bounces with 4.4.7. */
export const DELIVERY_WINDOW_MS = 5 * DAY_MS;

/**
 * When to try again after the `attempts`-th attempt (counting from 1) was deferred at `now`, or null when the
 * delivery window has closed. The last try lands exactly at the window's end.
 */
export function nextAttemptAt(attempts: number, now: number, expiresAt: number): number | null {
  if (now >= expiresAt) return null;
  const gap = RETRY_GAPS_MS[Math.min(attempts, RETRY_GAPS_MS.length) - 1] ?? RETRY_GAPS_MS[0]!;
  return Math.min(now + gap, expiresAt);
}

/**
 * Time as a dependency: production reads the system clocks, tests move a fake one.
 *
 * Two readings, for two uses. `now()` is the wall clock: what is stored and shown (a send's time, a schedule, a
 * session's last use). It can step, backward or forward (NTP correcting a drifted clock, an operator's `date -s`, a
 * VM resumed). `monotonic()` never steps: every duration measured inside this process (a rate-limit window, the
 * sign-in throttle, the store's fault window, a lease's term) is measured with it, so a step of the wall clock
 * neither locks a key out for the size of the step nor ends a window early.
 */
export interface Clock {
  /** Milliseconds since the epoch (the wall clock). */
  now(): number;
  /** Milliseconds from an arbitrary origin that only moves forward, at a steady rate: durations only. */
  monotonic(): number;
}

export const systemClock: Clock = { now: () => Date.now(), monotonic: () => performance.now() };

export const DAY_MS = 86_400_000;

const leaseAnchors = new WeakMap<Clock, { wall: number; monotonic: number }>();

/**
 * The time of lease deadlines (`locked_until` on the durable queues): epoch milliseconds that agree with the wall
 * clock the first time this process asks, and from then on move with the monotonic clock only. A lease this process
 * writes and judges lasts its term whatever the wall clock does meanwhile; stored, it still reads as a time of day
 * (for the dashboard, and for the next process after a crash, which judges it on its own timeline: see
 * `capForeignLeases` of the queues). The timeline drifts from the wall clock only by the steps taken while the
 * process runs.
 */
export function leaseNow(clock: Clock): number {
  let anchor = leaseAnchors.get(clock);
  if (!anchor) {
    anchor = { wall: clock.now(), monotonic: clock.monotonic() };
    leaseAnchors.set(clock, anchor);
  }
  // Whole milliseconds: the monotonic clock has fractions, and a stored deadline is an integer column (a bigint on
  // Postgres, which refuses a fraction).
  return Math.floor(anchor.wall + (clock.monotonic() - anchor.monotonic));
}

/** ISO 8601 UTC with milliseconds, the API's timestamp format. */
export function iso(ms: number): string {
  return new Date(ms).toISOString();
}

export function isoOrNull(ms: number | null | undefined): string | null {
  return ms === null || ms === undefined ? null : iso(ms);
}

/** Midnight UTC of the day containing `ms`, as YYYY-MM-DD. */
export function utcDay(ms: number): string {
  return iso(ms).slice(0, 10);
}

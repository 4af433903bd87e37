/** Time as a dependency: production reads the system clock, tests move a fake one. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export const DAY_MS = 86_400_000;

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

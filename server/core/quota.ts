import { utcDay } from '../shared/clock.js';
import type { Tier } from './tiers.js';

/** Recipients counted today (UTC); a count stored for an earlier day reads as zero. */
export function sentToday(r: { sentTodayDay: string | null; sentTodayCount: number }, now: number): number {
  return r.sentTodayDay === utcDay(now) ? r.sentTodayCount : 0;
}

/** `dailyQuota`, or a tenth of it (rounded down) while throttled. */
export function effectiveQuota(dailyQuota: number, tier: Tier): number {
  return tier === 'throttled' ? Math.floor(dailyQuota / 10) : dailyQuota;
}

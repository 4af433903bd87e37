/** Sending tiers, graded from lifetime rates of the account's own sends (docs/api/decisions.md section 4). */
export type Tier = 'healthy' | 'warning' | 'throttled' | 'paused';

/** Grading starts once this many recipients have been sent to. */
export const TIER_MIN_SENT = 50;

/**
 * Worst first: the first row whose bounce or complaint threshold is reached decides the tier. A rate counts only with
 * at least its row's count behind it (docs/api/decisions.md section 13), so that at low volume a few reports, which anyone can
 * try to send, cannot grade an account down: 1 complaint in 50 sends is 2%, far past every complaint rate.
 */
export const TIER_THRESHOLDS: readonly {
  tier: Exclude<Tier, 'healthy'>;
  bounceRate: number;
  minBounced: number;
  complaintRate: number;
  minComplained: number;
}[] = [
  { tier: 'paused', bounceRate: 0.1, minBounced: 10, complaintRate: 0.005, minComplained: 3 },
  { tier: 'throttled', bounceRate: 0.05, minBounced: 5, complaintRate: 0.001, minComplained: 2 },
  { tier: 'warning', bounceRate: 0.02, minBounced: 5, complaintRate: 0.0005, minComplained: 2 },
];

export interface ReputationCounters {
  totalSent: number;
  totalBounced: number;
  totalComplained: number;
}

export function gradeTier(c: ReputationCounters): Tier {
  if (c.totalSent < TIER_MIN_SENT) return 'healthy';
  const bounce = c.totalBounced / c.totalSent;
  const complaint = c.totalComplained / c.totalSent;
  for (const row of TIER_THRESHOLDS) {
    const bounces = bounce >= row.bounceRate && c.totalBounced >= row.minBounced;
    const complaints = complaint >= row.complaintRate && c.totalComplained >= row.minComplained;
    if (bounces || complaints) return row.tier;
  }
  return 'healthy';
}

/** Sending tiers, graded from lifetime rates of the account's own sends (decisions.md section 4). */
export type Tier = 'healthy' | 'warning' | 'throttled' | 'paused';

/** Grading starts once this many recipients have been sent to. */
export const TIER_MIN_SENT = 50;

/** Worst first: the first row whose bounce or complaint threshold is reached decides the tier. */
export const TIER_THRESHOLDS: readonly { tier: Exclude<Tier, 'healthy'>; bounceRate: number; complaintRate: number }[] = [
  { tier: 'paused', bounceRate: 0.1, complaintRate: 0.005 },
  { tier: 'throttled', bounceRate: 0.05, complaintRate: 0.001 },
  { tier: 'warning', bounceRate: 0.02, complaintRate: 0.0005 },
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
    if (bounce >= row.bounceRate || complaint >= row.complaintRate) return row.tier;
  }
  return 'healthy';
}

import { asc, count, desc, eq, or, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { accounts, customerDatabases, webhookEndpoints } from '../../db/schema/index.js';
import { type AccountView, accountView } from '../../server/core/accounts.js';
import { TIER_MIN_SENT } from '../../server/core/tiers.js';
import { type WebhookEndpointView, endpointView } from '../../server/core/webhooks.js';
import { pendingWrites } from '../../server/customer-db/outbox.js';
import { utcDay } from '../../server/clock.js';
import type { Deps } from '../../server/deps.js';

/** What the overview lists as needing the operator's eye: each list capped, with the full count beside it. */

/** Rows each list shows; the count says how many more there are. */
export const ATTENTION_LIMIT = 20;

export interface Capped<T> {
  items: T[];
  total: number;
}

export interface EndpointTrouble {
  endpoint: WebhookEndpointView;
  accountId: string;
  accountName: string;
}

/** Endpoints switched off, or failing now (consecutive failures since their last success), across every account. */
export function troubledWebhooks(db: Db): Capped<EndpointTrouble> {
  const troubled = or(eq(webhookEndpoints.active, false), sql`${webhookEndpoints.failureCount} > 0`);
  const rows = db
    .select({ endpoint: webhookEndpoints, accountName: accounts.name })
    .from(webhookEndpoints)
    .innerJoin(accounts, eq(accounts.id, webhookEndpoints.accountId))
    .where(troubled)
    // Switched off first, then the longest failing streak.
    .orderBy(asc(webhookEndpoints.active), desc(webhookEndpoints.failureCount), asc(webhookEndpoints.id))
    .limit(ATTENTION_LIMIT)
    .all();
  const total = db.select({ n: count() }).from(webhookEndpoints).where(troubled).get()?.n ?? 0;
  return { items: rows.map((r) => ({ endpoint: endpointView(r.endpoint), accountId: r.endpoint.accountId, accountName: r.accountName })), total };
}

export interface DatabaseTrouble {
  accountId: string;
  accountName: string;
  host: string;
  database: string;
  state: string;
  lastError: string | null;
  lastOkAt: number | null;
  pending: number;
}

/**
 * Customer databases that cannot be reached, or that have writes waiting (`pending` as GET /database counts it, the
 * outbox's own function).
 */
export function troubledDatabases(db: Db): Capped<DatabaseTrouble> {
  // One seek per database in the outbox's pending index (written out: drizzle leaves columns unqualified in sql``).
  const waiting = sql`exists (select 1 from customer_db_writes w where w.database_account_id = "customer_databases"."account_id" and w.set_aside_at is null)`;
  const troubled = or(eq(customerDatabases.state, 'unreachable'), waiting);
  const rows = db
    .select({ row: customerDatabases, accountName: accounts.name })
    .from(customerDatabases)
    .innerJoin(accounts, eq(accounts.id, customerDatabases.accountId))
    .where(troubled)
    .orderBy(desc(eq(customerDatabases.state, 'unreachable')), asc(customerDatabases.accountId))
    .limit(ATTENTION_LIMIT)
    .all();
  const total = db.select({ n: count() }).from(customerDatabases).where(troubled).get()?.n ?? 0;
  const items = rows.map(({ row, accountName }) => ({
    accountId: row.accountId,
    accountName,
    host: row.host,
    database: row.database,
    state: row.state,
    lastError: row.lastError,
    lastOkAt: row.lastOkAt,
    pending: pendingWrites(db, row.accountId),
  }));
  return { items, total };
}

/** Share of the day's effective quota that counts as near it. */
export const NEAR_QUOTA_SHARE = 0.8;

export interface AccountTrouble {
  view: AccountView;
  nearQuota: boolean;
  badTier: boolean;
}

/**
 * Accounts that have used NEAR_QUOTA_SHARE or more of today's effective quota, or whose tier is not `healthy`, judged
 * by the Account resource itself (accountView: sentToday, effectiveQuota and the tier graded by tiers.ts). Only
 * accounts that counted recipients today or have reached the grading minimum can be either, so only those are read.
 */
export function troubledAccounts(deps: Pick<Deps, 'db' | 'clock' | 'config'>): Capped<AccountTrouble> {
  const today = utcDay(deps.clock.now());
  const candidates = deps.db
    .select()
    .from(accounts)
    .where(or(eq(accounts.sentTodayDay, today), sql`${accounts.totalSent} >= ${TIER_MIN_SENT}`))
    .orderBy(asc(accounts.name), asc(accounts.id))
    .all();
  const troubled: AccountTrouble[] = [];
  for (const row of candidates) {
    const view = accountView(deps, row);
    const { sentToday, effectiveQuota, tier } = view.sending;
    const nearQuota = sentToday > 0 && sentToday >= NEAR_QUOTA_SHARE * effectiveQuota;
    const badTier = tier !== 'healthy';
    if (nearQuota || badTier) troubled.push({ view, nearQuota, badTier });
  }
  return { items: troubled.slice(0, ATTENTION_LIMIT), total: troubled.length };
}

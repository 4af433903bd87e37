import { asc, count, desc, eq, or, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { accounts, customerDatabases, webhookEndpoints } from '../../db/schema/index.js';
import { type AccountView, accountView } from '../../server/core/accounts.js';
import { TIER_MIN_SENT } from '../../server/core/tiers.js';
import { type DatabaseStatus, databaseStatusOf } from '../../server/core/customer-db.js';
import { utcDay } from '../../server/shared/clock.js';
import type { Deps } from '../../server/core/deps.js';
import { ENDPOINT_HEALTH, type EndpointSummary, listEndpoints } from './webhooks.js';
import { one } from '../../db/sql.js';

/** What the overview lists as needing the operator's eye: each list capped, with the full count beside it. */

/** Rows each list shows; the count says how many more there are. */
export const ATTENTION_LIMIT = 20;

export interface Capped<T> {
  items: T[];
  total: number;
}

/**
 * Endpoints switched off, then those failing now (consecutive failed attempts since their last success), across every
 * account: the webhooks pages' own health rule and list (ENDPOINT_HEALTH, listEndpoints), newest first within each;
 * and how many endpoints there are at all (none is no all-clear).
 */
export async function troubledWebhooks(db: Db): Promise<Capped<EndpointSummary> & { endpoints: number }> {
  const items: EndpointSummary[] = [];
  let total = 0;
  for (const health of ['disabled', 'failing'] as const) {
    total += (await one(db.select({ n: count() }).from(webhookEndpoints).where(ENDPOINT_HEALTH[health].where())))?.n ?? 0;
    const left = ATTENTION_LIMIT - items.length;
    if (left > 0) items.push(...(await listEndpoints(db, { health }, { after: null, before: null }, left)).items);
  }
  return { items, total, endpoints: (await one(db.select({ n: count() }).from(webhookEndpoints)))?.n ?? 0 };
}

export interface DatabaseTrouble {
  accountId: string;
  accountName: string;
  /** As GET /database answers it for that account (state, pending writes, last error). */
  status: DatabaseStatus;
}

/**
 * Customer databases the writer cannot reach, or that have writes waiting (`pending` as GET /database counts it),
 * each with the status databaseStatusOf gives, as the Database page shows it.
 */
export async function troubledDatabases(db: Db): Promise<Capped<DatabaseTrouble> & { databases: number }> {
  // One seek per database in the outbox's pending index (written out: drizzle leaves columns unqualified in sql``).
  const waiting = sql`exists (select 1 from customer_db_writes w where w.database_account_id = "customer_databases"."account_id" and w.set_aside_at is null)`;
  const troubled = or(eq(customerDatabases.state, 'unreachable'), waiting);
  const rows = await db
    .select({ accountId: customerDatabases.accountId, accountName: accounts.name })
    .from(customerDatabases)
    .innerJoin(accounts, eq(accounts.id, customerDatabases.accountId))
    .where(troubled)
    .orderBy(desc(eq(customerDatabases.state, 'unreachable')), asc(customerDatabases.accountId))
    .limit(ATTENTION_LIMIT);
  const total = (await one(db.select({ n: count() }).from(customerDatabases).where(troubled)))?.n ?? 0;
  const items = [];
  for (const r of rows) items.push({ ...r, status: await databaseStatusOf({ db }, r.accountId) });
  return {
    items,
    total,
    databases: (await one(db.select({ n: count() }).from(customerDatabases)))?.n ?? 0,
  };
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
export async function troubledAccounts(deps: Pick<Deps, 'db' | 'clock' | 'config'>): Promise<Capped<AccountTrouble>> {
  const today = utcDay(deps.clock.now());
  const candidates = await deps.db
    .select()
    .from(accounts)
    .where(or(eq(accounts.sentTodayDay, today), sql`${accounts.totalSent} >= ${TIER_MIN_SENT}`))
    .orderBy(asc(accounts.name), asc(accounts.id));
  const troubled: AccountTrouble[] = [];
  for (const row of candidates) {
    const view = await accountView(deps, row);
    const { sentToday, effectiveQuota, tier } = view.sending;
    const nearQuota = sentToday > 0 && sentToday >= NEAR_QUOTA_SHARE * effectiveQuota;
    const badTier = tier !== 'healthy';
    if (nearQuota || badTier) troubled.push({ view, nearQuota, badTier });
  }
  return { items: troubled.slice(0, ATTENTION_LIMIT), total: troubled.length };
}

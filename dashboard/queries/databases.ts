import { and, asc, count, eq, gt } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { type CustomerDbState, accounts, customerDatabases } from '../../db/schema/index.js';
import { type DatabaseStatus, databaseStatusOf } from '../../server/core/customer-db.js';
import { PAGE_SIZE } from './id-pages.js';
import { one } from '../../db/sql.js';

/**
 * Every customer database for the operator: the accounts that have one of their own (a sub-account writing to its
 * parent's shows under the parent). Each row's status is the one GET /database answers for that account, from the
 * same function the CLI's `database status` calls, so a state or a pending count means the same thing everywhere.
 */

export interface DatabaseEntry {
  accountId: string;
  accountName: string;
  status: DatabaseStatus;
}

export interface DatabaseListQuery {
  /** Only databases in this state (the writer's view: connected or unreachable), or all. */
  state: CustomerDbState | null;
  /** Keyset: accounts whose id sorts after this one. */
  after: string | null;
}

export async function listDatabases(db: Db, q: DatabaseListQuery): Promise<{ entries: DatabaseEntry[]; more: boolean }> {
  const rows = await db
    .select({ accountId: customerDatabases.accountId, accountName: accounts.name })
    .from(customerDatabases)
    .innerJoin(accounts, eq(accounts.id, customerDatabases.accountId))
    .where(and(q.state === null ? undefined : eq(customerDatabases.state, q.state), q.after === null ? undefined : gt(customerDatabases.accountId, q.after)))
    .orderBy(asc(customerDatabases.accountId))
    .limit(PAGE_SIZE + 1);
  const entries: DatabaseEntry[] = [];
  for (const r of rows.slice(0, PAGE_SIZE)) entries.push({ ...r, status: await databaseStatusOf({ db }, r.accountId) });
  return { entries, more: rows.length > PAGE_SIZE };
}

/** How many databases there are, and how many of them the writer cannot reach. */
export async function countDatabases(db: Db): Promise<{ total: number; unreachable: number }> {
  const total = (await one(db.select({ n: count() }).from(customerDatabases)))?.n ?? 0;
  const unreachable = (await one(db.select({ n: count() }).from(customerDatabases).where(eq(customerDatabases.state, 'unreachable'))))?.n ?? 0;
  return { total, unreachable };
}

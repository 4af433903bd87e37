import { type SQL, and, eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { type AccountRow, type CheckValue, type RecordKind, accounts, domainKeys, domains } from '../../db/schema/index.js';
import { databaseOwnerOf } from '../../server/core/customer-db-outbox.js';
import { type DomainView, domainView } from '../../server/core/domains.js';
import type { Deps } from '../../server/core/deps.js';
import { ApiError } from '../../server/shared/errors.js';
import { type IdPage, PAGE_SIZE, type PageLink, likePattern, pageByIds } from './id-pages.js';
import { one } from '../../db/sql.js';

/**
 * What the domains pages read across every account. Each row is presented with the API's domainView, so a status or
 * a record means here what it means in GET /domains.
 */

export interface DomainListRow {
  view: DomainView;
  account: { id: string; name: string };
  /** Whether the account (or its parent) has a database to hold inbound mail: without one, receiving is refused. */
  hasDatabase: boolean;
}

async function selectDomains(db: Db, where: SQL | undefined, order: SQL, take: number) {
  return await db
    .select({ domain: domains, key: domainKeys, account: { id: accounts.id, name: accounts.name } })
    .from(domains)
    .innerJoin(domainKeys, eq(domainKeys.id, domains.keyId))
    .innerJoin(accounts, eq(accounts.id, domains.accountId))
    .where(where)
    .orderBy(order)
    .limit(take);
}
type DomainJoinRow = Awaited<ReturnType<typeof selectDomains>>[number];

/** Every domain, newest first; optionally one account's, and `search` matching the domain's name anywhere. */
export async function listAllDomains(
  deps: Pick<Deps, 'db' | 'config'>,
  filter: { accountId: string | null; search: string },
  link: PageLink,
): Promise<IdPage<DomainListRow>> {
  const q = filter.search.trim();
  const where = and(
    filter.accountId === null ? undefined : eq(domains.accountId, filter.accountId),
    q === '' ? undefined : sql`${domains.name} LIKE ${likePattern(q.toLowerCase(), 'anywhere')} ESCAPE '\\'`,
  );
  const page = await pageByIds(
    domains.id,
    link,
    PAGE_SIZE,
    (r: DomainJoinRow) => r.domain.id,
    async (bound, order, take) => await selectDomains(deps.db, and(where, bound), order, take),
  );
  const items: DomainListRow[] = [];
  for (const r of page.items)
    items.push({ view: domainView(deps, r.domain, r.key), account: r.account, hasDatabase: await hasDatabase(deps.db, r.account.id) });
  return { ...page, items };
}

/** Whether inbound mail for `accountId`'s domains has a database to go to: its own or its parent's (databaseOwnerOf). */
export async function hasDatabase(db: Db, accountId: string): Promise<boolean> {
  return (await databaseOwnerOf(db, accountId)) !== null;
}

/** The account a domain belongs to (the operator acts as it), or the 404 page. */
export async function requireDomainAccount(deps: Pick<Deps, 'db'>, domainId: string): Promise<AccountRow> {
  const found = await one(
    deps.db.select({ account: accounts }).from(domains).innerJoin(accounts, eq(accounts.id, domains.accountId)).where(eq(domains.id, domainId)),
  );
  if (!found) throw new ApiError('not_found', 'There is no domain with that id.');
  return found.account;
}

/** What the last "verify" found for each record (stored by verifyDomain), or null before the first. */
export async function lastChecks(deps: Pick<Deps, 'db'>, domainId: string): Promise<Record<RecordKind, CheckValue> | null> {
  return (await one(deps.db.select({ checks: domains.checks }).from(domains).where(eq(domains.id, domainId))))?.checks ?? null;
}

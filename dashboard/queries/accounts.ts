import { and, asc, count, eq, inArray, or, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { type AccountRow, accounts } from '../../db/schema/index.js';
import { type AccountView, accountView } from '../../server/core/accounts.js';
import type { Deps } from '../../server/core/deps.js';
import { type IdPage, PAGE_SIZE, type PageLink, likePattern, pageByIds } from './id-pages.js';
import { containsNoCase, one } from '../../db/sql.js';

/**
 * What the accounts pages read across every account (the API sees one account at a time), and the choices of every
 * account picker. Rows are presented with the API's own accountView, so a tier, a quota or a credit state means here
 * what it means in GET /account.
 */

/** An account picker offers at most this many accounts; any other is reached from its own page (which picks it). */
export const ACCOUNT_CHOICES = 500;

export interface AccountListRow {
  view: AccountView;
  parentName: string | null;
  subAccounts: number;
}

/** Every account, top-level and sub, newest first; `search` matches a name anywhere or an id from its start. */
export async function listAccounts(deps: Pick<Deps, 'db' | 'clock' | 'config'>, search: string, link: PageLink): Promise<IdPage<AccountListRow>> {
  const q = search.trim();
  const filter =
    q === '' ? undefined : or(containsNoCase(deps.db, accounts.name, q), sql`${accounts.id} LIKE ${likePattern(q.toLowerCase(), 'start')} ESCAPE '\\'`);
  const page = await pageByIds(
    accounts.id,
    link,
    PAGE_SIZE,
    (r: AccountRow) => r.id,
    async (bound, order, take) => await deps.db.select().from(accounts).where(and(filter, bound)).orderBy(order).limit(take),
  );
  const ids = page.items.map((r) => r.id);
  const parentIds = [...new Set(page.items.flatMap((r) => (r.parentId === null ? [] : [r.parentId])))];
  const parents = new Map(parentIds.length === 0 ? [] : (await deps.db.select().from(accounts).where(inArray(accounts.id, parentIds))).map((p) => [p.id, p]));
  const subCounts = new Map(
    ids.length === 0
      ? []
      : (
          await deps.db.select({ parentId: accounts.parentId, n: count() }).from(accounts).where(inArray(accounts.parentId, ids)).groupBy(accounts.parentId)
        ).map((r) => [r.parentId, r.n]),
  );
  const items: AccountListRow[] = [];
  for (const row of page.items) {
    const parent = row.parentId === null ? undefined : parents.get(row.parentId);
    items.push({ view: await accountView(deps, row, parent), parentName: parent?.name ?? null, subAccounts: subCounts.get(row.id) ?? 0 });
  }
  return { ...page, items };
}

export interface AccountChoice {
  id: string;
  name: string;
  /** The parent's name, for a sub-account. */
  parentName: string | null;
}

// The parent's name by a subquery, not a join of an alias: an alias of a table of the SQLite schema is not named as
// one in Postgres's SQL (drizzle's pg dialect renders it as a table called "parent").
const parentName = sql<string | null>`(select p.name from accounts p where p.id = ${accounts.parentId})`;
const choiceColumns = { id: accounts.id, name: accounts.name, parentName };

/**
 * Accounts for every account picker (the send log's, webhooks' and suppressions' filters, the add-suppression and
 * connect-domain forms): top-level accounts by name, each followed by its sub-accounts by name; at most
 * ACCOUNT_CHOICES of them, plus `include` (the account the page is about) wherever it is not among those.
 */
export async function accountChoices(db: Db, include: string | null | undefined): Promise<AccountChoice[]> {
  const rows = await db
    .select(choiceColumns)
    .from(accounts)
    .orderBy(
      sql`coalesce(${parentName}, ${accounts.name})`,
      sql`coalesce(${accounts.parentId}, ${accounts.id})`,
      sql`${accounts.parentId} is not null`,
      asc(accounts.name),
      asc(accounts.id),
    )
    .limit(ACCOUNT_CHOICES);
  if (include && !rows.some((r) => r.id === include)) {
    const row = await one(db.select(choiceColumns).from(accounts).where(eq(accounts.id, include)));
    if (row) rows.unshift(row);
  }
  return rows;
}

/** How many accounts there are (the list's heading says it). */
export async function countAccounts(deps: Pick<Deps, 'db'>): Promise<number> {
  return (await one(deps.db.select({ n: count() }).from(accounts)))?.n ?? 0;
}

import { and, asc, count, inArray, or, sql } from 'drizzle-orm';
import { type AccountRow, accounts } from '../../db/schema/index.js';
import { type AccountView, accountView } from '../../server/core/accounts.js';
import type { Deps } from '../../server/deps.js';
import { type IdPage, type PageLink, likePattern, pageByIds } from './id-pages.js';

/**
 * What the accounts pages read across every account (the API sees one account at a time). Rows are presented with
 * the API's own accountView, so a tier, a quota or a credit state means here what it means in GET /account.
 */

export const ACCOUNTS_PER_PAGE = 50;
/** The connect-a-domain form offers at most this many accounts by name; any other is reached from its own page. */
export const ACCOUNT_CHOICES = 500;

export interface AccountListRow {
  view: AccountView;
  parentName: string | null;
  subAccounts: number;
}

/** Every account, top-level and sub, newest first; `search` matches a name anywhere or an id from its start. */
export function listAccounts(deps: Pick<Deps, 'db' | 'clock' | 'config'>, search: string, link: PageLink): IdPage<AccountListRow> {
  const q = search.trim();
  const filter = q === '' ? undefined : or(sql`${accounts.name} LIKE ${likePattern(q, 'anywhere')} ESCAPE '\\'`, sql`${accounts.id} LIKE ${likePattern(q.toLowerCase(), 'start')} ESCAPE '\\'`);
  const page = pageByIds(accounts.id, link, ACCOUNTS_PER_PAGE, (r: AccountRow) => r.id, (bound, order, take) =>
    deps.db.select().from(accounts).where(and(filter, bound)).orderBy(order).limit(take).all(),
  );
  const ids = page.items.map((r) => r.id);
  const parentIds = [...new Set(page.items.flatMap((r) => (r.parentId === null ? [] : [r.parentId])))];
  const parents = new Map(parentIds.length === 0 ? [] : deps.db.select().from(accounts).where(inArray(accounts.id, parentIds)).all().map((p) => [p.id, p]));
  const subCounts = new Map(
    ids.length === 0
      ? []
      : deps.db
          .select({ parentId: accounts.parentId, n: count() })
          .from(accounts)
          .where(inArray(accounts.parentId, ids))
          .groupBy(accounts.parentId)
          .all()
          .map((r) => [r.parentId, r.n]),
  );
  return {
    ...page,
    items: page.items.map((row) => {
      const parent = row.parentId === null ? undefined : parents.get(row.parentId);
      return { view: accountView(deps, row, parent), parentName: parent?.name ?? null, subAccounts: subCounts.get(row.id) ?? 0 };
    }),
  };
}

export interface AccountChoice {
  id: string;
  name: string;
  parentName: string | null;
}

/** Accounts to pick from by name (sub-accounts after their parent's name), plus `include` wherever it sorts. */
export function accountChoices(deps: Pick<Deps, 'db'>, include: AccountRow | null): AccountChoice[] {
  const rows = deps.db
    .select({ id: accounts.id, name: accounts.name, parentId: accounts.parentId })
    .from(accounts)
    .orderBy(asc(accounts.name), asc(accounts.id))
    .limit(ACCOUNT_CHOICES)
    .all();
  if (include && !rows.some((r) => r.id === include.id)) rows.unshift({ id: include.id, name: include.name, parentId: include.parentId });
  const names = new Map(rows.map((r) => [r.id, r.name]));
  const missing = [...new Set(rows.flatMap((r) => (r.parentId !== null && !names.has(r.parentId) ? [r.parentId] : [])))];
  if (missing.length > 0) for (const p of deps.db.select({ id: accounts.id, name: accounts.name }).from(accounts).where(inArray(accounts.id, missing)).all()) names.set(p.id, p.name);
  return rows.map((r) => ({ id: r.id, name: r.name, parentName: r.parentId === null ? null : (names.get(r.parentId) ?? null) }));
}

/** How many accounts there are (the list's heading says it). */
export function countAccounts(deps: Pick<Deps, 'db'>): number {
  return deps.db.select({ n: count() }).from(accounts).get()?.n ?? 0;
}

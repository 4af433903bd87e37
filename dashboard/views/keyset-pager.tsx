import type { FC } from 'hono/jsx';

/** Rows per page of the dashboard's keyset-paged lists (webhooks, deliveries, suppressions). */
export const PAGE_SIZE = 50;

/** A page of rows newest first, and the id to continue after when there is more. */
export interface KeysetPage<T> {
  rows: T[];
  nextAfter: string | null;
}

/** Cuts the `limit + 1` rows a query read into a page: the extra row only says another page exists. */
export function toKeysetPage<T>(rows: T[], limit: number, idOf: (row: T) => string): KeysetPage<T> {
  const more = rows.length > limit;
  const page = more ? rows.slice(0, limit) : rows;
  return { rows: page, nextAfter: more && page.length > 0 ? idOf(page[page.length - 1]!) : null };
}

/** A URL of `path` with the given query (empty values left out). */
export function withQuery(path: string, query: Record<string, string | null | undefined>): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v) params.set(k, v);
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

/** "First page" (when not on it) and "Next page" links; `query` keeps the list's filters. */
export const KeysetPager: FC<{ path: string; query: Record<string, string | undefined>; after: string | null; nextAfter: string | null; label: string }> = ({ path, query, after, nextAfter, label }) =>
  after || nextAfter ? (
    <nav class="pager" aria-label={`${label} pages`}>
      {after && <a href={withQuery(path, query)}>First page</a>}
      {nextAfter && <a href={withQuery(path, { ...query, after: nextAfter })}>Next page</a>}
    </nav>
  ) : null;

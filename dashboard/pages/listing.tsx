import type { FC } from 'hono/jsx';
import type { IdPage } from '../queries/id-pages.js';

/** Pieces the accounts and domains pages share: page links, query strings, counts. */

/** `path` with the non-empty params as its query string. */
export function withQuery(path: string, params: Record<string, string | null | undefined>): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== null && value !== undefined && value !== '') query.set(name, value);
  const text = query.toString();
  return text === '' ? path : `${path}?${text}`;
}

const counts = new Intl.NumberFormat('en-US');
export const formatCount = (n: number): string => counts.format(n);

/**
 * Links to a list's newer and older pages (addresses, or null where there is none). A list that only walks forward
 * (the API's lists on an account's page) links back to its newest page instead: `newerLabel` says so.
 */
export const Pager: FC<{ label: string; newer: string | null; older: string | null; newerLabel?: string }> = ({ label, newer, older, newerLabel = 'Newer' }) =>
  newer === null && older === null ? null : (
    <nav class="pager" aria-label={label}>
      {newer !== null && (
        <a class="button secondary" href={newer}>
          {newerLabel}
        </a>
      )}
      {older !== null && (
        <a class="button secondary" href={older}>
          Older
        </a>
      )}
    </nav>
  );

/** The Pager's addresses for a keyset page: `href` builds an address from extra query params (the filters kept). */
export function pageHrefs(page: IdPage<unknown>, href: (params: Record<string, string>) => string, prefix = ''): { newer: string | null; older: string | null } {
  return {
    newer: page.newer === null ? null : href({ [`${prefix}before`]: page.newer }),
    older: page.older === null ? null : href({ [`${prefix}after`]: page.older }),
  };
}

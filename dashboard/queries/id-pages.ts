import { type SQL, asc, desc, gt, lt } from 'drizzle-orm';
import type { SQLiteColumn } from 'drizzle-orm/sqlite-core';
import { ApiError } from '../../server/shared/errors.js';
import { isUuid } from '../../server/shared/ids.js';

/**
 * Keyset pages over time-ordered ids (UUIDv7), newest first, for the dashboard's lists: a page link names the id it
 * continues from, so rows added meanwhile never shift a page. `after` walks to older rows, `before` back to newer.
 */

/** Rows on one page of every dashboard list. */
export const PAGE_SIZE = 50;

export interface PageLink {
  after: string | null;
  before: string | null;
}

export interface IdPage<T> {
  items: T[];
  /** The `before` of the page of newer rows, or null on the first page. */
  newer: string | null;
  /** The `after` of the page of older rows, or null on the last page. */
  older: string | null;
}

/** One cursor of a query string: absent, or an id; anything else is the 422 page. */
function readCursor(query: (name: string) => string | undefined, name: string): string | null {
  const value = query(name);
  if (value === undefined || value === '') return null;
  if (!isUuid(value)) throw new ApiError('invalid_request', 'That page link is not valid; start again from the first page.');
  return value;
}

/** The page link of a list's query string (`<prefix>after`, `<prefix>before`). */
export function readPageLink(query: (name: string) => string | undefined, prefix = ''): PageLink {
  return { after: readCursor(query, `${prefix}after`), before: readCursor(query, `${prefix}before`) };
}

/** The page link of a list that walks forward only, from its newest page (its pager links back to that page). */
export function readForwardLink(query: (name: string) => string | undefined, prefix = ''): PageLink {
  return { after: readCursor(query, `${prefix}after`), before: null };
}

/**
 * A page of rows read newest first after `after`: `limit + 1` of them (the API's lists read so too), the extra row
 * only saying that another page follows.
 */
export function forwardPage<R>(rows: R[], limit: number, after: string | null, idOf: (row: R) => string): IdPage<R> {
  const items = rows.slice(0, limit);
  const newer = after === null ? null : items[0] ? idOf(items[0]) : after;
  return { items, newer, older: rows.length > limit ? idOf(items[items.length - 1]!) : null };
}

/**
 * One page of at most `limit` rows. `select` runs the list's own query with the keyset bound (AND it with the
 * filters), the order and how many rows to take; it gets one row more than a page to learn whether another follows.
 */
export async function pageByIds<R>(
  id: SQLiteColumn,
  link: PageLink,
  limit: number,
  idOf: (row: R) => string,
  select: (bound: SQL | undefined, order: SQL, take: number) => Promise<R[]>,
): Promise<IdPage<R>> {
  if (link.before !== null) {
    const rows = await select(gt(id, link.before), asc(id), limit + 1);
    const items = rows.slice(0, limit).reverse();
    return { items, newer: rows.length > limit && items[0] ? idOf(items[0]) : null, older: items.length > 0 ? idOf(items[items.length - 1]!) : link.before };
  }
  return forwardPage(await select(link.after !== null ? lt(id, link.after) : undefined, desc(id), limit + 1), limit, link.after, idOf);
}

/** A LIKE pattern matching `text` anywhere or at the start, its own % and _ taken literally (use with ESCAPE '\'). */
export function likePattern(text: string, where: 'anywhere' | 'start'): string {
  const literal = text.replace(/[\\%_]/g, (c) => `\\${c}`);
  return where === 'anywhere' ? `%${literal}%` : `${literal}%`;
}

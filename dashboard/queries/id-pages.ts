import { type SQL, asc, desc, gt, lt } from 'drizzle-orm';
import type { SQLiteColumn } from 'drizzle-orm/sqlite-core';
import { ApiError } from '../../server/errors.js';
import { isUuid } from '../../server/ids.js';

/**
 * Keyset pages over time-ordered ids (UUIDv7), newest first, for the dashboard's lists: a page link names the id it
 * continues from, so rows added meanwhile never shift a page. `after` walks to older rows, `before` back to newer.
 */

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

/** The page link of a list's query string (`<prefix>after`, `<prefix>before`); a malformed one is a 422 page. */
export function readPageLink(query: (name: string) => string | undefined, prefix = ''): PageLink {
  const read = (name: string) => {
    const value = query(`${prefix}${name}`);
    if (value === undefined || value === '') return null;
    if (!isUuid(value)) throw new ApiError('invalid_request', 'That page link is not valid; start again from the first page.');
    return value;
  };
  return { after: read('after'), before: read('before') };
}

/**
 * One page of at most `limit` rows. `select` runs the list's own query with the keyset bound (AND it with the
 * filters), the order and how many rows to take; it gets one row more than a page to learn whether another follows.
 */
export function pageByIds<R>(
  id: SQLiteColumn,
  link: PageLink,
  limit: number,
  idOf: (row: R) => string,
  select: (bound: SQL | undefined, order: SQL, take: number) => R[],
): IdPage<R> {
  if (link.before !== null) {
    const rows = select(gt(id, link.before), asc(id), limit + 1);
    const items = rows.slice(0, limit).reverse();
    return { items, newer: rows.length > limit && items[0] ? idOf(items[0]) : null, older: items.length > 0 ? idOf(items[items.length - 1]!) : link.before };
  }
  const rows = select(link.after !== null ? lt(id, link.after) : undefined, desc(id), limit + 1);
  const items = rows.slice(0, limit);
  const newer = link.after === null ? null : items[0] ? idOf(items[0]) : link.after;
  return { items, newer, older: rows.length > limit ? idOf(items[items.length - 1]!) : null };
}

/** A LIKE pattern matching `text` anywhere or at the start, its own % and _ taken literally (use with ESCAPE '\'). */
export function likePattern(text: string, where: 'anywhere' | 'start'): string {
  const literal = text.replace(/[\\%_]/g, (c) => `\\${c}`);
  return where === 'anywhere' ? `%${literal}%` : `${literal}%`;
}

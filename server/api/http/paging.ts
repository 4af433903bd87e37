import { createHmac } from 'node:crypto';
import type { Db } from '../../../db/client.js';
import type { PageRequest } from '../../core/context.js';
import { cursorKey } from '../../core/cursor-key.js';
import { TEMPLATE_NAME } from '../../core/template-name.js';
import { ApiError, type ErrorCode } from '../../shared/errors.js';
import { isUuid } from '../../shared/ids.js';
import { constantTimeEqual } from '../../shared/secrets.js';

/** How one list answers a bad limit or cursor: the spec differs per list. */
export interface ListDef {
  name: string;
  badLimit: { status: number; code: ErrorCode };
  badCursor: { status: number; code: ErrorCode };
  /** What a cursor's key must look like: a row id (a UUID) unless the list pages by something else. */
  isKey?: (key: string) => boolean;
}

export const DEFAULT_LIMIT = 25;
export const MAX_LIMIT = 100;

interface CursorBody {
  l: string;
  a: string;
  k: string;
}

/** HMAC-SHA256 of the encoded body under the server's cursor key, cut to 16 bytes: enough that none can be guessed. */
function sign(key: Buffer, body: string): string {
  return createHmac('sha256', key).update(`cursor.v1.${body}`).digest().subarray(0, 16).toString('base64url');
}

/** `<body>.<mac>`, the body base64url JSON: the client can read it but not make one up. */
function encodeCursor(key: Buffer, list: string, scope: string, lastId: string): string {
  const body: CursorBody = { l: list, a: scope, k: lastId };
  const encoded = Buffer.from(JSON.stringify(body)).toString('base64url');
  return `${encoded}.${sign(key, encoded)}`;
}

function decodeCursor(key: Buffer, cursor: string): CursorBody | null {
  const [encoded, mac, ...rest] = cursor.split('.');
  if (encoded === undefined || mac === undefined || rest.length > 0 || !constantTimeEqual(mac, sign(key, encoded))) return null;
  try {
    const v: unknown = JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8'));
    if (typeof v !== 'object' || v === null) return null;
    const { l, a, k } = v as Record<string, unknown>;
    return typeof l === 'string' && typeof a === 'string' && typeof k === 'string' ? { l, a, k } : null;
  } catch {
    return null;
  }
}

/**
 * Reads `limit` and `cursor`; a cursor is valid only if this server signed it, and only for the list and scope that
 * issued it. The scope is the acting account's id, and for a list under one resource (an endpoint's deliveries)
 * `listScope(account, resource)`: a cursor of one endpoint's list is no cursor of another's.
 */
export async function readPage(db: Db, list: ListDef, scope: string, query: { limit?: string | undefined; cursor?: string | undefined }): Promise<PageRequest> {
  let limit = DEFAULT_LIMIT;
  if (query.limit !== undefined) {
    if (!/^\d{1,3}$/.test(query.limit) || Number(query.limit) < 1 || Number(query.limit) > MAX_LIMIT) {
      throw new ApiError(list.badLimit.code, `limit: must be an integer from 1 to ${MAX_LIMIT}`, { status: list.badLimit.status });
    }
    limit = Number(query.limit);
  }
  let after: string | null = null;
  if (query.cursor !== undefined) {
    const c = decodeCursor(await cursorKey(db), query.cursor);
    if (!c || c.l !== list.name || c.a !== scope || !(list.isKey ?? isUuid)(c.k)) {
      throw new ApiError(list.badCursor.code, `cursor: was not issued by this list (${list.name})`, { status: list.badCursor.status });
    }
    after = c.k;
  }
  return { limit, after };
}

/**
 * A page's rows may take at most this many bytes of JSON: a row that would pass it ends the page early (unless it is
 * the first, so a page always has a row), so no list answer is huge, even over rows stored before the input limits.
 */
export const PAGE_BYTE_BUDGET = 1024 * 1024;

/**
 * Takes a page from the `limit + 1` rows a query yields (the extra row only says another page exists), pulling them
 * one at a time: the page ends at `limit` rows or before a row that would take its JSON past PAGE_BYTE_BUDGET,
 * and `nextCursor` then points after its last row. An array works; a lazy iterable is read no further than needed.
 */
export async function toPage<T extends { id: string }>(
  db: Db,
  list: ListDef,
  scope: string,
  page: PageRequest,
  rows: Iterable<T> | AsyncIterable<T>,
): Promise<{ data: T[]; nextCursor: string | null }> {
  return await toPageBy(db, list, scope, page, rows, (row) => row.id);
}

/** toPage for a list keyed by something other than `id` (its ListDef's `isKey` accepts what `keyOf` gives). */
export async function toPageBy<T>(
  db: Db,
  list: ListDef,
  scope: string,
  page: PageRequest,
  rows: Iterable<T> | AsyncIterable<T>,
  keyOf: (row: T) => string,
): Promise<{ data: T[]; nextCursor: string | null }> {
  const data: T[] = [];
  let bytes = 0;
  let more = false;
  for await (const row of rows) {
    if (data.length >= page.limit) {
      more = true;
      break;
    }
    const size = Buffer.byteLength(JSON.stringify(row), 'utf8');
    if (data.length > 0 && bytes + size > PAGE_BYTE_BUDGET) {
      more = true;
      break;
    }
    data.push(row);
    bytes += size;
  }
  const last = data[data.length - 1];
  return { data, nextCursor: more && last !== undefined ? encodeCursor(await cursorKey(db), list.name, scope, keyOf(last)) : null };
}

/** The scope of a list under one resource of the account (readPage). */
export function listScope(accountId: string, resourceId: string): string {
  return `${accountId}/${resourceId}`;
}

const standard = (name: string): ListDef => ({
  name,
  badLimit: { status: 422, code: 'invalid_request' },
  badCursor: { status: 422, code: 'invalid_request' },
});

/** Every list of the API and its declared errors. */
export const LISTS = {
  accounts: standard('accounts'),
  keys: standard('keys'),
  domains: standard('domains'),
  emails: { name: 'emails', badLimit: { status: 422, code: 'invalid_request' }, badCursor: { status: 422, code: 'invalid_cursor' } },
  suppressions: { name: 'suppressions', badLimit: { status: 422, code: 'invalid_request' }, badCursor: { status: 422, code: 'invalid_cursor' } },
  webhooks: { name: 'webhooks', badLimit: { status: 400, code: 'invalid_request' }, badCursor: { status: 400, code: 'invalid_request' } },
  webhookDeliveries: { name: 'webhook-deliveries', badLimit: { status: 400, code: 'invalid_request' }, badCursor: { status: 400, code: 'invalid_request' } },
  events: standard('events'),
  templates: { ...standard('templates'), isKey: (k: string) => TEMPLATE_NAME.test(k) },
  templateVersions: { ...standard('template-versions'), isKey: (k: string) => /^[1-9][0-9]{0,9}$/.test(k) },
} as const satisfies Record<string, ListDef>;

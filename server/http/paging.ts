import { ApiError, type ErrorCode } from '../errors.js';
import { isUuid } from '../ids.js';
import type { PageRequest } from '../core/context.js';

/** How one list answers a bad limit or cursor: the spec differs per list. */
export interface ListDef {
  name: string;
  badLimit: { status: number; code: ErrorCode };
  badCursor: { status: number; code: ErrorCode };
}

export const DEFAULT_LIMIT = 25;
export const MAX_LIMIT = 100;

interface CursorBody {
  l: string;
  a: string;
  k: string;
}

function encodeCursor(list: string, accountId: string, lastId: string): string {
  const body: CursorBody = { l: list, a: accountId, k: lastId };
  return Buffer.from(JSON.stringify(body)).toString('base64url');
}

function decodeCursor(cursor: string): CursorBody | null {
  try {
    const v: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (typeof v !== 'object' || v === null) return null;
    const { l, a, k } = v as Record<string, unknown>;
    return typeof l === 'string' && typeof a === 'string' && typeof k === 'string' ? { l, a, k } : null;
  } catch {
    return null;
  }
}

/** Reads `limit` and `cursor`; a cursor is valid only for the list and account that issued it. */
export function readPage(list: ListDef, accountId: string, query: { limit?: string | undefined; cursor?: string | undefined }): PageRequest {
  let limit = DEFAULT_LIMIT;
  if (query.limit !== undefined) {
    if (!/^\d{1,3}$/.test(query.limit) || Number(query.limit) < 1 || Number(query.limit) > MAX_LIMIT) {
      throw new ApiError(list.badLimit.code, `limit: must be an integer from 1 to ${MAX_LIMIT}`, { status: list.badLimit.status });
    }
    limit = Number(query.limit);
  }
  let after: string | null = null;
  if (query.cursor !== undefined) {
    const c = decodeCursor(query.cursor);
    if (!c || c.l !== list.name || c.a !== accountId || !isUuid(c.k)) {
      throw new ApiError(list.badCursor.code, `cursor: was not issued by this list (${list.name})`, { status: list.badCursor.status });
    }
    after = c.k;
  }
  return { limit, after };
}

/** Cuts the `limit + 1` rows a query fetched into a page; the extra row only says another page exists. */
export function toPage<T extends { id: string }>(list: ListDef, accountId: string, page: PageRequest, rows: T[]): { data: T[]; nextCursor: string | null } {
  const data = rows.slice(0, page.limit);
  const last = data[data.length - 1];
  return { data, nextCursor: rows.length > page.limit && last ? encodeCursor(list.name, accountId, last.id) : null };
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
} as const satisfies Record<string, ListDef>;

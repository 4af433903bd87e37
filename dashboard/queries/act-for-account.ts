import { asc } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { accounts } from '../../db/schema/index.js';
import { findAccount } from '../../server/core/accounts.js';
import type { RequestContext } from '../../server/core/context.js';
import { SCOPES } from '../../server/core/scopes.js';
import { ApiError } from '../../server/errors.js';
import { isUuid } from '../../server/ids.js';

/**
 * The dashboard acts as the operator on behalf of any account: the API's domain functions take a request context,
 * so the dashboard builds one for the account itself (every scope, no account header). keyId is a marker, not a key:
 * the functions called with it (webhooks, replay, suppressions) read only `ctx.account`.
 */
export function actForAccount(db: Db, accountId: string): RequestContext {
  const account = isUuid(accountId) ? findAccount(db, accountId) : undefined;
  if (!account) throw new ApiError('account_not_found', 'There is no account with that id.');
  return { keyId: 'dashboard', keyAccount: account, scopes: SCOPES, account, viaHeader: false };
}

export interface AccountChoice {
  id: string;
  /** The name, after its parent's for a sub-account ("Parent / Sub"). */
  label: string;
}

/**
 * Every account, for the account pickers of the filters and forms: top-level accounts by name, each followed by its
 * sub-accounts. An install's accounts are counted in hundreds at most, so one select holds them all.
 */
export function accountChoices(db: Db): AccountChoice[] {
  const rows = db.select({ id: accounts.id, name: accounts.name, parentId: accounts.parentId }).from(accounts).orderBy(asc(accounts.name), asc(accounts.id)).all();
  const children = new Map<string, typeof rows>();
  for (const r of rows) if (r.parentId) children.set(r.parentId, [...(children.get(r.parentId) ?? []), r]);
  return rows
    .filter((r) => r.parentId === null)
    .flatMap((top) => [{ id: top.id, label: top.name }, ...(children.get(top.id) ?? []).map((sub) => ({ id: sub.id, label: `${top.name} / ${sub.name}` }))]);
}

/** An optional account filter from the query string: absent or empty is none; anything else must be an account. */
export function accountFilter(db: Db, value: string | undefined): string | undefined {
  if (value === undefined || value === '') return undefined;
  return actForAccount(db, value).account.id;
}

/** A keyset cursor from the query string (the last id of the page before): absent, or a UUID. */
export function afterParam(value: string | undefined): string | null {
  if (value === undefined || value === '') return null;
  if (!isUuid(value)) throw new ApiError('invalid_request', 'after: is not a row id of this list.');
  return value;
}

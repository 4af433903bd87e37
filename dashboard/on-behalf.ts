import type { Db } from '../db/client.js';
import type { AccountRow } from '../db/schema/index.js';
import { findAccount } from '../server/core/accounts.js';
import type { RequestContext } from '../server/core/context.js';
import { SCOPES } from '../server/core/scopes.js';
import { ApiError } from '../server/shared/errors.js';
import { isUuid } from '../server/shared/ids.js';

/**
 * The dashboard acts as the operator on behalf of any account: the API's domain functions take a RequestContext, so
 * the operator gets one for the account concerned, holding every scope and no account header. This module is the one
 * place that builds it, and the one place that turns an account id from a page into an account (or the 404 page).
 */

/**
 * The operator's context for `account`. keyId names no key: of the functions the dashboard calls with it, revokeKey
 * only logs it, and none mints (minting checks a live key; the dashboard mints through insertKey, as the CLI does).
 */
export function operatorContext(account: AccountRow): RequestContext {
  return { keyId: 'dashboard', keyAccount: account, scopes: SCOPES, account, viaHeader: false };
}

/** The account with this id, or undefined: an id that is not a UUID reads like an unknown one (and is never queried). */
export async function accountById(db: Db, id: string): Promise<AccountRow | undefined> {
  return isUuid(id) ? await findAccount(db, id) : undefined;
}

/** The account with this id, or the 404 page. */
export async function requireAccount(db: Db, id: string): Promise<AccountRow> {
  const row = await accountById(db, id);
  if (!row) throw new ApiError('account_not_found', 'There is no account with that id.');
  return row;
}

/** The operator's context for the account with this id (a form's or a row's), or the 404 page. */
export async function actForAccount(db: Db, accountId: string): Promise<RequestContext> {
  return operatorContext(await requireAccount(db, accountId));
}

/** A list's optional account filter from its query string: absent or empty is none; anything else must be an account. */
export async function accountFilter(db: Db, value: string | undefined): Promise<AccountRow | null> {
  return value === undefined || value === '' ? null : await requireAccount(db, value);
}

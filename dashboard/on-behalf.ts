import { eq } from 'drizzle-orm';
import { type AccountRow, accounts } from '../db/schema/index.js';
import type { RequestContext } from '../server/core/context.js';
import { SCOPES } from '../server/core/scopes.js';
import type { Deps } from '../server/deps.js';
import { ApiError } from '../server/errors.js';

/**
 * The dashboard acts as the operator on behalf of any account: the API's domain functions take a RequestContext, so
 * the operator gets one for the account concerned, holding every scope. `keyId` names no key (the functions these
 * pages call do not look it up).
 */
export function operatorContext(account: AccountRow): RequestContext {
  return { keyId: 'dashboard', keyAccount: account, scopes: SCOPES, account, viaHeader: false };
}

/** The account with this id, or a 404 page. */
export function accountOr404(deps: Pick<Deps, 'db'>, id: string): AccountRow {
  const row = deps.db.select().from(accounts).where(eq(accounts.id, id)).get();
  if (!row) throw new ApiError('not_found', 'There is no account with that id.');
  return row;
}

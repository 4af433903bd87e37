import type { AccountRow } from '../../db/schema/index.js';
import type { RequestContext } from '../../server/core/context.js';
import { SCOPES } from '../../server/core/scopes.js';

/**
 * The dashboard acts as the operator on behalf of an account: the domain functions take the same request context the
 * API builds from a key, so a page reads exactly what the API would answer that account. The key id names no key
 * (the functions called with it only read `account`).
 */
export function operatorContext(account: AccountRow): RequestContext {
  return { keyId: 'dashboard', keyAccount: account, scopes: SCOPES, account, viaHeader: false };
}

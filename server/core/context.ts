import type { AccountRow } from '../../db/schema/index.js';
import type { KeyCheck } from './keys.js';
import type { Scope } from './scopes.js';

/** Who is asking: the key, the account that owns it, and the account the request acts for. */
export interface RequestContext {
  keyId: string;
  keyAccount: AccountRow;
  scopes: readonly Scope[];
  /** The acting account: the key's own, or the sub-account named by X-Service-Account. */
  account: AccountRow;
  viaHeader: boolean;
  /**
   * Set when the key was taken unread (the send on Postgres: server/api/http/auth.ts guard `keyReadBySend`): it must
   * be confirmed live before the request is answered. `account` and `keyAccount` are then the rows as last read for
   * this key: only their ids and `parentId`, which never change, may be relied on.
   */
  keyCheck?: KeyCheck;
}

/** A keyset page request: at most `limit` rows with ids below `after`. */
export interface PageRequest {
  limit: number;
  after: string | null;
}

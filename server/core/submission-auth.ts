import type { AccountRow } from '../../db/schema/index.js';
import type { Clock } from '../shared/clock.js';
import { ApiError } from '../shared/errors.js';
import { isUuid } from '../shared/ids.js';
import { findSubAccount } from './accounts.js';
import type { Deps } from './deps.js';
import { findLiveKey, findLiveKeyStamped, keyStamp } from './keys.js';
import { isScope } from './scopes.js';

/**
 * AUTH on the submission ports (docs/api/decisions.md section 10): the password is an API key holding `emails:send`;
 * the user name is ignored unless it is an account id, which must then be a sub-account of the key's account (the
 * session acts for it, as X-Service-Account does). Failures are counted per client address, and an address that fails
 * too often is locked out for a while.
 */

/** The lock-out policy of section 10, as data. */
export const AUTH_LOCKOUT = {
  /** Failures from one address within `windowMs` that lock it out. */
  failures: 10,
  windowMs: 15 * 60_000,
  /** How long the address is then refused, whatever it sends. */
  lockMs: 15 * 60_000,
} as const;

/** What a session holds once authenticated: never the key's secret in a log, only here, to check it again per message. */
export interface SubmissionAuth {
  /** The key as sent (kept in memory only, to notice a revocation at the next message). */
  secret: string;
  keyId: string;
  keyAccountId: string;
  /** The account the session sends for: the key's, or the sub-account named by the user name. */
  actingAccountId: string;
  /** The acting account's parent (a sub-account's), whose suppression list also applies; null for a top-level one. */
  parentId: string | null;
  /** The key store's stamp when the key was last found live (core/keys.ts keyStamp). */
  stamp: string;
}

/**
 * Authenticates AUTH's user name and password, or throws the refusal: `invalid_key` for a key that is unknown,
 * revoked or malformed, `insufficient_scope` without `emails:send`, `account_not_found` for an account id that is not
 * a sub-account of the key's account.
 */
export async function authenticateSubmission(deps: Pick<Deps, 'db'>, username: string, password: string): Promise<SubmissionAuth> {
  const { found, stamp } = await findLiveKeyStamped(deps.db, password.trim());
  if (!found) throw new ApiError('invalid_key', 'Authentication credentials invalid: the password must be a live API key.');
  if (!found.key.scopes.filter(isScope).includes('emails:send')) {
    throw new ApiError('insufficient_scope', 'Authentication credentials invalid: this key lacks the scope emails:send.');
  }
  const acting = await actingAccount(deps, found.account, username.trim());
  return { secret: password.trim(), keyId: found.key.id, keyAccountId: found.account.id, actingAccountId: acting.id, parentId: acting.parentId, stamp };
}

async function actingAccount(deps: Pick<Deps, 'db'>, keyAccount: AccountRow, username: string): Promise<AccountRow> {
  if (!isUuid(username.toLowerCase()) || username.toLowerCase() === keyAccount.id) return keyAccount;
  const sub = await findSubAccount(deps.db, keyAccount.id, username.toLowerCase());
  if (!sub) throw new ApiError('account_not_found', `Authentication credentials invalid: no sub-account ${username} under this key's account.`);
  return sub;
}

/**
 * Whether an authenticated session's key and account still stand, checked before each message: a key revoked, or
 * a sub-account deleted, since AUTH is refused at once. Costs a stamp read while nothing was revoked.
 */
export async function assertStillAuthenticated(deps: Pick<Deps, 'db'>, auth: SubmissionAuth): Promise<void> {
  const stamp = await keyStamp(deps.db);
  if (stamp === auth.stamp) return;
  const found = await findLiveKey(deps.db, auth.secret);
  if (!found) throw new ApiError('invalid_key', 'The API key this session authenticated with was revoked.');
  if (auth.actingAccountId !== auth.keyAccountId && !(await findSubAccount(deps.db, auth.keyAccountId, auth.actingAccountId))) {
    throw new ApiError('account_not_found', 'The sub-account this session sends for was deleted.');
  }
  auth.stamp = stamp;
}

/**
 * Failed AUTH attempts per client address (an IPv6 client by its /64), on the monotonic clock: `AUTH_LOCKOUT.failures`
 * within the window lock the address out for `AUTH_LOCKOUT.lockMs`. One per process (both submission ports share it).
 */
export function createAuthLockout(clock: Clock) {
  const failures = new Map<string, number[]>();
  const lockedUntil = new Map<string, number>();
  let sinceSweep = 0;
  const sweep = (now: number) => {
    if (++sinceSweep < 1000) return;
    sinceSweep = 0;
    for (const [client, times] of failures) if (times.every((t) => now - t >= AUTH_LOCKOUT.windowMs)) failures.delete(client);
    for (const [client, until] of lockedUntil) if (until <= now) lockedUntil.delete(client);
  };
  return {
    /** Whether the address is locked out now. */
    locked(client: string): boolean {
      const until = lockedUntil.get(client);
      if (until === undefined) return false;
      if (until > clock.monotonic()) return true;
      lockedUntil.delete(client);
      return false;
    },
    /** Counts a failure; true when it locks the address out. */
    fail(client: string): boolean {
      const now = clock.monotonic();
      sweep(now);
      const recent = (failures.get(client) ?? []).filter((t) => now - t < AUTH_LOCKOUT.windowMs);
      recent.push(now);
      if (recent.length < AUTH_LOCKOUT.failures) {
        failures.set(client, recent);
        return false;
      }
      failures.delete(client);
      lockedUntil.set(client, now + AUTH_LOCKOUT.lockMs);
      return true;
    },
  };
}

export type AuthLockout = ReturnType<typeof createAuthLockout>;

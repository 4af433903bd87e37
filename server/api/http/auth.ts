import type { MiddlewareHandler } from 'hono';
import { findSubAccount } from '../../core/accounts.js';
import { findLiveKey, findLiveKeyStamped, keyCheck, keyStamp } from '../../core/keys.js';
import { rateLimited } from '../../core/rate-limit.js';
import { type Scope, isScope } from '../../core/scopes.js';
import type { Deps } from '../../core/deps.js';
import { ApiError } from '../../shared/errors.js';
import { readRequestBody } from './body.js';
import type { AppEnv } from './env.js';

export const ACCOUNT_HEADER = 'X-Service-Account';

/**
 * How an endpoint treats X-Service-Account: `accepted` (act for the sub-account), `refused` (the endpoint is marked
 * "no account header": a valid header is refused), `passed` (accepted here, refused by the endpoint's own rule).
 */
export type AccountHeaderMode = 'accepted' | 'refused' | 'passed';

const BEARER = /^Bearer +(\S+) *$/i;

let turn: Promise<void> | null = null;

/**
 * Resolves at the next turn of the event loop (its check phase), one promise for every caller of the same turn: the
 * requests whose headers arrived in one poll phase go on together, so their keys' reads are issued in one tick and
 * leave for the database in one write (db/pg/state.ts pgPointReads).
 */
export function nextTurn(): Promise<void> {
  turn ??= new Promise<void>((resolve) =>
    setImmediate(() => {
      turn = null;
      resolve();
    }),
  );
  return turn;
}

const unknownKey = () => new ApiError('invalid_key', 'Missing or unknown API key: send Authorization: Bearer <API_KEY>.');

/**
 * The first checks of every endpoint, in the spec's order, all from the headers: the key (401), the rate limits
 * (429), the endpoint's one scope (403), then the account header (404, identical for a foreign and an unknown id).
 * Only then is the body read (413), so nobody without a key can make the service hold a body; and since a body can
 * take a while to arrive, the key is looked up again once it has (unless the whole request had arrived before the
 * key was read), if any key may have stopped working meanwhile: a key revoked meanwhile is `401 invalid_key`.
 */
export function guard(
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'rateLimiter'>,
  scope: Scope,
  header: AccountHeaderMode = 'accepted',
  /** A second scope that also opens the endpoint: the template catalog's older one (docs/api/decisions.md section 9). */
  alsoScope: Scope | null = null,
  /**
   * The endpoint confirms a known key itself, in its own transaction (the send: server/core/sending.ts): a key this
   * process found live before may then be taken unread (on Postgres: core/keys.ts findLiveKeyStamped), and is
   * confirmed before any answer (KeyCheck). Not with X-Service-Account, whose sub-account is read here anyway.
   */
  keyReadBySend = false,
): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const secret = BEARER.exec(c.req.header('authorization') ?? '')?.[1];
    if (secret === undefined) throw unknownKey();
    // Whether the whole request had arrived before its key is read: then that read is already after the body, and
    // the key is not checked again once the body is read. The server's parser hands the headers over before it
    // parses the rest of the packet they came in: a body sent with them is parsed by the next turn of the loop.
    const incoming = c.env?.incoming;
    if (incoming && !incoming.complete) await nextTurn();
    const arrived = incoming?.complete === true;
    const headerValue = c.req.header(ACCOUNT_HEADER);
    const unread = keyReadBySend && headerValue === undefined;
    // The stamp is read with the key, in one read transaction: nothing can stop the key between the two.
    const taken = await findLiveKeyStamped(deps.db, secret, { unread });
    const { found, stamp } = taken;
    if (!found) throw unknownKey();
    const { key, account: keyAccount } = found;
    const now = deps.clock.now();
    // A key taken unread is confirmed before any answer: in the send's transaction, else here (a read). Its use is
    // noted once it is confirmed.
    const check = taken.unread ? keyCheck(deps.db, secret, stamp) : undefined;
    const confirmed = async () => {
      if (!check) return;
      await check.confirm();
      deps.keyUsage.touch(key.id, now);
    };

    const rate = await deps.rateLimiter.take(key.id, keyAccount.id);
    if (!rate.ok) {
      await check?.confirm();
      throw rateLimited(deps.config, rate);
    }
    if (!check) deps.keyUsage.touch(key.id, now);

    const scopes = key.scopes.filter(isScope);
    if (!scopes.includes(scope) && !(alsoScope !== null && scopes.includes(alsoScope))) {
      await confirmed();
      throw new ApiError('insufficient_scope', `This key lacks the scope ${scope}${alsoScope ? ` (or ${alsoScope})` : ''}.`);
    }

    let account = keyAccount;
    if (headerValue !== undefined) {
      const sub = await findSubAccount(deps.db, keyAccount.id, headerValue.trim());
      if (!sub) throw new ApiError('account_not_found', `No sub-account ${headerValue.trim()} under this key's account.`);
      if (header === 'refused') throw new ApiError('invalid_request', `${ACCOUNT_HEADER}: is not accepted on this endpoint; send it without the header.`);
      account = sub;
    }

    let rawBody: Awaited<ReturnType<typeof readRequestBody>>;
    try {
      rawBody = await readRequestBody(c);
    } catch (err) {
      await confirmed();
      throw err;
    }
    // Looked up again only if a key may have stopped working meanwhile (core/keys.ts keyStamp), which deleting an
    // account also moves: the sub-account the header names too, so no write is made for one deleted meanwhile. (A key
    // taken unread is confirmed after the body in any case.)
    if (!check && !arrived && (await keyStamp(deps.db)) !== stamp) {
      if (!(await findLiveKey(deps.db, secret))) throw new ApiError('invalid_key', 'The API key was revoked while the request was in flight.');
      if (headerValue !== undefined && !(await findSubAccount(deps.db, keyAccount.id, headerValue.trim()))) {
        throw new ApiError('account_not_found', `The sub-account ${headerValue.trim()} was deleted while the request was in flight.`);
      }
    }
    c.set('rawBody', rawBody);
    c.set('auth', { keyId: key.id, keyAccount, scopes, account, viaHeader: headerValue !== undefined, ...(check ? { keyCheck: check } : {}) });
    try {
      await next();
    } catch (err) {
      await confirmed();
      throw err;
    }
    // Answered without its transaction confirming the key (an idempotent replay): confirmed now, the answer replaced
    // by a 401 if the key is no longer live.
    await confirmed();
  };
}

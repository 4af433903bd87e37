import { and, desc, eq, isNull, lt, sql } from 'drizzle-orm';
import { z } from 'zod';
import { labelSchema } from './text-rules.js';
import { type Db, pointReads, readUnit } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { type AccountRow, type ApiKeyRow, accounts, apiKeys, changeCounters } from '../../db/schema/index.js';
import { iso, isoOrNull } from '../shared/clock.js';
import type { Deps } from './deps.js';
import { ApiError, notFound } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { randomBase62, sha256Hex } from '../shared/secrets.js';
import type { PageRequest, RequestContext } from './context.js';
import { SCOPES, type Scope, isScope } from './scopes.js';
import { lockRows, one, statementsAreRoundTrips } from '../../db/sql.js';

export const MAX_LIVE_KEYS = 50;
export const KEY_PREFIX = 'ms_';
const KEY_RANDOM_LENGTH = 40;
const KEY_FORMAT = /^ms_[A-Za-z0-9]{32,200}$/;

export interface KeyView {
  id: string;
  name: string;
  prefix: string;
  scopes: Scope[];
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
}

export type MintedKeyView = Pick<KeyView, 'id' | 'name' | 'prefix' | 'scopes' | 'createdAt'> & { key: string };

export const mintKeyInput = z.strictObject({
  name: labelSchema(1, 60),
  scopes: z
    .array(z.string().refine(isScope, { message: `must be one of ${SCOPES.join(', ')}` }))
    .min(1, 'must name at least one scope')
    .optional(),
});

function keyView(deps: Pick<Deps, 'keyUsage'>, row: ApiKeyRow): KeyView {
  return {
    id: row.id,
    name: row.name,
    prefix: row.prefix,
    scopes: row.scopes.filter(isScope),
    createdAt: iso(row.createdAt),
    lastUsedAt: isoOrNull(deps.keyUsage.lastUsed(row.id, row.lastUsedAt)),
    revokedAt: isoOrNull(row.revokedAt),
  };
}

/** A key with the account that owns it, by the SHA-256 of its secret; a known key's account with the stamp (the guard's hot path). */
const statements = definePrepared((db) => ({
  keyByHash: db
    .select({ key: apiKeys, account: accounts })
    .from(apiKeys)
    .innerJoin(accounts, eq(accounts.id, apiKeys.accountId))
    .where(eq(apiKeys.keyHash, sql.placeholder('hash')))
    .prepare(),
  keysCounter: db.select({ n: changeCounters.n }).from(changeCounters).where(eq(changeCounters.name, 'keys')).prepare(),
  // A known key's account and the stamp, in one statement (the stamp is read in the same snapshot as the account).
  accountAndStamp: db
    .select({ account: accounts, stamp: sql<number>`(select n from change_counters where name = 'keys')`.mapWith(Number) })
    .from(accounts)
    .where(eq(accounts.id, sql.placeholder('id')))
    .prepare(),
}));

/**
 * Changes whenever a key may have stopped working (revoked, or deleted with its account), by this process or any
 * other (the CLI, another node): the `keys` change counter, raised by triggers on api_keys (db/migrations/0021, and
 * its Postgres twin). Equal stamps mean every key that was live is still live; the request guard compares them
 * instead of looking the key up a second time once the body has arrived.
 */
export async function keyStamp(db: Db): Promise<string> {
  const row = await pointReads(db, () => one(statements(db).keysCounter.execute()));
  return String(row?.n ?? 0);
}

/**
 * The live keys this process has found, by the SHA-256 of their secret (never the secret itself), each with the stamp
 * it was found under. Under the same stamp no key has stopped working, and nothing else of a key row that the guard
 * reads changes (its scopes are fixed when it is minted), so a known key skips its lookup; its account is read
 * afresh on every request, because its credits and counters change with every send. Bounded: past the limit the key
 * found longest ago makes room.
 */
const knownKeys = definePrepared(() => new Map<string, { key: ApiKeyRow; account: AccountRow; stamp: string }>());
const KNOWN_KEYS_MAX = 10_000;

/**
 * The key and the stamp it was found under. The stamp is read before the key: a key that stops working after it
 * moves the stamp, so a key found live is never kept under a stamp that already counts its end, on either engine.
 * On SQLite the reads share one read transaction (db/client.ts readUnit).
 *
 * With `unread`, on Postgres (each read a round trip; SQLite reads as before), a known key is not read at all: it
 * comes back as this process last found it live, its account row as read then (`unread: true`), and the caller must
 * confirm it before it answers (KeyCheck: the send does so in its own transaction's reading, server/core/sending.ts).
 */
export async function findLiveKeyStamped(
  db: Db,
  secret: string,
  opts: { unread?: boolean } = {},
): Promise<{ found: Awaited<ReturnType<typeof findLiveKey>>; stamp: string; unread?: true }> {
  if (!KEY_FORMAT.test(secret)) return { found: undefined, stamp: '' };
  const hash = sha256Hex(secret);
  const known = knownKeys(db);
  if (opts.unread && statementsAreRoundTrips(db)) {
    const cached = known.get(hash);
    if (cached) return { found: { key: cached.key, account: cached.account }, stamp: cached.stamp, unread: true };
  }
  return await readUnit(db, async () => {
    const cached = known.get(hash);
    let stamp: string;
    if (cached) {
      // A known key: its account and the stamp in one read; the stamp unchanged means the key is still live.
      const read = await one(statements(db).accountAndStamp.execute({ id: cached.key.accountId }));
      stamp = read ? String(read.stamp ?? 0) : await keyStamp(db);
      if (read && cached.stamp === stamp) {
        cached.account = read.account;
        return { found: { key: cached.key, account: read.account }, stamp };
      }
      known.delete(hash);
    } else {
      stamp = await keyStamp(db);
    }
    const found = await findLiveKeyByHash(db, hash);
    if (!found) return { found, stamp: '' };
    if (known.size >= KNOWN_KEYS_MAX) known.delete(known.keys().next().value!);
    known.set(hash, { key: found.key, account: found.account, stamp });
    return { found, stamp };
  });
}

/**
 * A key taken unread (findLiveKeyStamped `unread`), still to be confirmed live before the request is answered: by a
 * stamp read in the same transaction as the request's writes (`confirmedBy`), or by `confirm`, which reads the stamp
 * and, if it moved, looks the key up again. Either way a key found no longer live is `401 invalid_key`, as a key
 * revoked while its request was in flight.
 */
export interface KeyCheck {
  /** Confirms the key with a stamp read in the caller's transaction: unchanged, the key is live; else (or none) `confirm`. */
  confirmedBy(db: Db, stamp: string | null): Promise<void>;
  /** Confirms the key (a read, unless it already is); throws 401 invalid_key if it is not live. */
  confirm(db?: Db): Promise<void>;
}

export function keyCheck(db: Db, secret: string, stamp: string): KeyCheck {
  const hash = sha256Hex(secret);
  let confirmed = false;
  const check: KeyCheck = {
    async confirmedBy(on, read) {
      if (confirmed) return;
      if (read !== null && read === stamp) confirmed = true;
      else await check.confirm(on);
    },
    async confirm(on = db) {
      if (confirmed) return;
      // As findLiveKeyStamped: the stamp first, then the key, which is kept under that stamp once found live (so the
      // next request with it is taken unread again rather than confirmed with these reads each time).
      const now = await keyStamp(on);
      if (now !== stamp) {
        const found = await findLiveKeyByHash(on, hash);
        const known = knownKeys(db);
        if (!found) {
          known.delete(hash);
          throw new ApiError('invalid_key', 'The API key was revoked while the request was in flight.');
        }
        if (known.has(hash) || known.size < KNOWN_KEYS_MAX) known.set(hash, { key: found.key, account: found.account, stamp: now });
      }
      confirmed = true;
    },
  };
  return check;
}

export async function findLiveKey(db: Db, secret: string): Promise<{ key: ApiKeyRow; account: AccountRow } | undefined> {
  return KEY_FORMAT.test(secret) ? await findLiveKeyByHash(db, sha256Hex(secret)) : undefined;
}

async function findLiveKeyByHash(db: Db, hash: string): Promise<{ key: ApiKeyRow; account: AccountRow } | undefined> {
  const found = await one(statements(db).keyByHash.execute({ hash }));
  return found && found.key.revokedAt === null ? found : undefined;
}

async function countLiveKeys(db: Db, accountId: string): Promise<number> {
  return (
    (
      await one(
        db
          .select({ n: sql<number>`count(*)` })
          .from(apiKeys)
          .where(and(eq(apiKeys.accountId, accountId), isNull(apiKeys.revokedAt))),
      )
    )?.n ?? 0
  );
}

/**
 * Inserts a key for `accountId`. `mintedBy`, when given, must still be live at the moment of the insert, so a key
 * revoked while its request was in flight cannot mint.
 */
export async function insertKey(
  deps: Pick<Deps, 'db' | 'clock'>,
  input: { accountId: string; name: string; scopes: readonly Scope[]; mintedBy?: string },
): Promise<MintedKeyView> {
  const now = deps.clock.now();
  const secret = KEY_PREFIX + randomBase62(KEY_RANDOM_LENGTH);
  const row = await deps.db.transaction(async (tx) => {
    // The account held first (on Postgres): two mints at once cannot both pass the count of live keys.
    await lockRows(tx, accounts, accounts.id, [input.accountId]);
    if (input.mintedBy !== undefined) {
      const minter = await one(tx.select({ revokedAt: apiKeys.revokedAt }).from(apiKeys).where(eq(apiKeys.id, input.mintedBy)));
      if (!minter || minter.revokedAt !== null) throw new ApiError('invalid_key', 'The key used for this request was revoked.');
    }
    if ((await countLiveKeys(tx, input.accountId)) >= MAX_LIVE_KEYS) {
      throw new ApiError('limit_reached', `This account already has ${MAX_LIVE_KEYS} live keys; revoke one first.`);
    }
    return await one(
      tx
        .insert(apiKeys)
        .values({
          id: newId(now),
          accountId: input.accountId,
          name: input.name,
          prefix: secret.slice(0, 11),
          keyHash: sha256Hex(secret),
          // Each scope once, whoever mints (the API, the CLI, the dashboard).
          scopes: [...new Set(input.scopes)],
          createdAt: now,
        })
        .returning(),
    );
  });
  return { id: row!.id, name: row!.name, prefix: row!.prefix, scopes: row!.scopes.filter(isScope), createdAt: iso(row!.createdAt), key: secret };
}

/** POST /keys: scopes default to all of the minting key's and may never exceed them. */
export async function mintKey({
  deps,
  ctx,
  input,
}: {
  deps: Pick<Deps, 'clock' | 'db'>;
  ctx: RequestContext;
  input: z.output<typeof mintKeyInput>;
}): Promise<MintedKeyView> {
  const requested = input.scopes ? [...new Set(input.scopes.filter(isScope))] : [...ctx.scopes];
  const lacking = requested.filter((s) => !ctx.scopes.includes(s));
  if (lacking.length > 0) throw new ApiError('insufficient_scope', `This key cannot grant scopes it does not hold: ${lacking.join(', ')}.`);
  return await insertKey(deps, { accountId: ctx.account.id, name: input.name, scopes: requested, mintedBy: ctx.keyId });
}

export async function listKeys({ deps, ctx, page }: { deps: Pick<Deps, 'db' | 'keyUsage'>; ctx: RequestContext; page: PageRequest }): Promise<KeyView[]> {
  return (
    await deps.db
      .select()
      .from(apiKeys)
      .where(and(eq(apiKeys.accountId, ctx.account.id), page.after ? lt(apiKeys.id, page.after) : undefined))
      .orderBy(desc(apiKeys.id))
      .limit(page.limit + 1)
  ).map((r) => keyView(deps, r));
}

/** DELETE /keys/{id}: idempotent; the key stops working at once and stays listed with revokedAt. */
export async function revokeKey({ deps, ctx, id }: { deps: Pick<Deps, 'clock' | 'db' | 'logger'>; ctx: RequestContext; id: string }): Promise<void> {
  const row = await one(
    deps.db
      .select()
      .from(apiKeys)
      .where(and(eq(apiKeys.id, id), eq(apiKeys.accountId, ctx.account.id))),
  );
  if (!row) throw notFound('key');
  if (row.revokedAt === null) {
    await deps.db.update(apiKeys).set({ revokedAt: deps.clock.now() }).where(eq(apiKeys.id, id));
    deps.logger.info('key.revoked', { keyId: id, accountId: ctx.account.id, byKeyId: ctx.keyId });
  }
}

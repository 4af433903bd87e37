import { and, desc, eq, isNull, lt, sql } from 'drizzle-orm';
import { z } from 'zod';
import { labelSchema } from './text-rules.js';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { type AccountRow, type ApiKeyRow, accounts, apiKeys } from '../../db/schema/index.js';
import { iso, isoOrNull } from '../shared/clock.js';
import type { Deps } from './deps.js';
import { ApiError, notFound } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { randomBase62, sha256Hex } from '../shared/secrets.js';
import type { PageRequest, RequestContext } from './context.js';
import { SCOPES, type Scope, isScope } from './scopes.js';
import { one, queryRow } from '../../db/sql.js';

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

/** A key with the account that owns it, by the SHA-256 of its secret; an account by id (the guard's hot path). */
const statements = definePrepared((db) => ({
  keyByHash: db
    .select({ key: apiKeys, account: accounts })
    .from(apiKeys)
    .innerJoin(accounts, eq(accounts.id, apiKeys.accountId))
    .where(eq(apiKeys.keyHash, sql.placeholder('hash')))
    .prepare(),
  accountById: db
    .select()
    .from(accounts)
    .where(eq(accounts.id, sql.placeholder('id')))
    .prepare(),
}));

/** Keys made unusable by this process (revoked, or their account deleted): a count that only grows. */
let keysRemoved = 0;

/** A key of this process stopped working (revoked, or its account deleted). */
export function noteKeysRemoved(): void {
  keysRemoved++;
}

/**
 * Changes whenever a key may have stopped working: this process revoked one or deleted an account, or another
 * connection (the CLI, an operator's sqlite3) committed to the database, which SQLite's data_version tells. Equal
 * stamps mean every key that was live is still live; the request guard compares them instead of looking the key up
 * a second time once the body has arrived.
 */
export async function keyStamp(db: Db): Promise<string> {
  const removed = keysRemoved;
  const row = await queryRow<{ data_version: number }>(db, sql`PRAGMA data_version`);
  return `${removed}.${row!.data_version}`;
}

/**
 * The live keys this process has found, by the SHA-256 of their secret (never the secret itself), each with the stamp
 * it was found under. Under the same stamp no key has stopped working, and nothing else of a key row that the guard
 * reads changes (its scopes are fixed when it is minted), so a known key skips its lookup; its account is read
 * afresh on every request, because its credits and counters change with every send. Bounded: past the limit the key
 * found longest ago makes room.
 */
const knownKeys = definePrepared(() => new Map<string, { key: ApiKeyRow; stamp: string }>());
const KNOWN_KEYS_MAX = 10_000;

/**
 * The key and the stamp it was found under, read in one transaction, so nothing can stop the key between the reads
 * (on SQLite they also share one lock instead of each taking and dropping the WAL read lock). An unknown key (a 401)
 * reads no stamp.
 */
export async function findLiveKeyStamped(db: Db, secret: string): Promise<{ found: Awaited<ReturnType<typeof findLiveKey>>; stamp: string }> {
  return await db.transaction(async () => {
    if (!KEY_FORMAT.test(secret)) return { found: undefined, stamp: '' };
    const hash = sha256Hex(secret);
    const known = knownKeys(db);
    const cached = known.get(hash);
    if (cached) {
      const stamp = await keyStamp(db);
      const account = cached.stamp === stamp ? await one(statements(db).accountById.execute({ id: cached.key.accountId })) : undefined;
      if (account) return { found: { key: cached.key, account }, stamp };
      known.delete(hash);
    }
    const found = await findLiveKeyByHash(db, hash);
    // An unknown key (a 401) reads no stamp: traffic without a key costs one indexed read.
    if (!found) return { found, stamp: '' };
    const stamp = await keyStamp(db);
    if (known.size >= KNOWN_KEYS_MAX) known.delete(known.keys().next().value!);
    known.set(hash, { key: found.key, stamp });
    return { found, stamp };
  });
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
    noteKeysRemoved();
    deps.logger.info('key.revoked', { keyId: id, accountId: ctx.account.id, byKeyId: ctx.keyId });
  }
}

import { randomUUID } from 'node:crypto';
import { type SQL, and, eq, isNull, sql } from 'drizzle-orm';
import { type Db, unsynced } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { idempotencyKeys } from '../../db/schema/index.js';
import { ApiError } from '../shared/errors.js';
import { constantTimeEqual, sha256Hex } from '../shared/secrets.js';
import { nowAndThen } from '../shared/now-and-then.js';
import { changes, execute, one, queryRow, skipLocked } from '../../db/sql.js';

/** Idempotency rules of docs/api/contract.md for POST /emails, per acting account. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000;
export const CLAIM_RELEASE_MS = 15_000;
export const MAX_KEY_LENGTH = 255;

export interface Claim {
  accountId: string;
  key: string;
  token: string;
}

export type ClaimResult = { kind: 'claimed'; claim: Claim } | { kind: 'replay'; response: unknown };

export function validateIdempotencyKey(header: string | undefined): string | null {
  if (header === undefined) return null;
  if (header.length < 1 || header.length > MAX_KEY_LENGTH) {
    throw new ApiError('invalid_idempotency_key', `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters.`);
  }
  return header;
}

/**
 * Claims `key` for this request atomically, before any work: a settled answer for the same body within 24 h is
 * replayed, another body is a mismatch, a running claim younger than 15 s is in progress, anything older is free.
 */
const p = sql.placeholder;
const byKey = and(eq(idempotencyKeys.accountId, p('accountId')), eq(idempotencyKeys.key, p('key')));

/** The statements of every send that carries a key, compiled once (they run on the root connection). */
const statements = definePrepared((db) => ({
  find: db.select().from(idempotencyKeys).where(byKey).prepare(),
  holder: db.select({ token: idempotencyKeys.claimToken, state: idempotencyKeys.state }).from(idempotencyKeys).where(byKey).prepare(),
  // The answer as the column's JSON text, as drizzle writes it (a placeholder passes through unencoded).
  settle: db
    .update(idempotencyKeys)
    .set({ state: 'done', response: sql`${p('response')}`, completedAt: sql`${p('now')}` })
    .where(and(byKey, eq(idempotencyKeys.claimToken, p('token')), eq(idempotencyKeys.state, 'running')))
    .prepare(),
  release: db
    .delete(idempotencyKeys)
    .where(and(byKey, eq(idempotencyKeys.claimToken, p('token')), eq(idempotencyKeys.state, 'running')))
    .prepare(),
}));

/**
 * `now` (the wall clock) judges the 24-hour window of a settled answer; `leaseNow` (server/shared/clock.ts leaseNow) writes and
 * judges the 15 s of a running claim, which is a lease: a step of the wall clock neither holds a lost claim for the
 * size of the step nor frees a running one early.
 */
export async function claimIdempotencyKey(
  db: Db,
  accountId: string,
  key: string,
  rawBody: Buffer,
  now: number,
  leaseNow: number = now,
  /** The node whose request holds the claim (NODE_NAME): its claims are freed once its liveness lock is gone. */
  heldBy: string | null = null,
): Promise<ClaimResult> {
  const fingerprint = sha256Hex(rawBody);
  const q = statements(db);
  // Without an fsync of its own: the send's group commit that follows makes it durable with the send (an fsync
  // covers every frame written before it); lost in a power failure with its request, it is claimed again by the retry.
  // So are the keys forgotten now and then before it (a lost delete is done again).
  return await unsynced(db, async () => {
    await forgetNowAndThen(db, now);
    // Twice at most: a key released between the upsert that found it live and the read of why (another request's
    // answer, on an engine with several writers) is free again, and claimed on the second pass. A key that churns
    // faster than that is answered as still running.
    for (let pass = 0; pass < 2; pass++) {
      const token = randomUUID();
      // The claim in one statement: a new key is inserted; an existing one is taken over only when it is free (a
      // settled answer past the 24-hour window, or a running claim past its 15 s lease), and then its row comes back.
      // No row back means the key is live, and `find` reads why. One statement, so two requests can never both take a
      // live key, on any engine.
      const claimed = await queryRow<{ claim_token: string }>(
        db,
        sql`insert into idempotency_keys (account_id, key, fingerprint, claim_token, held_by, state, response, claimed_at, completed_at)
     values (${accountId}, ${key}, ${fingerprint}, ${token}, ${heldBy}, 'running', null, ${leaseNow}, null)
     on conflict (account_id, key) do update set
       fingerprint = excluded.fingerprint, claim_token = excluded.claim_token, held_by = excluded.held_by, state = 'running', response = null,
       claimed_at = excluded.claimed_at, completed_at = null
     where (idempotency_keys.state = 'done' and ${now} - coalesce(idempotency_keys.completed_at, idempotency_keys.claimed_at) >= ${IDEMPOTENCY_WINDOW_MS})
        or (idempotency_keys.state = 'running' and ${leaseNow} - idempotency_keys.claimed_at >= ${CLAIM_RELEASE_MS})
     returning claim_token`,
      );
      if (claimed !== undefined) return { kind: 'claimed', claim: { accountId, key, token } } as const;
      // Live: a settled answer within 24 h, or a claim still running.
      const row = await one(q.find.execute({ accountId, key }));
      if (row === undefined) continue;
      // Compared in constant time, as every digest the service holds is (a request cannot time its way to another's).
      if (!constantTimeEqual(row.fingerprint, fingerprint))
        throw new ApiError('idempotency_mismatch', 'This Idempotency-Key was already used with a different request body.');
      if (row.state === 'running') throw inProgress();
      return { kind: 'replay', response: row.response } as const;
    }
    throw inProgress();
  });
}

/** How often a claim also forgets the keys past their window, and how many at most each time (oldest first). */
export const FORGET_EVERY_MS = 60_000;
export const FORGET_BATCH = 1000;
const forgetting = nowAndThen(FORGET_EVERY_MS);

/**
 * Settled keys whose 24-hour window has ended are deleted, at most `limit` of them, oldest first, found by the index
 * on completed_at: a deleted key and one past its window answer alike (a fresh attempt), so the table holds about a
 * day of keys instead of every key ever sent. On Postgres a row another node is deleting at the same moment is left
 * to it (SKIP LOCKED), never waited for. Returns how many.
 */
export async function forgetExpiredKeys(db: Db, now: number, limit: number = FORGET_BATCH): Promise<number> {
  return await execute(db, forgetStatement(db, now, limit));
}

/** forgetExpiredKeys's statement (its plan is tested: the index, never a scan of the table). */
export function forgetStatement(db: Db, now: number, limit: number): SQL {
  return sql`delete from idempotency_keys where (account_id, key) in (
      select account_id, key from idempotency_keys
      where state = 'done' and completed_at <= ${now - IDEMPOTENCY_WINDOW_MS}
      order by completed_at limit ${limit}${skipLocked(db)})`;
}

/**
 * Once a FORGET_EVERY_MS per store (and at the first claim), as part of a claim: at most FORGET_BATCH keys; when
 * nothing has expired, one probe of the index. A full batch leaves more behind (a backlog: the table an upgrade found,
 * a burst a day ago), so the next claim forgets again, without waiting the minute, until a batch comes back short. A
 * wall clock stepped back forgets at once (a key's window is judged on the same clock).
 */
async function forgetNowAndThen(db: Db, now: number): Promise<void> {
  if (forgetting.due(db, now) && (await forgetExpiredKeys(db, now)) >= FORGET_BATCH) forgetting.again(db);
}

const inProgress = () => new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still running; retry shortly.');

/**
 * Inside the send's transaction, before anything is written: the claim is still this request's and still running.
 * After a stall past CLAIM_RELEASE_MS another request may have taken the key; then this send is refused (its
 * transaction rolls back) and the other request's claim is left alone.
 */
export async function assertClaimHeld(db: Db, claim: Claim): Promise<void> {
  const row = await one(statements(db).holder.execute({ accountId: claim.accountId, key: claim.key }));
  if (!row || row.token !== claim.token || row.state !== 'running') throw takenOver();
}

const takenOver = () =>
  new ApiError(
    'idempotency_in_progress',
    'Another request with this Idempotency-Key took it over while this one stalled; nothing was sent. Retry to see its answer.',
  );

/**
 * Stores the settled 200 answer, inside the send's own transaction (after assertClaimHeld). It must settle exactly
 * this request's running claim: an update that touches no row (the key taken over or settled by another request
 * meanwhile, which a store with more than one writer allows between the check and here) throws as assertClaimHeld
 * does, and the send's transaction rolls back.
 */
export async function settleClaim(db: Db, claim: Claim, response: unknown, now: number): Promise<void> {
  const settled = await statements(db).settle.execute({
    accountId: claim.accountId,
    key: claim.key,
    token: claim.token,
    response: JSON.stringify(response),
    now,
  });
  if (changes(settled) !== 1) throw takenOver();
}

/**
 * Running claims whose request is gone are freed, so a retry after a crash is a fresh attempt at once instead of
 * `409 idempotency_in_progress` until CLAIM_RELEASE_MS passes. Without `isGone` (at start on SQLite, under the data
 * directory's lock) every running claim is a dead process's; with several nodes, only those of nodes `isGone` names
 * (this node's earlier run at its start, a node whose liveness lock is gone: server/app/liveness.ts; a claim without
 * a node is an earlier version's). Returns how many.
 */
export async function releaseDeadClaims(db: Db, isGone?: (node: string | null) => boolean): Promise<number> {
  // A running claim has no completed_at (a claim clears it, a settle sets it with 'done'): said here, it lets both
  // engines find the running claims through the index on completed_at (its nulls), not by reading a day of keys.
  const running = and(eq(idempotencyKeys.state, 'running'), isNull(idempotencyKeys.completedAt));
  if (!isGone) return changes(await db.delete(idempotencyKeys).where(running));
  const holders = await db.selectDistinct({ heldBy: idempotencyKeys.heldBy }).from(idempotencyKeys).where(running);
  let released = 0;
  for (const { heldBy } of holders) {
    if (!isGone(heldBy)) continue;
    released += changes(
      await db.delete(idempotencyKeys).where(and(running, heldBy === null ? sql`${idempotencyKeys.heldBy} is null` : eq(idempotencyKeys.heldBy, heldBy))),
    );
  }
  return released;
}

/** Any answer but a 200 frees the key, so a retry is a fresh attempt. */
export async function releaseClaim(db: Db, claim: Claim): Promise<void> {
  // Without an fsync: lost in a power failure, the claim lapses after CLAIM_RELEASE_MS instead.
  await unsynced(db, async () => await statements(db).release.execute({ accountId: claim.accountId, key: claim.key, token: claim.token }));
}

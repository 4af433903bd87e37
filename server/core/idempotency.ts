import { randomUUID } from 'node:crypto';
import { and, eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { idempotencyKeys } from '../../db/schema/index.js';
import { ApiError } from '../errors.js';
import { sha256Hex } from '../secrets.js';

/** Idempotency rules of api.md for POST /emails, per acting account. */
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
export function claimIdempotencyKey(db: Db, accountId: string, key: string, rawBody: Buffer, now: number): ClaimResult {
  const fingerprint = sha256Hex(rawBody);
  return db.transaction((tx) => {
    const row = tx.select().from(idempotencyKeys).where(and(eq(idempotencyKeys.accountId, accountId), eq(idempotencyKeys.key, key))).get();
    const live =
      row !== undefined &&
      (row.state === 'done' ? now - (row.completedAt ?? row.claimedAt) < IDEMPOTENCY_WINDOW_MS : now - row.claimedAt < CLAIM_RELEASE_MS);
    if (row && live) {
      if (row.fingerprint !== fingerprint) throw new ApiError('idempotency_mismatch', 'This Idempotency-Key was already used with a different request body.');
      if (row.state === 'running') throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still running; retry shortly.');
      return { kind: 'replay', response: row.response } as const;
    }
    const token = randomUUID();
    const values = { accountId, key, fingerprint, claimToken: token, state: 'running' as const, response: null, claimedAt: now, completedAt: null };
    tx.insert(idempotencyKeys).values(values).onConflictDoUpdate({ target: [idempotencyKeys.accountId, idempotencyKeys.key], set: values }).run();
    return { kind: 'claimed', claim: { accountId, key, token } } as const;
  });
}

/**
 * Inside the send's transaction, before anything is written: the claim is still this request's and still running.
 * After a stall past CLAIM_RELEASE_MS another request may have taken the key; then this send is refused (its
 * transaction rolls back) and the other request's claim is left alone.
 */
export function assertClaimHeld(db: Db, claim: Claim): void {
  const row = db
    .select({ token: idempotencyKeys.claimToken, state: idempotencyKeys.state })
    .from(idempotencyKeys)
    .where(and(eq(idempotencyKeys.accountId, claim.accountId), eq(idempotencyKeys.key, claim.key)))
    .get();
  if (!row || row.token !== claim.token || row.state !== 'running') {
    throw new ApiError('idempotency_in_progress', 'Another request with this Idempotency-Key took it over while this one stalled; nothing was sent. Retry to see its answer.');
  }
}

/** Stores the settled 200 answer, inside the send's own transaction (after assertClaimHeld, so the claim is ours). */
export function settleClaim(db: Db, claim: Claim, response: unknown, now: number): void {
  db.update(idempotencyKeys)
    .set({ state: 'done', response, completedAt: now })
    .where(and(eq(idempotencyKeys.accountId, claim.accountId), eq(idempotencyKeys.key, claim.key), eq(idempotencyKeys.claimToken, claim.token)))
    .run();
}

/** Any answer but a 200 frees the key, so a retry is a fresh attempt. */
export function releaseClaim(db: Db, claim: Claim): void {
  db.delete(idempotencyKeys)
    .where(and(eq(idempotencyKeys.accountId, claim.accountId), eq(idempotencyKeys.key, claim.key), eq(idempotencyKeys.claimToken, claim.token), eq(idempotencyKeys.state, 'running')))
    .run();
}

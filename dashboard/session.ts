import { eq, lt, or } from 'drizzle-orm';
import { type Db, unsynced } from '../db/client.js';
import { dashboardSessions } from '../db/schema/index.js';
import { adminTokenHash } from '../server/core/admin-token.js';
import type { Deps } from '../server/core/deps.js';
import { SEAL_CONTEXTS } from '../server/shared/seal-contexts.js';
import { constantTimeEqual, openBytes, randomBase62, sealBytes, sha256Hex } from '../server/shared/secrets.js';
import { storeFaultOf } from '../server/shared/store-health.js';
import { one, statementsAreRoundTrips } from '../db/sql.js';

/** Sign-in, sessions and flash messages of the dashboard. Policy first, as data. */
export const SESSION_POLICY = {
  /** A session unused this long is over: the next request goes to the sign-in page. */
  idleMs: 30 * 60_000,
  /** However active, a session lasts at most this long. */
  absoluteMs: 12 * 60 * 60_000,
} as const;

export interface Session {
  tokenHash: string;
  csrfToken: string;
}

export interface Flash {
  kind: 'ok' | 'error';
  message: string;
  /** A value shown once beside the message (a new key), with a copy button. */
  secret?: string;
  /** Where to look next (the email a test send made), linked under the message. */
  links?: { href: string; label: string }[];
}

/** True when `given` is the admin token; compared as hashes, in constant time. */
export async function isAdminToken(db: Db, given: string): Promise<boolean> {
  const stored = await adminTokenHash(db);
  if (stored === null) return false;
  return constantTimeEqual(sha256Hex(given), stored);
}

/** A new session; returns the cookie's token (its only copy) and the session. */
export async function openSession(deps: Pick<Deps, 'db' | 'clock'>): Promise<{ token: string; session: Session }> {
  const now = deps.clock.now();
  const token = randomBase62(43);
  const session = { tokenHash: sha256Hex(token), csrfToken: randomBase62(32) };
  // Expired sessions go whenever someone signs in: the table stays as small as the sessions alive.
  await deps.db
    .delete(dashboardSessions)
    .where(or(lt(dashboardSessions.lastSeenAt, now - SESSION_POLICY.idleMs), lt(dashboardSessions.createdAt, now - SESSION_POLICY.absoluteMs)));
  await deps.db.insert(dashboardSessions).values({ ...session, createdAt: now, lastSeenAt: now });
  return { token, session };
}

/** The live session a cookie token names, touched; null when there is none or it has expired (then it is removed). */
export async function findSession(deps: Pick<Deps, 'db' | 'clock'>, token: string): Promise<Session | null> {
  const now = deps.clock.now();
  const tokenHash = sha256Hex(token);
  const row = await one(deps.db.select().from(dashboardSessions).where(eq(dashboardSessions.tokenHash, tokenHash)));
  if (!row) return null;
  if (row.lastSeenAt + SESSION_POLICY.idleMs <= now || row.createdAt + SESSION_POLICY.absoluteMs <= now) {
    await deps.db.delete(dashboardSessions).where(eq(dashboardSessions.tokenHash, tokenHash));
    return null;
  }
  // Every request counts from its own time (an operator's page views are few). Without an fsync: a touch lost in a
  // power failure only ends the session a little sooner; so does one the storage could not take (a full disk), and
  // the page is still shown (a read never fails for a write of its own).
  if (now > row.lastSeenAt) {
    try {
      await unsynced(deps.db, async () => await deps.db.update(dashboardSessions).set({ lastSeenAt: now }).where(eq(dashboardSessions.tokenHash, tokenHash)));
    } catch (err) {
      if (!storeFaultOf(err)) throw err;
    }
  }
  return { tokenHash, csrfToken: row.csrfToken };
}

export async function closeSession(db: Db, session: Session): Promise<void> {
  await db.delete(dashboardSessions).where(eq(dashboardSessions.tokenHash, session.tokenHash));
}

/** Every session ends (the admin token was reset). */
export async function closeAllSessions(db: Db): Promise<void> {
  await db.delete(dashboardSessions);
}

/**
 * A flash's secret (a new API key) is never stored in plain: on SQLite it waits in this process's memory, beside the
 * session's flash row, for the page that shows it, and is dropped after SECRET_HOLD_MS if that page never comes. (Keys
 * are stored only as hashes; a plaintext copy in the sessions table would undo that.) With several nodes (Postgres)
 * the page may be served by another node: the secret then waits in the session's row sealed with the secret key, until
 * SECRET_HOLD_MS has passed or it is shown, whichever comes first (with SECRET_KEY=off, in this node's memory as on
 * SQLite).
 */
const SECRET_HOLD_MS = 60_000;
const heldSecrets = new WeakMap<Db, Map<string, { secret: string; until: number }>>();

function secretsOf(db: Db): Map<string, { secret: string; until: number }> {
  let held = heldSecrets.get(db);
  if (!held) {
    held = new Map();
    heldSecrets.set(db, held);
  }
  return held;
}

/** Where a flash's secret waits: in the session's row, sealed, when several nodes may serve the next page and it can be sealed. */
function sealingKey(deps: Pick<Deps, 'db'> & Partial<Pick<Deps, 'secretKey'>>): Buffer | null {
  return statementsAreRoundTrips(deps.db) ? (deps.secretKey ?? null) : null;
}

export async function setFlash(deps: Pick<Deps, 'db' | 'clock'> & Partial<Pick<Deps, 'secretKey'>>, session: Session, flash: Flash): Promise<void> {
  const { secret, ...stored } = flash;
  const held = secretsOf(deps.db);
  const now = deps.clock.now();
  const key = sealingKey(deps);
  for (const [token, value] of held) if (value.until <= now) held.delete(token);
  if (secret !== undefined && !key) held.set(session.tokenHash, { secret, until: now + SECRET_HOLD_MS });
  else held.delete(session.tokenHash);
  const sealed = secret !== undefined && key ? sealBytes(key, Buffer.from(secret), SEAL_CONTEXTS.flashSecret(session.tokenHash)) : null;
  await deps.db
    .update(dashboardSessions)
    .set({ flash: JSON.stringify(stored), flashSecretSealed: sealed, flashSecretUntil: sealed ? now + SECRET_HOLD_MS : null })
    .where(eq(dashboardSessions.tokenHash, session.tokenHash));
}

/** The session's flash, removed as it is read (shown once). */
export async function takeFlash(deps: Pick<Deps, 'db' | 'clock'> & Partial<Pick<Deps, 'secretKey'>>, session: Session): Promise<Flash | null> {
  const where = eq(dashboardSessions.tokenHash, session.tokenHash);
  const row = await one(
    deps.db
      .select({ flash: dashboardSessions.flash, sealed: dashboardSessions.flashSecretSealed, until: dashboardSessions.flashSecretUntil })
      .from(dashboardSessions)
      .where(where),
  );
  if (!row?.flash) return null;
  await deps.db.update(dashboardSessions).set({ flash: null, flashSecretSealed: null, flashSecretUntil: null }).where(where);
  const flash = JSON.parse(row.flash) as Flash;
  const key = sealingKey(deps);
  if (row.sealed && key && (row.until ?? 0) > deps.clock.now()) {
    return { ...flash, secret: openBytes(key, row.sealed, SEAL_CONTEXTS.flashSecret(session.tokenHash)).toString() };
  }
  const held = secretsOf(deps.db).get(session.tokenHash);
  secretsOf(deps.db).delete(session.tokenHash);
  return held && held.until > deps.clock.now() ? { ...flash, secret: held.secret } : flash;
}

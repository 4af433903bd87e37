import { eq, lt, or } from 'drizzle-orm';
import { type Db, unsynced } from '../db/client.js';
import { dashboardSessions } from '../db/schema/index.js';
import { adminTokenHash } from '../server/core/admin-token.js';
import type { Deps } from '../server/core/deps.js';
import { constantTimeEqual, randomBase62, sha256Hex } from '../server/shared/secrets.js';
import { storeFaultOf } from '../server/shared/store-health.js';

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
export function isAdminToken(db: Db, given: string): boolean {
  const stored = adminTokenHash(db);
  if (stored === null) return false;
  return constantTimeEqual(sha256Hex(given), stored);
}

/** A new session; returns the cookie's token (its only copy) and the session. */
export function openSession(deps: Pick<Deps, 'db' | 'clock'>): { token: string; session: Session } {
  const now = deps.clock.now();
  const token = randomBase62(43);
  const session = { tokenHash: sha256Hex(token), csrfToken: randomBase62(32) };
  // Expired sessions go whenever someone signs in: the table stays as small as the sessions alive.
  deps.db
    .delete(dashboardSessions)
    .where(or(lt(dashboardSessions.lastSeenAt, now - SESSION_POLICY.idleMs), lt(dashboardSessions.createdAt, now - SESSION_POLICY.absoluteMs)))
    .run();
  deps.db
    .insert(dashboardSessions)
    .values({ ...session, createdAt: now, lastSeenAt: now })
    .run();
  return { token, session };
}

/** The live session a cookie token names, touched; null when there is none or it has expired (then it is removed). */
export function findSession(deps: Pick<Deps, 'db' | 'clock'>, token: string): Session | null {
  const now = deps.clock.now();
  const tokenHash = sha256Hex(token);
  const row = deps.db.select().from(dashboardSessions).where(eq(dashboardSessions.tokenHash, tokenHash)).get();
  if (!row) return null;
  if (row.lastSeenAt + SESSION_POLICY.idleMs <= now || row.createdAt + SESSION_POLICY.absoluteMs <= now) {
    deps.db.delete(dashboardSessions).where(eq(dashboardSessions.tokenHash, tokenHash)).run();
    return null;
  }
  // Every request counts from its own time (an operator's page views are few). Without an fsync: a touch lost in a
  // power failure only ends the session a little sooner; so does one the storage could not take (a full disk), and
  // the page is still shown (a read never fails for a write of its own).
  if (now > row.lastSeenAt) {
    try {
      unsynced(deps.db, () => deps.db.update(dashboardSessions).set({ lastSeenAt: now }).where(eq(dashboardSessions.tokenHash, tokenHash)).run());
    } catch (err) {
      if (!storeFaultOf(err)) throw err;
    }
  }
  return { tokenHash, csrfToken: row.csrfToken };
}

export function closeSession(db: Db, session: Session): void {
  db.delete(dashboardSessions).where(eq(dashboardSessions.tokenHash, session.tokenHash)).run();
}

/** Every session ends (the admin token was reset). */
export function closeAllSessions(db: Db): void {
  db.delete(dashboardSessions).run();
}

/**
 * A flash's secret (a new API key) never reaches the disk: it waits in this process's memory, beside the session's
 * flash row, for the page that shows it, and is dropped after SECRET_HOLD_MS if that page never comes. (Keys are
 * stored only as hashes; a plaintext copy in the sessions table would undo that.)
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

export function setFlash(deps: Pick<Deps, 'db' | 'clock'>, session: Session, flash: Flash): void {
  const { secret, ...stored } = flash;
  const held = secretsOf(deps.db);
  const now = deps.clock.now();
  for (const [key, value] of held) if (value.until <= now) held.delete(key);
  if (secret !== undefined) held.set(session.tokenHash, { secret, until: now + SECRET_HOLD_MS });
  else held.delete(session.tokenHash);
  deps.db
    .update(dashboardSessions)
    .set({ flash: JSON.stringify(stored) })
    .where(eq(dashboardSessions.tokenHash, session.tokenHash))
    .run();
}

/** The session's flash, removed as it is read (shown once). */
export function takeFlash(deps: Pick<Deps, 'db' | 'clock'>, session: Session): Flash | null {
  const where = eq(dashboardSessions.tokenHash, session.tokenHash);
  const row = deps.db.select({ flash: dashboardSessions.flash }).from(dashboardSessions).where(where).get();
  if (!row?.flash) return null;
  deps.db.update(dashboardSessions).set({ flash: null }).where(where).run();
  const flash = JSON.parse(row.flash) as Flash;
  const held = secretsOf(deps.db).get(session.tokenHash);
  secretsOf(deps.db).delete(session.tokenHash);
  return held && held.until > deps.clock.now() ? { ...flash, secret: held.secret } : flash;
}

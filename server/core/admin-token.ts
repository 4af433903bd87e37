import { eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { dashboardSessions, settings } from '../../db/schema/index.js';
import { randomBase62, sha256Hex } from '../shared/secrets.js';

const HASH_KEY = 'admin_token_sha256';

/** A new token ends every dashboard session signed in with the old one. */
function storeHash(db: Db, token: string): void {
  const value = sha256Hex(token);
  db.transaction((tx) => {
    const before = tx.select().from(settings).where(eq(settings.key, HASH_KEY)).get();
    tx.insert(settings).values({ key: HASH_KEY, value }).onConflictDoUpdate({ target: settings.key, set: { value } }).run();
    if (before && before.value !== value) tx.delete(dashboardSessions).run();
  });
}

/** A fresh dashboard token; only its hash is kept. */
/** A fresh dashboard admin token. */
const newAdminToken = () => `msa_${randomBase62(40)}`;

export function resetAdminToken(db: Db): string {
  const token = newAdminToken();
  storeHash(db, token);
  return token;
}

/**
 * At start: ADMIN_TOKEN, when set, replaces the stored hash; otherwise a token is generated once, on first start,
 * handed to `show` (main prints it, that one time) and only then stored: a start killed between the two stores
 * nothing, and the next start shows another, where the other order would keep a token nobody ever saw.
 */
export function ensureAdminToken(db: Db, configured: string | null, show: (token: string) => void = () => undefined): { generated: string | null } {
  if (configured !== null) {
    storeHash(db, configured);
    return { generated: null };
  }
  const existing = db.select().from(settings).where(eq(settings.key, HASH_KEY)).get();
  if (existing) return { generated: null };
  const token = newAdminToken();
  show(token);
  storeHash(db, token);
  return { generated: token };
}

export function adminTokenHash(db: Db): string | null {
  return db.select().from(settings).where(eq(settings.key, HASH_KEY)).get()?.value ?? null;
}

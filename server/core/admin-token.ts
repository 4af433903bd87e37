import { eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { dashboardSessions, settings } from '../../db/schema/index.js';
import { randomBase62, sha256Hex } from '../secrets.js';

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
export function resetAdminToken(db: Db): string {
  const token = `msa_${randomBase62(40)}`;
  storeHash(db, token);
  return token;
}

/**
 * At start: ADMIN_TOKEN, when set, replaces the stored hash; otherwise a token is generated once, on first start,
 * and returned so main can print it that one time.
 */
export function ensureAdminToken(db: Db, configured: string | null): { generated: string | null } {
  if (configured !== null) {
    storeHash(db, configured);
    return { generated: null };
  }
  const existing = db.select().from(settings).where(eq(settings.key, HASH_KEY)).get();
  return { generated: existing ? null : resetAdminToken(db) };
}

export function adminTokenHash(db: Db): string | null {
  return db.select().from(settings).where(eq(settings.key, HASH_KEY)).get()?.value ?? null;
}

import { eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { dashboardSessions, settings } from '../../db/schema/index.js';
import { randomBase62, sha256Hex } from '../shared/secrets.js';
import { one } from '../../db/sql.js';

const HASH_KEY = 'admin_token_sha256';

/** A new token ends every dashboard session signed in with the old one. */
async function storeHash(db: Db, token: string): Promise<void> {
  const value = sha256Hex(token);
  await db.transaction(async (tx) => {
    const before = await one(tx.select().from(settings).where(eq(settings.key, HASH_KEY)));
    await tx.insert(settings).values({ key: HASH_KEY, value }).onConflictDoUpdate({ target: settings.key, set: { value } });
    if (before && before.value !== value) await tx.delete(dashboardSessions);
  });
}

/** A fresh dashboard token; only its hash is kept. */
/** A fresh dashboard admin token. */
const newAdminToken = () => `msa_${randomBase62(40)}`;

export async function resetAdminToken(db: Db): Promise<string> {
  const token = newAdminToken();
  await storeHash(db, token);
  return token;
}

/**
 * At start: ADMIN_TOKEN, when set, replaces the stored hash; otherwise a token is generated once, on first start,
 * handed to `show` (main prints it, that one time) and only then stored: a start killed between the two stores
 * nothing, and the next start shows another, where the other order would keep a token nobody ever saw.
 */
export async function ensureAdminToken(
  db: Db,
  configured: string | null,
  show: (token: string) => void = () => undefined,
): Promise<{ generated: string | null }> {
  if (configured !== null) {
    await storeHash(db, configured);
    return { generated: null };
  }
  const existing = await one(db.select().from(settings).where(eq(settings.key, HASH_KEY)));
  if (existing) return { generated: null };
  const token = newAdminToken();
  show(token);
  await storeHash(db, token);
  return { generated: token };
}

export async function adminTokenHash(db: Db): Promise<string | null> {
  return (await one(db.select().from(settings).where(eq(settings.key, HASH_KEY))))?.value ?? null;
}

import { randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { settings } from '../../db/schema/index.js';

const SETTING = 'cursor_hmac_key';

const cache = new WeakMap<Db, Buffer>();

/**
 * The server's key for signing list cursors: 32 random bytes, made on first use and kept in `settings`, so cursors
 * outlive a restart and the CLI beside the server signs alike. Read once per database.
 */
export function cursorKey(db: Db): Buffer {
  let key = cache.get(db);
  if (!key) {
    // Whoever inserts first wins; everyone then reads the stored key.
    db.insert(settings).values({ key: SETTING, value: randomBytes(32).toString('hex') }).onConflictDoNothing().run();
    const stored = db.select().from(settings).where(eq(settings.key, SETTING)).get();
    if (!stored || !/^[0-9a-f]{64}$/.test(stored.value)) throw new Error(`settings.${SETTING} does not hold 32 bytes of hex`);
    key = Buffer.from(stored.value, 'hex');
    cache.set(db, key);
  }
  return key;
}

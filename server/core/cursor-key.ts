import { eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { settings } from '../../db/schema/index.js';
import { one } from '../../db/sql.js';

const SETTING = 'cursor_hmac_key';

const cache = new WeakMap<Db, Buffer>();

/**
 * The server's key for signing list cursors: 32 random bytes kept in `settings`, so cursors outlive a restart and the
 * CLI beside the server signs alike. Made by a migration (db/migrations/0016_cursor_key.sql), never here: a list is a
 * read, and a read never writes (on a full disk it still answers). Read once per database.
 */
export async function cursorKey(db: Db): Promise<Buffer> {
  let key = cache.get(db);
  if (!key) {
    const stored = await one(db.select().from(settings).where(eq(settings.key, SETTING)));
    if (!stored || !/^[0-9a-f]{64}$/.test(stored.value))
      throw new Error(`settings.${SETTING} does not hold 32 bytes of hex (the migration that makes it did not run?)`);
    key = Buffer.from(stored.value, 'hex');
    cache.set(db, key);
  }
  return key;
}

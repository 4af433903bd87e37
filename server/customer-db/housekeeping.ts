import { eq } from 'drizzle-orm';
import { customerDatabases } from '../../db/schema/index.js';
import type { Deps } from '../core/deps.js';
import { dropExpiredWrites } from '../core/customer-db-outbox.js';

/** How often the spool is swept, and how long an unreferenced message must be untouched (it is written before its commit). */
const SPOOL_SWEEP_EVERY_MS = 5 * 60_000;
const SPOOL_ORPHAN_AFTER_MS = 15 * 60_000;

/** The writer's housekeeping: writes that waited seven days dropped (with the count logged), the spool swept. */
export function createHousekeeping(deps: Pick<Deps, 'db' | 'clock' | 'logger' | 'config' | 'inboundSpool'>) {
  async function dropExpired(): Promise<void> {
    const now = deps.clock.now();
    for (const [owner, count] of await dropExpiredWrites(deps.db, now)) {
      const message = `${count} queued write${count === 1 ? ' was' : 's were'} dropped after waiting seven days for the database.`;
      deps.logger.error('customer_db.writes_dropped', { accountId: owner, count, message });
      await deps.db
        .update(customerDatabases)
        .set({ lastError: message, lastErrorKind: 'connection', updatedAt: now })
        .where(eq(customerDatabases.accountId, owner));
    }
  }

  /** Spooled messages no queued write reads (a crash between the spool and its commit, writes dropped or deleted). */
  let lastSweep = 0;
  async function sweep(): Promise<void> {
    if (Date.now() - lastSweep < SPOOL_SWEEP_EVERY_MS) return;
    lastSweep = Date.now();
    const removed = await deps.inboundSpool.sweep(SPOOL_ORPHAN_AFTER_MS);
    if (removed > 0) deps.logger.info('inbound.spool_swept', { removed });
  }

  return { dropExpired, sweep };
}

export type Housekeeping = ReturnType<typeof createHousekeeping>;

import { eq } from 'drizzle-orm';
import { sweepSpool } from '../../db/inbound-spool.js';
import { customerDatabases } from '../../db/schema/index.js';
import type { Deps } from '../core/deps.js';
import { dropExpiredWrites, spoolReferenced } from '../core/customer-db-outbox.js';

/** How often the spool is swept, and how old an unreferenced file must be (files are written before their commit). */
const SPOOL_SWEEP_EVERY_MS = 5 * 60_000;
const SPOOL_ORPHAN_AFTER_MS = 15 * 60_000;

/** The writer's housekeeping: writes that waited seven days dropped (with the count logged), the spool swept. */
export function createHousekeeping(deps: Pick<Deps, 'db' | 'clock' | 'logger' | 'config'>) {
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

  /** Spool files no queued write reads (a crash between the file and its commit, writes dropped or deleted). */
  let lastSweep = 0;
  async function sweep(): Promise<void> {
    if (Date.now() - lastSweep < SPOOL_SWEEP_EVERY_MS) return;
    lastSweep = Date.now();
    const removed = await sweepSpool(deps.config.dataDir, Date.now(), SPOOL_ORPHAN_AFTER_MS, async (id) => await spoolReferenced(deps.db, id));
    if (removed > 0) deps.logger.info('inbound.spool_swept', { removed });
  }

  return { dropExpired, sweep };
}

export type Housekeeping = ReturnType<typeof createHousekeeping>;

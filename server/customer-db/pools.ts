import type pg from 'pg';
import { openCustomerPool } from '../../db/customer/connect.js';
import { type CustomerDatabaseRow, customerDatabases } from '../../db/schema/index.js';
import type { Deps } from '../core/deps.js';
import { configsFor, connectFailure, targetOf } from './connection.js';

/** A customer database's pool, for the connection (URL) it was opened for. */
export interface PoolEntry {
  connectionId: string;
  pool: pg.Pool;
  /** The customer schema brought up to date on it already. */
  migrated: boolean;
}

/**
 * The writer's connection pools, one per connected database (keyed by its account): opened on the first checked
 * address that connects, closed when the URL is replaced or deleted, all closed at stop.
 */
export function createPools(deps: Pick<Deps, 'db' | 'secretKey' | 'logger' | 'resolver' | 'config'>, options: { poolMax: number }) {
  const pools = new Map<string, PoolEntry>();

  function closePool(owner: string): void {
    const entry = pools.get(owner);
    if (!entry) return;
    pools.delete(owner);
    entry.pool.end().catch(() => undefined);
  }

  /** The pool of a database's current URL, opened on the first checked address that connects; a replaced URL's pool is closed. */
  async function poolFor(db: CustomerDatabaseRow): Promise<PoolEntry | string> {
    const known = pools.get(db.accountId);
    if (known && known.connectionId === db.connectionId) return known;
    if (known) closePool(db.accountId);
    if (!deps.secretKey) return 'The server has no secret key to open the stored URL.';
    let target;
    try {
      target = targetOf(deps.secretKey, db);
    } catch {
      return 'The stored URL could not be read with the current secret key; connect the database again.';
    }
    const reached = await configsFor(deps, target);
    if (!reached.ok) return reached.message;
    // Each checked address in turn while the failure is at the network, as POST /database connects.
    let failure = 'could not connect';
    for (const config of reached.configs) {
      const pool = openCustomerPool(config, { max: options.poolMax, logger: deps.logger });
      try {
        (await pool.connect()).release();
      } catch (err) {
        pool.end().catch(() => undefined);
        const { atNetwork, message } = connectFailure(err);
        failure = message;
        if (atNetwork) continue;
        return failure;
      }
      const entry: PoolEntry = { connectionId: db.connectionId, pool, migrated: false };
      pools.set(db.accountId, entry);
      return entry;
    }
    return failure;
  }

  /** Closes the pools of databases no longer connected (deleted, or replaced: poolFor handles replaced ones too), unless busy. */
  async function closeForgotten(busy: ReadonlySet<string>): Promise<void> {
    if (pools.size === 0) return;
    const live = new Set((await deps.db.select({ id: customerDatabases.accountId }).from(customerDatabases)).map((r) => r.id));
    for (const owner of [...pools.keys()]) if (!live.has(owner) && !busy.has(owner)) closePool(owner);
  }

  /** Ends every pool (stop). */
  async function closeAll(): Promise<void> {
    await Promise.all([...pools.values()].map((e) => e.pool.end().catch(() => undefined)));
    pools.clear();
  }

  return { poolFor, closePool, closeForgotten, closeAll };
}

export type Pools = ReturnType<typeof createPools>;

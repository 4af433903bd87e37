import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SqliteStore, Store } from '../../db/client.js';
import type { PgStore } from '../../db/pg/state.js';
import type { Deps } from '../core/deps.js';
import { createFileDurably } from '../../db/data-dir.js';
import { createFileSpool } from '../../db/inbound-spool-store.js';
import { createRowSpool } from '../../db/inbound-spool-rows.js';
import { createGroupCommit, createPgGroupCommit, type GroupCommit } from '../../db/group-commit.js';
import type { Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import { createKeyUsage } from '../core/key-usage.js';
import { createRateLimiter, windowsFor } from '../core/rate-limit.js';
import { createResolver } from '../shared/dns/resolver.js';
import type { Logger } from '../shared/logger.js';
import { createMetrics } from '../shared/metrics.js';
import { type Scans, scansOn } from '../../db/scans.js';
import { createStoreHealth, type StoreHealth } from '../shared/store-health.js';
import type { Nodes } from '../core/nodes.js';
import { singleNode } from '../queues/nodes.js';
import { createDrain } from '../shared/drain.js';
import { holdsSealedSecrets } from './secret-key-check.js';
import { openStore } from './state.js';

/**
 * SECRET_KEY as decided: given, `off`, or read from DATA_DIR/secret.key, generated there (mode 0600) on first start.
 */
export function resolveSecretKey(config: Config, opts: { mayGenerate?: boolean } = {}): Buffer | null {
  if (config.secretKey.mode === 'off') return null;
  if (config.secretKey.mode === 'given') return config.secretKey.key;
  const path = join(config.dataDir, 'secret.key');
  try {
    const text = readFileSync(path, 'utf8').trim();
    if (!/^[0-9a-f]{64}$/i.test(text)) throw new Error(`${path} does not hold 32 bytes of hex`);
    return Buffer.from(text, 'hex');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  // The key file is gone while secrets sealed with it remain: the start stops instead of generating another.
  if (opts.mayGenerate === false) {
    throw new Error(
      `${path} is missing, and DATA_DIR holds secrets sealed with a key (DKIM keys, webhook secrets or database URLs): put that key back in ${path}, or set SECRET_KEY to it; a new key would open none of them`,
    );
  }
  const key = randomBytes(32);
  try {
    // Whole and on disk before anything is sealed with it: an empty or lost key would leave every secret unreadable.
    createFileDurably(path, `${key.toString('hex')}\n`);
  } catch (err) {
    // Another process (the CLI beside the server) wrote it first: use that one.
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return resolveSecretKey(config, opts);
    throw err;
  }
  return key;
}

/**
 * SQLite's durability: the group commit (one fsync for many writes), and the store's health. After a failed flush of
 * the WAL no write anywhere on the connection is safe to acknowledge: every one is refused (query_only) and /healthz
 * stays 503 until a restart recovers from what the disk holds.
 */
function sqliteDurability(store: SqliteStore, clock: Clock, logger: Logger): { storeHealth: StoreHealth; commits: GroupCommit } {
  const closeToWrites = (err: unknown) => {
    if (storeHealth.unsafe()) return;
    storeHealth.markUnsafe(err);
    store.sqlite.pragma('query_only = 1');
    logger.error('store.unsafe', {
      err,
      message: 'A flush of the database to disk failed: writes are refused until the service is restarted. Check the disk.',
    });
  };
  // The group commit's own flush failing says so (onUnsafe); SQLite's fsync inside a commit of any other write
  // (synchronous=FULL) failing is the same loss, and reaches the store's health as its error (onFlushFailure).
  const storeHealth = createStoreHealth(clock, { onFlushFailure: closeToWrites });
  return { storeHealth, commits: createGroupCommit(store, store.syncWal, { onFailure: storeHealth.note, onUnsafe: closeToWrites }) };
}

/** Postgres's: the writes that arrive together share a transaction, each in a savepoint; durable at its COMMIT. */
function postgresDurability(store: PgStore, clock: Clock): { storeHealth: StoreHealth; commits: GroupCommit } {
  return { storeHealth: createStoreHealth(clock), commits: createPgGroupCommit(store.db) };
}

/** What the start decides before the dependencies are built; a test or a tool leaves them to createDeps. */
export interface DepsOptions {
  /** The store, opened already (main reads the secret key's state from it first); else opened in DATA_DIR. */
  store?: Store;
  /** The secret key, resolved already (main checks it against the store first); else resolved here. */
  secretKey?: Buffer | null;
  /**
   * Where reads that walk many rows run (db/scans.ts): main puts them on the WAL checkpoint thread's connection; else
   * the store's own connection, on the event loop.
   */
  scans?: Scans;
  /** The nodes sharing the state (server/app/liveness.ts, on Postgres); else this one alone. */
  nodes?: Nodes;
}

export async function createDeps(config: Config, clock: Clock, logger: Logger, options: DepsOptions = {}): Promise<Deps> {
  const store = options.store ?? (await openStore(config));
  const { storeHealth, commits } = store.engine === 'sqlite' ? sqliteDurability(store, clock, logger) : postgresDurability(store, clock);
  const scans = options.scans ?? scansOn(store.db);
  // The rate limits' windows: this process's memory on SQLite, the state database on Postgres (every node's).
  const nodes = options.nodes ?? singleNode(config.nodeName);
  const windows = windowsFor(store.db, clock, () => nodes.liveCount());
  return {
    config,
    db: store.db,
    store,
    commits,
    clock,
    logger,
    resolver: createResolver({ servers: config.dnsServers }),
    // Generated only on a first start: DATA_DIR holding secrets sealed with a key and no key file is a lost key.
    secretKey: options.secretKey !== undefined ? options.secretKey : resolveSecretKey(config, { mayGenerate: !(await holdsSealedSecrets(store.db)) }),
    keyUsage: createKeyUsage(),
    rateLimiter: createRateLimiter(clock, { perKey: config.rateLimitPerKey, perAccount: config.rateLimitPerAccount }, windows),
    windows,
    scans,
    metrics: createMetrics(clock, () => scans, {
      ...(store.engine === 'postgres'
        ? { statePool: () => ({ total: store.pool.totalCount, idle: store.pool.idleCount, waiting: store.pool.waitingCount }) }
        : {}),
      node: { name: nodes.name, live: () => nodes.liveCount() },
    }),
    storeHealth,
    nodes,
    drain: createDrain(),
    inboundSpool: store.engine === 'sqlite' ? createFileSpool(config.dataDir, store.db) : createRowSpool(store.db, () => clock.now()),
  };
}

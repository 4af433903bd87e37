import type { Db, Store } from '../../db/client.js';
import type { GroupCommit } from '../../db/group-commit.js';
import type { InboundSpool } from '../../db/inbound-spool-store.js';
import type { Scans } from '../../db/scans.js';
import type { Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import type { DnsResolver } from '../shared/dns/resolver.js';
import type { Logger } from '../shared/logger.js';
import type { Metrics } from '../shared/metrics.js';
import type { StoreHealth } from '../shared/store-health.js';
import type { Drain } from '../shared/drain.js';
import type { Nodes } from './nodes.js';
import type { KeyUsage } from './key-usage.js';
import type { RateLimiter, WindowCounter } from './rate-limit.js';

/**
 * Everything with a side effect, built once in the composition root (server/app/deps.ts, or a test) and passed down;
 * read-only once built.
 */
export interface Deps {
  readonly config: Config;
  readonly db: Db;
  readonly store: Store;
  /** Durable writes that acknowledge a request (a send): batched, one commit for many. */
  readonly commits: GroupCommit;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Every DNS read (domain checks, MX routing) goes through it; it honours DNS_SERVERS. */
  readonly resolver: DnsResolver;
  /** The key that seals stored secrets; null when SECRET_KEY=off. */
  readonly secretKey: Buffer | null;
  readonly keyUsage: KeyUsage;
  readonly rateLimiter: RateLimiter;
  /** The sliding windows every limit counts in (the API's rate limits, the dashboard's sign-in): rate-limit.ts. */
  readonly windows: WindowCounter;
  /**
   * Where reads that walk many rows run (the /metrics gauges, the dashboard's chart): in the server the checkpoint
   * thread's connection, decided when the dependencies are built; else the event loop's (db/scans.ts).
   */
  readonly scans: Scans;
  /** The operator's counters and gauges (`GET /metrics`), one registry per Deps. */
  readonly metrics: Metrics;
  /** Whether this node is stopping: `/healthz` answers 503 `draining` from the stop's first step. */
  readonly drain: Drain;
  /** The nodes sharing the state: this one alone, or the live picture of several (server/app/liveness.ts). */
  readonly nodes: Nodes;
  /**
   * Where a large received message waits for the customer-database writer: files in DATA_DIR beside SQLite, rows of
   * the state beside Postgres (any node's writer reads them), chosen with the store.
   */
  readonly inboundSpool: InboundSpool;
  /** Failures on the store itself, from every part of the service, for /healthz (server/shared/store-health.ts). */
  readonly storeHealth: StoreHealth;
}

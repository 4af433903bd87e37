import type { Db, Store } from '../../db/client.js';
import type { GroupCommit } from '../../db/group-commit.js';
import type { Scans } from '../../db/scans.js';
import type { Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import type { DnsResolver } from '../shared/dns/resolver.js';
import type { Logger } from '../shared/logger.js';
import type { Metrics } from '../shared/metrics.js';
import type { StoreHealth } from '../shared/store-health.js';
import type { KeyUsage } from './key-usage.js';
import type { RateLimiter } from './rate-limit.js';

/** Everything with a side effect, built once in main (or a test) and passed down. */
export interface Deps {
  config: Config;
  db: Db;
  store: Store;
  /** Durable writes that acknowledge a request (a send): batched, one commit for many. */
  commits: GroupCommit;
  clock: Clock;
  logger: Logger;
  /** Every DNS read (domain checks, MX routing) goes through it; it honours DNS_SERVERS. */
  resolver: DnsResolver;
  /** The key that seals stored secrets; null when SECRET_KEY=off. */
  secretKey: Buffer | null;
  keyUsage: KeyUsage;
  rateLimiter: RateLimiter;
  /**
   * Where reads that walk many rows run (the /metrics gauges, the dashboard's chart): the event loop's connection,
   * until main points them at the checkpoint thread's (db/scans.ts).
   */
  scans: Scans;
  /** The operator's counters and gauges (`GET /metrics`), one registry per Deps. */
  metrics: Metrics;
  /** Failures on the store itself, from every part of the service, for /healthz (server/shared/store-health.ts). */
  storeHealth: StoreHealth;
}

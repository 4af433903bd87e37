import { and, gt, lte, sql } from 'drizzle-orm';
import { definePrepared } from '../../db/prepared.js';
import { type CustomerDatabaseRow, customerDatabases } from '../../db/schema/index.js';
import type { Deps } from '../core/deps.js';
import { skipped } from '../core/nodes.js';
import { singleNode } from '../queues/nodes.js';
import { createQueueWorker } from '../queues/runner.js';
import { logFailure } from '../shared/store-health.js';
import { createBatches } from './batches.js';
import { createHousekeeping } from './housekeeping.js';
import { createInboundHandoff } from './inbound-handoff.js';
import type { InboundParser } from './inbound/parser.js';
import { createPools } from './pools.js';
import { indexedBy, one } from '../../db/sql.js';

export { isTimeout, withinBudget } from './batches.js';

/**
 * The customer-database writer: takes the outbox's waiting writes of each connected database, oldest first, in
 * batches applied in one Postgres transaction each (db/customer/writes.ts), and deletes them once committed. A
 * database that cannot be reached turns `unreachable` and is tried again after growing gaps; writes older than seven
 * days are dropped with a logged count; a write the database refuses for its data is retried a few times and then
 * set aside, never holding up the writes behind it. One batch per database at a time, so a database's writes land in
 * the order they happened.
 */

export interface WriterOptions {
  /** How often due writes are looked for besides `poke()`. */
  intervalMs: number;
  /** Writes applied in one transaction. */
  batchSize: number;
  /** Databases written to at once. */
  maxDatabases: number;
  /** Connections per customer database. */
  poolMax: number;
  /** The parse thread's script (tests start one that dies); the built mta/inbound/parse-worker.js otherwise. */
  parserWorkerUrl?: URL;
  /** The parse threads to use (main shares them with the inbound server, and closes them); else the writer's own. */
  parser?: InboundParser;
}

export const DEFAULT_WRITER_OPTIONS: WriterOptions = { intervalMs: 1000, batchSize: 500, maxDatabases: 8, poolMax: 2 };

const statements = definePrepared((db) => ({
  dueDatabases: db
    .select()
    .from(customerDatabases)
    .where(
      and(
        lte(customerDatabases.nextAttemptAt, sql.placeholder('now')),
        sql`exists (select 1 from customer_db_writes w${indexedBy(db, 'customer_db_writes_pending_idx')}
                    where w.database_account_id = ${customerDatabases.accountId} and w.set_aside_at is null and w.next_attempt_at <= ${sql.placeholder('now')})`,
      ),
    )
    .orderBy(customerDatabases.nextAttemptAt)
    .prepare(),
  databaseCount: db.select({ count: sql<number>`count(*)` }).from(customerDatabases).prepare(),
}));

export function createCustomerDbWriter(
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'inboundSpool' | 'logger' | 'resolver' | 'secretKey' | 'storeHealth'> & Partial<Pick<Deps, 'nodes'>>,
  options: Partial<WriterOptions> = {},
) {
  const opts: WriterOptions = { ...DEFAULT_WRITER_OPTIONS, ...options };
  const nodes = deps.nodes ?? singleNode(deps.config.nodeName);

  // The queue's state: the databases being written, driving and stopping. The loop, the runs in flight, start, stop
  // and wake are the runner's (server/queues/runner.ts).
  /** Databases with a run in flight. */
  const busy = new Set<string>();
  /**
   * Databases another node was writing when this one tried (one batch at a time per database across nodes), and
   * until when they are left to it: the loop does not spin on a lock another node holds.
   */
  const elsewhere = new Map<string, number>();
  /** Set by runOnce (tests) while it drives the writer without the loop. */
  let driving = false;
  let stopping = false;
  const runner = createQueueWorker<CustomerDatabaseRow>({
    intervalMs: opts.intervalMs,
    maxInFlight: opts.maxDatabases,
    onError: (err) => logFailure(deps, 'customer_db.claim_failed', err),
    wake: { db: deps.db, queue: 'customer-db' },
    claim: async (room) => await claim(room),
    // One attempt: everything due for one database, batch after batch, while no other node writes it.
    attempt: (db) => {
      busy.add(db.accountId);
      return nodes
        .exclusive('customer-db', db.accountId, () => batches.serve(db))
        .then((served) => {
          if (served === skipped) elsewhere.set(db.accountId, deps.clock.now() + opts.intervalMs);
        })
        .catch((err: unknown) => deps.logger.error('customer_db.writer_failed', { accountId: db.accountId, err }))
        .finally(() => busy.delete(db.accountId));
    },
    // A start tries every database at once: an operator restarting expects the writes to flow.
    onStart: async () => {
      const now = deps.clock.now();
      await deps.db.update(customerDatabases).set({ nextAttemptAt: now }).where(gt(customerDatabases.nextAttemptAt, now));
    },
  });

  // The parts: the pools, the hand-off to the parse threads, the batches, the housekeeping.
  const pools = createPools(deps, { poolMax: opts.poolMax });
  const inbound = createInboundHandoff(deps, { parser: opts.parser, parserWorkerUrl: opts.parserWorkerUrl });
  const batches = createBatches(deps, {
    pools,
    inbound,
    batchSize: opts.batchSize,
    isRunning: () => runner.running || driving || stopping,
    isStopping: () => stopping,
    poke: () => runner.wake(),
  });
  const housekeeping = createHousekeeping(deps);

  // What the queue says: which databases are due, and the claim (with the housekeeping).
  /**
   * Databases whose next attempt is due and that have a write due, not already being written. Asked on every poke
   * (after each queued write's commit), so the statement is compiled once; and not asked at all while every database
   * the writer knows of is being served (each serve keeps fetching until its database has nothing due).
   */
  async function dueDatabases(now: number): Promise<CustomerDatabaseRow[]> {
    if (busy.size > 0 && busy.size >= ((await one(statements(deps.db).databaseCount.execute()))?.count ?? 0)) return [];
    for (const [id, until] of elsewhere) if (until <= now) elsewhere.delete(id);
    return (await statements(deps.db).dueDatabases.execute({ now })).filter((d) => !busy.has(d.accountId) && !elsewhere.has(d.accountId));
  }

  /** When the housekeeping last ran: the loop is poked after every queued write, and it need not run that often. */
  let lastHousekeeping = Number.NEGATIVE_INFINITY;

  async function claim(room: number): Promise<CustomerDatabaseRow[]> {
    const now = deps.clock.now();
    if (driving || now - lastHousekeeping >= opts.intervalMs) {
      lastHousekeeping = now;
      await housekeeping.dropExpired();
      await pools.closeForgotten(busy);
      await housekeeping.sweep();
    }
    if (room <= 0) return [];
    return (await dueDatabases(deps.clock.now())).slice(0, room);
  }

  /** Writes until nothing more is due now (tests drive it with a fake clock); the number of database runs made. */
  async function runOnce(): Promise<number> {
    const wasDriving = driving;
    driving = true;
    try {
      return await runner.runOnce();
    } finally {
      driving = wasDriving;
    }
  }

  return {
    runOnce,
    /** Starts the loop (from main), woken by every durable commit that queues writes. */
    start: runner.start,
    /** Looks now instead of at the next interval. */
    poke: runner.wake,
    /** Stops taking new batches, lets the batches in flight commit, and closes every pool. */
    async stop(): Promise<void> {
      stopping = true;
      await runner.stop();
      await pools.closeAll();
      await inbound.close();
      stopping = false;
    },
  };
}

export type CustomerDbWriter = ReturnType<typeof createCustomerDbWriter>;

import { hostname } from 'node:os';
import { type SQL, and, eq, getTableColumns, inArray, isNotNull, sql } from 'drizzle-orm';
import type { SQLiteColumn, SQLiteTable } from 'drizzle-orm/sqlite-core';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { isDeadHolder } from './leases.js';
import { changes, isOneOf, isOneOfPlaceholder, listParam, one } from '../../db/sql.js';

/**
 * The claim of a durable queue, as its worker sees it: lease due jobs, renew and give back the leases, and at start
 * free what a dead process held. Every queue table has `locked_by` and `locked_until`; a row is free when it has no
 * lease or its lease ran out, and a write from a worker that no longer holds the lease is refused.
 *
 * `sqliteLeases` below implements it on SQLite (one UPDATE ... RETURNING over the ids a queue's own candidate query
 * chose). A Postgres store implements the same interface with `SELECT ... FOR UPDATE SKIP LOCKED` in the claim's
 * transaction, so several nodes can claim from one table without waiting on each other's rows.
 */
export interface QueueStore<Job, Request> {
  /** Leases to `worker` the jobs that are due now and fit `request` (the queue's room and clocks). */
  claim(worker: string, request: Request): Promise<Job[]>;
  /** Extends the leases `worker` still holds among `ids` until `until`. */
  renew(worker: string, ids: readonly string[], until: number): Promise<void>;
  /** Gives back `worker`'s leases among `ids`, or all of them; the number given back. */
  release(worker: string, ids?: readonly string[]): Promise<number>;
  /** Whether `worker` still holds the lease of `id` (the row may be gone). */
  stillHeld(worker: string, id: string): Promise<boolean>;
  /**
   * At start: the leases of holders that are gone given back at once; how many. Gone: as `isDead` judges (the node's
   * liveness on Postgres), else by isDeadHolder (the process, on this host).
   */
  releaseDead(worker: string, isDead?: (holder: string) => boolean): Promise<number>;
  /** The leases of every holder on `node` given back (a node whose liveness lock is gone); how many. */
  releaseNode(node: string): Promise<number>;
  /** At start: other holders' leases reaching past one term from `leaseNow` cut to it (a wall clock stepped back). */
  capForeign(worker: string, leaseNow: number, leaseMs: number): Promise<number>;
}

/** A queue table as the lease operations see it: the table, its id and lease columns, and what makes a row leasable. */
export interface LeaseTable<T extends SQLiteTable> {
  table: T;
  id: SQLiteColumn;
  lockedBy: SQLiteColumn;
  lockedUntil: SQLiteColumn;
  /**
   * What a row must be to be leased besides free, e.g. sql`+status = 'queued'` or sql`next_attempt_at <= ${now}` with
   * `sql.placeholder('now')`: its placeholders are given to `lease` in `params`.
   */
  leasable: SQL | ((db: Db) => SQL);
  /**
   * What every leased row also is, in a form an index serves (the recipients: queued). The scans for a holder's leases
   * across the table (release all, releaseDead, releaseNode, capForeign) read only those rows, not the table's history:
   * a dead node's leases come back in milliseconds however many rows were ever delivered. Leases by id leave it out
   * (the primary key finds those).
   */
  leased?: SQL;
}

const p = sql.placeholder;

/** The field name drizzle's update().set() takes for `column` of `table`. */
function fieldOf(table: SQLiteTable, column: SQLiteColumn): string {
  for (const [field, c] of Object.entries(getTableColumns(table))) if (c === column) return field;
  throw new Error(`column ${column.name} is not in the table`);
}

/**
 * The lease operations over one queue table, written once for every queue and both engines. None opens a transaction or
 * changes the connection's synchronous level: a queue that takes its leases unsynced (db/client.ts unsynced) wraps
 * the call, as it does its claim.
 */
export function sqliteLeases<T extends SQLiteTable>(spec: LeaseTable<T>) {
  type Row = T['$inferSelect'];
  const lockedBy = fieldOf(spec.table, spec.lockedBy);
  const lockedUntil = fieldOf(spec.table, spec.lockedUntil);
  const set = (values: { by?: unknown; until: unknown }) =>
    (values.by === undefined ? { [lockedUntil]: values.until } : { [lockedBy]: values.by, [lockedUntil]: values.until }) as never;
  const table = spec.table as SQLiteTable;
  /** A holder-wide condition, within the rows that can hold a lease. */
  const leasedAnd = (...conditions: (SQL | undefined)[]) => and(spec.leased, ...conditions);
  const statements = definePrepared((db) => ({
    lease: db
      .update(table)
      .set(set({ by: sql`${p('worker')}`, until: sql`${p('until')}` }))
      .where(
        sql`${isOneOfPlaceholder(db, spec.id, 'ids')} and ${typeof spec.leasable === 'function' ? spec.leasable(db) : spec.leasable}
            and (${spec.lockedUntil} is null or ${spec.lockedUntil} <= ${p('leaseNow')})`,
      )
      .returning()
      .prepare(),
    held: db
      .select({ id: spec.id })
      .from(table)
      .where(and(eq(spec.id, p('id')), eq(spec.lockedBy, p('worker'))))
      .prepare(),
  }));

  return {
    /**
     * Leases to `worker` until `until` those of `ids` that are free (no lease, or one that ran out by `leaseNow`) and
     * leasable; the rows leased. `params` carries the leasable condition's placeholders.
     */
    async lease(db: Db, worker: string, ids: readonly string[], until: number, leaseNow: number, params: Record<string, unknown> = {}): Promise<Row[]> {
      if (ids.length === 0) return [];
      return (await statements(db).lease.execute({ ...params, worker, until, leaseNow, ids: listParam(db, ids) })) as Row[];
    },

    /** Whether `worker` still holds the lease of `id`: false once the row is gone or leased to another. */
    async stillHeld(db: Db, worker: string, id: string): Promise<boolean> {
      return (await one(statements(db).held.execute({ id, worker }))) !== undefined;
    },

    /** Extends the leases `worker` still holds among `ids` until `until`. */
    async renew(db: Db, worker: string, ids: readonly string[], until: number): Promise<void> {
      if (ids.length === 0) return;
      await db
        .update(table)
        .set(set({ until }))
        .where(and(eq(spec.lockedBy, worker), isOneOf(db, spec.id, ids)));
    },

    /** Gives back `worker`'s leases among `ids`, or every lease it holds when `ids` is absent; how many. */
    async release(db: Db, worker: string, ids?: readonly string[]): Promise<number> {
      if (ids !== undefined && ids.length === 0) return 0;
      const where = ids === undefined ? leasedAnd(eq(spec.lockedBy, worker)) : and(inArray(spec.id, [...ids]), eq(spec.lockedBy, worker));
      return changes(
        await db
          .update(table)
          .set(set({ by: null, until: null }))
          .where(where),
      );
    },

    /**
     * At start: the leases of earlier workers on this host whose process is gone (killed, or an earlier run under this
     * same pid, as in a restarted container) are given back at once, so their rows are due again now. A lease of a
     * process that may still run (another host, or a live pid) is left to expire.
     */
    async releaseDead(db: Db, worker: string, isDead: (holder: string) => boolean = (h) => isDeadHolder(h, worker, hostname())): Promise<number> {
      const holders = (await db
        .selectDistinct({ lockedBy: spec.lockedBy })
        .from(table)
        .where(leasedAnd(isNotNull(spec.lockedBy), sql`${spec.lockedBy} <> ${worker}`))) as { lockedBy: string | null }[];
      let released = 0;
      for (const { lockedBy: holder } of holders) {
        if (!holder || !isDead(holder)) continue;
        released += changes(
          await db
            .update(table)
            .set(set({ by: null, until: null }))
            .where(leasedAnd(eq(spec.lockedBy, holder))),
        );
      }
      return released;
    },

    /** Gives back the leases of every holder on `node` (`<node>:<pid>:<random>`); how many. */
    async releaseNode(db: Db, node: string): Promise<number> {
      const prefix = `${node}:`;
      return changes(
        await db
          .update(table)
          .set(set({ by: null, until: null }))
          .where(leasedAnd(sql`substr(${spec.lockedBy}, 1, ${prefix.length}) = ${prefix}`)),
      );
    },

    /**
     * At start, after releaseDead: a lease of another worker that reaches further than one term from now was written
     * before the wall clock stepped back (a holder renews to at most one term ahead), so it is cut to one term from now
     * on this process's timeline (`leaseNow`): it still runs out after at most its term, never after the size of the
     * step.
     */
    async capForeign(db: Db, worker: string, leaseNow: number, leaseMs: number): Promise<number> {
      return changes(
        await db
          .update(table)
          .set(set({ until: leaseNow + leaseMs }))
          .where(leasedAnd(isNotNull(spec.lockedBy), sql`${spec.lockedBy} <> ${worker}`, sql`${spec.lockedUntil} > ${leaseNow + leaseMs}`)),
      );
    },
  };
}

export type SqliteLeases<T extends SQLiteTable> = ReturnType<typeof sqliteLeases<T>>;

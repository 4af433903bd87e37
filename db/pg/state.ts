import { AsyncLocalStorage } from 'node:async_hooks';
import { existsSync, readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SQL } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { PgDialect } from 'drizzle-orm/pg-core';
import pg from 'pg';
import type { Db } from '../client.js';
import { type LateWrite, LateWriteRefusedError, lateStatements } from '../late-writes.js';
import { inPipeline } from './pipeline.js';
import { statementNamer } from './statement-names.js';

/**
 * The service's state on Postgres (STATE_URL, docs/api/decisions.md section 11): the same `Db` the rest of the
 * service uses on SQLite, over a `pg` pool. Queries are built from the SQLite schema's tables (db/schema/); the
 * Postgres schema (db/pg/schema/) has the same names and columns, and the type parsers below give every value back
 * as better-sqlite3 gives it (a bigint as a number, JSON as its text for the column to parse), so each table's
 * mapping works unchanged. A transaction takes one connection of the pool for the async work under it (found by
 * AsyncLocalStorage, as on SQLite: db/sqlite-connection.ts); any other statement runs on the pool.
 */

export interface PgTarget {
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
  /** false: plain TCP (loopback only, checked by the caller); else TLS, the chain and the name checked unless told. */
  ssl: false | { rejectUnauthorized: boolean; ca?: string };
}

/** A transaction on one connection, and what its units share. */
interface PgTx {
  open: boolean;
  client: pg.PoolClient;
  savepoints: number;
  /** The releases of savepoints not yet answered: awaited before COMMIT. */
  readonly released: Promise<unknown>[];
  /** Set when a savepoint could not be rolled back: the transaction can only end, with this error. */
  failed?: Error;
  /** Set while units run at once (PgUnits.atOnce): none may open a savepoint of its own. */
  atOnce?: boolean;
  /** A transaction that takes late writes (LateWrite): its units' writes of that kind wait for its end. */
  late?: boolean;
}

/**
 * A unit of work: a transaction and the async work under it, or a savepoint inside one. What runs after the commit
 * (queue wakes) is kept per unit: a savepoint's joins its transaction's when it is released, and is dropped with it
 * when it is rolled back.
 */
interface PgScope {
  readonly tx: PgTx;
  readonly afterCommit: (() => void)[];
  /** The late writes the unit asked for (LateWrite): a savepoint's join its transaction's as its queue wakes do. */
  readonly late: LateWrite[];
  /** A unit run at once with others (PgUnits.atOnce): what it did that only rolling them all back can undo. */
  watch?: { wrote: boolean; failed: boolean };
}

/** A unit run at once with others asked for a savepoint of its own, which their interleaved statements cannot have. */
class NestedAtOnceError extends Error {
  override name = 'NestedAtOnceError';
}

/** A statement that changes nothing: one a unit run at once with others may issue and still be refused cleanly. */
const isRead = (text: string) => /^\s*select\b/i.test(text);

/** A database migrated by a newer Mailstead: this build does not know its tables, and must not write them. */
export class StateTooNewError extends Error {
  override name = 'StateTooNewError';
}

/** Held while the migrations run, so two nodes starting at once migrate one after the other. */
const MIGRATION_LOCK = 0x4d41494c; // "MAIL"

const { builtins } = pg.types;
/** What differs from node-postgres's defaults: everything else (booleans, bytea as a Buffer, text) it reads as wanted. */
const PARSERS: ReadonlyMap<number, (value: string) => unknown> = new Map<number, (value: string) => unknown>([
  // 64-bit integers (ms timestamps, counters, count(*)): a number, as better-sqlite3 reads SQLite's integers.
  [builtins.INT8, Number],
  // sum() of bigints.
  [builtins.NUMERIC, Number],
  // JSON as its text: the SQLite schema's json columns parse it themselves, so a stored answer comes back as written.
  [builtins.JSON, (v) => v],
  [builtins.JSONB, (v) => v],
]);

function typesFor(inner?: { getTypeParser: (oid: number, format?: string) => unknown }) {
  return {
    getTypeParser: (oid: number, format?: string) =>
      (format === undefined || format === 'text' ? PARSERS.get(oid) : undefined) ??
      (inner ? inner.getTypeParser(oid, format) : pg.types.getTypeParser(oid, format as 'text')),
  };
}

export interface PgStore {
  readonly engine: 'postgres';
  readonly db: Db;
  readonly pool: pg.Pool;
  /** Where it runs: a node's own connection (db/pg/node-link.ts) reaches the same database. */
  readonly target: PgTarget;
  close(): Promise<void>;
}

/** The socket under a pool client (pg keeps it on the client's connection; not in its types). */
const socketOf = (client: pg.PoolClient): { cork(): void; uncork(): void } =>
  (client as unknown as { connection: { stream: { cork(): void; uncork(): void } } }).connection.stream;
const corked = new WeakSet<object>();

/**
 * Holds what is written to a transaction's connection until the current tick ends, so the statements issued in one
 * tick (db/sql.ts together, BEGIN with the first statement) leave in one write and wake the server once. The pool runs
 * its clients in pipeline mode: a statement is sent without waiting for the one before it to be answered; outside a
 * transaction each with its own Sync, inside one the tick's statements with one Sync for them all (db/pg/pipeline.ts),
 * an error still the failing statement's own (and, in a transaction, aborting what follows it).
 */
function corkForTick(client: pg.PoolClient): void {
  const socket = socketOf(client);
  if (corked.has(socket)) return;
  corked.add(socket);
  socket.cork();
  process.nextTick(() => {
    corked.delete(socket);
    socket.uncork();
  });
}

const ignoreError = () => undefined;

/**
 * A statement of the transaction's own on its connection: with the others of the tick, one Sync for all
 * (db/pg/pipeline.ts); `alone` (COMMIT, ROLLBACK, ROLLBACK TO: a failure before them must not skip them) on its own,
 * after what was waiting.
 */
function txQuery(client: pg.PoolClient, text: string, alone = false): Promise<pg.QueryResult> {
  return inPipeline(client, { text }, alone);
}

/**
 * Rolls the transaction back to a savepoint. If that fails (the connection failed), the transaction cannot go on: it
 * ends with this error, whatever its unit threw.
 */
async function rollbackTo(tx: PgTx, name: string): Promise<void> {
  try {
    await txQuery(tx.client, `ROLLBACK TO SAVEPOINT ${name}`, true);
  } catch (rollbackErr) {
    tx.failed ??= rollbackErr as Error;
    throw rollbackErr;
  }
}

/**
 * Releases a savepoint without waiting: the release leaves with whatever the transaction issues next, and the
 * transaction waits for it before COMMIT.
 */
function releaseLater(tx: PgTx, name: string): void {
  corkForTick(tx.client);
  const released = txQuery(tx.client, `RELEASE SAVEPOINT ${name}`);
  released.catch(ignoreError);
  tx.released.push(released);
}

/**
 * Statements issued together in a savepoint of their own, in one write with it: their settlements once all have
 * ended, the savepoint released; or, if any failed, all rolled back and null.
 */
async function allInSavepoint(
  tx: PgTx,
  name: string,
  statements: () => readonly (Promise<unknown> | undefined)[],
): Promise<PromiseSettledResult<unknown>[] | null> {
  corkForTick(tx.client);
  const saved = txQuery(tx.client, `SAVEPOINT ${name}`);
  saved.catch(ignoreError);
  const ended = await Promise.allSettled([saved, ...statements()]);
  if (ended.some((e) => e.status === 'rejected')) {
    await rollbackTo(tx, name);
    return null;
  }
  releaseLater(tx, name);
  return ended.slice(1);
}

const dialect = new PgDialect();
const stores = new WeakMap<object, PgUnits>();

class PgUnits {
  readonly scopes = new AsyncLocalStorage<PgScope>();
  /** Set while point reads run (pointReads): their statements go to the shared reader. */
  readonly reads = new AsyncLocalStorage<true>();
  /** The point reads' connection, held from the pool while it lasts; null until connected (the pool serves meanwhile). */
  private reader: pg.PoolClient | null = null;
  private readerConnecting = false;
  private closed = false;
  /** The name a repeated statement runs under on this pool's connections. */
  readonly nameOf = statementNamer();
  constructor(readonly pool: pg.Pool) {}

  current(): PgScope | null {
    const scope = this.scopes.getStore();
    return scope?.tx.open ? scope : null;
  }

  /** The connection a statement runs on: its transaction's (held for the rest of the tick: corkForTick), or the pool. */
  target(): pg.Pool | pg.PoolClient {
    return this.connectionFor(this.current());
  }

  private connectionFor(scope: PgScope | null): pg.Pool | pg.PoolClient {
    if (scope) {
      corkForTick(scope.tx.client);
      return scope.tx.client;
    }
    if (this.reads.getStore()) return this.pointReader() ?? this.pool;
    return this.pool;
  }

  /** Runs a statement where `target` says; a unit run at once with others (atOnce) has it noted, and its failure. */
  query(config: pg.QueryConfig): Promise<pg.QueryResult> {
    const scope = this.current();
    // A transaction's statements leave with the others of the tick, at one Sync (db/pg/pipeline.ts).
    const answer = scope ? inPipeline(this.connectionFor(scope) as pg.PoolClient, config) : this.connectionFor(scope).query(config);
    const watch = scope?.watch;
    if (watch) {
      if (!isRead(config.text)) watch.wrote = true;
      answer.catch(() => {
        watch.failed = true;
      });
    }
    return answer;
  }

  /**
   * The connection that point reads share (single-row reads by key: a request's key check, a cache's stamp, a lease
   * still held), in pipeline mode and corked for the tick (the reads issued together leave in one write), so none
   * checks a connection out of the pool. Reads take no row locks, so none waits behind another's lock; each sees
   * what is committed when it runs, as on the pool. Null while it connects (or after it failed: the next read
   * connects again). Held until the poll phase ends instead, to gather the reads of every request of a turn, it
   * cost more than it saved (docs/performance.md, session 29).
   */
  private pointReader(): pg.PoolClient | null {
    if (this.reader) {
      corkForTick(this.reader);
      return this.reader;
    }
    if (!this.readerConnecting && !this.closed) {
      this.readerConnecting = true;
      this.pool.connect().then(
        (client) => {
          this.readerConnecting = false;
          if (this.closed) return client.release();
          // The connection dropped: the reads in flight fail with it; the next one connects again. Released once,
          // however many errors the client reports (a FATAL message, then the end of the connection).
          client.on('error', ignoreError);
          client.once('error', (err) => {
            // Given back already (closeReader): the pool hears it.
            if (this.reader !== client) return;
            this.reader = null;
            client.release(err);
          });
          this.reader = client;
        },
        () => {
          this.readerConnecting = false;
        },
      );
    }
    return null;
  }

  /** Gives the point reads' connection back to the pool (before the pool ends). */
  closeReader(): void {
    this.closed = true;
    const reader = this.reader;
    this.reader = null;
    reader?.release();
  }

  async transaction<T>(fn: () => Promise<T>, opts: { late?: boolean } = {}): Promise<T> {
    const outer = this.current();
    if (outer) return this.savepoint(outer, fn);
    const client = await this.pool.connect();
    // A connection that drops while checked out is reported by the statement it fails; without a listener of its own
    // (the pool listens only while the connection is idle) the client's 'error' event would end the process.
    client.on('error', ignoreError);
    const tx: PgTx = { open: true, client, savepoints: 0, released: [], ...(opts.late ? { late: true } : {}) };
    const scope: PgScope = { tx, afterCommit: [], late: [] };
    let broken: Error | undefined;
    try {
      // BEGIN leaves with the transaction's first statements (fn issues them in this tick): one round trip fewer. It
      // can only fail with the connection, which fails those statements too; it is awaited before COMMIT all the same.
      corkForTick(client);
      const begun = txQuery(client, 'BEGIN');
      begun.catch(() => undefined);
      const value = await this.scopes.run(scope, fn);
      await begun;
      // The late writes' statements, worked out before anything is sent: one that cannot be written late (LateKind)
      // ends the transaction here, rolled back.
      const late = lateStatements(scope.late);
      tx.open = false;
      // COMMIT leaves with the last savepoints' releases and the late writes. Had one failed, the transaction was
      // aborted, and Postgres answers that COMMIT with a ROLLBACK (no error): that is this transaction's failure.
      corkForTick(client);
      const written = late.map((query) => {
        const { sql, params } = dialect.sqlToQuery(query);
        const answer = inPipeline(client, { text: sql, values: params, name: this.nameOf(sql), types: typesFor() });
        answer.catch(ignoreError);
        return answer;
      });
      const committing = txQuery(client, 'COMMIT', true);
      committing.catch(() => undefined);
      const releases = await Promise.allSettled(tx.released);
      const lateEnded = await Promise.allSettled(written);
      const committed = await committing;
      const release = releases.find((r) => r.status === 'rejected');
      if (release) throw release.reason;
      const refused = lateEnded.find((r) => r.status === 'rejected');
      if (refused) throw new LateWriteRefusedError(refused.reason);
      if (committed.command !== 'COMMIT') throw new Error(`the transaction was rolled back at its commit (${committed.command})`);
      for (const hook of scope.afterCommit) hook();
      return value;
    } catch (err) {
      if (tx.open) {
        tx.open = false;
        try {
          await txQuery(client, 'ROLLBACK', true);
        } catch (rollbackErr) {
          // The connection is in no state to serve another: the pool drops it.
          broken = rollbackErr as Error;
        }
      }
      throw err;
    } finally {
      client.removeListener('error', ignoreError);
      client.release(broken);
    }
  }

  /**
   * A unit inside a transaction: a savepoint, sent with the unit's first statements, and released without waiting
   * (the release leaves with whatever the transaction issues next; the transaction waits for it before COMMIT). A unit
   * that throws is rolled back to its savepoint, and the transaction goes on without it.
   */
  private async savepoint<T>(outer: PgScope, fn: () => Promise<T>): Promise<T> {
    const { tx } = outer;
    if (tx.atOnce) throw new NestedAtOnceError('a unit run at once with others opened a transaction of its own');
    const name = `unit_${++tx.savepoints}`;
    corkForTick(tx.client);
    const saved = txQuery(tx.client, `SAVEPOINT ${name}`);
    saved.catch(() => undefined);
    const inner: PgScope = { tx, afterCommit: [], late: [] };
    let value: T;
    try {
      value = await this.scopes.run(inner, fn);
      await saved;
    } catch (err) {
      await saved.catch(() => undefined);
      await rollbackTo(tx, name);
      throw err;
    }
    releaseLater(tx, name);
    outer.afterCommit.push(...inner.afterCommit);
    outer.late.push(...inner.late);
    return value;
  }

  /**
   * The units' readings (PgUnits.batch), issued together in a savepoint of their own, so a batch's readings cost one
   * round trip instead of one a unit. If any fails (a lock conflict, a verdict such as a claim taken over), all are
   * rolled back and none is given: each unit then reads in its turn, as it would without them.
   */
  private async readAhead(scope: PgScope, aheads: readonly (AheadReading | undefined)[], lockFirst?: () => Promise<unknown>): Promise<(Reading | undefined)[]> {
    const several = aheads.filter(Boolean).length >= 2;
    if (!several || !aheads.some((a) => a?.read)) {
      if (lockFirst) await this.lockFirst(scope, lockFirst);
      if (!several) return [];
      // Units that read nothing ahead (their keys alone): nothing to wait for.
      return aheads.map((a) => a && { value: null, keys: a.keys(null) });
    }
    // The rows the readings lock, locked first in one order (the caller's: sorted), with the readings' statements;
    // released with the first unit's statements, as a unit's savepoint is.
    const ended = await allInSavepoint(scope.tx, 'ahead', () => [
      lockFirst?.() ?? Promise.resolve(),
      ...aheads.map((a) => a && (a.read ? a.read() : Promise.resolve(null)).then((value) => ({ value, keys: a.keys(value) }))),
    ]);
    if (!ended) return [];
    return ended.slice(1).map((e) => {
      const read = (e as PromiseFulfilledResult<{ value: unknown; keys: readonly string[] } | undefined>).value;
      return read && { value: read.value, keys: read.keys };
    });
  }

  /**
   * The batch's locks (db/group-commit.ts WriteLock) in a batch that reads nothing ahead: taken before its units run,
   * in a savepoint of their own. If they fail (a deadlock with a transaction that locks in another order), they are
   * rolled back and the units lock their rows in their turn, as without them.
   */
  private async lockFirst(scope: PgScope, lockFirst: () => Promise<unknown>): Promise<void> {
    await allInSavepoint(scope.tx, 'locks', () => [lockFirst()]);
  }

  /**
   * Runs units at once in one savepoint, none with a savepoint of its own: each issues its statements without waiting
   * for another's answers, so theirs leave together (one write and one round trip for the lot, where one after the
   * other costs one each). Each is given a reading taken ahead under keys none of the others has, so none reads or
   * writes what another writes, and they may interleave; or, in a chain of units under the same keys (chainRuns), its
   * reading carried past what the one before handed on once that one's statements were issued. Their settlements,
   * once all have ended, if each either succeeded or was refused having changed nothing (no statement but reads, none
   * failed, no savepoint asked for, no reading it could not be given).
   * Otherwise (a statement failed, which aborts the transaction; a unit refused after a write) all are rolled back,
   * and null: the caller runs them again one by one, each in its savepoint, where one rolls back alone.
   */
  private async atOnce(outer: PgScope, fns: readonly (() => Promise<unknown>)[]): Promise<Settled[] | null> {
    const { tx } = outer;
    corkForTick(tx.client);
    const saved = txQuery(tx.client, 'SAVEPOINT at_once');
    saved.catch(() => undefined);
    const scopes: PgScope[] = fns.map(() => ({ tx, afterCommit: [], late: [], watch: { wrote: false, failed: false } }));
    tx.atOnce = true;
    let ended: PromiseSettledResult<unknown>[];
    try {
      ended = await Promise.allSettled(fns.map((fn, n) => this.scopes.run(scopes[n]!, fn)));
    } finally {
      tx.atOnce = false;
    }
    const clean =
      (await saved.then(
        () => true,
        () => false,
      )) &&
      ended.every((e, n) => {
        const { wrote, failed } = scopes[n]!.watch!;
        return !failed && (e.status === 'fulfilled' || (!wrote && !(e.reason instanceof NestedAtOnceError) && !(e.reason instanceof NotCarriedError)));
      });
    if (!clean) {
      await rollbackTo(tx, 'at_once');
      return null;
    }
    // Left unreleased: the commit releases it, and the savepoints of the units run after it nest inside it.
    for (const scope of scopes) {
      outer.afterCommit.push(...scope.afterCommit);
      outer.late.push(...scope.late);
    }
    return ended.map((e) => (e.status === 'fulfilled' ? { ok: true, value: e.value } : { ok: false, err: e.reason }));
  }

  /**
   * Runs each unit of work in a savepoint of one transaction, one after the other, and commits them together: the
   * group commit on Postgres (db/group-commit.ts). A unit that throws is rolled back alone and settles with its error;
   * one that lost a lock conflict to another transaction (a deadlock, which the batch's arbitrary lock order can
   * cause) runs again on its own after the commit. The whole batch is rejected if the transaction itself fails.
   */
  async batch(
    units: readonly BatchUnit[],
    aheads: readonly (AheadReading | undefined)[] = [],
    lockFirst?: () => Promise<unknown>,
    opts: { late?: boolean } = {},
  ): Promise<Settled[]> {
    const settled: (Settled | 'again')[] = new Array(units.length);
    // The units with a reading ahead run first, in the order they came, then the others: a batch's units were submitted
    // while the one before ran, none waiting for another, so any order is one they could have run in; and a unit
    // without a reading ahead, whose writes are not confined to keys, would leave every reading after it stale.
    const order = [...units.keys()].sort((a, b) => Number(!aheads[a]) - Number(!aheads[b]));
    await this.transaction(async () => {
      const scope = this.current()!;
      const readings = await this.readAhead(scope, aheads, lockFirst);
      // The units given a reading run at once, their statements leaving together: each under keys no other chain has,
      // or after the unit before it under the very same keys and with the same carry (a chain, its units in order).
      const chains: number[][] = [];
      const chainOf = new Map<string, number[]>();
      for (const i of order) {
        const keys = readings[i]?.keys;
        if (!keys) continue;
        const owners = keys.map((k) => chainOf.get(k));
        const chain = owners[0];
        if (owners.every((c) => c === undefined)) {
          const started = [i];
          chains.push(started);
          for (const k of keys) chainOf.set(k, started);
        } else if (chain && owners.every((c) => c === chain) && readings[chain[0]!]!.keys.length === keys.length && sameCarry(aheads[i], aheads[chain[0]!])) {
          chain.push(i);
        }
      }
      const atOnce = chains.flat();
      /** What each unit run at once handed on (HandOn). */
      const handedBy = new Map<number, Handed>();
      const ranAtOnce =
        atOnce.length >= 2
          ? await this.atOnce(
              scope,
              chains.flatMap((chain) => chainRuns(chain, units, readings, aheads, handedBy)),
            )
          : null;
      // The keys of the units run so far (all with a reading ahead: the others run last), and under each the last of
      // them that committed its work (a unit that failed was rolled back: it wrote nothing).
      const written = new Set<string>(ranAtOnce ? chainOf.keys() : []);
      const lastUnder = new Map<string, Ran>();
      const ran = (i: number, handed: Handed | undefined) => {
        const reading = readings[i];
        if (!reading) return;
        const entry: Ran = { keys: reading.keys, carry: aheads[i]?.carry, handed };
        for (const k of reading.keys) lastUnder.set(k, entry);
      };
      if (ranAtOnce) {
        for (const [n, i] of atOnce.entries()) {
          const s = ranAtOnce[n]!;
          settled[i] = s;
          if (s.ok) ran(i, handedBy.get(i));
        }
      }
      for (const i of order) {
        if (settled[i] !== undefined) continue;
        const ahead = readings[i];
        // A reading taken ahead is still what the unit would read now if no unit before it wrote under its keys; else
        // if the last to write under them all was one unit under the same keys, the reading carried past it.
        const fresh = !ahead ? undefined : ahead.keys.every((k) => !written.has(k)) ? { value: ahead.value } : carried(ahead, aheads[i], lastUnder);
        let handed: Handed | undefined;
        try {
          const value = await this.savepoint(scope, () =>
            units[i]!(fresh && Promise.resolve(fresh.value), (h) => {
              handed ??= { handed: h };
            }),
          );
          settled[i] = { ok: true, value };
          ran(i, handed);
        } catch (err) {
          if (scope.tx.failed) throw scope.tx.failed;
          settled[i] = isLockConflict(err) ? 'again' : { ok: false, err };
        }
        for (const k of ahead?.keys ?? []) written.add(k);
      }
    }, opts);
    const out: Settled[] = [];
    for (const [i, s] of settled.entries()) {
      if (s !== 'again') out.push(s);
      else out.push(await this.alone(units[i]!));
    }
    return out;
  }

  /**
   * A unit that lost a lock conflict in its batch, run in a transaction of its own. It may meet the same conflict
   * again (another node's batch locking the same rows in another order: a batch's units lock in the order they run):
   * it runs again, up to ALONE_ATTEMPTS times, before the conflict is its answer (a send's 502 send_failed).
   */
  private async alone(unit: BatchUnit): Promise<Settled> {
    for (let attempt = 1; ; attempt++) {
      try {
        return { ok: true, value: await this.transaction(() => unit()) };
      } catch (err) {
        if (attempt >= ALONE_ATTEMPTS || !isLockConflict(err)) return { ok: false, err };
      }
    }
  }
}

/** Times a unit that lost a lock conflict in its batch is run on its own before the conflict is its answer. */
const ALONE_ATTEMPTS = 3;

export type Settled = { ok: true; value: unknown } | { ok: false; err: unknown };

/** A unit's reading taken ahead, and the keys it named. */
interface Reading {
  value: unknown;
  keys: readonly string[];
}

/** What a unit handed on (HandOn), boxed: a unit may hand on undefined. */
interface Handed {
  handed: unknown;
}

/** A unit with a reading that committed its work in a batch: its keys, how its reading carries, what it handed on. */
interface Ran {
  keys: readonly string[];
  carry: AheadReading['carry'];
  handed: Handed | undefined;
}

const sameCarry = (a: AheadReading | undefined, b: AheadReading | undefined) => a?.carry !== undefined && a.carry === b?.carry;

/** A unit of a chain that could not be given its reading: the units run at once are all run again one by one. */
class NotCarriedError extends Error {
  override name = 'NotCarriedError';
}

/**
 * The runs of a chain's units at once (PgUnits.batch): the first on its reading taken ahead; each next one, once the
 * one before has handed on (every statement it issued by then runs before the next one's), on its own reading carried
 * past what was handed on. A unit refused before handing on hands on what it was given. One that cannot be given its
 * reading (the carry cannot tell, or the unit before ended without handing on) throws NotCarriedError, and so does
 * every unit after it, and one that fails after handing on: atOnce then rolls them all back.
 */
function chainRuns(
  chain: readonly number[],
  units: readonly BatchUnit[],
  readings: readonly (Reading | undefined)[],
  aheads: readonly (AheadReading | undefined)[],
  handedBy: Map<number, Handed>,
): (() => Promise<unknown>)[] {
  /** What the unit before handed on (null: nothing yet, the unit reads its own reading; 'broken': no reading). */
  let before: Promise<Handed | null | 'broken'> = Promise.resolve(null);
  return chain.map((i, n) => {
    const given = before;
    let pass!: (state: Handed | null | 'broken') => void;
    before = new Promise((resolve) => {
      pass = resolve;
    });
    const last = n === chain.length - 1;
    return async () => {
      const state = await given;
      const own = readings[i]!.value;
      const reading = state === null ? own : state === 'broken' ? undefined : aheads[i]!.carry!(own, state.handed);
      if (reading === undefined) {
        pass('broken');
        throw new NotCarriedError('a unit of a chain could not be given its reading');
      }
      let handed: Handed | undefined;
      try {
        const value = await units[i]!(Promise.resolve(reading), (h) => {
          if (handed) return;
          handed = { handed: h };
          handedBy.set(i, handed);
          pass(handed);
        });
        if (!handed && !last) pass('broken');
        return value;
      } catch (err) {
        // Failed after handing on: what the next one was given never happened, so all are run again.
        if (handed) throw new NotCarriedError('a unit of a chain failed after handing on');
        pass(state);
        throw err;
      }
    };
  });
}

/**
 * The reading of a unit after others wrote under its keys, if the last of them to write under each was one and the
 * same unit, under exactly these keys and with the same `carry`: the unit's own reading carried past what that one
 * handed on (AheadReading.carry). Undefined otherwise, or when `carry` cannot tell: the unit reads in its turn.
 */
function carried(reading: Reading, ahead: AheadReading | undefined, lastUnder: ReadonlyMap<string, Ran>): { value: unknown } | undefined {
  const carry = ahead?.carry;
  const before = lastUnder.get(reading.keys[0]!);
  if (!carry || !before?.handed || before.carry !== carry || before.keys.length !== reading.keys.length) return undefined;
  if (!reading.keys.every((k) => lastUnder.get(k) === before)) return undefined;
  const value = carry(reading.value, before.handed.handed);
  return value === undefined ? undefined : { value };
}

/** A unit of a batch: given its reading taken ahead when that is still what it would read (else it reads itself). */
export type BatchUnit = (ahead?: Promise<unknown>, handOn?: (handed: unknown) => void) => Promise<unknown>;

/** A unit's reading, to issue ahead with the batch's others, and the keys it and its unit's writes are confined to. */
export interface AheadReading {
  /** Absent: the unit reads nothing ahead, and its keys are given null. */
  read?: () => Promise<unknown>;
  keys: (reading: unknown) => readonly string[];
  /** Its reading after a unit under the same keys handed on `handed` (db/group-commit.ts ReadAhead.carry). */
  carry?: (reading: unknown, handed: unknown) => unknown;
}

/** A statement that lost a lock conflict with another transaction and may succeed on its own (deadlock_detected). */
const isLockConflict = (err: unknown) => {
  const e = err as { code?: unknown; cause?: { code?: unknown } } | null;
  // drizzle wraps the driver's error (DrizzleQueryError), its code in the cause.
  return (e?.code ?? e?.cause?.code) === '40P01';
};

/** Runs units of work on a Postgres Db in one transaction, each in its own savepoint (PgUnits.batch). */
export function runPgBatch(
  db: Db,
  units: readonly BatchUnit[],
  aheads?: readonly (AheadReading | undefined)[],
  lockFirst?: () => Promise<unknown>,
  opts: { late?: boolean } = {},
): Promise<Settled[]> {
  const pg = stores.get(db);
  if (!pg) throw new Error('not a Postgres Db');
  return pg.batch(units, aheads, lockFirst, opts);
}

/** A transaction on a Postgres Db, taking late writes when told (db/late-writes.ts). */
export function runPgTransaction<T>(db: Db, fn: () => Promise<T>, opts: { late?: boolean } = {}): Promise<T> {
  const pg = stores.get(db);
  if (!pg) throw new Error('not a Postgres Db');
  return pg.transaction(fn, opts);
}

/**
 * Asks for a late write (db/late-writes.ts) in the caller's unit: true if its transaction takes late writes (the write
 * is then the transaction's to issue at its end), else false and the caller writes in its turn; undefined when `db`
 * is not Postgres.
 */
/** Whether the caller's transaction on `db` takes late writes (db/late-writes.ts); false on SQLite. */
export function pgTakesLateWrites(db: Db): boolean {
  return stores.get(db)?.current()?.tx.late === true;
}

export function pgWriteLate(db: Db, write: LateWrite): boolean | undefined {
  const units = stores.get(db);
  if (!units) return undefined;
  const scope = units.current();
  if (!scope?.tx.late) return false;
  scope.late.push(write);
  return true;
}

/** The unit (transaction) the caller's async work runs in on `db`, if `db` is a Postgres Db. */
export function pgUnitOf(db: Db): { afterCommit: (() => void)[] } | null | undefined {
  const units = stores.get(db);
  return units ? units.current() : undefined;
}

/**
 * Runs `fn`, single-row reads only, with its statements on the point reads' shared connection (PgUnits.pointReader);
 * inside a transaction they stay on the transaction's. On a Db that is not Postgres, just runs `fn`.
 */
export function pgPointReads<T>(db: Db, fn: () => Promise<T>): Promise<T> {
  const units = stores.get(db);
  return units ? units.reads.run(true, fn) : fn();
}

/** Whether `db` keeps the state on Postgres. */
export function isPostgres(db: Db): boolean {
  return stores.has(db);
}

/** Runs plain SQL on a Postgres Db: rows as objects, or how many rows it touched; `values` for text numbering its own. */
export async function runPgSql(db: Db, query: SQL, values?: unknown[]): Promise<pg.QueryResult> {
  const units = stores.get(db);
  if (!units) throw new Error('not a Postgres Db');
  const { sql, params } = dialect.sqlToQuery(query);
  return units.query({ text: sql, name: units.nameOf(sql), values: values ?? params, types: typesFor() });
}

function migrationsFolder(): string {
  const candidates = [fileURLToPath(new URL('./migrations', import.meta.url)), fileURLToPath(new URL('../../../db/pg/migrations', import.meta.url))];
  const found = candidates.find((p) => existsSync(join(p, 'meta', '_journal.json')));
  if (!found) throw new Error(`Postgres migrations not found (looked in ${candidates.join(', ')})`);
  return found;
}

/**
 * Applies the pending migrations under an advisory lock (two nodes starting at once take turns), after refusing a
 * database whose newest migration this build does not have.
 */
async function migrateState(pool: pg.Pool): Promise<void> {
  const folder = migrationsFolder();
  const client = await pool.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK]);
    try {
      const journal = JSON.parse(readFileSync(join(folder, 'meta', '_journal.json'), 'utf8')) as { entries: { when: number }[] };
      const known = Math.max(...journal.entries.map((e) => e.when));
      const table = await client.query<{ t: string | null }>(`select to_regclass('drizzle.__drizzle_migrations')::text as t`);
      if (table.rows[0]?.t) {
        const newest = await client.query<{ newest: string | null }>('select max(created_at)::text as newest from drizzle.__drizzle_migrations');
        const at = newest.rows[0]?.newest;
        if (at !== null && at !== undefined && Number(at) > known) {
          throw new StateTooNewError(
            `the state database was migrated by a newer Mailstead (its newest migration is from ${new Date(Number(at)).toISOString()}, this version knows migrations up to ${new Date(known).toISOString()}): start that version or a newer one; a downgrade is not supported`,
          );
        }
      }
      await migrate(drizzle({ client }), { migrationsFolder: folder });
    } finally {
      await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK]);
    }
  } finally {
    client.release();
  }
}

/** Postgres 13 is the oldest the state's SQL is written for (gen_random_uuid() without an extension, among others). */
export const OLDEST_POSTGRES = 130000;

async function refuseOldServer(pool: pg.Pool): Promise<void> {
  const { rows } = await pool.query<{ v: string }>(`select current_setting('server_version_num') as v`);
  const version = Number(rows[0]?.v);
  if (!(version >= OLDEST_POSTGRES)) throw new Error(`the state database runs Postgres ${rows[0]?.v}: Mailstead needs Postgres 13 or newer`);
}

/** Opens the state on Postgres: a pool, the migrations applied, and the `Db` over it. */
/** How to reach `target`: the pool's connections and a node's own (db/pg/node-link.ts) alike. */
export function connectionConfig(target: PgTarget): pg.ClientConfig {
  return {
    host: target.host,
    port: target.port,
    database: target.database,
    user: target.user,
    password: target.password,
    ssl:
      target.ssl === false
        ? false
        : {
            rejectUnauthorized: target.ssl.rejectUnauthorized,
            ...(target.ssl.ca ? { ca: target.ssl.ca } : {}),
            ...(isIP(target.host) ? {} : { servername: target.host }),
          },
  };
}

export async function openPostgres(target: PgTarget, opts: { poolSize?: number } = {}): Promise<PgStore> {
  const pool = new pg.Pool({
    ...connectionConfig(target),
    max: opts.poolSize ?? 10,
    // Statements sent without waiting for the answer to the one before (corkForTick).
    pipeline: true,
    application_name: 'mailstead',
    types: typesFor(),
  });
  // An idle connection that drops (a restart of Postgres) is the pool's to replace, never an uncaught error.
  pool.on('error', () => undefined);
  try {
    await refuseOldServer(pool);
    await migrateState(pool);
  } catch (err) {
    await pool.end();
    throw err;
  }
  const units = new PgUnits(pool);
  // drizzle runs every statement through this client: the caller's transaction's connection, else the pool; a
  // statement it repeats under a name of its own (statement-names.ts).
  const router = {
    query: (config: pg.QueryConfig, values?: unknown[]) =>
      units.query({
        ...config,
        ...(values === undefined ? {} : { values }),
        name: config.name ?? units.nameOf(config.text),
        types: typesFor((config as { types?: { getTypeParser: (oid: number, format?: string) => unknown } }).types),
      }),
  };
  const db = drizzle({ client: router as unknown as pg.Pool }) as unknown as Db;
  db.transaction = (fn) => units.transaction(() => fn(db));
  stores.set(db, units);
  // Closed once, however often asked (as a SQLite connection's close): pg's pool refuses a second end.
  let closed: Promise<void> | null = null;
  return {
    engine: 'postgres',
    db,
    pool,
    target,
    close: () => {
      units.closeReader();
      return (closed ??= pool.end());
    },
  };
}

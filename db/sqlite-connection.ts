import { AsyncLocalStorage } from 'node:async_hooks';
import type Database from 'better-sqlite3';

/**
 * The one better-sqlite3 connection of the server, shared by async work. better-sqlite3 runs each statement
 * synchronously; what this adds is who may run one while a unit of work (a transaction, a batch of the group commit,
 * an unsynced run) holds the connection between its awaits:
 * - the unit's own statements, found by AsyncLocalStorage (any handle: the root `db` and `tx` are the same);
 * - nobody else: another statement, or another unit, waits until the unit ends. A statement outside every unit
 *   would otherwise land inside the open transaction (rolled back with it, or committed with it).
 * A unit holds the connection only while its statements run: no SMTP or HTTP call is made inside one, so it ends in
 * the same turn of the event loop in which it began, and the wait is no longer than SQLite's own work.
 */

/** What the proxy driver asks for (drizzle-orm/sqlite-proxy), plus rows as objects for plain SQL (db/sql.ts). */
export type Method = 'run' | 'all' | 'get' | 'values' | 'objects';

/** A unit of work holding the connection. */
export interface Scope {
  open: boolean;
  /** Run once the unit's writes are committed (the queues' wake: db/queue-wake.ts); dropped when it rolls back. */
  readonly afterCommit: (() => void)[];
}

/** Prepared statements kept per SQL text; past this many distinct texts the cache starts over. */
const STATEMENT_CACHE = 512;

export class SqliteConnection {
  private readonly scopes = new AsyncLocalStorage<Scope>();
  private owner: Scope | null = null;
  private waiting: (() => void)[] = [];
  private readonly statements = new Map<string, Database.Statement>();
  private savepoints = 0;

  constructor(readonly sqlite: Database.Database) {}

  /** The open unit the caller's async work runs in, if any. */
  current(): Scope | null {
    const scope = this.scopes.getStore();
    return scope?.open ? scope : null;
  }

  /** Whether the caller's unit is the one holding the connection. */
  holds(): boolean {
    return this.owner !== null && this.owner === this.current();
  }

  /** Whether a statement of the caller may run now: the connection is free, or held by the caller's unit. */
  canRunNow(): boolean {
    return this.owner === null || this.owner === this.current();
  }

  /** Runs one statement: at once when the connection is free or held by the caller's unit, else once it is free. */
  run(sql: string, params: unknown[], method: Method): Promise<unknown> {
    if (!this.canRunNow()) return this.runWhenFree(sql, params, method);
    try {
      return Promise.resolve(this.runNow(sql, params, method));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  private async runWhenFree(sql: string, params: unknown[], method: Method): Promise<unknown> {
    while (!this.canRunNow()) await this.free();
    return this.runNow(sql, params, method);
  }

  /** Runs one statement now, synchronously: for callers that hold the connection (or know it is free). */
  runNow(sql: string, params: unknown[], method: Method): unknown {
    const stmt = this.prepare(sql);
    switch (method) {
      case 'run': {
        const { changes, lastInsertRowid } = stmt.run(...params);
        return { rows: [], changes, lastInsertRowid };
      }
      case 'get':
        return { rows: stmt.raw(true).get(...params) };
      case 'objects':
        return stmt.reader ? stmt.raw(false).all(...params) : (stmt.run(...params), []);
      default:
        return { rows: stmt.reader ? stmt.raw(true).all(...params) : (stmt.run(...params), []) };
    }
  }

  /** Plain SQL with named parameters (db/scans.ts): its first row, or all of them, once the connection is free. */
  async scan(sql: string, params: Record<string, unknown>, first: boolean): Promise<unknown> {
    while (this.owner !== null && this.owner !== this.current()) await this.free();
    const stmt = this.prepare(sql).raw(false);
    return first ? stmt.get(params) : stmt.all(params);
  }

  /**
   * Runs `fn` as one unit holding the connection (nothing else runs a statement until it ends); its after-commit
   * hooks run when it resolves, unless `commits` says the unit wrote nothing durable (a rollback).
   */
  async hold<T>(fn: (scope: Scope) => Promise<T>): Promise<T> {
    // Inside the caller's own unit: part of it (waiting for the connection would wait for itself).
    const own = this.holds() ? this.current() : null;
    if (own) return fn(own);
    while (this.owner !== null) await this.free();
    const scope: Scope = { open: true, afterCommit: [] };
    this.owner = scope;
    try {
      const value = await this.scopes.run(scope, fn, scope);
      scope.open = false;
      this.release();
      for (const hook of scope.afterCommit) hook();
      return value;
    } finally {
      if (scope.open) {
        scope.open = false;
        this.release();
      }
    }
  }

  /**
   * One transaction: BEGIN IMMEDIATE (the write lock at once, so a read then a write never fails SQLITE_BUSY_SNAPSHOT
   * against the CLI's connection) ... COMMIT, or ROLLBACK when `fn` throws. Inside the caller's own unit it is a
   * savepoint of the transaction already open (or begins one, when the unit has none).
   */
  async transaction<T>(fn: () => Promise<T>): Promise<T> {
    return this.holds() ? this.inUnit(fn) : this.hold(() => this.inUnit(fn));
  }

  private async inUnit<T>(fn: () => Promise<T>): Promise<T> {
    const { sqlite } = this;
    if (!sqlite.inTransaction) {
      this.control('BEGIN IMMEDIATE');
      try {
        const value = await fn();
        this.control('COMMIT');
        return value;
      } catch (err) {
        // A full disk or an I/O error may already have rolled SQLite's transaction back.
        if (sqlite.inTransaction) this.control('ROLLBACK');
        throw err;
      }
    }
    // Named by depth, so each name's statements are compiled once.
    const name = `unit_${++this.savepoints}`;
    this.control(`SAVEPOINT ${name}`);
    try {
      const value = await fn();
      this.control(`RELEASE ${name}`);
      return value;
    } catch (err) {
      if (sqlite.inTransaction) {
        this.control(`ROLLBACK TO ${name}`);
        this.control(`RELEASE ${name}`);
      }
      throw err;
    } finally {
      this.savepoints--;
    }
  }

  /** A statement that controls the transaction (BEGIN, COMMIT, SAVEPOINT...), compiled once. */
  control(sql: string): void {
    this.prepare(sql).run();
  }

  private prepare(sql: string): Database.Statement {
    let stmt = this.statements.get(sql);
    if (!stmt) {
      if (this.statements.size >= STATEMENT_CACHE) this.statements.clear();
      stmt = this.sqlite.prepare(sql);
      this.statements.set(sql, stmt);
    }
    return stmt;
  }

  private free(): Promise<void> {
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  private release(): void {
    this.owner = null;
    const waiting = this.waiting;
    this.waiting = [];
    for (const wake of waiting) wake();
  }
}

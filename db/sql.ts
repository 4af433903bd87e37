import { fillPlaceholders, type SQL, type SQLWrapper, sql } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import { SQLiteAsyncDialect } from 'drizzle-orm/sqlite-core';
import type { SQLiteColumn, SQLiteTable } from 'drizzle-orm/sqlite-core';
import { type Db, runPlainSql, runSql } from './client.js';
import { isPostgres, pgUnitOf, runPgSql } from './pg/state.js';

/**
 * The few ways of running a statement that read the same on every engine. Product code awaits drizzle's builders
 * (`await db.select()…` gives the rows; `await db.update()…` without `returning` gives a result for `changes`), and
 * runs plain SQL only through these.
 */

/** The first row of a query's rows, or undefined: what `.get()` was. */
export async function one<T>(rows: PromiseLike<T[]>): Promise<T | undefined> {
  return (await rows)[0];
}

/**
 * Statements of one transaction that need none of each other's answers, given as functions that start them, run in
 * the order given. On Postgres they are issued together and awaited together: they travel in one write and their
 * answers come back in one (db/pg/state.ts pipelines a transaction's statements issued in the same tick), where
 * awaiting each before issuing the next costs a round trip apiece; a failure aborts the transaction, so the ones after
 * it fail too, and the first failure in issue order is thrown once all have ended. On SQLite they run one by one and
 * stop at the first failure, as before: some of its errors (a full disk, an I/O error) end the transaction themselves,
 * and a statement run after that would commit on its own.
 */
export async function together<const T extends readonly (() => PromiseLike<unknown>)[]>(
  db: Db,
  statements: T,
): Promise<{ -readonly [K in keyof T]: Awaited<ReturnType<T[K]>> }> {
  type Answers = { -readonly [K in keyof T]: Awaited<ReturnType<T[K]>> };
  if (!isPostgres(db)) {
    const answers: unknown[] = [];
    for (const start of statements) answers.push(await start());
    return answers as Answers;
  }
  const ended = await Promise.allSettled(statements.map((start) => issue(start())));
  const failed = ended.find((e) => e.status === 'rejected');
  if (failed) throw failed.reason;
  return ended.map((e) => (e as PromiseFulfilledResult<unknown>).value) as Answers;
}

/**
 * Starts a drizzle query now. A builder runs when its `then` is called, and `await` (or Promise.all) calls it only a
 * microtask later, after statements issued meanwhile: for `together` and `lockRows`, where the issue order is the
 * run order.
 */
export function issue<T>(query: PromiseLike<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    query.then(resolve, reject);
  });
}

/** How many rows a write without `returning` touched, from the result its await gave. */
export function changes(result: unknown): number {
  const r = result as { changes?: number; rowCount?: number | null };
  return r.changes ?? r.rowCount ?? 0;
}

/** Rows of plain SQL (a `sql` template), as objects keyed by the column names the query gives them. */
export async function queryRows<T>(db: Db, query: SQL): Promise<T[]> {
  if (isPostgres(db)) return (await runPgSql(db, query)).rows as T[];
  return (await runSql(db, query, 'objects')) as T[];
}

/** The first row of plain SQL, or undefined. */
export async function queryRow<T>(db: Db, query: SQL): Promise<T | undefined> {
  return (await queryRows<T>(db, query))[0];
}

/** Runs plain SQL that returns no rows; resolves to how many rows it touched. */
export async function execute(db: Db, query: SQL): Promise<number> {
  return changes(await (isPostgres(db) ? runPgSql(db, query) : runSql(db, query, 'run')));
}

/**
 * Plain SQL compiled once per engine (a hot path's statement: `queryRows` compiles its `sql` on every call): `build`
 * gives the statement with `sql.placeholder(name)` where values go; `rows`/`row`/`run` fill them and run it.
 */
export function plainStatement(build: (db: Db) => SQL) {
  const compiled = new WeakMap<Db, { sql: string; params: unknown[] }>();
  const of = (db: Db) => {
    let c = compiled.get(db);
    if (!c) {
      c = isPostgres(db) ? pgDialect.sqlToQuery(build(db)) : sqliteDialect.sqlToQuery(build(db));
      compiled.set(db, c);
    }
    return c;
  };
  const rowsOf = async <T>(db: Db, values: Record<string, unknown>): Promise<T[]> => {
    const c = of(db);
    const params = fillPlaceholders(c.params, values);
    if (isPostgres(db)) return (await runPgSql(db, sql.raw(c.sql), params)).rows as T[];
    return (await runPlainSql(db, c.sql, params, 'objects')) as T[];
  };
  return {
    rows: rowsOf,
    row: async <T>(db: Db, values: Record<string, unknown>): Promise<T | undefined> => (await rowsOf<T>(db, values))[0],
    run: async (db: Db, values: Record<string, unknown>): Promise<number> => {
      const c = of(db);
      const params = fillPlaceholders(c.params, values);
      return changes(await (isPostgres(db) ? runPgSql(db, sql.raw(c.sql), params) : runPlainSql(db, c.sql, params, 'run')));
    },
  };
}

const sqliteDialect = new SQLiteAsyncDialect();
const pgDialect = new PgDialect();

/*
 * The few places where the engines' SQL differs, each one fragment written for both. Everything else is drizzle's
 * builder or SQL both engines read alike.
 */

/** `column` is one of `values` (text), in one statement text whatever their number. */
export function isOneOf(db: Db, column: SQLWrapper, values: readonly string[]): SQL {
  return isPostgres(db) ? sql`${column} = any(${sql.param([...values])}::text[])` : sql`${column} in (select value from json_each(${JSON.stringify(values)}))`;
}

/** As isOneOf, for a prepared statement: the list is the placeholder `name`, given with listParam. */
export function isOneOfPlaceholder(db: Db, column: SQLWrapper, name: string): SQL {
  return isPostgres(db) ? sql`${column} = any(${sql.placeholder(name)}::text[])` : sql`${column} in (select value from json_each(${sql.placeholder(name)}))`;
}

/** The value of a list placeholder of isOneOfPlaceholder. */
export function listParam(db: Db, values: readonly string[]): unknown {
  return isPostgres(db) ? [...values] : JSON.stringify(values);
}

/**
 * Whether each statement on `db` is a round trip to a server (Postgres), so that reads are worth folding into one; on
 * SQLite a statement is a function call, and simple reads cost it less than the subqueries that fold them.
 */
export function statementsAreRoundTrips(db: Db): boolean {
  return isPostgres(db);
}

/** Whether the caller's statements on `db` run inside a transaction (its own or a unit's) on Postgres. */
export function inPostgresTransaction(db: Db): boolean {
  return pgUnitOf(db) != null;
}

/** SQLite's `indexed by` (its planner told which index a query must use); nothing on Postgres, which plans its own. */
export function indexedBy(db: Db, index: string): SQL {
  return isPostgres(db) ? sql.empty() : sql.raw(` indexed by ${index}`);
}

/** `a` equals `b`, two nulls being equal. */
export function isSame(db: Db, a: unknown, b: unknown): SQL {
  return isPostgres(db) ? sql`${a} is not distinct from ${b}` : sql`${a} is ${b}`;
}

/** A boolean column is true (SQLite keeps a boolean as 1 or 0). */
export function isTrue(db: Db, column: SQLWrapper): SQL {
  return isPostgres(db) ? sql`${column}` : sql`${column} = 1`;
}

/**
 * A select whose rows the caller's transaction then holds until it ends (`FOR UPDATE`), so a rule that reads them
 * before it writes (credits, quota, the last recipient of a message) cannot be raced by another transaction on
 * Postgres. On SQLite nothing is added: a transaction there holds the connection and the database's write lock from
 * its first statement (db/sqlite-connection.ts). Lock rows of one table in one order (by id) to never deadlock.
 */
export function forUpdate<Q extends PromiseLike<unknown>>(db: Db, query: Q): Q {
  if (!isPostgres(db)) return query;
  // drizzle's Postgres select has `for`; the query is typed with the SQLite schema's builder, which has not.
  return (query as unknown as { for(strength: 'update'): Q }).for('update');
}

/**
 * forUpdate for a row the caller then changes only outside its keys (`FOR NO KEY UPDATE`): it keeps out every other
 * transaction that locks or changes the row as forUpdate does, but not the foreign-key checks of rows that reference
 * it (`KEY SHARE`), so other transactions' inserts naming the row (an account's webhook deliveries, its customer
 * database's writes) do not wait for the caller, nor deadlock with it.
 */
export function forNoKeyUpdate<Q extends PromiseLike<unknown>>(db: Db, query: Q): Q {
  if (!isPostgres(db)) return query;
  return (query as unknown as { for(strength: 'no key update'): Q }).for('no key update');
}

/**
 * The end of a plain SQL select whose rows the caller is about to change, where other writers may be at the same rows:
 * on Postgres `FOR UPDATE SKIP LOCKED` (a row another node holds is left to it, never waited for); on SQLite nothing
 * (one writer at a time).
 */
export function skipLocked(db: Db): SQL {
  return isPostgres(db) ? sql` for update skip locked` : sql``;
}

/**
 * Locks rows of `table` by id for the rest of the caller's transaction (in id order), where that takes a statement:
 * Postgres. On SQLite the transaction already holds the whole database, and nothing is run. The statement is compiled
 * once per database and column (an outcome locks its message: building the select each time cost about 35 µs of the
 * main thread), one for a single id (`= $1`) and one for a list (`= any($1)`): Postgres plans the list's statement
 * again on every run (its generic plan looks dearer to it than a custom one), which for an outcome's one message cost
 * 25 µs a lock.
 */
export async function lockRows(db: Db, table: SQLiteTable, id: SQLiteColumn, ids: readonly string[]): Promise<void> {
  if (!isPostgres(db) || ids.length === 0) return;
  // Started at once (a prepared statement is issued when executed), so a statement issued after this call (db/sql.ts
  // together) runs after the lock.
  const statements = lockStatements(db, table, id);
  await (ids.length === 1 ? statements.one.execute({ id: ids[0] }) : statements.list.execute({ ids: listParam(db, ids) }));
}

interface Executable {
  execute(values: Record<string, unknown>): Promise<unknown>;
}

const compiledLocks = new WeakMap<Db, Map<SQLiteColumn, { one: Executable; list: Executable }>>();

function lockStatements(db: Db, table: SQLiteTable, id: SQLiteColumn): { one: Executable; list: Executable } {
  let ofDb = compiledLocks.get(db);
  if (!ofDb) compiledLocks.set(db, (ofDb = new Map()));
  let statements = ofDb.get(id);
  if (!statements) {
    const lock = (where: SQL) => (forUpdate(db, db.select({ id }).from(table).where(where).orderBy(id)) as unknown as { prepare(): Executable }).prepare();
    statements = { one: lock(sql`${id} = ${sql.placeholder('id')}`), list: lock(isOneOfPlaceholder(db, id, 'ids')) };
    ofDb.set(id, statements);
  }
  return statements;
}

/**
 * Holds `key` (a name no unique index can guard, such as a domain name several accounts may claim) for the rest of
 * the caller's transaction, against every other transaction holding it: an advisory lock on Postgres. On SQLite the
 * transaction already holds the whole database, and nothing is run.
 */
export async function lockKey(db: Db, key: string): Promise<void> {
  if (!isPostgres(db)) return;
  await runPgSql(db, sql`select pg_advisory_xact_lock(hashtext(${key}))`);
}

/** A boolean as a value to write in SQL text: SQLite's 1 or 0, Postgres's true or false. */
export function boolValue(db: Db, value: boolean): SQL {
  return sql.raw(isPostgres(db) ? String(value) : value ? '1' : '0');
}

/** `column` contains `text`, ignoring case (ASCII): SQLite's LIKE, Postgres's ILIKE; `%` and `_` in `text` are literal. */
export function containsNoCase(db: Db, column: SQLWrapper, text: string): SQL {
  const pattern = `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  return isPostgres(db) ? sql`${column} ilike ${pattern} escape '\\'` : sql`${column} like ${pattern} escape '\\'`;
}

/** The JSON list of text in `column` holds `value` once lower-cased (each item lower-cased, `value` as given). */
export function listHasLowered(db: Db, column: SQLWrapper, value: string): SQL {
  return isPostgres(db)
    ? sql`exists (select 1 from json_array_elements_text(${column}) as item(value) where lower(item.value) = ${value})`
    : sql`exists (select 1 from json_each(${column}) where lower(json_each.value) = ${value})`;
}

/** The text at the top-level `key` of the JSON object held as text in `column` (SQLite's json_extract, Postgres's ->>). */
export function jsonText(db: Db, column: SQLWrapper, key: string): SQL {
  if (!/^\w+$/.test(key)) throw new Error(`not a plain JSON key: ${key}`);
  return isPostgres(db) ? sql`(${column}::json ->> ${sql.raw(`'${key}'`)})` : sql`json_extract(${column}, ${sql.raw(`'$.${key}'`)})`;
}

import type { SQL } from 'drizzle-orm';
import { type Db, runSql } from './client.js';
import { isPostgres, runPgSql } from './pg/state.js';

/**
 * The few ways of running a statement that read the same on every engine. Product code awaits drizzle's builders
 * (`await db.select()…` gives the rows; `await db.update()…` without `returning` gives a result for `changes`), and
 * runs plain SQL only through these.
 */

/** The first row of a query's rows, or undefined: what `.get()` was. */
export async function one<T>(rows: PromiseLike<T[]>): Promise<T | undefined> {
  return (await rows)[0];
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

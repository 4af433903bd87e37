import pg from 'pg';
import { SqliteConnection } from '../../db/sqlite-connection.js';

/**
 * The statements `work` issues on the state, counted at each engine's one door: the pg client's `query`, SQLite's
 * connection `runNow`. Their texts, in the order issued.
 */
export async function statementsOf(work: () => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  const pgQuery = pg.Client.prototype.query;
  const sqliteRun = SqliteConnection.prototype.runNow;
  (pg.Client.prototype as any).query = function (this: pg.Client, query: any, ...rest: unknown[]) {
    seen.push(typeof query === 'string' ? query : query.text);
    return (pgQuery as (...a: unknown[]) => unknown).call(this, query, ...rest);
  };
  SqliteConnection.prototype.runNow = function (this: SqliteConnection, sql, params, method) {
    seen.push(sql);
    return sqliteRun.call(this, sql, params, method);
  };
  try {
    await work();
  } finally {
    pg.Client.prototype.query = pgQuery;
    SqliteConnection.prototype.runNow = sqliteRun;
  }
  return seen;
}

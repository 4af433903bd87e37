import pg from 'pg';
import { groupedTexts } from '../../db/pg/pipeline.js';
import { SqliteConnection } from '../../db/sqlite-connection.js';

/**
 * The statements `work` issues on the state, counted at each engine's one door: the pg client's `query` (each
 * statement of a transaction's group: db/pg/pipeline.ts), SQLite's connection `runNow`. Their texts, in the order
 * issued.
 */
export async function statementsOf(work: () => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  // pg's query is overloaded; the patch takes any of its forms and hands them on unchanged.
  const client = pg.Client.prototype as unknown as { query: (this: pg.Client, query: string | { text: string }, ...rest: unknown[]) => unknown };
  const pgQuery = client.query;
  const sqliteRun = SqliteConnection.prototype.runNow;
  client.query = function (query, ...rest) {
    const grouped = groupedTexts(query);
    if (grouped) seen.push(...grouped);
    else seen.push(typeof query === 'string' ? query : query.text);
    return pgQuery.call(this, query, ...rest);
  };
  SqliteConnection.prototype.runNow = function (this: SqliteConnection, sql, params, method) {
    seen.push(sql);
    return sqliteRun.call(this, sql, params, method);
  };
  try {
    await work();
  } finally {
    client.query = pgQuery;
    SqliteConnection.prototype.runNow = sqliteRun;
  }
  return seen;
}

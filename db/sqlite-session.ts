import { DrizzleQueryError, NoopLogger, type Query, fillPlaceholders } from 'drizzle-orm';
import { NoopCache } from 'drizzle-orm/cache/core';
import type { SQLiteAsyncDialect, SelectedFieldsOrdered } from 'drizzle-orm/sqlite-core';
import { RemotePreparedQuery, SQLiteRemoteSession, SqliteRemoteDatabase } from 'drizzle-orm/sqlite-proxy';
import type { Method, SqliteConnection } from './sqlite-connection.js';

/**
 * drizzle's proxy driver (drizzle-orm/sqlite-proxy) with its statements run by the connection directly: the same
 * queries, rows and errors, but each statement is one promise, settled at once when the connection is free or held by
 * the caller's unit (db/sqlite-connection.ts), instead of the proxy's five nested async functions. A send runs about
 * ten statements; those layers and their garbage were most of what the async `Db` cost SQLite.
 */

type RowMapper = (raw: unknown) => unknown;

/** One statement on the connection, its raw result mapped; an error is drizzle's, as the proxy driver throws it. */
function execute(conn: SqliteConnection, query: Query, params: unknown[], method: Method, map: RowMapper): Promise<unknown> {
  if (conn.canRunNow()) {
    let raw: unknown;
    try {
      raw = conn.runNow(query.sql, params, method);
    } catch (err) {
      return Promise.reject(new DrizzleQueryError(query.sql, params, err as Error));
    }
    return Promise.resolve(map(raw));
  }
  return conn.run(query.sql, params, method).then(map, (err: unknown) => {
    throw new DrizzleQueryError(query.sql, params, err as Error);
  });
}

const asIs: RowMapper = (raw) => raw;
const rowsOf: RowMapper = (raw) => (raw as { rows: unknown }).rows;

class ConnectionQuery extends RemotePreparedQuery {
  constructor(
    private readonly conn: SqliteConnection,
    query: Query,
    fields: SelectedFieldsOrdered | undefined,
    executeMethod: 'run' | 'all' | 'get',
    isResponseInArrayMode: boolean,
    customResultMapper: ((rows: unknown[][]) => unknown) | undefined,
  ) {
    // The proxy's own client is never called: every method below goes to the connection.
    super(notCalled, query, new NoopLogger(), new NoopCache(), undefined, undefined, fields, executeMethod, isResponseInArrayMode, customResultMapper);
  }

  private params(placeholderValues: Record<string, unknown> | undefined): unknown[] {
    return fillPlaceholders(this.query.params, placeholderValues ?? {});
  }

  override run(placeholderValues?: Record<string, unknown>): Promise<never> {
    return execute(this.conn, this.query, this.params(placeholderValues), 'run', asIs) as Promise<never>;
  }

  override all(placeholderValues?: Record<string, unknown>): Promise<never> {
    return execute(this.conn, this.query, this.params(placeholderValues), 'all', (raw) => this.mapAllResult(rowsOf(raw))) as Promise<never>;
  }

  override get(placeholderValues?: Record<string, unknown>): Promise<never> {
    return execute(this.conn, this.query, this.params(placeholderValues), 'get', (raw) => this.mapGetResult(rowsOf(raw))) as Promise<never>;
  }

  override values(placeholderValues?: Record<string, unknown>): Promise<never> {
    return execute(this.conn, this.query, this.params(placeholderValues), 'values', rowsOf) as Promise<never>;
  }
}

function notCalled(): Promise<never> {
  return Promise.reject(new Error('the SQLite session runs statements on its connection'));
}

class ConnectionSession extends SQLiteRemoteSession<Record<string, unknown>, never> {
  constructor(
    private readonly conn: SqliteConnection,
    dialect: SQLiteAsyncDialect,
    schema: ConstructorParameters<typeof SQLiteRemoteSession<Record<string, unknown>, never>>[2],
  ) {
    super(notCalled, dialect, schema, undefined);
  }

  override prepareQuery(
    query: Query,
    fields: SelectedFieldsOrdered | undefined,
    executeMethod: 'run' | 'all' | 'get',
    isResponseInArrayMode: boolean,
    customResultMapper?: (rows: unknown[][]) => unknown,
  ): never {
    return new ConnectionQuery(this.conn, query, fields, executeMethod, isResponseInArrayMode, customResultMapper) as never;
  }
}

/**
 * The drizzle database over `conn`, as drizzle-orm/sqlite-proxy's `drizzle(callback, { schema })` builds it, with
 * the session above.
 */
export function connectionDatabase<S extends Record<string, unknown>>(conn: SqliteConnection, proxy: SqliteRemoteDatabase<S>): SqliteRemoteDatabase<S> {
  // The proxy driver built the dialect and the schema's relational config; only the session changes.
  const { dialect, _ } = proxy as unknown as { dialect: SQLiteAsyncDialect; _: { schema: unknown; fullSchema: unknown; tableNamesMap: unknown } };
  const schema = _.schema === undefined ? undefined : { schema: _.schema, fullSchema: _.fullSchema, tableNamesMap: _.tableNamesMap };
  const session = new ConnectionSession(conn, dialect, schema as never);
  return new SqliteRemoteDatabase('async', dialect, session as never, schema as never) as SqliteRemoteDatabase<S>;
}

import type { Db } from './client.js';

/**
 * Statements of the hot paths (auth, the send pipeline), built and compiled once per database instead of once per
 * call: drizzle otherwise rebuilds the SQL and SQLite re-prepares it on every query. They run on the connection, so
 * they take part in whatever transaction is open on it; always pass the root `Db`, not a transaction handle. Also what
 * a hot path keeps beside its statements for one database (the guard's known keys, core/keys.ts).
 */
export function definePrepared<T>(build: (db: Db) => T): (db: Db) => T {
  const cache = new WeakMap<Db, T>();
  return (db) => {
    let statements = cache.get(db);
    if (!statements) {
      statements = build(db);
      cache.set(db, statements);
    }
    return statements;
  };
}

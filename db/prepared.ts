import type { Db } from './client.js';

/**
 * Statements of the hot paths (auth, the send pipeline), built and compiled once per database instead of once per
 * call: drizzle otherwise rebuilds the SQL on every query. Run them with `.execute(params)`; each runs in the
 * transaction the caller's async work is in, if any (db/sqlite-connection.ts), so the root `Db` is the one to pass
 * (a transaction's handle is the same). Also what
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

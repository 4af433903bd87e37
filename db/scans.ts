import { sql } from 'drizzle-orm';
import { type Db, connectionOf } from './client.js';
import { isPostgres, runPgSql } from './pg/state.js';

export type ScanParams = Record<string, unknown>;

/**
 * Where the reads that walk many rows run: the /metrics gauges over the outbound queue, the dashboard's 30-day chart.
 * On the event loop's connection they would hold every request, delivery and SMTP session for as long as they take
 * (a scrape over 500,000 queued recipients ~200 ms, the chart over a million sends ~600 ms); the server puts them on
 * the WAL checkpoint thread's own connection when it builds its dependencies (db/checkpointer.ts `read`). Plain SQL text with named parameters, not
 * drizzle's builder, because the text crosses to that thread. Read-only statements only.
 */
export interface Scans {
  /** The statement's first row. */
  first<Row>(sql: string, params?: ScanParams): Promise<Row | undefined>;
  /** Every row of the statement. */
  all<Row>(sql: string, params?: ScanParams): Promise<Row[]>;
}

/** On `db`'s own connection, on the event loop (tests and tools; the server puts them on the checkpoint thread's). */
export function scansOn(db: Db): Scans {
  if (isPostgres(db)) {
    // Postgres numbers its parameters: each @name becomes $n, in the order they first appear.
    const run = async <Row>(text: string, params: ScanParams): Promise<Row[]> => {
      const names: string[] = [];
      const numbered = text.replace(/@([A-Za-z_][A-Za-z0-9_]*)/g, (_, name: string) => {
        const at = names.indexOf(name);
        return `$${at >= 0 ? at + 1 : names.push(name)}`;
      });
      return (
        await runPgSql(
          db,
          sql.raw(numbered),
          names.map((n) => params[n]),
        )
      ).rows as Row[];
    };
    return {
      first: async <Row>(text: string, params: ScanParams = {}) => (await run<Row>(text, params))[0],
      all: <Row>(text: string, params: ScanParams = {}) => run<Row>(text, params),
    };
  }
  return {
    first: async <Row>(sql: string, params: ScanParams = {}) => (await connectionOf(db).scan(sql, params, true)) as Row | undefined,
    all: async <Row>(sql: string, params: ScanParams = {}) => (await connectionOf(db).scan(sql, params, false)) as Row[],
  };
}

/** A thread with a connection of its own to the database (db/checkpointer.ts). */
export interface ReadingThread {
  readonly running: boolean;
  read<Row>(sql: string, params?: ScanParams): Promise<Row | undefined>;
  readAll<Row>(sql: string, params?: ScanParams): Promise<Row[]>;
}

/**
 * On the thread's connection while it runs; else, or if it stops during the read, on `db`'s connection: a scrape or
 * a page always answers. A failure of the statement itself (a missing table) is passed on.
 */
export function scansOffThread(thread: ReadingThread, db: Db): Scans {
  const here = scansOn(db);
  const either =
    <T>(there: () => Promise<T>, fallback: () => Promise<T>) =>
    async (): Promise<T> => {
      if (!thread.running) return fallback();
      try {
        return await there();
      } catch (err) {
        if (thread.running) throw err;
        return fallback();
      }
    };
  return {
    first: <Row>(sql: string, params: ScanParams = {}) =>
      either(
        () => thread.read<Row>(sql, params),
        () => here.first<Row>(sql, params),
      )(),
    all: <Row>(sql: string, params: ScanParams = {}) =>
      either(
        () => thread.readAll<Row>(sql, params),
        () => here.all<Row>(sql, params),
      )(),
  };
}

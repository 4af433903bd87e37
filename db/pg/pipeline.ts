import { createRequire } from 'node:module';
import pg from 'pg';

/** `pg`'s own value serializer (what its queries bind with), from its package (`pg/lib/*` is exported). */
const { prepareValue } = createRequire(import.meta.url)('pg/lib/utils.js') as { prepareValue: (value: unknown) => unknown };

/**
 * The statements a transaction issues in one tick, sent as one pipeline with one Sync (db/pg/state.ts): `pg` in
 * pipeline mode ends each statement with a Sync of its own, and Postgres flushes its output at each Sync, so over TLS
 * every statement's answer was a record of its own, decrypted and handed to `pg` one `data` event at a time (about
 * 10,000 a second under `bench:vs-postfix`, against 1,300–1,800 over plain TCP: docs/performance.md, session 36).
 * With one Sync a group, Postgres answers a group at once.
 *
 * Inside a transaction block the statements of a group run as they would with a Sync each: in order, each seeing the
 * ones before. An error ends the group there, as it would have aborted the transaction anyway: the failing statement
 * rejects with Postgres's error, and each statement after it with the error Postgres gives a statement in an aborted
 * transaction (25P02), which is what it got before. A statement whose values cannot be sent (a value `pg` cannot
 * serialize) rejects on its own without reaching the server, as with `pg`'s own queries.
 *
 * Only for a connection inside a transaction block: outside one, statements between two Syncs would share one implicit
 * transaction.
 */

interface Waiting {
  config: pg.QueryConfig & { rowMode?: 'array'; types?: unknown };
  resolve: (result: pg.QueryResult) => void;
  reject: (err: unknown) => void;
}

/** The parts of `pg`'s Connection a group writes with (pg/lib/connection.js). */
interface PgConnection {
  stream: { cork(): void; uncork(): void };
  parsedStatements: Record<string, string>;
  submittedNamedStatements: Record<string, string>;
  parse(query: { text: string; name?: string; types?: unknown }): void;
  bind(config: { portal: string; statement?: string; values: unknown[]; binary?: boolean }): void;
  describe(msg: { type: 'P'; name: string }): void;
  execute(config: { portal: string; rows?: number }): void;
  sync(): void;
  sendCopyFail(msg: string): void;
}

type PgResult = pg.QueryResult & {
  addFields(fields: unknown[]): void;
  parseRow(fields: unknown[]): unknown;
  addRow(row: unknown): void;
  addCommandComplete(msg: unknown): void;
};

const ResultOf = pg.Result as unknown as new (rowMode?: string, types?: unknown) => PgResult;

/** The error Postgres gives each statement after a failed one in a transaction block. */
function abortedError(): Error {
  return Object.assign(new Error('current transaction is aborted, commands ignored until end of transaction block'), {
    code: '25P02',
    severity: 'ERROR',
  });
}

/**
 * `pg`'s query class, which a group extends: in pipeline mode `pg` takes no other kind of query (it refuses cursors and
 * streams, which need a portal kept open between Syncs; a group needs none). Its `name` and `text` are read by `pg` at
 * ParseComplete and at an error, to keep its record of the named statements parsed (pg/lib/client.js).
 */
const QueryBase = pg.Query as unknown as new (config: { text: string }) => { name?: string; text?: string };

/**
 * One group, submitted to `pg` as a single query: `pg` hands it every message of the answer, in order, until the
 * group's ReadyForQuery (or its error).
 */
class StatementGroup extends QueryBase {
  /** The statements written to the server, in order; `at` is the one whose answer arrives now. */
  private readonly sent: (Waiting & { parsed: boolean })[] = [];
  /** The connection it was written to, once submitted (for its record of named statements, if the group fails). */
  private connection: PgConnection | null = null;
  private at = 0;
  private result: PgResult | null = null;
  /** A row of the current statement that `pg`'s type parsers could not read: the statement rejects with it. */
  private failedRow: unknown = null;

  constructor(private readonly waiting: readonly Waiting[]) {
    super({ text: '' });
  }

  /** Its statements' texts, in order. */
  get texts(): readonly string[] {
    return this.waiting.map((w) => w.config.text);
  }

  /** The statement whose answer arrives now, for `pg`'s record of the named statements (name and text). */
  private point(): void {
    const w = this.sent[this.at];
    this.name = w?.config.name;
    this.text = w?.config.text;
  }

  submit(connection: PgConnection): null {
    this.connection = connection;
    const ready: { w: Waiting; values: unknown[] }[] = [];
    for (const w of this.waiting) {
      try {
        ready.push({ w, values: (w.config.values ?? []).map((v) => prepareValue(v)) });
      } catch (err) {
        // Never reached the server: this statement fails alone, as a `pg` query whose values cannot be bound does.
        w.reject(err);
      }
    }
    connection.stream.cork();
    try {
      for (const { w, values } of ready) {
        const { name, text } = w.config;
        const parsed = name !== undefined && (connection.parsedStatements[name] !== undefined || connection.submittedNamedStatements[name] !== undefined);
        if (!parsed) {
          connection.parse({ text, ...(name === undefined ? {} : { name }), types: w.config.types });
          if (name !== undefined) connection.submittedNamedStatements[name] = text;
        }
        connection.bind({ portal: '', ...(name === undefined ? {} : { statement: name }), values });
        connection.describe({ type: 'P', name: '' });
        connection.execute({ portal: '' });
        this.sent.push({ ...w, parsed: !parsed });
      }
      connection.sync();
    } finally {
      connection.stream.uncork();
    }
    this.point();
    return null;
  }

  handleRowDescription(msg: { fields: unknown[] }): void {
    const w = this.sent[this.at];
    this.result = new ResultOf(w?.config.rowMode, w?.config.types);
    this.result.addFields(msg.fields);
  }

  handleDataRow(msg: { fields: unknown[] }): void {
    if (!this.result || this.failedRow !== null) return;
    try {
      this.result.addRow(this.result.parseRow(msg.fields));
    } catch (err) {
      this.failedRow = err;
    }
  }

  handleCommandComplete(msg: unknown): void {
    const w = this.sent[this.at];
    const result = this.result ?? new ResultOf(w?.config.rowMode, w?.config.types);
    result.addCommandComplete(msg);
    this.settle(result);
  }

  handleEmptyQuery(): void {
    const w = this.sent[this.at];
    this.settle(new ResultOf(w?.config.rowMode, w?.config.types));
  }

  private settle(result: PgResult): void {
    const w = this.sent[this.at++];
    this.point();
    const failed = this.failedRow;
    this.result = null;
    this.failedRow = null;
    if (!w) return;
    if (failed !== null) w.reject(failed);
    else w.resolve(result);
  }

  /**
   * An ErrorResponse for the current statement (`pg` has already let go of the group: the rest of its answer is the
   * ReadyForQuery after the skipped statements), or the connection's failure.
   */
  handleError(err: unknown): void {
    // Refused before it was sent (the connection not queryable): nothing of it reached the server.
    const { connection } = this;
    if (!connection) {
      for (const w of this.waiting) w.reject(err);
      return;
    }
    const fromServer = err instanceof pg.DatabaseError;
    const rest = this.sent.splice(this.at);
    rest.forEach((w, n) => {
      // A statement the server skipped was never parsed: `pg` would otherwise take its name as still on its way.
      if (n > 0 && w.parsed && w.config.name !== undefined) delete connection.submittedNamedStatements[w.config.name];
      w.reject(n === 0 || !fromServer ? err : abortedError());
    });
  }

  handleReadyForQuery(): void {
    for (const w of this.sent.splice(this.at)) w.reject(new Error('Postgres ended the pipeline without answering this statement'));
  }

  handlePortalSuspended(): void {
    // Never asked for: each statement is executed to its end.
  }

  handleCopyInResponse(connection: PgConnection): void {
    connection.sendCopyFail('No source stream defined');
  }

  handleCopyData(): void {}
}

/** The texts of the statements `query` carries, if it is a group (what a count of the statements issued counts). */
export function groupedTexts(query: unknown): readonly string[] | undefined {
  return query instanceof StatementGroup ? query.texts : undefined;
}

/** The statements waiting for the end of the tick, per connection. */
const pending = new WeakMap<pg.PoolClient, Waiting[]>();

/** Sends what `client` has waiting, as one group (no-op when nothing waits). */
export function sendWaiting(client: pg.PoolClient): void {
  const waiting = pending.get(client);
  if (!waiting) return;
  pending.delete(client);
  const group = new StatementGroup(waiting);
  // `pg` queues it behind what it has already sent, and hands it its answers (or its failure) like any query's.
  client.query(group as unknown as pg.QueryConfig);
}

/**
 * Issues a statement on a connection inside a transaction block, to leave with the others the tick issues on it (one
 * Sync for all). `alone`: what was waiting leaves first, then this statement with a Sync of its own (COMMIT, ROLLBACK:
 * a failure before them must not skip them).
 */
export function inPipeline(client: pg.PoolClient, config: Waiting['config'], alone = false): Promise<pg.QueryResult> {
  if (alone) {
    sendWaiting(client);
    return client.query(config);
  }
  return new Promise<pg.QueryResult>((resolve, reject) => {
    let waiting = pending.get(client);
    if (!waiting) {
      waiting = [];
      pending.set(client, waiting);
      process.nextTick(() => sendWaiting(client));
    }
    waiting.push({ config, resolve, reject });
  });
}

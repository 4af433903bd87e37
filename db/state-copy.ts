import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import type Database from 'better-sqlite3';
import { is } from 'drizzle-orm';
import { getTableConfig, type SQLiteColumn, SQLiteTable } from 'drizzle-orm/sqlite-core';
import type pg from 'pg';
import { spoolFileRecords, spoolPath } from './inbound-spool.js';
import * as schema from './schema/index.js';

/**
 * `mailstead state copy`: a stopped server's state, from SQLite in DATA_DIR into an empty Postgres (docs/api/decisions.md
 * section 11). Every table, row for row, in one transaction (a copy that fails leaves the target as empty as it found
 * it), parents before children; then each table counted on both sides and compared row for row (the queues and the
 * content they send among them). The tables come from the SQLite schema, whose Postgres twin has the same names and columns
 * (tests/schema-parity.test.ts).
 */

/** Tables whose rows the migrations write (the change counters, the cursor key): the copy replaces them. */
const MADE_BY_MIGRATIONS = new Set(['change_counters', 'settings']);

/**
 * Not compared row for row after the copy, only counted: the change counters, which the triggers of the tables copied
 * after them raise (a counter only has to move for the caches that read it to start over).
 */
const COUNTED_ONLY = new Set(['change_counters']);

/** Postgres takes at most 65,535 parameters a statement. */
const MAX_PARAMETERS = 60_000;

/**
 * The inbound spool's table: on SQLite the spool is files in DATA_DIR (db/inbound-spool.ts) and the table stays empty,
 * so its rows come from the files, each record a row, as a Postgres node writes them (db/inbound-spool-rows.ts).
 */
const SPOOL_TABLE = 'inbound_spool_records';
/** Spool records (up to 64 KB each) sent in one statement, and read back in one when they are compared. */
const SPOOL_ROWS_PER_STATEMENT = 32;

interface CopiedTable {
  name: string;
  table: SQLiteTable;
  columns: SQLiteColumn[];
  /** A column of the table that references the table itself (accounts.parent_id): rows without it go first. */
  selfReference: string | null;
  /** An identity column (SQLite's rowid `seq`) whose sequence must move past the largest number copied. */
  identity: string | null;
}

export interface TableCount {
  name: string;
  source: number;
  target: number;
}

export interface CopyReport {
  dryRun: boolean;
  /** The spooled messages copied from DATA_DIR's files (the queued writes' own), and their records. */
  spool: { messages: number; records: number };
  tables: TableCount[];
  /** The tables compared row for row (every one but the change counters), each with the digest both sides gave. */
  compared: { name: string; rows: number; digest: string }[];
}

export class StateCopyError extends Error {
  override name = 'StateCopyError';
}

/** The state's tables, each after every table it references. */
export function tablesInCopyOrder(): CopiedTable[] {
  const tables = Object.values(schema).flatMap((value): SQLiteTable[] => (is(value, SQLiteTable) ? [value] : []));
  const byName = new Map(tables.map((t) => [getTableConfig(t).name, t]));
  const ordered: CopiedTable[] = [];
  const placed = new Set<string>();
  const visit = (name: string, path: string[]) => {
    if (placed.has(name)) return;
    if (path.includes(name)) throw new Error(`foreign keys form a cycle: ${[...path, name].join(' -> ')}`);
    const table = byName.get(name);
    if (!table) throw new Error(`unknown table ${name}`);
    const config = getTableConfig(table);
    let selfReference: string | null = null;
    for (const fk of config.foreignKeys) {
      const ref = fk.reference();
      const parent = getTableConfig(ref.foreignTable).name;
      if (parent === name) selfReference = ref.columns[0]?.name ?? null;
      else visit(parent, [...path, name]);
    }
    const identity = config.columns.find((c) => c.primary && c.columnType === 'SQLiteInteger')?.name ?? null;
    ordered.push({ name, table, columns: config.columns, selfReference, identity });
    placed.add(name);
  };
  for (const name of [...byName.keys()].sort()) visit(name, []);
  return ordered;
}

/** A value as SQLite keeps it, as Postgres takes it: SQLite's 0/1 booleans become booleans; the rest is the same. */
function toPostgres(column: SQLiteColumn, value: unknown): unknown {
  if (value === null) return null;
  if (column.columnType === 'SQLiteBoolean') return value !== 0;
  return value;
}

const quote = (name: string) => `"${name.replace(/"/g, '""')}"`;

function selectSql(t: CopiedTable): string {
  const order = t.columns.filter((c) => c.primary).map((c) => quote(c.name));
  const keys = order.length > 0 ? order : ['rowid'];
  const first = t.selfReference ? `${quote(t.selfReference)} is not null, ` : '';
  return `select ${t.columns.map((c) => quote(c.name)).join(', ')} from ${quote(t.name)} order by ${first}${keys.join(', ')}`;
}

function primaryOrder(t: CopiedTable, sqlite: Database.Database): string[] {
  const keys = t.columns.filter((c) => c.primary).map((c) => c.name);
  if (keys.length > 0) return keys;
  // A composite primary key (idempotency_keys: account and key) is declared on the table, not on a column.
  const info = sqlite.prepare(`select name from pragma_table_info(?) where pk > 0 order by pk`).all(t.name) as { name: string }[];
  // A table without one (rate_hits: counted requests) is compared in the order of all its columns.
  return info.length > 0 ? info.map((r) => r.name) : t.columns.map((c) => c.name);
}

/**
 * The spool files the queued writes read (an unreferenced file is an orphan the sweep would remove), in the order
 * Postgres sorts their ids with collate "C", each record a row of SPOOL_TABLE: its id, its index, its bytes, and the
 * file's last write as its `created_at` (what the sweep reads).
 */
function spoolRows(sqlite: Database.Database, dataDir: string, columns: SQLiteColumn[]): { ids: string[]; rows: () => Generator<unknown[]> } {
  const referenced = sqlite.prepare('select distinct spool_id as id from customer_db_writes where spool_id is not null').all() as { id: string }[];
  const ids = referenced
    .map((r) => r.id)
    .filter((id) => existsSync(spoolPath(dataDir, id)))
    .sort((a, b) => (Buffer.from(a) < Buffer.from(b) ? -1 : 1));
  return {
    ids,
    *rows() {
      for (const id of ids) {
        const path = spoolPath(dataDir, id);
        const createdAt = Math.floor(statSync(path).mtimeMs);
        let seq = 0;
        for (const record of spoolFileRecords(path)) {
          const row: Record<string, unknown> = { spool_id: id, seq: seq++, record, created_at: createdAt };
          yield columns.map((c) => row[c.name]);
        }
      }
    },
  };
}

/** A digest of every row of `rows`, each value written as the other engine would give it back. */
function digestRows(rows: Iterable<unknown[]>): { rows: number; digest: string } {
  const hash = createHash('sha256');
  const n = digestRowsInto(hash, rows);
  return { rows: n, digest: hash.digest('hex') };
}

/** Feeds `rows` to `hash` as digestRows does; returns how many. */
function digestRowsInto(hash: ReturnType<typeof createHash>, rows: Iterable<unknown[]>): number {
  let n = 0;
  for (const row of rows) {
    n++;
    hash.update(JSON.stringify(row.map((v) => (Buffer.isBuffer(v) ? `\\x${v.toString('hex')}` : v))));
    hash.update('\n');
  }
  return n;
}

/**
 * Copies SQLite's state (`sqlite`, a connection to a stopped server's database, migrated by this version) into the
 * Postgres behind `pool`, migrated by this version and empty of rows but the migrations' own. With `dryRun`, checks
 * both and counts what it would copy, writing nothing.
 */
export async function copyState(sqlite: Database.Database, pool: pg.Pool, opts: { dryRun: boolean; dataDir: string }): Promise<CopyReport> {
  const tables = tablesInCopyOrder();
  const spoolTable = tables.find((t) => t.name === SPOOL_TABLE)!;
  const spool = spoolRows(sqlite, opts.dataDir, spoolTable.columns);
  /** The rows to copy of a table: SQLite's, or the spool files' records. */
  const sourceRows = (t: CopiedTable): Iterable<unknown[]> =>
    t.name === SPOOL_TABLE ? spool.rows() : (sqlite.prepare(selectSql(t)).raw(true).iterate() as Iterable<unknown[]>);
  const client = await pool.connect();
  try {
    if ((sqlite.prepare(`select count(*) as n from ${SPOOL_TABLE}`).get() as { n: number }).n > 0)
      throw new StateCopyError(`${SPOOL_TABLE} holds rows in DATA_DIR, where the spool is files: this state was not written by Mailstead`);
    const counts: TableCount[] = [];
    let spoolRecords = 0;
    for (const _ of spool.rows()) spoolRecords++;
    for (const t of tables) {
      const source = t.name === SPOOL_TABLE ? spoolRecords : (sqlite.prepare(`select count(*) as n from ${quote(t.name)}`).get() as { n: number }).n;
      const { rows } = await client.query<{ n: string }>(`select count(*)::text as n from ${quote(t.name)}`);
      const target = Number(rows[0]?.n ?? 0);
      if (target > 0 && !MADE_BY_MIGRATIONS.has(t.name)) {
        throw new StateCopyError(`the target is not empty: ${t.name} holds ${target} rows; copy into a new, empty database`);
      }
      counts.push({ name: t.name, source, target });
    }
    const spoolCopied = { messages: spool.ids.length, records: spoolRecords };
    if (opts.dryRun) return { dryRun: true, spool: spoolCopied, tables: counts.map((c) => ({ ...c, target: 0 })), compared: [] };

    await client.query('BEGIN');
    try {
      for (const t of tables) {
        if (MADE_BY_MIGRATIONS.has(t.name)) await client.query(`delete from ${quote(t.name)}`);
        const names = t.columns.map((c) => quote(c.name)).join(', ');
        const perBatch = t.name === SPOOL_TABLE ? SPOOL_ROWS_PER_STATEMENT : Math.max(1, Math.floor(MAX_PARAMETERS / t.columns.length));
        let batch: unknown[][] = [];
        const flush = async () => {
          if (batch.length === 0) return;
          const params: unknown[] = [];
          const tuples = batch.map((row) => `(${row.map((v) => `$${params.push(v)}`).join(', ')})`);
          await client.query(`insert into ${quote(t.name)} (${names}) values ${tuples.join(', ')}`, params);
          batch = [];
        };
        for (const row of sourceRows(t)) {
          batch.push(row.map((v, i) => toPostgres(t.columns[i]!, v)));
          if (batch.length >= perBatch) await flush();
        }
        await flush();
        if (t.identity) {
          await client.query(
            `select setval(pg_get_serial_sequence($1, $2), coalesce((select max(${quote(t.identity)}) from ${quote(t.name)}), 1), (select count(*) > 0 from ${quote(t.name)}))`,
            [t.name, t.identity],
          );
        }
      }
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    }

    const tablesAfter: TableCount[] = [];
    for (const t of tables) {
      const source = counts.find((c) => c.name === t.name)!.source;
      const { rows } = await client.query<{ n: string }>(`select count(*)::text as n from ${quote(t.name)}`);
      const target = Number(rows[0]?.n ?? 0);
      if (target !== source) throw new StateCopyError(`${t.name}: ${source} rows in DATA_DIR, ${target} in Postgres after the copy`);
      tablesAfter.push({ name: t.name, source, target });
    }

    const compared: CopyReport['compared'] = [];
    for (const t of tables) {
      if (COUNTED_ONLY.has(t.name)) continue;
      const name = t.name;
      const order = primaryOrder(t, sqlite).map(quote).join(', ');
      const cols = t.columns.map((c) => quote(c.name)).join(', ');
      if (name === SPOOL_TABLE) {
        const fromFiles = digestRows(spool.rows());
        const fromPostgres = await digestSpoolRows(client, cols);
        if (fromFiles.digest !== fromPostgres.digest || fromFiles.rows !== fromPostgres.rows) {
          throw new StateCopyError(`${name}: the records in Postgres differ from DATA_DIR's spool files after the copy`);
        }
        compared.push({ name, ...fromPostgres });
        continue;
      }
      const fromSqlite = digestRows(
        (function* () {
          for (const row of sqlite
            .prepare(`select ${cols} from ${quote(t.name)} order by ${order}`)
            .raw(true)
            .iterate() as Iterable<unknown[]>) {
            yield row.map((v, i) => toPostgres(t.columns[i]!, v));
          }
        })(),
      );
      // Ordered as SQLite orders text (byte by byte), whatever the database's collation.
      const byteOrder = primaryOrder(t, sqlite)
        .map((c) => (t.columns.find((col) => col.name === c)?.columnType === 'SQLiteText' ? `${quote(c)} collate "C"` : quote(c)))
        .join(', ');
      const { rows } = await client.query({ text: `select ${cols} from ${quote(t.name)} order by ${byteOrder}`, rowMode: 'array' });
      const fromPostgres = digestRows(rows as unknown[][]);
      if (fromSqlite.digest !== fromPostgres.digest || fromSqlite.rows !== fromPostgres.rows) {
        throw new StateCopyError(`${name}: the rows in Postgres differ from DATA_DIR's after the copy`);
      }
      compared.push({ name, ...fromPostgres });
    }
    return { dryRun: false, spool: spoolCopied, tables: tablesAfter, compared };
  } finally {
    client.release();
  }
}

/** digestRows of SPOOL_TABLE in Postgres, read a page at a time (its records are the large messages themselves). */
async function digestSpoolRows(client: pg.PoolClient, cols: string): Promise<{ rows: number; digest: string }> {
  const pages = async function* () {
    let after: [string, number] | null = null;
    for (;;) {
      const where: string = after ? `where (spool_id collate "C", seq) > ($1 collate "C", $2)` : '';
      const { rows } = await client.query<unknown[]>({
        text: `select ${cols} from ${SPOOL_TABLE} ${where} order by spool_id collate "C", seq limit ${SPOOL_ROWS_PER_STATEMENT}`,
        values: after ? [...after] : [],
        rowMode: 'array',
      });
      if (rows.length === 0) return;
      yield rows;
      const last = rows[rows.length - 1] as unknown[];
      after = [last[0] as string, Number(last[1])];
    }
  };
  // The digest over the pages as digestRows makes it over rows.
  const hash = createHash('sha256');
  let n = 0;
  for await (const rows of pages()) n += digestRowsInto(hash, rows);
  return { rows: n, digest: hash.digest('hex') };
}

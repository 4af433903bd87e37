import { is, SQL } from 'drizzle-orm';
import { type AnyPgColumn, getTableConfig as pgConfig, PgDialect, PgTable } from 'drizzle-orm/pg-core';
import { type AnySQLiteColumn, getTableConfig as sqliteConfig, SQLiteSyncDialect, SQLiteTable } from 'drizzle-orm/sqlite-core';

/**
 * The comparison behind tests/schema-parity.test.ts: what the SQLite schema (db/schema/) and the Postgres schema
 * (db/pg/schema/) say of each table, as lines naming the table and the column, index or key that differs.
 */

/**
 * The type mapping of db/pg/schema/columns.ts, as data: each drizzle column class of the SQLite schema and the
 * Postgres type it becomes. A SQLite column class missing here has no mapping, and is reported as such.
 */
export const TYPE_MAPPING: Readonly<Record<string, string>> = {
  SQLiteText: 'text',
  SQLiteTextJson: 'json',
  SQLiteInteger: 'bigint',
  SQLiteBoolean: 'boolean',
  SQLiteBlobBuffer: 'bytea',
  SQLiteReal: 'double precision',
};

/** The tables a schema module exports, by table name. */
export function sqliteTablesOf(module: Record<string, unknown>): Map<string, SQLiteTable> {
  const tables = Object.values(module).filter((v): v is SQLiteTable => is(v, SQLiteTable));
  return new Map(tables.map((t) => [sqliteConfig(t).name, t]));
}

export function pgTablesOf(module: Record<string, unknown>): Map<string, PgTable> {
  const tables = Object.values(module).filter((v): v is PgTable => is(v, PgTable));
  return new Map(tables.map((t) => [pgConfig(t).name, t]));
}

const sqliteDialect = new SQLiteSyncDialect();
const pgDialect = new PgDialect();

/** A default as text: a value as JSON, a SQL default rendered by its engine's dialect. */
function defaultText(value: unknown, render: (s: SQL) => string): string | undefined {
  if (value === undefined) return undefined;
  return is(value, SQL) ? `sql ${render(value)}` : JSON.stringify(value);
}

/**
 * Whether a SQLite column is its table's rowid (`integer primary key` alone): SQLite numbers it when an insert leaves
 * it out, which Postgres does for an identity column only.
 */
function isRowid(column: AnySQLiteColumn, table: SQLiteTable): boolean {
  return column.columnType === 'SQLiteInteger' && column.primary && sqliteConfig(table).primaryKeys.length === 0;
}

/** What a column of either engine says, in the terms the two share. */
interface ColumnFacts {
  type: string;
  notNull: boolean;
  primaryKey: boolean;
  unique: boolean;
  default: string | undefined;
  /** Numbered by the engine when an insert leaves it out: SQLite's rowid, Postgres's identity (by default). */
  numbered: boolean;
  enumValues: string[] | undefined;
  defaultFn: boolean;
}

function sqliteColumnFacts(column: AnySQLiteColumn, table: SQLiteTable): ColumnFacts {
  return {
    type: TYPE_MAPPING[column.columnType] ?? `${column.columnType} (not in the type mapping)`,
    notNull: column.notNull,
    primaryKey: column.primary,
    unique: column.isUnique,
    default: defaultText(column.default, (s) => sqliteDialect.sqlToQuery(s).sql),
    numbered: isRowid(column, table),
    enumValues: column.enumValues,
    defaultFn: column.defaultFn !== undefined || column.onUpdateFn !== undefined,
  };
}

function pgColumnFacts(column: AnyPgColumn): ColumnFacts {
  return {
    type: column.getSQLType(),
    notNull: column.notNull,
    primaryKey: column.primary,
    unique: column.isUnique,
    default: defaultText(column.default, (s) => pgDialect.sqlToQuery(s).sql),
    numbered: column.generatedIdentity?.type === 'byDefault',
    enumValues: column.enumValues,
    defaultFn: column.defaultFn !== undefined || column.onUpdateFn !== undefined,
  };
}

/** An index in the terms both engines share: its columns in order, unique or not, and its partial `where` as SQL text. */
function indexText(name: string | undefined, columns: string[], unique: boolean, where: string | undefined): string {
  return `${unique ? 'unique ' : ''}index ${name} on (${columns.join(', ')})${where === undefined ? '' : ` where ${where}`}`;
}

function columnName(c: unknown): string {
  if (is(c, SQL)) return `sql ${pgDialect.sqlToQuery(c).sql}`;
  return (c as { name: string }).name;
}

/** A Postgres index column: its name, and any order, nulls or operator class other than btree's default. */
function pgIndexColumn(c: unknown): string {
  const config = (c as { indexConfig?: { order?: string; nulls?: string; opClass?: string } }).indexConfig;
  const extra = [config?.order === 'desc' ? 'desc' : '', config?.nulls === 'first' ? 'nulls first' : '', config?.opClass ?? ''].filter(Boolean);
  return [columnName(c), ...extra].join(' ');
}

/** A foreign key's on delete and on update: drizzle leaves SQLite's unset when it is `no action`. */
function action(a: string | undefined): string {
  return a ?? 'no action';
}

/** Lines for the entries of two keyed lists that differ: one missing on a side, or different. */
function compareKeyed(what: string, sqlite: Map<string, string>, pg: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [key, s] of sqlite) {
    const p = pg.get(key);
    if (p === undefined) out.push(`${what} ${key}: on SQLite (${s}), missing on Postgres`);
    else if (p !== s) out.push(`${what} ${key}: SQLite ${s}, Postgres ${p}`);
  }
  for (const [key, p] of pg) if (!sqlite.has(key)) out.push(`${what} ${key}: on Postgres (${p}), missing on SQLite`);
  return out;
}

/** Every difference between a SQLite table and its Postgres twin, each line starting with the table's name. */
export function tableDifferences(sqliteTable: SQLiteTable, pgTable: PgTable): string[] {
  const s = sqliteConfig(sqliteTable);
  const p = pgConfig(pgTable);
  const out: string[] = [];

  const sqliteColumns = new Map(s.columns.map((c) => [c.name, sqliteColumnFacts(c, sqliteTable)]));
  const pgColumns = new Map(p.columns.map((c) => [c.name, pgColumnFacts(c)]));
  for (const [name, sc] of sqliteColumns) {
    const pc = pgColumns.get(name);
    if (!pc) {
      out.push(`column ${name}: on SQLite, missing on Postgres`);
      continue;
    }
    for (const key of Object.keys(sc) as (keyof ColumnFacts)[]) {
      const a = JSON.stringify(sc[key]);
      const b = JSON.stringify(pc[key]);
      if (a !== b) out.push(`column ${name}: ${key} is ${a} on SQLite, ${b} on Postgres`);
    }
  }
  for (const name of pgColumns.keys()) if (!sqliteColumns.has(name)) out.push(`column ${name}: on Postgres, missing on SQLite`);
  // Same columns in the same order, so a row reads alike and a copy can go column for column.
  const sOrder = s.columns.map((c) => c.name).filter((n) => pgColumns.has(n));
  const pOrder = p.columns.map((c) => c.name).filter((n) => sqliteColumns.has(n));
  if (sOrder.join() !== pOrder.join()) out.push(`columns in another order: SQLite ${sOrder.join(', ')}; Postgres ${pOrder.join(', ')}`);

  out.push(
    ...compareKeyed(
      'index',
      new Map(
        s.indexes.map((i) => [
          String(i.config.name),
          indexText(i.config.name, i.config.columns.map(columnName), i.config.unique, i.config.where && sqliteDialect.sqlToQuery(i.config.where).sql),
        ]),
      ),
      new Map(
        p.indexes.map((i) => {
          const method = i.config.method && i.config.method !== 'btree' ? ` using ${i.config.method}` : '';
          const text = indexText(
            i.config.name,
            i.config.columns.map(pgIndexColumn),
            i.config.unique,
            i.config.where && pgDialect.sqlToQuery(i.config.where).sql,
          );
          return [String(i.config.name), `${text}${method}${i.config.concurrently ? ' concurrently' : ''}${i.config.only ? ' only' : ''}`];
        }),
      ),
    ),
  );

  const fkText = (columns: string[], table: string, foreign: string[], onDelete: string | undefined, onUpdate: string | undefined) =>
    `(${columns.join(', ')}) references ${table} (${foreign.join(', ')}) on delete ${action(onDelete)} on update ${action(onUpdate)}`;
  const sqliteFks = s.foreignKeys.map((fk) => {
    const r = fk.reference();
    return fkText(
      r.columns.map((c) => c.name),
      sqliteConfig(r.foreignTable).name,
      r.foreignColumns.map((c) => c.name),
      fk.onDelete,
      fk.onUpdate,
    );
  });
  const pgFks = p.foreignKeys.map((fk) => {
    const r = fk.reference();
    return fkText(
      r.columns.map((c) => c.name),
      pgConfig(r.foreignTable).name,
      r.foreignColumns.map((c) => c.name),
      fk.onDelete,
      fk.onUpdate,
    );
  });
  // Keyed by their columns: a constraint's name is drizzle's own on both sides and SQLite does not keep it.
  const byColumns = (fks: string[]) => new Map(fks.map((f) => [f.slice(0, f.indexOf(')') + 1), f]));
  out.push(...compareKeyed('foreign key', byColumns(sqliteFks), byColumns(pgFks)));

  out.push(
    ...compareKeyed(
      'primary key',
      new Map(s.primaryKeys.map((k) => [`(${k.columns.map((c) => c.name).join(', ')})`, k.getName()])),
      new Map(p.primaryKeys.map((k) => [`(${k.columns.map((c) => c.name).join(', ')})`, k.getName()])),
    ),
  );
  out.push(
    ...compareKeyed(
      'unique constraint',
      new Map(s.uniqueConstraints.map((u) => [String(u.name), `(${u.columns.map((c) => c.name).join(', ')})`])),
      new Map(
        p.uniqueConstraints.map((u) => [String(u.name), `(${u.columns.map((c) => c.name).join(', ')})${u.nullsNotDistinct ? ' nulls not distinct' : ''}`]),
      ),
    ),
  );
  out.push(
    ...compareKeyed(
      'check',
      new Map(s.checks.map((c) => [c.name, sqliteDialect.sqlToQuery(c.value).sql])),
      new Map(p.checks.map((c) => [c.name, pgDialect.sqlToQuery(c.value).sql])),
    ),
  );

  return out.map((line) => `${s.name}: ${line}`);
}

/** Every difference between two schema modules: tables on one side only, then each common table's differences. */
export function schemaDifferences(sqliteModule: Record<string, unknown>, pgModule: Record<string, unknown>): string[] {
  const sqlite = sqliteTablesOf(sqliteModule);
  const pg = pgTablesOf(pgModule);
  const out: string[] = [];
  for (const name of sqlite.keys()) if (!pg.has(name)) out.push(`${name}: a table on SQLite, missing on Postgres`);
  for (const name of pg.keys()) if (!sqlite.has(name)) out.push(`${name}: a table on Postgres, missing on SQLite`);
  for (const [name, table] of sqlite) {
    const twin = pg.get(name);
    if (twin) out.push(...tableDifferences(table, twin));
  }
  return out;
}

import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { getTableName, is, type Table } from 'drizzle-orm';
import { PgTable } from 'drizzle-orm/pg-core';
import { SQLiteTable } from 'drizzle-orm/sqlite-core';
import { describe, expect, it } from 'vitest';
import * as pgSchema from '../db/pg/schema/index.js';
import * as schema from '../db/schema/index.js';

/**
 * House style (State): one file per table under the schema folder of each engine, db/schema/ (SQLite) and
 * db/pg/schema/ (Postgres), named after the table, all exported from index.ts.
 */

const HELPERS = new Set(['index.ts', 'columns.ts']);

describe.each([
  { folder: 'db/schema', kind: SQLiteTable as typeof Table, index: schema as Record<string, unknown> },
  { folder: 'db/pg/schema', kind: PgTable as typeof Table, index: pgSchema as Record<string, unknown> },
])('$folder', ({ folder, kind, index }) => {
  const files = readdirSync(fileURLToPath(new URL(`../${folder}/`, import.meta.url))).filter((f) => f.endsWith('.ts') && !HELPERS.has(f));
  // Only the engine's own tables: a Postgres file may import an enum from its SQLite twin, never export its table.
  const tablesOf = (module: Record<string, unknown>) =>
    Object.values(module)
      .filter((v): v is Table => is(v, kind))
      .map((t) => getTableName(t));

  it.each(files)('%s holds exactly one table, the one it is named after', async (file) => {
    // The file list is read at run time: there is nothing for vite to analyse statically.
    const module = (await import(/* @vite-ignore */ `../${folder}/${file.replace(/\.ts$/, '.js')}`)) as Record<string, unknown>;
    expect(Object.values(module).filter((v) => is(v, SQLiteTable) || is(v, PgTable)).length).toBe(1);
    expect(tablesOf(module)).toEqual([file.replace(/\.ts$/, '').replace(/-/g, '_')]);
  });

  it('index.ts exports the table of every file, and no other', () => {
    expect(tablesOf(index).sort()).toEqual(files.map((f) => f.replace(/\.ts$/, '').replace(/-/g, '_')).sort());
  });
});

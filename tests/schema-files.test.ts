import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { getTableName, is } from 'drizzle-orm';
import { SQLiteTable } from 'drizzle-orm/sqlite-core';
import { describe, expect, it } from 'vitest';
import * as schema from '../db/schema/index.js';

/** House style (State): one file per table under db/schema/, named after the table, all exported from index.ts. */

const DIR = fileURLToPath(new URL('../db/schema/', import.meta.url));
const HELPERS = new Set(['index.ts', 'columns.ts']);
const files = readdirSync(DIR).filter((f) => f.endsWith('.ts') && !HELPERS.has(f));

const tablesOf = (module: Record<string, unknown>) =>
  Object.values(module)
    .filter((v): v is SQLiteTable => is(v, SQLiteTable))
    .map((t) => getTableName(t));

describe('db/schema', () => {
  it.each(files)('%s holds exactly one table, the one it is named after', async (file) => {
    // The file list is read at run time: there is nothing for vite to analyse statically.
    const module = (await import(/* @vite-ignore */ `../db/schema/${file.replace(/\.ts$/, '.js')}`)) as Record<string, unknown>;
    expect(tablesOf(module)).toEqual([file.replace(/\.ts$/, '').replace(/-/g, '_')]);
  });

  it('index.ts exports the table of every file, and no other', () => {
    expect(tablesOf(schema).sort()).toEqual(files.map((f) => f.replace(/\.ts$/, '').replace(/-/g, '_')).sort());
  });
});

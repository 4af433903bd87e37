import { sql, type Table } from 'drizzle-orm';
import {
  bigint,
  boolean,
  json,
  index as pgIndex,
  primaryKey as pgPrimaryKey,
  pgTable,
  text as pgText,
  uniqueIndex as pgUniqueIndex,
} from 'drizzle-orm/pg-core';
import { index, integer, primaryKey as sqlitePrimaryKey, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';
import { describe, expect, it } from 'vitest';
import * as pgSchema from '../db/pg/schema/index.js';
import * as sqliteSchema from '../db/schema/index.js';
import { pgTablesOf, schemaDifferences, sqliteTablesOf, tableDifferences } from './helpers/schema-parity.js';

/**
 * The two schemas of the service's state cannot drift (issue 36; db/pg/README.md): the same tables; per table the
 * same columns (name, not null, primary key, default, a type that maps by db/pg/schema/columns.ts), the same indexes
 * (name, columns in order, unique, a partial one's `where` as SQL), the same foreign keys, composite primary keys and
 * unique constraints. Each difference is a line naming the table and the column, index or key.
 */

describe('db/schema (SQLite) and db/pg/schema (Postgres)', () => {
  const sqliteTables = sqliteTablesOf(sqliteSchema);
  const pgTables = pgTablesOf(pgSchema);

  it('have the same tables', () => {
    expect([...pgTables.keys()].sort()).toEqual([...sqliteTables.keys()].sort());
    expect(sqliteTables.size).toBeGreaterThan(20);
  });

  it.each([...sqliteTables.keys()].sort())('%s: the same columns, indexes and keys', (name) => {
    const twin = pgTables.get(name);
    expect(twin, `${name} has no Postgres table`).toBeDefined();
    if (twin) expect(tableDifferences(sqliteTables.get(name)!, twin)).toEqual([]);
  });
});

// The rows the two engines read and write are the same TypeScript types, table for table: checked by `tsc` (npm run
// typecheck), where a difference names the table's export.
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
type S = typeof sqliteSchema;
type P = typeof pgSchema;
type TableKeys<M> = { [K in keyof M]: M[K] extends Table ? K : never }[keyof M];
type Shared = TableKeys<S> & TableKeys<P>;
type Differing<Kind extends '$inferSelect' | '$inferInsert'> = {
  [K in Shared]: S[K] extends Table ? (P[K] extends Table ? (Same<S[K][Kind], P[K][Kind]> extends true ? never : K) : K) : K;
}[Shared];
const selectRowsAgree: [Differing<'$inferSelect'>] extends [never] ? true : Differing<'$inferSelect'> = true;
const insertRowsAgree: [Differing<'$inferInsert'>] extends [never] ? true : Differing<'$inferInsert'> = true;
const everyTableOnBoth: [Exclude<TableKeys<S>, TableKeys<P>> | Exclude<TableKeys<P>, TableKeys<S>>] extends [never] ? true : false = true;
void [selectRowsAgree, insertRowsAgree, everyTableOnBoth];

/**
 * The comparison itself sees what it is for: a pair of tables that differ in each way the test guards against, and
 * each difference reported by table and column. (Without this, a comparison that saw nothing would pass.)
 */
describe('the comparison reports each kind of difference', () => {
  const sqliteThing = sqliteTable(
    'things',
    {
      id: text('id').primaryKey(),
      owner: text('owner').notNull(),
      label: text('label').notNull().default(''),
      count: integer('count').notNull().default(0),
      flag: integer('flag', { mode: 'boolean' }).notNull(),
      tags: text('tags', { mode: 'json' }).$type<string[]>(),
      gone: text('gone'),
      state: text('state', { enum: ['a', 'b'] }),
    },
    (t) => [uniqueIndex('things_owner_idx').on(t.owner, t.label), uniqueIndex('things_dropped_idx').on(t.count)],
  );
  const pgThing = pgTable(
    'things',
    {
      id: pgText('id').primaryKey(),
      owner: pgText('owner'),
      label: pgText('label').notNull().default('x'),
      count: bigint('count', { mode: 'number' }).notNull().default(0),
      flag: pgText('flag').notNull(),
      tags: json('tags').$type<string[]>(),
      renamed: pgText('renamed'),
      state: pgText('state', { enum: ['a', 'c'] }),
      extra: boolean('extra'),
    },
    (t) => [pgUniqueIndex('things_owner_idx').on(t.label, t.owner), pgIndex('things_added_idx').on(t.count)],
  );

  it('lists every difference, table and column named', () => {
    expect(tableDifferences(sqliteThing, pgThing)).toEqual([
      'things: column owner: notNull is true on SQLite, false on Postgres',
      'things: column label: default is "\\"\\"" on SQLite, "\\"x\\"" on Postgres',
      'things: column flag: type is "boolean" on SQLite, "text" on Postgres',
      'things: column gone: on SQLite, missing on Postgres',
      'things: column state: enumValues is ["a","b"] on SQLite, ["a","c"] on Postgres',
      'things: column renamed: on Postgres, missing on SQLite',
      'things: column extra: on Postgres, missing on SQLite',
      'things: index things_owner_idx: SQLite unique index things_owner_idx on (owner, label), Postgres unique index things_owner_idx on (label, owner)',
      'things: index things_dropped_idx: on SQLite (unique index things_dropped_idx on (count)), missing on Postgres',
      'things: index things_added_idx: on Postgres (index things_added_idx on (count)), missing on SQLite',
    ]);
  });

  it("compares foreign keys, partial indexes, composite keys and SQLite's rowid", () => {
    const sqliteParent = sqliteTable('parents', { id: text('id').primaryKey() });
    const pgParent = pgTable('parents', { id: pgText('id').primaryKey() });
    const sqliteChild = sqliteTable(
      'children',
      {
        seq: integer('seq').primaryKey(),
        parentId: text('parent_id').references(() => sqliteParent.id, { onDelete: 'cascade' }),
        doneAt: integer('done_at'),
      },
      (t) => [index('children_open_idx').on(t.parentId).where(sql`${t.doneAt} is null`)],
    );
    const pgChild = pgTable(
      'children',
      {
        seq: bigint('seq', { mode: 'number' }).primaryKey(),
        parentId: pgText('parent_id').references(() => pgParent.id, { onDelete: 'set null' }),
        doneAt: bigint('done_at', { mode: 'number' }),
      },
      (t) => [pgIndex('children_open_idx').on(t.parentId).where(sql`${t.doneAt} is not null`)],
    );
    expect(tableDifferences(sqliteChild, pgChild)).toEqual([
      'children: column seq: numbered is true on SQLite, false on Postgres',
      'children: index children_open_idx: SQLite index children_open_idx on (parent_id) where "children"."done_at" is null, Postgres index children_open_idx on (parent_id) where "children"."done_at" is not null',
      'children: foreign key (parent_id): SQLite (parent_id) references parents (id) on delete cascade on update no action, Postgres (parent_id) references parents (id) on delete set null on update no action',
    ]);
    const sqliteVersions = sqliteTable('versions', { a: text('a').notNull(), b: integer('b').notNull() }, (t) => [sqlitePrimaryKey({ columns: [t.a, t.b] })]);
    const pgVersions = pgTable('versions', { a: pgText('a').notNull(), b: bigint('b', { mode: 'number' }).notNull() }, (t) => [
      pgPrimaryKey({ columns: [t.a] }),
    ]);
    expect(tableDifferences(sqliteVersions, pgVersions)).toEqual([
      'versions: primary key (a, b): on SQLite (versions_a_b_pk), missing on Postgres',
      'versions: primary key (a): on Postgres (versions_a_pk), missing on SQLite',
    ]);
  });

  it('names a table on one side only', () => {
    expect(schemaDifferences({ sqliteThing }, {})).toEqual(['things: a table on SQLite, missing on Postgres']);
    expect(schemaDifferences({}, { pgThing })).toEqual(['things: a table on Postgres, missing on SQLite']);
  });
});

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { eq } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { getTableConfig, PgDialect, type PgTable } from 'drizzle-orm/pg-core';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type SqliteStore } from '../db/client.js';
import * as pgSchema from '../db/pg/schema/index.js';
import { pgTablesOf } from './helpers/schema-parity.js';
import { startPostgres, type TestPostgres } from './helpers/postgres.js';

/**
 * db/pg/migrations applied by drizzle's migrator to a fresh Postgres make what db/pg/schema/ declares (every table,
 * column, index, key), and the change counters' triggers behave as SQLite's do: one list of cases, run on a Postgres
 * migrated here and on a SQLite database migrated by the service's own openDatabase (db/client.ts). One Postgres for
 * the file; each trigger case runs in a transaction rolled back after it.
 */

const MIGRATIONS = fileURLToPath(new URL('../db/pg/migrations', import.meta.url));
const journal = JSON.parse(readFileSync(join(MIGRATIONS, 'meta', '_journal.json'), 'utf8')) as { entries: { tag: string }[] };
const COUNTERS = ['recipients', 'templates', 'keys'] as const;
type Counter = (typeof COUNTERS)[number];

/** One engine as the trigger cases see it: SQL in, the counters out. */
interface Engine {
  exec(sql: string): Promise<void>;
  rows<T>(sql: string): Promise<T[]>;
}

let server: TestPostgres;
let client: pg.Client;
let store: SqliteStore;
let dataDir: string;
/** What each engine held right after its migrations, before the seed below: the change counters and the cursor key. */
const fresh: Partial<Record<'sqlite' | 'postgres', { counters: [string, number][]; cursorKey: string | undefined }>> = {};
const engines: Record<'sqlite' | 'postgres', Engine> = {
  sqlite: {
    exec: async (sql) => void store.sqlite.exec(sql),
    rows: async <T>(sql: string) => store.sqlite.prepare(sql).all() as T[],
  },
  postgres: {
    exec: async (sql) => void (await client.query(sql)),
    rows: async <T>(sql: string) => (await client.query(sql)).rows as T[],
  },
};

/** The same rows on both engines, for the trigger cases to change: accounts A (B its sub-account, C alone), A's domain, database, templates, suppression. */
const SEED = `
  insert into accounts (id, parent_id, name, created_at, daily_quota) values ('acc-a', null, 'A', 1, 100), ('acc-b', 'acc-a', 'B', 1, 100), ('acc-c', null, 'C', 1, 100);
  insert into domain_keys (id, account_id, name, token, selector, dkim_public_key, dkim_private_key_sealed, created_at) values ('key-1', 'acc-a', 'example.com', 't', 's', 'p', 'k', 1);
  insert into domains (id, account_id, name, key_id, record_status, checks, created_at, last_checked_at) values ('dom-1', 'acc-a', 'example.com', 'key-1', '{"ownership":"pending"}', null, 1, 1);
  insert into customer_databases (account_id, connection_id, url_sealed, host, port, "database", "user", ssl_mode, state, schema_version, next_attempt_at, updated_at, created_at)
    values ('acc-a', 'conn-1', 'sealed', 'db.example.com', 5432, 'app', 'app', 'verify', 'connected', 1, 1, 1, 1);
  insert into templates (id, account_id, name, kind, version, created_at, updated_at) values ('tpl-1', 'acc-a', 'welcome', 'template', 1, 1, 1), ('tpl-2', 'acc-a', 'spare', 'template', 1, 1, 1);
  insert into template_versions (template_id, version, subject, html, text, layout, variables, created_at) values ('tpl-1', 1, 's', 'h', 't', null, '{}', 1);
  insert into suppressions (id, account_id, address, reason, detail, created_at) values ('sup-1', 'acc-a', 'x@example.org', 'manual', '', 1);
  insert into api_keys (id, account_id, name, prefix, key_hash, scopes, created_at) values ('k-1', 'acc-a', 'one', 'ms_1', 'h1', '[]', 1), ('k-2', 'acc-a', 'two', 'ms_2', 'h2', '[]', 1);`;

interface TriggerCase {
  table: string;
  event: 'insert' | 'update' | 'delete';
  /** For an update: the column it sets. */
  column?: string;
  sql: string;
  /** The counters it raises, each by one; every other stands still. */
  raises: Counter[];
}

/**
 * The change counters' triggers (db/schema/change-counters.ts; db/migrations/0014, 0018, 0020 and
 * db/pg/migrations/0001_change_counters.sql), case by case: each event a trigger covers raises its counter, and an
 * update of a column none covers raises nothing. The same list for both engines.
 */
const TRIGGER_CASES: TriggerCase[] = [
  {
    table: 'domains',
    event: 'insert',
    sql: `insert into domains (id, account_id, name, key_id, record_status, created_at, last_checked_at) values ('dom-2', 'acc-a', 'example.net', 'key-1', '{}', 1, 1)`,
    raises: ['recipients'],
  },
  { table: 'domains', event: 'update', column: 'account_id', sql: `update domains set account_id = 'acc-b' where id = 'dom-1'`, raises: ['recipients'] },
  { table: 'domains', event: 'update', column: 'name', sql: `update domains set name = 'example.org' where id = 'dom-1'`, raises: ['recipients'] },
  {
    table: 'domains',
    event: 'update',
    column: 'record_status',
    sql: `update domains set record_status = '{"ownership":"published"}' where id = 'dom-1'`,
    raises: ['recipients'],
  },
  { table: 'domains', event: 'update', column: 'checks', sql: `update domains set checks = '{}' where id = 'dom-1'`, raises: [] },
  { table: 'domains', event: 'update', column: 'last_checked_at', sql: `update domains set last_checked_at = 2 where id = 'dom-1'`, raises: [] },
  { table: 'domains', event: 'delete', sql: `delete from domains where id = 'dom-1'`, raises: ['recipients'] },

  { table: 'accounts', event: 'insert', sql: `insert into accounts (id, name, created_at, daily_quota) values ('acc-d', 'D', 1, 100)`, raises: ['recipients'] },
  {
    table: 'accounts',
    event: 'update',
    column: 'id',
    sql: `update accounts set id = 'acc-c2' where id = 'acc-c'`,
    raises: ['recipients', 'templates'],
  },
  {
    table: 'accounts',
    event: 'update',
    column: 'parent_id',
    sql: `update accounts set parent_id = 'acc-a' where id = 'acc-c'`,
    raises: ['recipients', 'templates'],
  },
  { table: 'accounts', event: 'update', column: 'name', sql: `update accounts set name = 'A2' where id = 'acc-a'`, raises: [] },
  {
    table: 'accounts',
    event: 'update',
    column: 'credits_balance',
    sql: `update accounts set credits_balance = credits_balance - 1 where id = 'acc-a'`,
    raises: [],
  },
  { table: 'accounts', event: 'update', column: 'sent_today_count', sql: `update accounts set sent_today_count = 1 where id = 'acc-a'`, raises: [] },
  // A deleted account's keys go with it (B has none): the keys counter moves for the account.
  { table: 'accounts', event: 'delete', sql: `delete from accounts where id = 'acc-b'`, raises: ['recipients', 'templates', 'keys'] },

  { table: 'api_keys', event: 'update', column: 'revoked_at', sql: `update api_keys set revoked_at = 5 where id = 'k-1'`, raises: ['keys'] },
  { table: 'api_keys', event: 'update', column: 'key_hash', sql: `update api_keys set key_hash = 'h9' where id = 'k-1'`, raises: ['keys'] },
  { table: 'api_keys', event: 'update', column: 'account_id', sql: `update api_keys set account_id = 'acc-c' where id = 'k-1'`, raises: ['keys'] },
  { table: 'api_keys', event: 'update', column: 'last_used_at', sql: `update api_keys set last_used_at = 5 where id = 'k-1'`, raises: [] },
  { table: 'api_keys', event: 'delete', sql: `delete from api_keys where id = 'k-1'`, raises: ['keys'] },

  {
    table: 'customer_databases',
    event: 'insert',
    sql: `insert into customer_databases (account_id, connection_id, url_sealed, host, port, "database", "user", ssl_mode, state, schema_version, next_attempt_at, updated_at, created_at)
      values ('acc-c', 'conn-2', 'sealed', 'db.example.com', 5432, 'app', 'app', 'verify', 'connected', 1, 1, 1, 1)`,
    raises: ['recipients'],
  },
  {
    table: 'customer_databases',
    event: 'update',
    column: 'account_id',
    sql: `update customer_databases set account_id = 'acc-c' where account_id = 'acc-a'`,
    raises: ['recipients'],
  },
  {
    table: 'customer_databases',
    event: 'update',
    column: 'state',
    sql: `update customer_databases set state = 'unreachable' where account_id = 'acc-a'`,
    raises: [],
  },
  { table: 'customer_databases', event: 'delete', sql: `delete from customer_databases where account_id = 'acc-a'`, raises: ['recipients'] },

  {
    table: 'templates',
    event: 'insert',
    sql: `insert into templates (id, account_id, name, kind, version, created_at, updated_at) values ('tpl-3', 'acc-a', 'base', 'layout', 1, 1, 1)`,
    raises: ['templates'],
  },
  { table: 'templates', event: 'update', column: 'id', sql: `update templates set id = 'tpl-2b' where id = 'tpl-2'`, raises: ['templates'] },
  { table: 'templates', event: 'update', column: 'account_id', sql: `update templates set account_id = 'acc-b' where id = 'tpl-1'`, raises: ['templates'] },
  { table: 'templates', event: 'update', column: 'name', sql: `update templates set name = 'hello' where id = 'tpl-1'`, raises: ['templates'] },
  { table: 'templates', event: 'update', column: 'kind', sql: `update templates set kind = 'layout' where id = 'tpl-2'`, raises: ['templates'] },
  { table: 'templates', event: 'update', column: 'version', sql: `update templates set version = 2 where id = 'tpl-1'`, raises: ['templates'] },
  { table: 'templates', event: 'update', column: 'updated_at', sql: `update templates set updated_at = 2 where id = 'tpl-1'`, raises: [] },
  { table: 'templates', event: 'delete', sql: `delete from templates where id = 'tpl-2'`, raises: ['templates'] },

  {
    table: 'template_versions',
    event: 'insert',
    sql: `insert into template_versions (template_id, version, variables, created_at) values ('tpl-1', 2, '{}', 1)`,
    raises: ['templates'],
  },
  {
    table: 'template_versions',
    event: 'update',
    column: 'template_id',
    sql: `update template_versions set template_id = 'tpl-2' where template_id = 'tpl-1'`,
    raises: ['templates'],
  },
  {
    table: 'template_versions',
    event: 'update',
    column: 'version',
    sql: `update template_versions set version = 2 where template_id = 'tpl-1'`,
    raises: ['templates'],
  },
  {
    table: 'template_versions',
    event: 'update',
    column: 'layout',
    sql: `update template_versions set layout = 'base' where template_id = 'tpl-1'`,
    raises: ['templates'],
  },
  { table: 'template_versions', event: 'update', column: 'html', sql: `update template_versions set html = 'h2' where template_id = 'tpl-1'`, raises: [] },
  { table: 'template_versions', event: 'delete', sql: `delete from template_versions where template_id = 'tpl-1'`, raises: ['templates'] },

  {
    table: 'suppressions',
    event: 'insert',
    sql: `insert into suppressions (id, account_id, address, reason, created_at) values ('sup-2', 'acc-a', 'y@example.org', 'bounce', 1)`,
    raises: [],
  },
  {
    table: 'suppressions',
    event: 'update',
    column: 'account_id',
    sql: `update suppressions set account_id = 'acc-b' where id = 'sup-1'`,
    raises: [],
  },
  {
    table: 'suppressions',
    event: 'update',
    column: 'address',
    sql: `update suppressions set address = 'z@example.org' where id = 'sup-1'`,
    raises: [],
  },
  { table: 'suppressions', event: 'update', column: 'detail', sql: `update suppressions set detail = 'why' where id = 'sup-1'`, raises: [] },
  // The `suppressions` counter and its triggers are gone (migration 0010 on Postgres, 0026 on SQLite): no reader left.
  { table: 'suppressions', event: 'delete', sql: `delete from suppressions where id = 'sup-1'`, raises: [] },
];

const title = (c: TriggerCase) => `${c.table}: ${c.event}${c.column ? ` of ${c.column}` : ''} raises ${c.raises.join(', ') || 'nothing'}`;

/** The counters each statement moved, run in a transaction that is rolled back. */
async function countersMovedBy(engine: Engine, sql: string): Promise<Record<string, number>> {
  const read = async () =>
    new Map((await engine.rows<{ name: string; n: number | string }>('select name, n from change_counters')).map((r) => [r.name, Number(r.n)]));
  await engine.exec('begin');
  try {
    const before = await read();
    await engine.exec(sql);
    const after = await read();
    return Object.fromEntries([...after].filter(([name, n]) => n !== before.get(name)).map(([name, n]) => [name, n - (before.get(name) ?? 0)]));
  } finally {
    await engine.exec('rollback');
  }
}

beforeAll(async () => {
  server = await startPostgres({ certificate: 'trusted' });
  await server.admin('create database state');
  client = await server.connect('state');
  await migrate(drizzle(client), { migrationsFolder: MIGRATIONS });
  dataDir = mkdtempSync(join(tmpdir(), 'mailstead-pg-schema-'));
  store = openDatabase(dataDir);
  for (const name of ['sqlite', 'postgres'] as const) {
    const engine = engines[name];
    const counters = await engine.rows<{ name: string; n: number | string }>('select name, n from change_counters order by name');
    const key = await engine.rows<{ value: string }>(`select value from settings where key = 'cursor_hmac_key'`);
    fresh[name] = { counters: counters.map((r) => [r.name, Number(r.n)]), cursorKey: key[0]?.value };
    await engine.exec(SEED);
  }
}, 60_000);

afterAll(async () => {
  await client?.end();
  await server?.stop();
  store?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

/** A SQL literal of a schema default, as information_schema shows it without its cast. */
function literal(value: unknown): string | null {
  if (value === undefined) return null;
  return typeof value === 'string' ? `'${value.replace(/'/g, "''")}'` : String(value);
}

/** A partial index's ` where`, without quotes, table names or outer parentheses: as drizzle writes it and as Postgres shows it. */
function predicate(sql: string | null | undefined, table: string): string {
  if (!sql) return '';
  const bare = sql
    .replaceAll('"', '')
    .replaceAll(`${table}.`, '')
    .replace(/^\((.*)\)$/, '$1')
    .toLowerCase();
  return ` where ${bare}`;
}

const dialect = new PgDialect();
const pgTables = [...pgTablesOf(pgSchema).values()].map((t: PgTable) => getTableConfig(t));

describe('db/pg/migrations on a fresh Postgres', () => {
  it('records every migration of the journal, and a second run applies none', async () => {
    await migrate(drizzle(client), { migrationsFolder: MIGRATIONS });
    const applied = await engines.postgres.rows<{ n: string }>('select count(*) as n from drizzle.__drizzle_migrations');
    expect(Number(applied[0]?.n)).toBe(journal.entries.length);
  });

  it('makes every table and column of db/pg/schema, with its type, nullability, default and identity, and nothing else', async () => {
    const live = await engines.postgres.rows<{
      table_name: string;
      column_name: string;
      data_type: string;
      is_nullable: string;
      column_default: string | null;
      is_identity: string;
    }>(
      `select table_name, column_name, data_type, is_nullable, column_default, is_identity from information_schema.columns where table_schema = 'public' order by table_name, ordinal_position`,
    );
    const expected = pgTables.flatMap((t) =>
      t.columns.map(
        (c) => `${t.name}.${c.name} ${c.getSQLType()}${c.notNull ? ' not null' : ''} default ${literal(c.default)}${c.generatedIdentity ? ' identity' : ''}`,
      ),
    );
    const found = live.map(
      (r) =>
        `${r.table_name}.${r.column_name} ${r.data_type}${r.is_nullable === 'NO' ? ' not null' : ''} default ${r.column_default?.replace(/::[a-z ]+$/, '') ?? null}${r.is_identity === 'YES' ? ' identity' : ''}`,
    );
    expect(found.sort()).toEqual(expected.sort());
  });

  it('makes every index of db/pg/schema: columns in order, unique, the partial ones with their where', async () => {
    const live = await engines.postgres.rows<{ name: string; table_name: string; is_unique: boolean; columns: string[]; pred: string | null }>(`
      select i.relname as name, t.relname as table_name, x.indisunique as is_unique,
        array(select a.attname from unnest(x.indkey) with ordinality k(attnum, ord) join pg_attribute a on a.attrelid = x.indrelid and a.attnum = k.attnum order by k.ord)::text[] as columns,
        pg_get_expr(x.indpred, x.indrelid) as pred
      from pg_index x join pg_class i on i.oid = x.indexrelid join pg_class t on t.oid = x.indrelid join pg_namespace n on n.oid = t.relnamespace
      where n.nspname = 'public' and not x.indisprimary`);
    const expected = pgTables.flatMap((t) =>
      t.indexes.map(
        (i) =>
          `${t.name}: ${i.config.unique ? 'unique ' : ''}${i.config.name} (${i.config.columns.map((c) => (c as { name: string }).name).join(', ')})${predicate(i.config.where && dialect.sqlToQuery(i.config.where).sql, t.name)}`,
      ),
    );
    const found = live.map((r) => `${r.table_name}: ${r.is_unique ? 'unique ' : ''}${r.name} (${r.columns.join(', ')})${predicate(r.pred, r.table_name)}`);
    expect(found.sort()).toEqual(expected.sort());
  });

  it('makes every primary and foreign key of db/pg/schema, with its on delete', async () => {
    const live = await engines.postgres.rows<{
      table_name: string;
      kind: string;
      columns: string[];
      target: string | null;
      target_columns: string[] | null;
      on_delete: string;
    }>(`
      select t.relname as table_name, c.contype as kind,
        array(select a.attname from unnest(c.conkey) with ordinality k(attnum, ord) join pg_attribute a on a.attrelid = c.conrelid and a.attnum = k.attnum order by k.ord)::text[] as columns,
        f.relname as target,
        array(select a.attname from unnest(c.confkey) with ordinality k(attnum, ord) join pg_attribute a on a.attrelid = c.confrelid and a.attnum = k.attnum order by k.ord)::text[] as target_columns,
        c.confdeltype as on_delete
      from pg_constraint c join pg_class t on t.oid = c.conrelid join pg_namespace n on n.oid = t.relnamespace left join pg_class f on f.oid = c.confrelid
      where n.nspname = 'public' and c.contype in ('p', 'f')`);
    const ON_DELETE: Record<string, string> = { a: 'no action', r: 'restrict', c: 'cascade', n: 'set null', d: 'set default' };
    const expected = pgTables.flatMap((t) => [
      ...t.columns.filter((c) => c.primary).map((c) => `${t.name}: primary key (${c.name})`),
      ...t.primaryKeys.map((k) => `${t.name}: primary key (${k.columns.map((c) => c.name).join(', ')})`),
      ...t.foreignKeys.map((fk) => {
        const r = fk.reference();
        return `${t.name}: (${r.columns.map((c) => c.name).join(', ')}) references ${getTableConfig(r.foreignTable).name} (${r.foreignColumns.map((c) => c.name).join(', ')}) on delete ${fk.onDelete ?? 'no action'}`;
      }),
    ]);
    const found = live.map((r) =>
      r.kind === 'p'
        ? `${r.table_name}: primary key (${r.columns.join(', ')})`
        : `${r.table_name}: (${r.columns.join(', ')}) references ${r.target} (${r.target_columns?.join(', ')}) on delete ${ON_DELETE[r.on_delete]}`,
    );
    expect(found.sort()).toEqual(expected.sort());
  });

  it('makes the rows the SQLite migrations make: the change counters at zero, a cursor key of 32 random bytes', () => {
    expect(fresh.postgres?.counters).toEqual(fresh.sqlite?.counters);
    expect(fresh.postgres?.counters).toEqual([
      ['keys', 0],
      ['recipients', 0],
      ['templates', 0],
    ]);
    expect(fresh.postgres?.cursorKey).toMatch(/^[0-9a-f]{64}$/);
    expect(fresh.sqlite?.cursorKey).toMatch(/^[0-9a-f]{64}$/);
    expect(fresh.postgres?.cursorKey).not.toBe(fresh.sqlite?.cursorKey);
  });

  it('reads a row back through db/pg/schema as written: JSON keys in their order, bytes as a Buffer, numbers, booleans, the seq numbered', async () => {
    const db = drizzle(client, { schema: pgSchema });
    const response = { z: 1, a: { y: [1, 'two'], b: null }, m: 'é' };
    await db
      .insert(pgSchema.idempotencyKeys)
      .values({ accountId: 'acc-a', key: 'k', fingerprint: 'f', claimToken: 't', state: 'done', response, claimedAt: 1_700_000_000_123 });
    const [claim] = await db.select().from(pgSchema.idempotencyKeys).where(eq(pgSchema.idempotencyKeys.key, 'k'));
    expect(JSON.stringify(claim?.response)).toBe(JSON.stringify(response));
    expect(claim?.claimedAt).toBe(1_700_000_000_123);
    const bytes = Buffer.from([0, 1, 2, 255, 254]);
    const row = {
      id: 'op-1',
      recipients: ['postmaster@mx.example'],
      mailFrom: '',
      fromHeader: '',
      subject: '',
      remoteAddress: '192.0.2.1',
      helo: 'h',
      size: 5,
    };
    await db.insert(pgSchema.operatorMessages).values([
      { ...row, truncated: true, messageSealed: bytes, receivedAt: 1 },
      { ...row, id: 'op-2', truncated: false, messageSealed: bytes, receivedAt: 2 },
    ]);
    const stored = await db.select().from(pgSchema.operatorMessages).orderBy(pgSchema.operatorMessages.seq);
    expect(stored.map((r) => [r.seq, r.id, r.truncated, Buffer.isBuffer(r.messageSealed) && r.messageSealed.equals(bytes), r.recipients])).toEqual([
      [1, 'op-1', true, true, ['postmaster@mx.example']],
      [2, 'op-2', false, true, ['postmaster@mx.example']],
    ]);
  });
});

describe('the queued messages on Postgres (0004_queue_rows_inline)', () => {
  it('keep a row of a few KB whole in its page, neither compressed nor moved out; a larger one is compressed as before', async () => {
    const [options] = await engines.postgres.rows<{ reloptions: string[] | null }>(`select reloptions from pg_class where relname = 'outbound_messages'`);
    expect(options?.reloptions).toEqual(['toast_tuple_target=8160']);
    // Content that compresses well, as HTML does: about 5 KB of it stayed whole; 40 KB is still compressed.
    const html = (kb: number) => '<p>Your receipt: one line of a table, repeated.</p>\n'.repeat(Math.ceil((kb * 1024) / 52));
    await client.query('begin');
    try {
      for (const [id, kb] of [
        ['em-small', 5],
        ['em-large', 40],
      ] as const) {
        await client.query(
          `insert into emails (id, account_id, from_address, "to", subject, template, status, sandbox, created_at) values ($1, 'acc-a', 'a@example.com', '[]', 's', 'own', 'queued', false, 1)`,
          [id],
        );
        await client.query(
          `insert into outbound_messages (id, account_id, domain_key_id, from_header, from_address, message_id, subject, html, text, created_at, expires_at)
             values ($1, 'acc-a', 'key-1', 'a@example.com', 'a@example.com', '<m@x>', 's', $2, $3, 1, 2)`,
          [id, html(kb * 0.6), html(kb * 0.4)],
        );
      }
      const stored = await engines.postgres.rows<{ id: string; compression: string | null; size: number; length: number }>(
        `select id, pg_column_compression(html) as compression, pg_column_size(html) as size, octet_length(html) as length from outbound_messages order by id`,
      );
      expect(stored.find((r) => r.id === 'em-small')).toMatchObject({ compression: null });
      const small = stored.find((r) => r.id === 'em-small')!;
      expect(small.size).toBeGreaterThanOrEqual(small.length);
      const large = stored.find((r) => r.id === 'em-large')!;
      expect(large.compression).toBe('pglz');
      expect(large.size).toBeLessThan(large.length / 4);
    } finally {
      await client.query('rollback');
    }
  });
});

describe('the change counters: the same triggers on both engines', () => {
  it('have the same names on the same tables', async () => {
    const sqliteTriggers = await engines.sqlite.rows<{ name: string; table_name: string }>(
      `select name, tbl_name as table_name from sqlite_master where type = 'trigger'`,
    );
    const pgTriggers = await engines.postgres.rows<{ name: string; table_name: string }>(
      `select tgname as name, c.relname as table_name from pg_trigger t join pg_class c on c.oid = t.tgrelid where not t.tgisinternal`,
    );
    const text = (rows: { name: string; table_name: string }[]) => rows.map((r) => `${r.table_name}: ${r.name}`).sort();
    expect(text(pgTriggers)).toEqual(text(sqliteTriggers));
    expect(sqliteTriggers.length).toBe(20);
  });

  it('each trigger has a case for its event, and each table a case for a column none covers', async () => {
    const triggers = await engines.sqlite.rows<{ name: string; table_name: string }>(
      `select name, tbl_name as table_name from sqlite_master where type = 'trigger'`,
    );
    const missing = triggers.filter(({ name, table_name }) => {
      const counter = name.split('_changed_')[0];
      const event = name.split('_').at(-1);
      return !TRIGGER_CASES.some((c) => c.table === table_name && c.event === event && c.raises.includes(counter as Counter));
    });
    expect(missing.map((t) => t.name)).toEqual([]);
    const updated = new Set(triggers.filter((t) => t.name.endsWith('_update')).map((t) => t.table_name));
    expect([...updated].filter((table) => !TRIGGER_CASES.some((c) => c.table === table && c.event === 'update' && c.raises.length === 0))).toEqual([]);
  });

  describe.each(['sqlite', 'postgres'] as const)('on %s', (name) => {
    it.each(TRIGGER_CASES.map((c) => [title(c), c] as const))('%s', async (_, c) => {
      expect(await countersMovedBy(engines[name], c.sql)).toEqual(Object.fromEntries(c.raises.map((counter) => [counter, 1])));
    });
  });
});

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CUSTOMER_MIGRATIONS, CUSTOMER_SCHEMA_VERSION, migrateCustomerDb } from '../db/customer/schema.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';

/**
 * The `service` schema in a customer's Postgres, against a real Postgres: created on first
 * connect, versioned, applied once however often or concurrently it runs, with the columns and indexes
 * docs/api/behaviour.md names; a database already at a newer version is left as it is (and reported at the version this service knows).
 */

let server: TestPostgres;

beforeAll(async () => {
  server = await startPostgres({ certificate: 'self-signed' });
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

async function withClient<T>(database: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({
    host: '127.0.0.1',
    port: server.port,
    user: server.user,
    password: server.password,
    database,
    ssl: { rejectUnauthorized: false },
  });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

let dbCounter = 0;
async function freshDatabase(): Promise<string> {
  const name = `schema_test_${process.pid}_${++dbCounter}`;
  await withClient(server.database, (c) => c.query(`create database ${name}`));
  return name;
}

const columnsOf = (c: pg.Client, table: string) =>
  c
    .query<{ column_name: string; data_type: string }>(
      `select column_name, data_type from information_schema.columns where table_schema = 'service' and table_name = $1 order by ordinal_position`,
      [table],
    )
    .then((r) => Object.fromEntries(r.rows.map((row) => [row.column_name, row.data_type])));

describe('the service schema', () => {
  it('a database at version 1 (written before own templates) gains template_version and attachments, its rows kept', async () => {
    const db = await freshDatabase();
    await withClient(db, async (c) => {
      // Version 1 as the service created it before: service.emails without the two columns.
      await c.query('create schema service');
      await c.query('create table service.schema_migrations (version integer primary key, name text not null, applied_at timestamptz not null default now())');
      await c.query(
        CUSTOMER_MIGRATIONS[0]!.sql
          .replace('template_version integer,', '')
          .replace('attachments jsonb,', '')
          .replace("source text not null default 'api',", '')
          .replace('raw bytea,', ''),
      );
      await c.query("insert into service.schema_migrations (version, name) values (1, 'emails, events, inbound, attachments')");
      await c.query(
        "insert into service.emails (id, account_id, from_address, to_addresses, subject, html, text, template, status, created_at) values (gen_random_uuid(), gen_random_uuid(), 'a@b.example', '{c@d.example}', 's', 'h', 't', 'receipt', 'sent', now())",
      );
      expect(await columnsOf(c, 'emails')).not.toHaveProperty('template_version');
      expect(await migrateCustomerDb(c)).toBe(CUSTOMER_SCHEMA_VERSION);
      expect(await columnsOf(c, 'emails')).toMatchObject({ template_version: 'integer', attachments: 'jsonb' });
      expect((await c.query('select template, template_version, attachments from service.emails')).rows).toEqual([
        { template: 'receipt', template_version: null, attachments: null },
      ]);
      expect((await c.query('select version from service.schema_migrations order by version')).rows.map((r) => r.version)).toEqual([1, 2, 3]);
      // Version 3 (SMTP submission): the row is an API send; a submitted message has no template and no rendered parts.
      expect(await columnsOf(c, 'emails')).toMatchObject({ source: 'text', raw: 'bytea' });
      expect((await c.query('select source, raw from service.emails')).rows).toEqual([{ source: 'api', raw: null }]);
      await c.query(
        "insert into service.emails (id, account_id, from_address, to_addresses, subject, html, text, template, source, raw, status, created_at) values (gen_random_uuid(), gen_random_uuid(), 'a@b.example', '{c@d.example}', 's', null, null, null, 'smtp', '\\x4869'::bytea, 'sent', now())",
      );
    });
  });

  it('is created with every table and column docs/api/behaviour.md names, at the current version', async () => {
    const db = await freshDatabase();
    await withClient(db, async (c) => {
      expect(await migrateCustomerDb(c)).toBe(CUSTOMER_SCHEMA_VERSION);
      expect(await columnsOf(c, 'emails')).toMatchObject({
        id: 'uuid',
        account_id: 'uuid',
        from_address: 'text',
        to_addresses: 'ARRAY',
        subject: 'text',
        html: 'text',
        text: 'text',
        template: 'text',
        template_version: 'integer',
        attachments: 'jsonb',
        tags: 'jsonb',
        status: 'text',
        created_at: 'timestamp with time zone',
        delivered_at: 'timestamp with time zone',
        bounced_at: 'timestamp with time zone',
        complained_at: 'timestamp with time zone',
      });
      expect(await columnsOf(c, 'events')).toMatchObject({
        id: 'uuid',
        email_id: 'uuid',
        recipient: 'text',
        status: 'text',
        dsn: 'text',
        detail: 'text',
        occurred_at: 'timestamp with time zone',
      });
      expect(await columnsOf(c, 'inbound')).toMatchObject({
        id: 'uuid',
        account_id: 'uuid',
        from_address: 'text',
        to_addresses: 'ARRAY',
        subject: 'text',
        headers: 'jsonb',
        text: 'text',
        html: 'text',
        message_id: 'text',
        size: 'integer',
        spf: 'text',
        dkim: 'text',
        dmarc: 'text',
        received_at: 'timestamp with time zone',
      });
      expect(await columnsOf(c, 'attachments')).toMatchObject({
        id: 'uuid',
        inbound_id: 'uuid',
        filename: 'text',
        content_type: 'text',
        size: 'integer',
        content: 'bytea',
      });
      const indexes = (await c.query<{ indexname: string }>(`select indexname from pg_indexes where schemaname = 'service'`)).rows.map((r) => r.indexname);
      expect(indexes).toEqual(
        expect.arrayContaining(['emails_created_at_idx', 'events_email_id_idx', 'inbound_received_at_idx', 'attachments_inbound_id_idx']),
      );
      const versions = (await c.query<{ version: number }>('select version from service.schema_migrations order by version')).rows.map((r) => r.version);
      expect(versions).toEqual(CUSTOMER_MIGRATIONS.map((m) => m.version));
    });
  });

  it('applies each migration once: again, and from two connections at the same moment', async () => {
    const db = await freshDatabase();
    const results = await Promise.all([withClient(db, migrateCustomerDb), withClient(db, migrateCustomerDb)]);
    expect(results).toEqual([CUSTOMER_SCHEMA_VERSION, CUSTOMER_SCHEMA_VERSION]);
    await withClient(db, async (c) => {
      expect(await migrateCustomerDb(c)).toBe(CUSTOMER_SCHEMA_VERSION);
      expect((await c.query('select count(*)::int as n from service.schema_migrations')).rows[0].n).toBe(CUSTOMER_MIGRATIONS.length);
    });
  });

  it('leaves a database a newer service migrated as it is, and reports the version this service knows (never a number read from the table)', async () => {
    const db = await freshDatabase();
    await withClient(db, async (c) => {
      await migrateCustomerDb(c);
      await c.query(`insert into service.schema_migrations (version, name) values (99, 'from the future')`);
      // The table is the customer's: what it says past the versions this service applies is not reported.
      expect(await migrateCustomerDb(c)).toBe(CUSTOMER_SCHEMA_VERSION);
      const versions = (await c.query<{ version: number }>('select version from service.schema_migrations order by version')).rows.map((r) => r.version);
      expect(versions).toEqual([...CUSTOMER_MIGRATIONS.map((m) => m.version), 99]);
    });
  });

  it('keeps the rows a customer wrote when it runs again', async () => {
    const db = await freshDatabase();
    await withClient(db, async (c) => {
      await migrateCustomerDb(c);
      await c.query(
        `insert into service.events (id, email_id, recipient, status, dsn, detail, occurred_at) values (gen_random_uuid(), gen_random_uuid(), 'a@example.net', 'delivered', '2.0.0', '250 ok', now())`,
      );
      await migrateCustomerDb(c);
      expect((await c.query('select count(*)::int as n from service.events')).rows[0].n).toBe(1);
    });
  });

  it('creates again a table the customer dropped, keeping the others and their rows', async () => {
    const db = await freshDatabase();
    await withClient(db, async (c) => {
      await migrateCustomerDb(c);
      await c.query(
        `insert into service.emails (id, account_id, from_address, to_addresses, subject, html, text, template, status, created_at) values (gen_random_uuid(), gen_random_uuid(), 'a@example.com', '{b@example.net}', 's', 'h', 't', 'receipt', 'sent', now())`,
      );
      await c.query('drop table service.events');
      expect(await migrateCustomerDb(c)).toBe(CUSTOMER_SCHEMA_VERSION);
      expect((await c.query(`select to_regclass('service.events') as t`)).rows[0].t).toBe('service.events');
      expect(await columnsOf(c, 'events')).toMatchObject({ email_id: 'uuid', occurred_at: 'timestamp with time zone' });
      expect((await c.query('select count(*)::int as n from service.emails')).rows[0].n).toBe(1);
      expect((await c.query('select count(*)::int as n from service.schema_migrations')).rows[0].n).toBe(CUSTOMER_MIGRATIONS.length);
    });
  });
});

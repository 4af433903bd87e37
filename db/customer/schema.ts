import type { ClientBase } from 'pg';

/**
 * The `service` schema in a customer's own Postgres (docs/api/contract.md, Tables written to the customer database; docs/api/decisions.md
 * section 8), as versioned migrations: data, applied in order, each once. `schemaVersion` in the database status is
 * the highest version this service knows and has applied. Content lives only there; the service keeps addresses,
 * status and timestamps.
 */
export const CUSTOMER_MIGRATIONS: readonly {
  version: number;
  name: string;
  /** The tables it creates, and whether its SQL may run again over a schema that has some of them (`if not exists`). */
  tables: readonly string[];
  repeatable: boolean;
  sql: string;
}[] = [
  {
    version: 1,
    name: 'emails, events, inbound, attachments',
    tables: ['service.emails', 'service.events', 'service.inbound', 'service.attachments'],
    repeatable: true,
    sql: `
      create table if not exists service.emails (
        id uuid primary key,
        account_id uuid not null,
        from_address text not null,
        to_addresses text[] not null,
        subject text not null,
        html text not null,
        text text not null,
        template text not null,
        template_version integer,
        attachments jsonb,
        tags jsonb,
        source text not null default 'api',
        raw bytea,
        status text not null,
        created_at timestamptz not null,
        delivered_at timestamptz,
        bounced_at timestamptz,
        complained_at timestamptz
      );
      create index if not exists emails_created_at_idx on service.emails (created_at);
      create index if not exists emails_account_created_at_idx on service.emails (account_id, created_at);

      create table if not exists service.events (
        id uuid primary key,
        email_id uuid not null,
        recipient text not null,
        status text not null,
        dsn text not null,
        detail text not null,
        occurred_at timestamptz not null
      );
      create index if not exists events_email_id_idx on service.events (email_id, occurred_at);
      create index if not exists events_occurred_at_idx on service.events (occurred_at);

      create table if not exists service.inbound (
        id uuid primary key,
        account_id uuid not null,
        from_address text not null,
        to_addresses text[] not null,
        subject text not null,
        headers jsonb not null,
        text text,
        html text,
        message_id text,
        size integer not null,
        spf text,
        dkim text,
        dmarc text,
        received_at timestamptz not null
      );
      create index if not exists inbound_received_at_idx on service.inbound (received_at);
      create index if not exists inbound_account_received_at_idx on service.inbound (account_id, received_at);

      create table if not exists service.attachments (
        id uuid primary key,
        inbound_id uuid not null references service.inbound (id) on delete cascade,
        filename text,
        content_type text not null,
        size integer not null,
        content bytea not null
      );
      create index if not exists attachments_inbound_id_idx on service.attachments (inbound_id);
    `,
  },
  {
    // docs/api/decisions.md section 9: the own template's version, and what was attached (never the bytes). Version 1
    // creates these columns too, so a table it re-creates has them.
    version: 2,
    name: 'emails: template version, attachments',
    tables: ['service.emails'],
    repeatable: true,
    sql: `
      alter table service.emails add column if not exists template_version integer;
      alter table service.emails add column if not exists attachments jsonb;
    `,
  },
  {
    // docs/api/decisions.md section 10: a message submitted over SMTP is kept as submitted (`raw`), with no template
    // and no rendered parts. Version 1 creates the two columns too, so a table it re-creates has them.
    version: 3,
    name: 'emails: source, the submitted message',
    tables: ['service.emails'],
    repeatable: true,
    sql: `
      alter table service.emails add column if not exists source text not null default 'api';
      alter table service.emails add column if not exists raw bytea;
      alter table service.emails alter column template drop not null;
      alter table service.emails alter column html drop not null;
      alter table service.emails alter column text drop not null;
    `,
  },
];

/** The schema version this service writes: the last migration's. */
export const CUSTOMER_SCHEMA_VERSION = CUSTOMER_MIGRATIONS[CUSTOMER_MIGRATIONS.length - 1]!.version;

/** A fixed advisory lock key, so two processes (or two connects) never migrate the same database at once. */
const MIGRATION_LOCK = 0x6d61696c; // "mail"

/**
 * Creates schema `service` and applies every migration not yet applied, each in its own transaction with its version
 * recorded in `service.schema_migrations`, under an advisory lock, and runs an applied one again when a table it
 * creates is gone. Returns the schema version now in place, which is this service's: the known versions it finds
 * recorded and those it applies, never a number read from the table (a database a newer service migrated further is
 * left alone, and reported at the version this service knows).
 *
 * The customer owns `service.schema_migrations` and may have made it anything (a view over millions of rows): every
 * read here returns at most a row per known migration, of values the service sent (docs/api/decisions.md section 13), and each
 * statement is bounded by the connection's statement_timeout. Catalog functions are named with their schema, so a
 * search_path the customer set cannot put a function of theirs in their place.
 */
export async function migrateCustomerDb(client: ClientBase): Promise<number> {
  await client.query('select pg_catalog.pg_advisory_lock($1)', [MIGRATION_LOCK]);
  try {
    // Only when missing: `create schema if not exists` needs CREATE on the database even when the schema exists, and
    // a least-privilege role whose DBA created `service` for it has no such right.
    const exists = await client.query("select 1 from pg_catalog.pg_namespace where nspname = 'service' limit 1");
    if (exists.rowCount === 0) await client.query('create schema service');
    // Likewise the table: `create table if not exists` asks for CREATE on the schema even when the table is there.
    const recorded = await client.query("select pg_catalog.to_regclass('service.schema_migrations') is not null as present limit 1");
    if (recorded.rows[0]?.present !== true) {
      await client.query(
        'create table if not exists service.schema_migrations (version integer primary key, name text not null, applied_at timestamptz not null default now())',
      );
    }
    const applied = await appliedVersions(client);
    for (const m of CUSTOMER_MIGRATIONS) {
      if (applied.has(m.version)) continue;
      await client.query('begin');
      try {
        await client.query(m.sql);
        await client.query('insert into service.schema_migrations (version, name) values ($1, $2)', [m.version, m.name]);
        await client.query('commit');
      } catch (err) {
        await client.query('rollback');
        throw err;
      }
    }
    // A table the customer dropped since (by hand, or a restore that missed it): its migration runs again, so a
    // reconnect or a test repairs the schema instead of answering 200 over writes that will fail for seven days.
    for (const m of CUSTOMER_MIGRATIONS) {
      if (!applied.has(m.version) || !m.repeatable) continue;
      const missing = await client.query<{ t: string }>('select t from pg_catalog.unnest($1::text[]) as t where pg_catalog.to_regclass(t) is null limit $2', [
        m.tables,
        m.tables.length,
      ]);
      if (missing.rowCount === 0) continue;
      await client.query(m.sql);
    }
    // Every known migration is now recorded: found so, or applied above.
    return CUSTOMER_SCHEMA_VERSION;
  } finally {
    await client.query('select pg_catalog.pg_advisory_unlock($1)', [MIGRATION_LOCK]);
  }
}

/**
 * Which of this service's migrations `service.schema_migrations` records: the known versions are sent and those found
 * come back, so the answer is at most a row per known migration whatever the table holds (a view over generate_series
 * of millions of rows answered millions of rows when the table itself was read). Each version is looked for with a
 * limit of its own (a lateral join), so the search stops at its first match: as `exists`, Postgres chose to hash the
 * whole view first.
 */
async function appliedVersions(client: ClientBase): Promise<Set<number>> {
  const known = CUSTOMER_MIGRATIONS.map((m) => m.version);
  const found = await client.query<{ version: number }>(
    `select k.version from pg_catalog.unnest($1::integer[]) as k(version)
     cross join lateral (select 1 from service.schema_migrations s where s.version = k.version limit 1) as recorded
     limit $2`,
    [known, known.length],
  );
  return new Set(found.rows.map((r) => Number(r.version)).filter((v) => known.includes(v)));
}

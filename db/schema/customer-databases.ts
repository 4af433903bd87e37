import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn, timestampColumn } from './columns.js';

export const CUSTOMER_DB_STATES = ['connected', 'unreachable'] as const;
export type CustomerDbState = (typeof CUSTOMER_DB_STATES)[number];
export const CUSTOMER_DB_SSL_MODES = ['verify', 'no-verify'] as const;
/** What the last error was about: reaching the database, or one write it refused (set aside). */
export const CUSTOMER_DB_ERROR_KINDS = ['connection', 'data'] as const;

/**
 * An account's own Postgres (docs/api/contract.md, Database status; docs/api/decisions.md section 8): the URL sealed with the secret key, the
 * parts of it the status shows (never the password), and the writer's view of it.
 */
export const customerDatabases = sqliteTable('customer_databases', {
  accountId: text('account_id')
    .primaryKey()
    .references(() => accounts.id, { onDelete: 'cascade' }),
  /** A fresh id for each URL connected: the writer's pool of an older URL is closed when it changes. */
  connectionId: text('connection_id').notNull(),
  /** The whole URL, sealed (server/shared/secrets.ts) with context `customer-db:<accountId>`; never returned. */
  urlSealed: text('url_sealed').notNull(),
  host: text('host').notNull(),
  port: integer('port').notNull(),
  database: text('database').notNull(),
  user: text('user').notNull(),
  sslMode: text('ssl_mode', { enum: CUSTOMER_DB_SSL_MODES }).notNull(),
  state: text('state', { enum: CUSTOMER_DB_STATES }).$type<CustomerDbState>().notNull(),
  schemaVersion: integer('schema_version').notNull(),
  lastOkAt: timestampColumn('last_ok_at'),
  lastError: text('last_error'),
  lastErrorKind: text('last_error_kind', { enum: CUSTOMER_DB_ERROR_KINDS }),
  /** Connection failures in a row; they space the writer's attempts (server/customer-db/retry-schedule.ts). */
  failures: integer('failures').notNull().default(0),
  /** When the writer may try this database again. */
  nextAttemptAt: integer('next_attempt_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
  createdAt: createdAtColumn(),
});

export type CustomerDatabaseRow = typeof customerDatabases.$inferSelect;

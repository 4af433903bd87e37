import { pgTable, text } from 'drizzle-orm/pg-core';
import { CUSTOMER_DB_ERROR_KINDS, CUSTOMER_DB_SSL_MODES, CUSTOMER_DB_STATES, type CustomerDbState } from '../../schema/customer-databases.js';
import { accounts } from './accounts.js';
import { createdAtColumn, int64, timestampColumn } from './columns.js';

/** An account's own Postgres: the URL sealed, the parts the status shows, the writer's view (db/schema/customer-databases.ts). */
export const customerDatabases = pgTable('customer_databases', {
  accountId: text('account_id')
    .primaryKey()
    .references(() => accounts.id, { onDelete: 'cascade' }),
  /** A fresh id for each URL connected: the writer's pool of an older URL is closed when it changes. */
  connectionId: text('connection_id').notNull(),
  /** The whole URL, sealed with context `customer-db:<accountId>`; never returned. */
  urlSealed: text('url_sealed').notNull(),
  host: text('host').notNull(),
  port: int64('port').notNull(),
  database: text('database').notNull(),
  user: text('user').notNull(),
  sslMode: text('ssl_mode', { enum: CUSTOMER_DB_SSL_MODES }).notNull(),
  state: text('state', { enum: CUSTOMER_DB_STATES }).$type<CustomerDbState>().notNull(),
  schemaVersion: int64('schema_version').notNull(),
  lastOkAt: timestampColumn('last_ok_at'),
  lastError: text('last_error'),
  lastErrorKind: text('last_error_kind', { enum: CUSTOMER_DB_ERROR_KINDS }),
  /** Connection failures in a row; they space the writer's attempts. */
  failures: int64('failures').notNull().default(0),
  /** When the writer may try this database again. */
  nextAttemptAt: int64('next_attempt_at').notNull(),
  updatedAt: int64('updated_at').notNull(),
  createdAt: createdAtColumn(),
});

export type CustomerDatabaseRow = typeof customerDatabases.$inferSelect;

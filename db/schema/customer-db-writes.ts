import { sql } from 'drizzle-orm';
import { blob, index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';

export const CUSTOMER_DB_WRITE_KINDS = ['email', 'event', 'inbound'] as const;
export type CustomerDbWriteKind = (typeof CUSTOMER_DB_WRITE_KINDS)[number];

/**
 * The outbox of the customer-database writer: one row per write to a customer's `service` schema, inserted in the
 * same SQLite transaction as the send, the outcome or the received message it carries, and deleted once the customer
 * database has it. Ids are UUIDv7: a database's writes in id order are in the order they happened.
 */
export const customerDbWrites = sqliteTable(
  'customer_db_writes',
  {
    id: idColumn(),
    /** Whose database it goes to: the account's own, or its parent's (docs/api/contract.md: a sub-account uses its parent's). */
    databaseAccountId: text('database_account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    /** The account the mail belongs to. */
    accountId: text('account_id').notNull(),
    kind: text('kind', { enum: CUSTOMER_DB_WRITE_KINDS }).$type<CustomerDbWriteKind>().notNull(),
    /** The write's content as JSON, sealed with the secret key (context `customer-db-write:<id>`). */
    payloadSealed: text('payload_sealed').notNull(),
    /** A small received message's bytes, sealed apart from the JSON (server/shared/secrets.ts sealBytes, context `customer-db-write-raw:<id>`). */
    rawSealed: blob('raw_sealed', { mode: 'buffer' }),
    /** Tries the customer database refused for a data reason (a connection failure is not counted here). */
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: integer('next_attempt_at').notNull(),
    /** Set once refused for a data reason too often: kept out of the way, never blocking the writes behind it. */
    setAsideAt: timestampColumn('set_aside_at'),
    lastError: text('last_error'),
    /** A received message's spool file (db/inbound-spool.ts), for the inbound writes that read it; not a secret. */
    spoolId: text('spool_id'),
    createdAt: createdAtColumn(),
  },
  (t) => [
    // The writes still waiting for one database, in order: the writer's claim and the status's `pending` read here.
    index('customer_db_writes_pending_idx').on(t.databaseAccountId, t.id).where(sql`${t.setAsideAt} is null`),
    index('customer_db_writes_created_idx').on(t.createdAt),
    index('customer_db_writes_spool_idx').on(t.spoolId).where(sql`${t.spoolId} is not null`),
  ],
);

export type CustomerDbWriteRow = typeof customerDbWrites.$inferSelect;

import { sql } from 'drizzle-orm';
import { index, pgTable, text } from 'drizzle-orm/pg-core';
import { CUSTOMER_DB_WRITE_KINDS, type CustomerDbWriteKind } from '../../schema/customer-db-writes.js';
import { accounts } from './accounts.js';
import { bytea, createdAtColumn, idColumn, int64, timestampColumn } from './columns.js';

/** The outbox of the customer-database writer, in UUIDv7 order per database (db/schema/customer-db-writes.ts). */
export const customerDbWrites = pgTable(
  'customer_db_writes',
  {
    id: idColumn(),
    /** Whose database it goes to: the account's own, or its parent's. */
    databaseAccountId: text('database_account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    /** The account the mail belongs to. */
    accountId: text('account_id').notNull(),
    kind: text('kind', { enum: CUSTOMER_DB_WRITE_KINDS }).$type<CustomerDbWriteKind>().notNull(),
    /** The write's content as JSON, sealed with the secret key (context `customer-db-write:<id>`). */
    payloadSealed: text('payload_sealed').notNull(),
    /** A small received message's bytes, sealed apart from the JSON (context `customer-db-write-raw:<id>`). */
    rawSealed: bytea('raw_sealed'),
    /** Tries the customer database refused for a data reason (a connection failure is not counted here). */
    attempts: int64('attempts').notNull().default(0),
    nextAttemptAt: int64('next_attempt_at').notNull(),
    /** Set once refused for a data reason too often: kept out of the way, never blocking the writes behind it. */
    setAsideAt: timestampColumn('set_aside_at'),
    lastError: text('last_error'),
    /** A received message's spool file (db/inbound-spool.ts), for the inbound writes that read it; not a secret. */
    spoolId: text('spool_id'),
    createdAt: createdAtColumn(),
  },
  (t) => [
    index('customer_db_writes_pending_idx').on(t.databaseAccountId, t.id).where(sql`${t.setAsideAt} is null`),
    index('customer_db_writes_created_idx').on(t.createdAt),
    index('customer_db_writes_spool_idx').on(t.spoolId).where(sql`${t.spoolId} is not null`),
  ],
);

export type CustomerDbWriteRow = typeof customerDbWrites.$inferSelect;

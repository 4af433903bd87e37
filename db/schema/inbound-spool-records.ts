import { blob, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/**
 * On Postgres, the inbound spool (db/inbound-spool.ts): a received message too large to keep in its write's row, as
 * the spool file's sealed records, one row each, so any node's writer can read it and no node keeps state in DATA_DIR.
 * On SQLite the spool is files in DATA_DIR and this table stays empty.
 */
export const inboundSpoolRecords = sqliteTable(
  'inbound_spool_records',
  {
    /** The spooled message's id (the customer-database write's). */
    spoolId: text('spool_id').notNull(),
    /** The record's index, from 0. */
    seq: integer('seq').notNull(),
    /** The sealed record, as the spool file holds it (head and ciphertext). */
    record: blob('record', { mode: 'buffer' }).notNull(),
    createdAt: integer('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.spoolId, t.seq] })],
);

import { pgTable, primaryKey, text } from 'drizzle-orm/pg-core';
import { bytea, int64 } from './columns.js';

/** The inbound spool's sealed records, on Postgres (db/schema/inbound-spool-records.ts). */
export const inboundSpoolRecords = pgTable(
  'inbound_spool_records',
  {
    spoolId: text('spool_id').notNull(),
    seq: int64('seq').notNull(),
    record: bytea('record').notNull(),
    createdAt: int64('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.spoolId, t.seq] })],
);

import { boolean, json, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { bytea, int64, seqColumn } from './columns.js';

/** Mail for the operator (postmaster@, abuse@ MAIL_HOSTNAME), its first bytes sealed (db/schema/operator-messages.ts). */
export const operatorMessages = pgTable(
  'operator_messages',
  {
    /** The arrival order: the bound is one range delete below `max(seq) - OPERATOR_MAIL_LIMIT`. */
    seq: seqColumn(),
    /** UUIDv7, the address of the message in the dashboard. */
    id: text('id').notNull(),
    /** The operator addresses of the envelope it came to, lower-cased. */
    recipients: json('recipients').$type<string[]>().notNull(),
    /** The envelope sender (MAIL FROM); empty for a null sender. */
    mailFrom: text('mail_from').notNull(),
    /** The From header as sent (encoded words decoded), cut short; empty when it has none. */
    fromHeader: text('from_header').notNull(),
    /** The Subject header, decoded and cut short; empty when it has none. */
    subject: text('subject').notNull(),
    remoteAddress: text('remote_address').notNull(),
    helo: text('helo').notNull(),
    /** Bytes received. */
    size: int64('size').notNull(),
    /** Whether only the first OPERATOR_MESSAGE_BYTES of it are kept. */
    truncated: boolean('truncated').notNull(),
    /** The kept bytes, sealed (server/shared/secrets.ts sealBytes, context `operator-message:<id>`). */
    messageSealed: bytea('message_sealed').notNull(),
    receivedAt: int64('received_at').notNull(),
  },
  (t) => [uniqueIndex('operator_messages_id_idx').on(t.id)],
);

export type OperatorMessageRow = typeof operatorMessages.$inferSelect;

import { blob, integer, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';

/**
 * Mail for the operator: what arrives at `postmaster@` and `abuse@` MAIL_HOSTNAME (RFC 5321 4.5.1, RFC 2142), which is
 * no customer's mail. Its first bytes sealed with the secret key, the basics for a list beside them. Bounded
 * (server/core/operator-mail.ts keeps the newest OPERATOR_MAIL_LIMIT, each cut to OPERATOR_MESSAGE_BYTES).
 */
export const operatorMessages = sqliteTable(
  'operator_messages',
  {
    /** The arrival order (SQLite's rowid): the bound is one range delete below `max(seq) - OPERATOR_MAIL_LIMIT`. */
    seq: integer('seq').primaryKey(),
    /** UUIDv7, the address of the message in the dashboard. */
    id: text('id').notNull(),
    /** The operator addresses of the envelope it came to, lower-cased (`postmaster@<MAIL_HOSTNAME>`, `abuse@...`). */
    recipients: text('recipients', { mode: 'json' }).$type<string[]>().notNull(),
    /** The envelope sender (MAIL FROM); empty for a null sender. */
    mailFrom: text('mail_from').notNull(),
    /** The From header as sent (encoded words decoded), cut short; empty when it has none. */
    fromHeader: text('from_header').notNull(),
    /** The Subject header, decoded and cut short; empty when it has none. */
    subject: text('subject').notNull(),
    remoteAddress: text('remote_address').notNull(),
    helo: text('helo').notNull(),
    /** Bytes received. */
    size: integer('size').notNull(),
    /** Whether only the first OPERATOR_MESSAGE_BYTES of it are kept. */
    truncated: integer('truncated', { mode: 'boolean' }).notNull(),
    /** The kept bytes, sealed (server/shared/secrets.ts sealBytes, context `operator-message:<id>`). */
    messageSealed: blob('message_sealed', { mode: 'buffer' }).notNull(),
    receivedAt: integer('received_at').notNull(),
  },
  (t) => [uniqueIndex('operator_messages_id_idx').on(t.id)],
);

export type OperatorMessageRow = typeof operatorMessages.$inferSelect;

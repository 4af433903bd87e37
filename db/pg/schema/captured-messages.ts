import { pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { bytea, createdAtColumn, seqColumn } from './columns.js';
import { emails } from './emails.js';

/** The capture store (DELIVERY_MODE=capture), bounded and going with its email (db/schema/captured-messages.ts). */
export const capturedMessages = pgTable(
  'captured_messages',
  {
    /** The capture order: the bound is one range delete below `max(seq) - CAPTURE_LIMIT`. */
    seq: seqColumn(),
    emailId: text('email_id')
      .notNull()
      .references(() => emails.id, { onDelete: 'cascade' }),
    accountId: text('account_id').notNull(),
    /** Lower-cased, as GET /emails/{id}/message?recipient= looks it up. */
    recipient: text('recipient').notNull(),
    /** The RFC 5322 bytes, sealed (server/shared/secrets.ts sealBytes, context `captured:<emailId>:<recipient>`). */
    messageSealed: bytea('message_sealed').notNull(),
    /** When it was captured: its latest attempt. */
    createdAt: createdAtColumn(),
  },
  (t) => [uniqueIndex('captured_messages_recipient_idx').on(t.emailId, t.recipient)],
);

export type CapturedMessageRow = typeof capturedMessages.$inferSelect;

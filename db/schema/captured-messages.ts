import { blob, integer, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';
import { createdAtColumn } from './columns.js';
import { emails } from './emails.js';

/**
 * The capture store (DELIVERY_MODE=capture): each recipient's message as it would have gone out, signed, sealed with
 * the secret key. Bounded (server/core/capture-store.ts keeps the newest CAPTURE_LIMIT); goes with its email (a deleted
 * sub-account takes its captured mail with it).
 */
export const capturedMessages = sqliteTable(
  'captured_messages',
  {
    /**
     * The capture order (SQLite's rowid): the bound is one range delete below `max(seq) - CAPTURE_LIMIT`, with no count
     * and no scan, which a UUID key could not give.
     */
    seq: integer('seq').primaryKey(),
    emailId: text('email_id')
      .notNull()
      .references(() => emails.id, { onDelete: 'cascade' }),
    accountId: text('account_id').notNull(),
    /** Lower-cased (a send's recipients are distinct lower-cased), as GET /emails/{id}/message?recipient= looks it up. */
    recipient: text('recipient').notNull(),
    /** The RFC 5322 bytes, sealed (server/shared/secrets.ts sealBytes, context `captured:<emailId>:<recipient>`). */
    messageSealed: blob('message_sealed', { mode: 'buffer' }).notNull(),
    /** When it was captured: its latest attempt (a recipient is kept once; a later attempt replaces its copy). */
    createdAt: createdAtColumn(),
  },
  (t) => [uniqueIndex('captured_messages_recipient_idx').on(t.emailId, t.recipient)],
);

export type CapturedMessageRow = typeof capturedMessages.$inferSelect;

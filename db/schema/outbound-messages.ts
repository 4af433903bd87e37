import { blob, index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn } from './columns.js';
import { domainKeys } from './domain-keys.js';
import { emails } from './emails.js';

/** A message accepted for delivery: the rendered content, kept only until every recipient has an outcome. */
export const outboundMessages = sqliteTable(
  'outbound_messages',
  {
    /** The email's id. */
    id: text('id')
      .primaryKey()
      .references(() => emails.id, { onDelete: 'cascade' }),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    /** The from-domain's DKIM key, kept even if the domain is deleted while the message waits. */
    domainKeyId: text('domain_key_id')
      .notNull()
      .references(() => domainKeys.id, { onDelete: 'cascade' }),
    fromHeader: text('from_header').notNull(),
    fromAddress: text('from_address').notNull(),
    replyToHeader: text('reply_to_header'),
    messageId: text('message_id').notNull(),
    subject: text('subject').notNull(),
    html: text('html').notNull(),
    text: text('text').notNull(),
    /** The attachments' bytes (base64) until the message is delivered, as the rest of the content. */
    attachments: text('attachments', { mode: 'json' }).$type<OutboundAttachment[]>(),
    /**
     * A submitted message as the client sent it (CRLF lines, `Bcc` removed, `Message-ID` and `Date` added when
     * missing): sent as is with a DKIM-Signature prepended; `subject`, `html` and `text` are then not used to build it.
     */
    raw: blob('raw', { mode: 'buffer' }),
    createdAt: createdAtColumn(),
    /** Deferred recipients bounce with 4.4.7 after this. */
    expiresAt: integer('expires_at').notNull(),
  },
  // Pruning a kept domain key asks whether queued mail still needs it (and the foreign key's cascade looks here).
  (t) => [index('outbound_messages_domain_key_idx').on(t.domainKeyId)],
);

/** An attachment as the message carries it: `content` is standard base64; `contentId` makes it an inline part. */
export interface OutboundAttachment {
  filename: string;
  contentType: string;
  content: string;
  contentId: string | null;
}

export type OutboundMessageRow = typeof outboundMessages.$inferSelect;

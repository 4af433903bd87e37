import { index, json, pgTable, text } from 'drizzle-orm/pg-core';
import type { OutboundAttachment } from '../../schema/outbound-messages.js';
import { accounts } from './accounts.js';
import { bytea, createdAtColumn, int64 } from './columns.js';
import { domainKeys } from './domain-keys.js';
import { emails } from './emails.js';

/** A message accepted for delivery, kept until every recipient has an outcome (db/schema/outbound-messages.ts). */
export const outboundMessages = pgTable(
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
    attachments: json('attachments').$type<OutboundAttachment[]>(),
    /** A submitted message as the client sent it, sent as is with a DKIM-Signature prepended. */
    raw: bytea('raw'),
    createdAt: createdAtColumn(),
    /** Deferred recipients bounce with 4.4.7 after this. */
    expiresAt: int64('expires_at').notNull(),
  },
  (t) => [index('outbound_messages_domain_key_idx').on(t.domainKeyId)],
);

export type OutboundMessageRow = typeof outboundMessages.$inferSelect;

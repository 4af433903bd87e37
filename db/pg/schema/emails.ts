import { boolean, index, json, pgTable, text } from 'drizzle-orm/pg-core';
import { type AttachmentRecord, EMAIL_SOURCES, EMAIL_STATUSES } from '../../schema/emails.js';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, int64, timestampColumn } from './columns.js';

/** The send log: addresses, status and timestamps only (db/schema/emails.ts). */
export const emails = pgTable(
  'emails',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    fromAddress: text('from_address').notNull(),
    to: json('to').$type<string[]>().notNull(),
    subject: text('subject').notNull(),
    /** The template's name; `''` for a submitted message, which has none (NOT NULL as on SQLite, where it must stay so). */
    template: text('template').notNull(),
    source: text('source', { enum: EMAIL_SOURCES }).notNull().default('api'),
    /** The own template's version sent; null for a built-in. */
    templateVersion: int64('template_version'),
    /** Each attachment's filename, type, size and SHA-256: never the bytes. */
    attachments: json('attachments').$type<AttachmentRecord[]>(),
    status: text('status', { enum: EMAIL_STATUSES }).notNull(),
    error: text('error'),
    tags: json('tags').$type<Record<string, string>>(),
    sandbox: boolean('sandbox').notNull(),
    createdAt: createdAtColumn(),
    deliveredAt: timestampColumn('delivered_at'),
    bouncedAt: timestampColumn('bounced_at'),
    complainedAt: timestampColumn('complained_at'),
  },
  (t) => [index('emails_account_idx').on(t.accountId, t.id), index('emails_account_status_idx').on(t.accountId, t.status, t.createdAt)],
);

export type EmailRow = typeof emails.$inferSelect;

import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';

export const EMAIL_STATUSES = ['sent', 'failed', 'sandboxed'] as const;
export type EmailStatus = (typeof EMAIL_STATUSES)[number];

/** How a send came in: `POST /emails`, or SMTP submission (docs/api/decisions.md section 10). */
export const EMAIL_SOURCES = ['api', 'smtp'] as const;
export type EmailSource = (typeof EMAIL_SOURCES)[number];

/** The send log: addresses, status and timestamps only; content lives in the outbound queue until delivered. */
export const emails = sqliteTable(
  'emails',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    fromAddress: text('from_address').notNull(),
    to: text('to', { mode: 'json' }).$type<string[]>().notNull(),
    subject: text('subject').notNull(),
    /**
     * The template's name; `''` for a submitted message, which has none (the API shows null). Kept NOT NULL: making it
     * nullable would rebuild the largest table at upgrade, and SQLite cannot drop it inside the migration's
     * transaction without its foreign keys cascading.
     */
    template: text('template').notNull(),
    source: text('source', { enum: EMAIL_SOURCES }).notNull().default('api'),
    /** The own template's version sent (docs/api/decisions.md section 9); null for a built-in. */
    templateVersion: integer('template_version'),
    /** Each attachment's filename, type, size and SHA-256: never the bytes (docs/api/decisions.md section 9). */
    attachments: text('attachments', { mode: 'json' }).$type<AttachmentRecord[]>(),
    status: text('status', { enum: EMAIL_STATUSES }).notNull(),
    error: text('error'),
    tags: text('tags', { mode: 'json' }).$type<Record<string, string>>(),
    sandbox: integer('sandbox', { mode: 'boolean' }).notNull(),
    createdAt: createdAtColumn(),
    deliveredAt: timestampColumn('delivered_at'),
    bouncedAt: timestampColumn('bounced_at'),
    complainedAt: timestampColumn('complained_at'),
  },
  (t) => [index('emails_account_idx').on(t.accountId, t.id), index('emails_account_status_idx').on(t.accountId, t.status, t.createdAt)],
);

/** What the log keeps of an attachment. */
export interface AttachmentRecord {
  filename: string;
  contentType: string;
  size: number;
  sha256: string;
  contentId: string | null;
}

export type EmailRow = typeof emails.$inferSelect;

import { integer, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn } from './columns.js';

export const TEMPLATE_KINDS = ['template', 'layout'] as const;
export type TemplateKind = (typeof TEMPLATE_KINDS)[number];

/** A variable a template declares (docs/api/decisions.md section 9): required or not, plain text or an http(s) link. */
export interface DeclaredVariable {
  required: boolean;
  kind: 'text' | 'url';
}

/**
 * An account's own template or layout (docs/api/decisions.md section 9): its name and which version is current. The
 * source of each version is in template_versions.
 */
export const templates = sqliteTable(
  'templates',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    kind: text('kind', { enum: TEMPLATE_KINDS }).notNull(),
    /** The current version: the highest one made. */
    version: integer('version').notNull(),
    createdAt: createdAtColumn(),
    updatedAt: integer('updated_at').notNull(),
  },
  (t) => [uniqueIndex('templates_account_name_idx').on(t.accountId, t.name)],
);

export type TemplateRow = typeof templates.$inferSelect;

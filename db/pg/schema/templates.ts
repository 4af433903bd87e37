import { pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { TEMPLATE_KINDS } from '../../schema/templates.js';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, int64 } from './columns.js';

/** An account's own template or layout: its name and which version is current (db/schema/templates.ts). */
export const templates = pgTable(
  'templates',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    kind: text('kind', { enum: TEMPLATE_KINDS }).notNull(),
    /** The current version: the highest one made. */
    version: int64('version').notNull(),
    createdAt: createdAtColumn(),
    updatedAt: int64('updated_at').notNull(),
  },
  (t) => [uniqueIndex('templates_account_name_idx').on(t.accountId, t.name)],
);

export type TemplateRow = typeof templates.$inferSelect;

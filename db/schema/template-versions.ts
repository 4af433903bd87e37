import { integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { createdAtColumn } from './columns.js';
import { type DeclaredVariable, templates } from './templates.js';

/** Each version's source as saved; the newest 50 of a template are kept. */
export const templateVersions = sqliteTable(
  'template_versions',
  {
    templateId: text('template_id')
      .notNull()
      .references(() => templates.id, { onDelete: 'cascade' }),
    version: integer('version').notNull(),
    /** Null for a layout, which has no subject of its own. */
    subject: text('subject'),
    html: text('html'),
    text: text('text'),
    /** The name of one of the account's layouts, or null. */
    layout: text('layout'),
    variables: text('variables', { mode: 'json' }).$type<Record<string, DeclaredVariable>>().notNull(),
    createdAt: createdAtColumn(),
  },
  (t) => [primaryKey({ columns: [t.templateId, t.version] })],
);

export type TemplateVersionRow = typeof templateVersions.$inferSelect;

import { json, pgTable, primaryKey, text } from 'drizzle-orm/pg-core';
import type { DeclaredVariable } from '../../schema/templates.js';
import { createdAtColumn, int64 } from './columns.js';
import { templates } from './templates.js';

/** Each version's source as saved; the newest 50 of a template are kept (db/schema/template-versions.ts). */
export const templateVersions = pgTable(
  'template_versions',
  {
    templateId: text('template_id')
      .notNull()
      .references(() => templates.id, { onDelete: 'cascade' }),
    version: int64('version').notNull(),
    /** Null for a layout, which has no subject of its own. */
    subject: text('subject'),
    html: text('html'),
    text: text('text'),
    /** The name of one of the account's layouts, or null. */
    layout: text('layout'),
    variables: json('variables').$type<Record<string, DeclaredVariable>>().notNull(),
    createdAt: createdAtColumn(),
  },
  (t) => [primaryKey({ columns: [t.templateId, t.version] })],
);

export type TemplateVersionRow = typeof templateVersions.$inferSelect;

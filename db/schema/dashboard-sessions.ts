import { blob, index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { createdAtColumn } from './columns.js';

/**
 * Signed-in dashboard sessions (dashboard/session.ts). The cookie holds a random token; only its SHA-256 is kept, so
 * a copy of the database signs nobody in. Each session carries its own CSRF token and at most one flash message
 * (shown once, on the page after a form's redirect).
 */
export const dashboardSessions = sqliteTable(
  'dashboard_sessions',
  {
    /** SHA-256 (hex) of the cookie's token. */
    tokenHash: text('token_hash').primaryKey(),
    csrfToken: text('csrf_token').notNull(),
    createdAt: createdAtColumn(),
    lastSeenAt: integer('last_seen_at').notNull(),
    /** JSON of the Flash shown on the next page, then cleared. */
    flash: text('flash'),
    /**
     * On Postgres, a flash's secret (a new API key) sealed with the secret key, so the page that shows it may be served
     * by any node; with its end (`flash_secret_until`, a minute on), and removed as it is read. On SQLite it stays in
     * the process's memory and these are null (dashboard/session.ts).
     */
    flashSecretSealed: blob('flash_secret_sealed', { mode: 'buffer' }),
    flashSecretUntil: integer('flash_secret_until'),
  },
  (t) => [index('dashboard_sessions_last_seen_idx').on(t.lastSeenAt)],
);

export type DashboardSessionRow = typeof dashboardSessions.$inferSelect;

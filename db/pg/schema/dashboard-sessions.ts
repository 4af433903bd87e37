import { index, pgTable, text } from 'drizzle-orm/pg-core';
import { bytea, createdAtColumn, int64 } from './columns.js';

/** Signed-in dashboard sessions, kept by the SHA-256 of the cookie's token (db/schema/dashboard-sessions.ts). */
export const dashboardSessions = pgTable(
  'dashboard_sessions',
  {
    /** SHA-256 (hex) of the cookie's token. */
    tokenHash: text('token_hash').primaryKey(),
    csrfToken: text('csrf_token').notNull(),
    createdAt: createdAtColumn(),
    lastSeenAt: int64('last_seen_at').notNull(),
    /** JSON of the Flash shown on the next page, then cleared (text, as on SQLite: the code parses it). */
    flash: text('flash'),
    /** A flash's secret sealed with the secret key, and its end (db/schema/dashboard-sessions.ts). */
    flashSecretSealed: bytea('flash_secret_sealed'),
    flashSecretUntil: int64('flash_secret_until'),
  },
  (t) => [index('dashboard_sessions_last_seen_idx').on(t.lastSeenAt)],
);

export type DashboardSessionRow = typeof dashboardSessions.$inferSelect;

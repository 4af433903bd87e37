import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';

export const WEBHOOK_EVENT_TYPES = ['email.delivered', 'email.bounced', 'email.deferred', 'email.complained', 'ping'] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** An https endpoint of an account that receives its delivery outcomes as signed posts. */
export const webhookEndpoints = sqliteTable(
  'webhook_endpoints',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    url: text('url').notNull(),
    /** The subscribed event types, a JSON array without repeats. */
    events: text('events', { mode: 'json' }).$type<WebhookEventType[]>().notNull(),
    /** The signing secret (`whsec_...`), sealed with the server's secret key; never returned after creation. */
    secretSealed: text('secret_sealed').notNull(),
    active: integer('active', { mode: 'boolean' }).notNull().default(true),
    /** Consecutive failed attempts (pings never count); 10 switch the endpoint off. */
    failureCount: integer('failure_count').notNull().default(0),
    disabledAt: timestampColumn('disabled_at'),
    /** The last test ping, for the ten-second cooldown. */
    lastPingAt: timestampColumn('last_ping_at'),
    createdAt: createdAtColumn(),
  },
  (t) => [index('webhook_endpoints_account_idx').on(t.accountId, t.id)],
);

export type WebhookEndpointRow = typeof webhookEndpoints.$inferSelect;

import { boolean, index, json, pgTable, text } from 'drizzle-orm/pg-core';
import type { WebhookEventType } from '../../schema/webhook-endpoints.js';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, int64, timestampColumn } from './columns.js';

/** An https endpoint of an account that receives its delivery outcomes as signed posts (db/schema/webhook-endpoints.ts). */
export const webhookEndpoints = pgTable(
  'webhook_endpoints',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    url: text('url').notNull(),
    /** The subscribed event types, a JSON array without repeats. */
    events: json('events').$type<WebhookEventType[]>().notNull(),
    /** The signing secret (`whsec_...`), sealed with the server's secret key; never returned after creation. */
    secretSealed: text('secret_sealed').notNull(),
    active: boolean('active').notNull().default(true),
    /** Consecutive failed attempts (pings never count); 10 switch the endpoint off. */
    failureCount: int64('failure_count').notNull().default(0),
    disabledAt: timestampColumn('disabled_at'),
    /** The last test ping, for the ten-second cooldown. */
    lastPingAt: timestampColumn('last_ping_at'),
    createdAt: createdAtColumn(),
  },
  (t) => [index('webhook_endpoints_account_idx').on(t.accountId, t.id)],
);

export type WebhookEndpointRow = typeof webhookEndpoints.$inferSelect;

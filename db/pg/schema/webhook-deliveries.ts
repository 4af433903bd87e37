import { sql } from 'drizzle-orm';
import { index, pgTable, text } from 'drizzle-orm/pg-core';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../schema/webhook-endpoints.js';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, int64, timestampColumn } from './columns.js';
import { webhookEndpoints } from './webhook-endpoints.js';

/** One event to post to one endpoint: a queue row and its history, in UUIDv7 order (db/schema/webhook-deliveries.ts). */
export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: idColumn(),
    endpointId: text('endpoint_id')
      .notNull()
      .references(() => webhookEndpoints.id, { onDelete: 'cascade' }),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    eventType: text('event_type', { enum: WEBHOOK_EVENT_TYPES }).$type<WebhookEventType>().notNull(),
    /** The post's `data` object, as JSON text (text, as on SQLite: posted as stored). */
    data: text('data').notNull(),
    attempts: int64('attempts').notNull().default(0),
    lastStatus: int64('last_status'),
    lastError: text('last_error'),
    deliveredAt: timestampColumn('delivered_at'),
    /** When the next attempt is due; null once delivered or final. */
    nextAttemptAt: timestampColumn('next_attempt_at'),
    lockedBy: text('locked_by'),
    lockedUntil: timestampColumn('locked_until'),
    createdAt: createdAtColumn(),
  },
  (t) => [
    index('webhook_deliveries_endpoint_idx').on(t.endpointId, t.id),
    index('webhook_deliveries_due_idx').on(t.nextAttemptAt, t.id),
    index('webhook_deliveries_pending_idx').on(t.endpointId, t.id).where(sql`${t.nextAttemptAt} is not null`),
    index('webhook_deliveries_leased_idx').on(t.endpointId).where(sql`${t.lockedBy} is not null`),
  ],
);

export type WebhookDeliveryRow = typeof webhookDeliveries.$inferSelect;

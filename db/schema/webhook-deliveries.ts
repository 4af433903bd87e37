import { sql } from 'drizzle-orm';
import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';
import { type WebhookEventType, WEBHOOK_EVENT_TYPES, webhookEndpoints } from './webhook-endpoints.js';

/**
 * One event to post to one endpoint: a queue row (claimed with a lease, attempted, rescheduled from the retry table)
 * and its history. Ids are UUIDv7, so an endpoint's deliveries in id order are in event order.
 */
export const webhookDeliveries = sqliteTable(
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
    /** The post's `data` object, as JSON text; the post is `{ id, type, createdAt, data }`. */
    data: text('data').notNull(),
    attempts: integer('attempts').notNull().default(0),
    lastStatus: integer('last_status'),
    lastError: text('last_error'),
    deliveredAt: timestampColumn('delivered_at'),
    /** When the next attempt is due; null once delivered or final (6 attempts, or a ping after its one). */
    nextAttemptAt: timestampColumn('next_attempt_at'),
    lockedBy: text('locked_by'),
    lockedUntil: timestampColumn('locked_until'),
    createdAt: createdAtColumn(),
  },
  (t) => [
    index('webhook_deliveries_endpoint_idx').on(t.endpointId, t.id),
    index('webhook_deliveries_due_idx').on(t.nextAttemptAt, t.id),
    // An endpoint's pending deliveries in event order, without its delivered history: the claim reads each active
    // endpoint's earliest due one from here, so a switched-off endpoint's backlog costs the claim nothing.
    index('webhook_deliveries_pending_idx').on(t.endpointId, t.id).where(sql`${t.nextAttemptAt} is not null`),
    // The deliveries in flight (leased), by endpoint: an endpoint with any is busy, whichever of its deliveries it is
    // (server/webhooks/webhook-queue.ts). Only the leased rows, so it stays as small as the posts in flight.
    index('webhook_deliveries_leased_idx').on(t.endpointId).where(sql`${t.lockedBy} is not null`),
  ],
);

export type WebhookDeliveryRow = typeof webhookDeliveries.$inferSelect;

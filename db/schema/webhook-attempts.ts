import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { webhookDeliveries } from './webhook-deliveries.js';

/**
 * Every attempt of a webhook delivery (a ping's one included): when, the receiver's status or the error, and whether it
 * counted as delivered. Written in the transaction that records the attempt on its delivery; goes with the delivery.
 * The delivery row keeps the last answer (the API's `lastStatus`, `lastError`); this is its history, for the dashboard.
 */
export const webhookAttempts = sqliteTable(
  'webhook_attempts',
  {
    seq: integer('seq').primaryKey(),
    deliveryId: text('delivery_id')
      .notNull()
      .references(() => webhookDeliveries.id, { onDelete: 'cascade' }),
    /** 1 for the first attempt. */
    attempt: integer('attempt').notNull(),
    attemptedAt: integer('attempted_at').notNull(),
    status: integer('status'),
    error: text('error'),
    delivered: integer('delivered', { mode: 'boolean' }).notNull(),
  },
  (t) => [index('webhook_attempts_delivery_idx').on(t.deliveryId, t.attempt)],
);

export type WebhookAttemptRow = typeof webhookAttempts.$inferSelect;

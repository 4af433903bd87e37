import { boolean, index, pgTable, text } from 'drizzle-orm/pg-core';
import { int64, seqColumn } from './columns.js';
import { webhookDeliveries } from './webhook-deliveries.js';

/** Every attempt of a webhook delivery, its history for the dashboard (db/schema/webhook-attempts.ts). */
export const webhookAttempts = pgTable(
  'webhook_attempts',
  {
    seq: seqColumn(),
    deliveryId: text('delivery_id')
      .notNull()
      .references(() => webhookDeliveries.id, { onDelete: 'cascade' }),
    /** 1 for the first attempt. */
    attempt: int64('attempt').notNull(),
    attemptedAt: int64('attempted_at').notNull(),
    status: int64('status'),
    error: text('error'),
    delivered: boolean('delivered').notNull(),
  },
  (t) => [index('webhook_attempts_delivery_idx').on(t.deliveryId, t.attempt)],
);

export type WebhookAttemptRow = typeof webhookAttempts.$inferSelect;

import { desc, eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { webhookEndpoints } from '../../db/schema/index.js';
import { ApiError } from '../shared/errors.js';
import { reenableWebhookEndpoint } from './webhook-deliveries.js';
import { endpointView, type WebhookEndpointView } from './webhooks.js';

/** The operator's webhook commands (docs/api/decisions.md section 1's CLI): no request context, no secret ever shown. */

/** Every endpoint of one account, newest first, as the API shows them. */
export function listAccountWebhooks(db: Db, accountId: string): WebhookEndpointView[] {
  return db.select().from(webhookEndpoints).where(eq(webhookEndpoints.accountId, accountId)).orderBy(desc(webhookEndpoints.id)).all().map(endpointView);
}

/**
 * Switches an endpoint back on without a ping, as a successful ping does (active, disabledAt null, failureCount 0,
 * its waiting deliveries due now so the dispatcher's next run sends them in event order). On an endpoint that is
 * already on it only resets the failure count.
 */
export function enableWebhook(db: Db, id: string, now: number): WebhookEndpointView {
  const row = db.transaction(() => {
    reenableWebhookEndpoint(db, id, now);
    return db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id)).get();
  });
  if (!row) throw new ApiError('webhook_not_found', `No webhook endpoint ${id}.`);
  return endpointView(row);
}

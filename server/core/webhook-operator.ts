import { desc, eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { webhookEndpoints } from '../../db/schema/index.js';
import { ApiError } from '../shared/errors.js';
import { reenableWebhookEndpoint } from './webhook-deliveries.js';
import { endpointView, type WebhookEndpointView } from './webhooks.js';
import { one } from '../../db/sql.js';

/** The operator's webhook commands (docs/api/decisions.md section 1's CLI): no request context, no secret ever shown. */

/** Every endpoint of one account, newest first, as the API shows them. */
export async function listAccountWebhooks(db: Db, accountId: string): Promise<WebhookEndpointView[]> {
  return (await db.select().from(webhookEndpoints).where(eq(webhookEndpoints.accountId, accountId)).orderBy(desc(webhookEndpoints.id))).map(endpointView);
}

/**
 * Switches an endpoint back on without a ping, as a successful ping does (active, disabledAt null, failureCount 0,
 * its waiting deliveries due now so the dispatcher's next run sends them in event order). On an endpoint that is
 * already on it only resets the failure count.
 */
export async function enableWebhook(db: Db, id: string, now: number): Promise<WebhookEndpointView> {
  const row = await db.transaction(async () => {
    await reenableWebhookEndpoint(db, id, now);
    return await one(db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id)));
  });
  if (!row) throw new ApiError('webhook_not_found', `No webhook endpoint ${id}.`);
  return endpointView(row);
}

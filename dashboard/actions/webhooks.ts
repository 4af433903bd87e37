import { WEBHOOK_EVENT_TYPES, type WebhookDeliveryRow } from '../../db/schema/index.js';
import type { AccountRow } from '../../db/schema/index.js';
import { EMAIL_EVENT_TYPES, type EmailEventType } from '../../server/core/events.js';
import { enableWebhook } from '../../server/core/webhook-operator.js';
import { replayWebhook } from '../../server/core/webhook-replay.js';
import { createWebhook, createWebhookInput, deleteWebhook } from '../../server/core/webhooks.js';
import { testWebhook } from '../../server/webhooks/test-webhook.js';
import { parseInput } from '../../server/api/http/validate.js';
import type { Deps } from '../../server/core/deps.js';
import { actForAccount, operatorContext } from '../on-behalf.js';
import type { EndpointSummary } from '../queries/webhooks.js';
import type { Outcome } from '../render.js';
import { endpointPath } from '../views/webhooks.js';

/**
 * The webhook actions of the dashboard, each the function the API or the CLI calls: the test ping of
 * POST /webhooks/{id}/test, the create of POST /webhooks, the delete of DELETE /webhooks/{id}, the replay of
 * POST /webhooks/{id}/replay, and the CLI's `webhooks enable`. Each answers
 * the outcome to show; a refusal of the domain function (an ApiError) is left to formAction, which flashes it.
 */

/** The event types the form's checkboxes name (`event.<type>`), in the order of WEBHOOK_EVENT_TYPES. */
function checkedEvents(form: Record<string, string>): string[] {
  return WEBHOOK_EVENT_TYPES.filter((t) => form[`event.${t}`] !== undefined);
}

/**
 * POST /webhooks for the account: the API's body rules (createWebhookInput: 422 invalid_request), then createWebhook's
 * own (https, no credentials, a public host unless ALLOW_PRIVATE_TARGETS: 422 invalid_url; 20 endpoints; a server
 * that can keep secrets). The secret is flashed once, as a new key's is, on the new endpoint's page.
 */
export async function createEndpoint(
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'resolver' | 'secretKey'>,
  account: AccountRow,
  form: Record<string, string>,
): Promise<Outcome> {
  const input = parseInput(createWebhookInput, { url: form.url ?? '', events: checkedEvents(form) }, 'form');
  const endpoint = await createWebhook({ deps, ctx: operatorContext(account), input });
  return {
    kind: 'ok',
    message: `Endpoint ${endpoint.url} added for ${account.name}. Copy its signing secret now: it is shown only this once.`,
    secret: endpoint.secret,
    to: endpointPath(endpoint.id),
  };
}

/** DELETE /webhooks/{id}: nothing more is posted to it, and every delivery queued or kept for it goes. */
export async function deleteEndpoint(deps: Pick<Deps, 'clock' | 'commits' | 'db'>, endpoint: EndpointSummary): Promise<Outcome> {
  await deleteWebhook({ deps, ctx: await actForAccount(deps.db, endpoint.accountId), id: endpoint.view.id });
  return { kind: 'ok', message: `Endpoint ${endpoint.view.url} deleted from ${endpoint.accountName}, with its deliveries.` };
}

/** POST /webhooks/{id}/test for the endpoint's account: a ping now, its answer awaited (a success switches it on). */
export async function sendTestPing(
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>,
  endpoint: EndpointSummary,
): Promise<Outcome> {
  const result = await testWebhook({ deps, ctx: await actForAccount(deps.db, endpoint.accountId), id: endpoint.view.id });
  if (!result.delivered) return { kind: 'error', message: `The test ping failed: ${result.error ?? 'no answer'}.` };
  const back = endpoint.view.active ? '' : ' The endpoint is switched back on.';
  return { kind: 'ok', message: `The test ping was delivered: the receiver answered ${result.status}.${back}` };
}

/**
 * The CLI's `webhooks enable`: on, no failures, its waiting deliveries due now. Unlike the CLI (another process),
 * the dashboard runs beside the dispatcher, which the re-enable's mark (db/queue-wake.ts) wakes at once, as a
 * successful ping's does.
 */
export async function reenableEndpoint(deps: Pick<Deps, 'clock' | 'db' | 'logger'>, endpoint: EndpointSummary): Promise<Outcome> {
  const wasOff = !endpoint.view.active;
  await enableWebhook(deps.db, endpoint.view.id, deps.clock.now());
  if (!wasOff) return { kind: 'ok', message: 'The endpoint was already on; its failure count is reset.' };
  deps.logger.info('webhook.endpoint_reenabled', { endpointId: endpoint.view.id, accountId: endpoint.accountId, by: 'operator' });
  return { kind: 'ok', message: 'The endpoint is switched back on; its waiting deliveries go out now.' };
}

function isEmailEventType(t: string): t is EmailEventType {
  return (EMAIL_EVENT_TYPES as readonly string[]).includes(t);
}

/**
 * Replays the one outcome a delivery carried, through the API's replay: the window is the outcome's millisecond, the
 * type its event type, narrowed to its email and recipient. The replay builds the post afresh from the recorded
 * outcome (a new delivery id, due now), exactly as POST /webhooks/{id}/replay does, under the same cap on what an
 * endpoint may have pending (its `limit_reached` refusal is flashed).
 */
export async function replayDelivery(
  deps: Pick<Deps, 'clock' | 'commits' | 'db' | 'logger'>,
  endpoint: EndpointSummary,
  row: WebhookDeliveryRow,
): Promise<Outcome> {
  if (!isEmailEventType(row.eventType)) return { kind: 'error', message: 'A test ping is never replayed; send a new test ping instead.' };
  const data = JSON.parse(row.data) as { messageId?: unknown; recipient?: unknown; occurredAt?: unknown };
  const since = typeof data.occurredAt === 'string' ? Date.parse(data.occurredAt) : Number.NaN;
  if (typeof data.messageId !== 'string' || typeof data.recipient !== 'string' || Number.isNaN(since)) {
    return { kind: 'error', message: 'This delivery does not name the outcome it carried, so it cannot be replayed.' };
  }
  const { queued } = await replayWebhook({
    deps,
    ctx: await actForAccount(deps.db, endpoint.accountId),
    endpointId: endpoint.view.id,
    input: { since, until: since + 1, events: [row.eventType] },
    only: { emailId: data.messageId, recipient: data.recipient },
  });
  if (queued === 0) return { kind: 'error', message: 'Nothing was replayed: the outcome is no longer recorded (its email was deleted).' };
  const waits = endpoint.view.active ? 'it goes out on the dispatcher’s next run' : 'it waits until the endpoint is switched back on';
  return { kind: 'ok', message: `Replay queued ${queued === 1 ? 'a new delivery' : `${queued} new deliveries`} of this ${row.eventType} event; ${waits}.` };
}

import { and, asc, eq, gte, inArray, lt, sql } from 'drizzle-orm';
import { z } from 'zod';
import { definePrepared } from '../../db/prepared.js';
import { emailEvents, emails, webhookDeliveries, webhookEndpoints } from '../../db/schema/index.js';
import type { Deps } from '../deps.js';
import { ApiError } from '../errors.js';
import { newId } from '../ids.js';
import { outcomeEventData } from '../webhooks/fanout.js';
import type { RequestContext } from './context.js';
import { type EmailEventType, EMAIL_EVENT_TYPES, EVENT_TYPE_OF_STATUS, emailEventType, isoDateTime, statusOfEventType } from './events.js';

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  insert: db
    .insert(webhookDeliveries)
    .values({ id: p('id'), endpointId: p('endpointId'), accountId: p('accountId'), eventType: p('eventType'), data: p('data'), nextAttemptAt: p('now'), createdAt: p('now') })
    .prepare(),
}));

/** One replay queues at most this many deliveries; a window holding more is refused whole (never cut silently). */
export const MAX_REPLAY_EVENTS = 10_000;

/** The body of POST /webhooks/{id}/replay; `events` repeats are dropped. */
export const replayInput = z.strictObject({
  since: isoDateTime,
  until: isoDateTime.optional(),
  events: z
    .array(emailEventType, { error: 'must be an array of event types' })
    .min(1, 'must name at least one event type')
    .transform((types) => [...new Set(types)])
    .optional(),
});

export type ReplayInput = z.output<typeof replayInput>;

/**
 * Narrows a replay to one recipient's outcomes of one email: the dashboard's "replay this delivery" replays exactly
 * the outcome a delivery carried (its time as the window, its type as `events`). The API's body has no such field.
 */
export interface ReplayMatch {
  emailId: string;
  recipient: string;
}

/**
 * Queues fresh deliveries to one endpoint of the acting account for the account's recorded outcomes that occurred in
 * `[since, until)` (until defaults to now), oldest first, each with a new UUIDv7 id and due now, its `data` built like
 * the fan-out's. `events` defaults to the email event types the endpoint subscribes to. A window holding more than
 * MAX_REPLAY_EVENTS outcomes is refused with `422 invalid_request` and nothing is queued. A switched-off endpoint's
 * replayed deliveries wait, like the rest of its queue, until it is switched back on. `only` narrows the window to one
 * email's recipient (see ReplayMatch).
 */
export function replayWebhook({
  deps,
  ctx,
  endpointId,
  input,
  only,
}: {
  deps: Pick<Deps, 'db' | 'clock' | 'logger' | 'onWebhookQueued'>;
  ctx: RequestContext;
  endpointId: string;
  input: ReplayInput;
  only?: ReplayMatch;
}): { queued: number } {
  const now = deps.clock.now();
  const until = input.until ?? now;
  if (until <= input.since) throw new ApiError('invalid_request', 'until: must be later than since');

  const queued = deps.db.transaction((tx) => {
    const endpoint = tx
      .select({ id: webhookEndpoints.id, events: webhookEndpoints.events })
      .from(webhookEndpoints)
      .where(and(eq(webhookEndpoints.id, endpointId), eq(webhookEndpoints.accountId, ctx.account.id)))
      .get();
    if (!endpoint) throw new ApiError('webhook_not_found', 'No webhook endpoint with that id on this account.');
    const types: EmailEventType[] = input.events ?? EMAIL_EVENT_TYPES.filter((t) => endpoint.events.includes(t));
    if (types.length === 0) return 0;

    const inWindow = and(
      eq(emailEvents.accountId, ctx.account.id),
      inArray(emailEvents.status, types.map(statusOfEventType)),
      gte(emailEvents.occurredAt, input.since),
      lt(emailEvents.occurredAt, until),
      only ? eq(emailEvents.emailId, only.emailId) : undefined,
      only ? eq(emailEvents.recipient, only.recipient) : undefined,
    );
    const count = tx
      .select({ n: sql<number>`count(*)` })
      .from(emailEvents)
      .where(inWindow)
      .get()?.n ?? 0;
    if (count > MAX_REPLAY_EVENTS) {
      throw new ApiError(
        'invalid_request',
        `since: the window holds ${count} events, more than the ${MAX_REPLAY_EVENTS} one replay may queue; narrow it (since/until) and replay it in parts.`,
      );
    }
    const rows = tx
      .select({ event: emailEvents, from: emails.fromAddress, tags: emails.tags })
      .from(emailEvents)
      .innerJoin(emails, eq(emails.id, emailEvents.emailId))
      .where(inWindow)
      .orderBy(asc(emailEvents.id))
      .all();
    // One compiled statement for up to 10,000 rows: the transaction holds the (synchronous) database briefly.
    const insert = statements(deps.db).insert;
    for (const { event: e, from, tags } of rows) {
      const data = outcomeEventData({ emailId: e.emailId, recipient: e.recipient, status: e.status, dsn: e.dsn, detail: e.detail, occurredAt: e.occurredAt, from, tags });
      insert.run({ id: newId(now), endpointId: endpoint.id, accountId: ctx.account.id, eventType: EVENT_TYPE_OF_STATUS[e.status], data: JSON.stringify(data), now });
    }
    return rows.length;
  });

  deps.logger.info('webhook.replay_queued', { accountId: ctx.account.id, endpointId, queued, since: input.since, until });
  if (queued > 0) deps.onWebhookQueued();
  return { queued };
}

import { eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { type WebhookEventType, emails, webhookDeliveries, webhookEndpoints } from '../../db/schema/index.js';
import { newId } from '../shared/ids.js';
import { markQueued } from '../../db/queue-wake.js';
import { one } from '../../db/sql.js';

/** The webhook event type of each recorded outcome (docs/api/contract.md, Events). */
export const OUTCOME_EVENT_TYPES = {
  delivered: 'email.delivered',
  bounced: 'email.bounced',
  deferred: 'email.deferred',
  complained: 'email.complained',
} as const satisfies Record<string, WebhookEventType>;

export type OutcomeStatus = keyof typeof OUTCOME_EVENT_TYPES;

/** An endpoint as the fan-out reads it: its id and the event types it is subscribed to. */
export interface WebhookEndpointEvents {
  id: string;
  events: readonly string[];
}

/** The `data` of an email event's post (docs/api/contract.md, Events; docs/api/decisions.md section 7: `tags` when the send had tags). */
export interface OutcomeEventData {
  /** The email's id, as `POST /emails` answered it. */
  messageId: string;
  recipient: string;
  status: OutcomeStatus;
  dsn: string;
  detail: string;
  occurredAt: string;
  from: string;
  tags?: Record<string, string>;
}

/** Builds the `data` of an email event; the fan-out and the replay both use it, so a replayed post is the same. */
export function outcomeEventData(e: {
  emailId: string;
  recipient: string;
  status: OutcomeStatus;
  dsn: string;
  detail: string;
  occurredAt: number;
  from: string;
  tags: Record<string, string> | null;
}): OutcomeEventData {
  const data: OutcomeEventData = {
    messageId: e.emailId,
    recipient: e.recipient,
    status: e.status,
    dsn: e.dsn,
    detail: e.detail,
    occurredAt: new Date(e.occurredAt).toISOString(),
    from: e.from,
  };
  if (e.tags && Object.keys(e.tags).length > 0) data.tags = e.tags;
  return data;
}

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  endpoints: db
    .select({ id: webhookEndpoints.id, events: webhookEndpoints.events })
    .from(webhookEndpoints)
    .where(eq(webhookEndpoints.accountId, p('accountId')))
    .orderBy(webhookEndpoints.id)
    .prepare(),
  email: db
    .select({ fromAddress: emails.fromAddress, tags: emails.tags })
    .from(emails)
    .where(eq(emails.id, p('id')))
    .prepare(),
  insert: db
    .insert(webhookDeliveries)
    .values({
      id: p('id'),
      endpointId: p('endpointId'),
      accountId: p('accountId'),
      eventType: p('eventType'),
      data: p('data'),
      nextAttemptAt: p('now'),
      createdAt: p('now'),
    })
    .prepare(),
}));

/**
 * Writes one webhook delivery per endpoint of the account subscribed to the outcome's event type, active or switched
 * off (a disabled endpoint's deliveries wait for it), however many are already pending: the cap on pending deliveries
 * refuses replays only (core/webhook-replay.ts), never a new outcome. Runs inside the transaction that records the
 * outcome, so an outcome is never recorded without its deliveries, nor a delivery written for an outcome that was not.
 * Returns how many were written. `db` is the root database: the statements run on its connection, inside the open transaction.
 */
export async function fanOutOutcome(
  db: Db,
  outcome: { accountId: string; emailId: string; recipient: string; status: OutcomeStatus; dsn: string; detail: string; occurredAt: number },
  /** The account's endpoints, when the caller's transaction read them already (in id order); else read here. */
  knownEndpoints?: readonly WebhookEndpointEvents[],
): Promise<number> {
  const q = statements(db);
  const type = OUTCOME_EVENT_TYPES[outcome.status];
  const endpoints = knownEndpoints ?? (await q.endpoints.execute({ accountId: outcome.accountId }));
  const subscribed = endpoints.filter((e) => e.events.includes(type));
  if (subscribed.length === 0) return 0;
  const email = await one(q.email.execute({ id: outcome.emailId }));
  const data = JSON.stringify(outcomeEventData({ ...outcome, from: email?.fromAddress ?? '', tags: email?.tags ?? null }));
  for (const endpoint of subscribed) {
    await q.insert.execute({
      id: newId(outcome.occurredAt),
      endpointId: endpoint.id,
      accountId: outcome.accountId,
      eventType: type,
      data,
      now: outcome.occurredAt,
    });
  }
  markQueued(db, 'webhooks');
  return subscribed.length;
}

/** The prepared insert of one webhook delivery (id, endpointId, accountId, eventType, data, now): the fan-out's and a replay's. */
export const insertWebhookDelivery = (db: Db) => statements(db).insert;

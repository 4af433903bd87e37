import { and, desc, eq, gte, lt } from 'drizzle-orm';
import { z } from 'zod';
import { type EventStatus, emailEvents } from '../../db/schema/index.js';
import { iso } from '../shared/clock.js';
import type { Deps } from './deps.js';
import { OUTCOME_EVENT_TYPES } from './webhook-fanout.js';
import type { PageRequest, RequestContext } from './context.js';

/** The event type of each recorded outcome: the fan-out's table, so GET /events and the posts name them alike. */
export const EVENT_TYPE_OF_STATUS: Record<EventStatus, (typeof OUTCOME_EVENT_TYPES)[EventStatus]> = OUTCOME_EVENT_TYPES;

export type EmailEventType = (typeof OUTCOME_EVENT_TYPES)[EventStatus];

export const EMAIL_EVENT_TYPES = Object.values(EVENT_TYPE_OF_STATUS) as [EmailEventType, ...EmailEventType[]];

const STATUS_OF_EVENT_TYPE = Object.fromEntries(Object.entries(EVENT_TYPE_OF_STATUS).map(([status, type]) => [type, status])) as Record<
  EmailEventType,
  EventStatus
>;

/** The status an event type stands for in email_events. */
export function statusOfEventType(type: EmailEventType): EventStatus {
  return STATUS_OF_EVENT_TYPE[type];
}

/** A date-time with a zone (`Z` or an offset), read as epoch milliseconds. */
export const isoDateTime = z.iso
  .datetime({ offset: true, error: 'must be a date-time with a zone offset or Z, such as 2026-01-31T12:00:00Z' })
  .transform((s) => Date.parse(s));

export const emailEventType = z.enum(EMAIL_EVENT_TYPES, { error: `must be one of ${EMAIL_EVENT_TYPES.join(', ')}` });

/** The query of GET /events. */
export const eventFilter = z.strictObject({
  since: isoDateTime.optional(),
  type: emailEventType.optional(),
  limit: z.string().optional(),
  cursor: z.string().optional(),
});

/** One recorded outcome, as GET /events lists it. */
export interface EventItem {
  id: string;
  type: EmailEventType;
  emailId: string;
  recipient: string;
  status: EventStatus;
  dsn: string;
  detail: string;
  occurredAt: string;
}

/**
 * GET /events: every recorded outcome of the acting account's emails, newest first (event ids are UUIDv7, so id order
 * is the order they were recorded), from the page's cursor: at most `limit + 1` items. `since` keeps outcomes that
 * occurred at or after it; `type` one event type. One query per page, read newest first from email_events_account_idx
 * (account_id, id), so a page costs the same however many outcomes the account has.
 */
export async function listEvents({
  deps,
  ctx,
  page,
  filter,
}: {
  deps: Pick<Deps, 'db'>;
  ctx: RequestContext;
  page: PageRequest;
  filter: z.output<typeof eventFilter>;
}): Promise<EventItem[]> {
  return (
    await deps.db
      .select({ event: emailEvents })
      .from(emailEvents)
      .where(
        and(
          eq(emailEvents.accountId, ctx.account.id),
          filter.type ? eq(emailEvents.status, statusOfEventType(filter.type)) : undefined,
          filter.since !== undefined ? gte(emailEvents.occurredAt, filter.since) : undefined,
          page.after ? lt(emailEvents.id, page.after) : undefined,
        ),
      )
      .orderBy(desc(emailEvents.id))
      .limit(page.limit + 1)
  ).map(({ event: e }) => ({
    id: e.id,
    type: EVENT_TYPE_OF_STATUS[e.status],
    emailId: e.emailId,
    recipient: e.recipient,
    status: e.status,
    dsn: e.dsn,
    detail: e.detail,
    occurredAt: iso(e.occurredAt),
  }));
}

import { type SQL, and, asc, eq, gt, gte, inArray, lt, lte, sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Db } from '../../db/client.js';
import { markQueued } from '../../db/queue-wake.js';
import { emailEvents, emails, webhookEndpoints } from '../../db/schema/index.js';
import type { Deps } from './deps.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { insertWebhookDelivery, outcomeEventData } from './webhook-fanout.js';
import type { RequestContext } from './context.js';
import { type EmailEventType, EMAIL_EVENT_TYPES, EVENT_TYPE_OF_STATUS, emailEventType, isoDateTime, statusOfEventType } from './events.js';
import { forUpdate, indexedBy, one, queryRow } from '../../db/sql.js';

/** One replay queues at most this many deliveries; a window holding more is refused whole (never cut silently). */
export const MAX_REPLAY_EVENTS = 10_000;

/**
 * At most this many deliveries may be pending (neither delivered nor final) at one endpoint once a replay is queued
 * (docs/api/decisions.md section 13): a replay that would pass it is refused whole with `409 limit_reached`. The fan-out of new
 * outcomes is never refused (an event the receiver never asked to lose would be lost); it only counts toward it.
 */
export const MAX_PENDING_PER_ENDPOINT = 10_000;

/**
 * Outcomes a replay queues per transaction. Each chunk is one short transaction of the group commit (about 10 ms for
 * 250 rows), and the event loop is free while it goes to disk and until the next one starts, so a replay of 10,000
 * never holds the loop past 50 ms (docs/api/decisions.md section 13); one transaction for all of them held it 0.4 to 0.65 s.
 */
export const REPLAY_CHUNK_ROWS = 250;

/**
 * Of the account's recorded outcomes, how many one step of a replay looks at (counting the window, or finding the
 * next chunk's): a few milliseconds' reading, so an account with millions of outcomes is walked in short steps too.
 */
export const REPLAY_SCAN_ROWS = 5_000;

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
 * What a replay queues: the outcomes matching `window`, oldest first, found by walking `walk` (the account's outcomes,
 * or one email's) in id order from `floor`.
 */
interface ReplayScope {
  endpointId: string;
  accountId: string;
  window: SQL;
  walk: SQL;
  floor: string;
}

/**
 * The smallest id an outcome that occurred at or after `ms` can have: an outcome's id is made from its occurredAt
 * (server/core/outcomes.ts, newId(occurredAt)), and newId never goes back in time, so the walk starts there instead of at the
 * account's first outcome. The id is a UUIDv7, its first 48 bits the milliseconds: the bare prefix sorts first.
 */
function idFloor(ms: number): string {
  const h = Math.max(0, Math.floor(ms)).toString(16).padStart(12, '0');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}`;
}

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * The id of the last outcome one step from `after` looks at (REPLAY_SCAN_ROWS further along `walk`), or null when
 * fewer are left: the step reads the index only.
 */
async function scanEnd(db: Db, scope: ReplayScope, after: string): Promise<string | null> {
  return (
    (
      await queryRow<{ id: string }>(
        db,
        sql`
      select id from email_events where ${scope.walk} and id > ${after} order by id limit 1 offset ${REPLAY_SCAN_ROWS - 1}`,
      )
    )?.id ?? null
  );
}

/**
 * How many outcomes the window holds, up to MAX_REPLAY_EVENTS + 1 (it stops there), walked REPLAY_SCAN_ROWS at a
 * time with the event loop free between steps.
 */
async function countWindow(db: Db, scope: ReplayScope): Promise<number> {
  let count = 0;
  let after = scope.floor;
  for (;;) {
    const end = await scanEnd(db, scope, after);
    const upTo = end === null ? sql`` : sql` and id <= ${end}`;
    count +=
      (
        await queryRow<{ n: number }>(
          db,
          sql`
        select count(*) as n from email_events where ${scope.walk} and id > ${after}${upTo} and ${scope.window}`,
        )
      )?.n ?? 0;
    if (end === null || count > MAX_REPLAY_EVENTS) return count;
    after = end;
    await nextTurn();
  }
}

/**
 * Deliveries this process's replays have promised an endpoint and not yet written, counted as pending by the cap's
 * check, so two replays of one endpoint at once cannot pass it together (the check and the writes are apart in time).
 */
const promised = new WeakMap<Db, Map<string, number>>();

function promisedTo(db: Db): Map<string, number> {
  let byEndpoint = promised.get(db);
  if (!byEndpoint) promised.set(db, (byEndpoint = new Map()));
  return byEndpoint;
}

function addPromised(db: Db, endpointId: string, n: number): void {
  const byEndpoint = promisedTo(db);
  const left = (byEndpoint.get(endpointId) ?? 0) + n;
  if (left > 0) byEndpoint.set(endpointId, left);
  else byEndpoint.delete(endpointId);
}

/** How many of the endpoint's deliveries are pending, counted up to `bound` at most (the count reads no further). */
async function countPending(db: Db, endpointId: string, bound: number): Promise<number> {
  return (
    (
      await queryRow<{ n: number }>(
        db,
        sql`
      select count(*) as n from (
        select 1 from webhook_deliveries${indexedBy(db, 'webhook_deliveries_pending_idx')}
        where endpoint_id = ${endpointId} and next_attempt_at is not null
        limit ${bound}
      )`,
      )
    )?.n ?? 0
  );
}

/**
 * The acting account's endpoint (404 webhook_not_found) and what a replay of it queues; null when the endpoint
 * subscribes to no email event type and `events` names none.
 */
async function replayScope(
  db: Db,
  ctx: RequestContext,
  endpointId: string,
  input: ReplayInput,
  until: number,
  only: ReplayMatch | undefined,
): Promise<ReplayScope | null> {
  const endpoint = await one(
    db
      .select({ id: webhookEndpoints.id, events: webhookEndpoints.events })
      .from(webhookEndpoints)
      .where(and(eq(webhookEndpoints.id, endpointId), eq(webhookEndpoints.accountId, ctx.account.id))),
  );
  if (!endpoint) throw new ApiError('webhook_not_found', 'No webhook endpoint with that id on this account.');
  const types: EmailEventType[] = input.events ?? EMAIL_EVENT_TYPES.filter((t) => endpoint.events.includes(t));
  if (types.length === 0) return null;
  const window = and(
    eq(emailEvents.accountId, ctx.account.id),
    inArray(emailEvents.status, types.map(statusOfEventType)),
    gte(emailEvents.occurredAt, input.since),
    lt(emailEvents.occurredAt, until),
    only ? eq(emailEvents.recipient, only.recipient) : undefined,
  )!;
  // One email's outcomes are few: walked through its own index rather than the account's.
  const walk = only ? eq(emailEvents.emailId, only.emailId) : eq(emailEvents.accountId, ctx.account.id);
  return { endpointId: endpoint.id, accountId: ctx.account.id, window, walk, floor: idFloor(input.since) };
}

/**
 * The cap, checked in one transaction with the promise of the replay's rows (no chunk of another replay commits its
 * rows and takes back its promise in between): what is pending at the endpoint (counted up to one past the cap,
 * however long its backlog), plus what other replays have promised it, plus this replay stays within
 * MAX_PENDING_PER_ENDPOINT, else 409 limit_reached, its message saying how many are pending.
 */
async function promiseWithinCap(db: Db, endpointId: string, count: number): Promise<void> {
  await db.transaction(async () => {
    const pending = (await countPending(db, endpointId, MAX_PENDING_PER_ENDPOINT + 1)) + (promisedTo(db).get(endpointId) ?? 0);
    if (pending + count > MAX_PENDING_PER_ENDPOINT) {
      const howMany = pending > MAX_PENDING_PER_ENDPOINT ? `More than ${MAX_PENDING_PER_ENDPOINT}` : String(pending);
      throw new ApiError(
        'limit_reached',
        `${howMany} deliveries are pending for this endpoint and this replay would add ${count}; at most ${MAX_PENDING_PER_ENDPOINT} may be pending. Replay again once the receiver has taken some of them, or narrow the window.`,
      );
    }
    addPromised(db, endpointId, count);
  });
}

/**
 * One chunk of a replay, in the group commit's transaction: the window's outcomes after `after` (id order, so oldest
 * first) among the next REPLAY_SCAN_ROWS of the walk, at most `limit` of them, each queued as a fresh delivery due
 * now. Answers how many, and where the next chunk starts; null when the endpoint is gone.
 */
async function queueReplayChunk(
  db: Db,
  scope: ReplayScope,
  after: string,
  limit: number,
  now: number,
): Promise<{ written: number; next: string | null } | null> {
  // Held to the chunk's commit (Postgres): a deletion of the endpoint meanwhile waits for it, then takes its rows along.
  const endpoint = await one(forUpdate(db, db.select({ id: webhookEndpoints.id }).from(webhookEndpoints).where(eq(webhookEndpoints.id, scope.endpointId))));
  if (!endpoint) return null;
  const end = await scanEnd(db, scope, after);
  const rows = await db
    .select({ event: emailEvents, from: emails.fromAddress, tags: emails.tags })
    .from(emailEvents)
    .innerJoin(emails, eq(emails.id, emailEvents.emailId))
    .where(and(scope.walk, scope.window, gt(emailEvents.id, after), end === null ? undefined : lte(emailEvents.id, end)))
    .orderBy(asc(emailEvents.id))
    .limit(limit);
  const insert = insertWebhookDelivery(db);
  for (const { event: e, from, tags } of rows) {
    const data = outcomeEventData({
      emailId: e.emailId,
      recipient: e.recipient,
      status: e.status,
      dsn: e.dsn,
      detail: e.detail,
      occurredAt: e.occurredAt,
      from,
      tags,
    });
    await insert.execute({
      id: newId(now),
      endpointId: scope.endpointId,
      accountId: scope.accountId,
      eventType: EVENT_TYPE_OF_STATUS[e.status],
      data: JSON.stringify(data),
      now,
    });
  }
  if (rows.length > 0) markQueued(db, 'webhooks');
  // A full chunk goes on after its last row; otherwise after the step's end (none: the walk is over).
  const next = rows.length === limit ? rows.at(-1)!.event.id : end;
  return { written: rows.length, next };
}

/**
 * Queues fresh deliveries to one endpoint of the acting account for the account's recorded outcomes that occurred in
 * `[since, until)` (until defaults to now), oldest first, each with a new UUIDv7 id and due now, its `data` built like
 * the fan-out's. `events` defaults to the email event types the endpoint subscribes to. Refused whole, nothing queued:
 * a window of more than MAX_REPLAY_EVENTS outcomes (`422 invalid_request`), or one that would leave more than
 * MAX_PENDING_PER_ENDPOINT deliveries pending at the endpoint (`409 limit_reached`). A switched-off endpoint's
 * replayed deliveries wait, like the rest of its queue, until it is switched back on. `only` narrows the window to
 * one email's recipient (see ReplayMatch).
 *
 * Nothing holds the event loop long: the window is counted REPLAY_SCAN_ROWS outcomes at a time, and the deliveries
 * are written REPLAY_CHUNK_ROWS at a time, each chunk its own transaction of the group commit, the loop free between
 * them; the dispatcher is told after each, so the first go out while the rest are written.
 * The answer, `{ queued }`, comes once every chunk is on disk. A process that stops mid-replay (killed, the power
 * lost) never answers it and keeps the chunks already on disk: the window's oldest outcomes, queued and due, counted
 * as pending by the cap. Replaying the window again queues those again too (as any second replay does). An endpoint
 * deleted meanwhile ends the replay with `404 webhook_not_found` (its deliveries went with it).
 */
export async function replayWebhook({
  deps,
  ctx,
  endpointId,
  input,
  only,
}: {
  deps: Pick<Deps, 'db' | 'commits' | 'clock' | 'logger'>;
  ctx: RequestContext;
  endpointId: string;
  input: ReplayInput;
  only?: ReplayMatch;
}): Promise<{ queued: number }> {
  const now = deps.clock.now();
  const until = input.until ?? now;
  if (until <= input.since) throw new ApiError('invalid_request', 'until: must be later than since');

  const scope = await replayScope(deps.db, ctx, endpointId, input, until, only);
  const count = scope === null ? 0 : await countWindow(deps.db, scope);
  if (count > MAX_REPLAY_EVENTS) {
    throw new ApiError(
      'invalid_request',
      `since: the window holds more than the ${MAX_REPLAY_EVENTS} events one replay may queue; narrow it (since/until) and replay it in parts.`,
    );
  }
  let queued = 0;
  if (scope !== null && count > 0) {
    await promiseWithinCap(deps.db, scope.endpointId, count);
    let unwritten = count;
    try {
      let after: string | null = scope.floor;
      while (unwritten > 0 && after !== null) {
        const from: string = after;
        const limit = Math.min(REPLAY_CHUNK_ROWS, unwritten);
        const chunk = await deps.commits.run(async (db) => {
          const done = await queueReplayChunk(db, scope, from, limit, now);
          // In the same transaction as the rows: from its commit the pending count sees them (or the endpoint is gone).
          const settled = done === null ? unwritten : done.written;
          unwritten -= settled;
          addPromised(deps.db, scope.endpointId, -settled);
          return done;
        });
        if (chunk === null) throw new ApiError('webhook_not_found', 'The webhook endpoint was deleted while its replay was being queued.');
        queued += chunk.written;
        after = chunk.next;
      }
    } finally {
      // What was counted and not found after all (an email deleted meanwhile) is no longer promised either.
      addPromised(deps.db, scope.endpointId, -unwritten);
    }
  }

  deps.logger.info('webhook.replay_queued', { accountId: ctx.account.id, endpointId, queued, since: input.since, until });
  return { queued };
}

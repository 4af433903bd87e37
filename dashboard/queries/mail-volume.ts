import { EVENT_STATUSES, type EventStatus } from '../../db/schema/index.js';
import { DAY_MS, utcDay } from '../../server/shared/clock.js';
import type { Scans } from '../../db/scans.js';
import { idFloor } from './id-time.js';

/** The overview chart's series, in the legend's order: what was sent, then each outcome docs/api/contract.md records. */
export const VOLUME_SERIES = ['sent', ...EVENT_STATUSES] as const;
export type VolumeSeries = (typeof VOLUME_SERIES)[number];

export const VOLUME_LABELS: Record<VolumeSeries, string> = {
  sent: 'Sent',
  delivered: 'Delivered',
  bounced: 'Bounced',
  deferred: 'Deferred',
  complained: 'Complained',
};

/**
 * One UTC day: `emails` counts the emails accepted for delivery, every series counts recipients (an email to three
 * people is one email and three recipients sent to).
 */
export type DayVolume = { day: string; emails: number } & Record<VolumeSeries, number>;

/** How many UTC days the overview shows, today included. */
export const VOLUME_DAYS = 30;

/**
 * Two grouped reads, each a range of the table's primary key (UUIDv7 ids, see id-time.ts), not a query per day. The
 * day's length is written into the SQL as an integer literal: a bound JS number is a REAL to SQLite, which would not
 * divide to whole days. SQL text, because it runs where `deps.scans` says (off the event loop in the server).
 */
const SENT_BY_DAY = `
  select created_at / ${DAY_MS} as d, count(*) as e, sum(json_array_length("to")) as n
  from emails
  where id >= @floor and created_at >= @since and created_at < @until and status = 'sent'
  group by d`;
const OUTCOMES_BY_DAY = `
  select occurred_at / ${DAY_MS} as d, status, count(*) as n
  from email_events
  where id >= @floor and occurred_at >= @since and occurred_at < @until
  group by d, status`;

/**
 * Mail flow per UTC day for the `days` days ending today (every day present, zeros included, oldest first):
 * `emails` counts the emails accepted for delivery that day (status `sent`, so sandboxed and failed sends are left
 * out) and `sent` their recipients, the others count the recorded outcomes of recipients that day (email_events, the rows GET
 * /emails/{id} lists as events; every deferral counts). Over a month of a busy server both walk a million rows or
 * more (~600 ms for a million of each on the 2-vCPU VM), so they go through `scans`.
 */
export async function dailyVolume(scans: Scans, now: number, days = VOLUME_DAYS): Promise<DayVolume[]> {
  const firstDay = Math.floor(now / DAY_MS) - (days - 1);
  const since = firstDay * DAY_MS;
  const until = (firstDay + days) * DAY_MS;
  const out: DayVolume[] = Array.from({ length: days }, (_, i) => ({
    day: utcDay(since + i * DAY_MS),
    emails: 0,
    sent: 0,
    delivered: 0,
    bounced: 0,
    deferred: 0,
    complained: 0,
  }));
  const at = (dayNumber: number) => out[dayNumber - firstDay];
  const range = { floor: idFloor(since), since, until };

  const [sent, outcomes] = await Promise.all([
    scans.all<{ d: number; e: number; n: number }>(SENT_BY_DAY, range),
    scans.all<{ d: number; status: EventStatus; n: number }>(OUTCOMES_BY_DAY, range),
  ]);
  for (const r of sent) {
    const day = at(r.d);
    if (day) {
      day.emails = r.e;
      day.sent = r.n;
    }
  }
  for (const r of outcomes) {
    const day = at(r.d);
    if (day) day[r.status] = r.n;
  }
  return out;
}

import { sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { EVENT_STATUSES, type EventStatus } from '../../db/schema/index.js';
import { DAY_MS, utcDay } from '../../server/clock.js';
import { idFloor } from './id-time.js';

/** The overview chart's series, in the legend's order: what was sent, then each outcome api.md records. */
export const VOLUME_SERIES = ['sent', ...EVENT_STATUSES] as const;
export type VolumeSeries = (typeof VOLUME_SERIES)[number];

export const VOLUME_LABELS: Record<VolumeSeries, string> = {
  sent: 'Sent',
  delivered: 'Delivered',
  bounced: 'Bounced',
  deferred: 'Deferred',
  complained: 'Complained',
};

export type DayVolume = { day: string } & Record<VolumeSeries, number>;

/** How many UTC days the overview shows, today included. */
export const VOLUME_DAYS = 30;

/** Written into the SQL as an integer literal: a bound JS number is a REAL to SQLite, which would not divide to whole days. */
const DAY = sql.raw(String(DAY_MS));

/**
 * Mail flow per UTC day for the `days` days ending today (every day present, zeros included, oldest first):
 * `sent` counts the recipients of the emails accepted for delivery that day (status `sent`, so sandboxed and failed
 * sends are left out), the others count the recorded outcomes of recipients that day (email_events, the rows GET
 * /emails/{id} lists as events; every deferral counts). Two grouped queries, each a range of the table's primary key
 * (UUIDv7 ids, see id-time.ts), not a query per day.
 */
export function dailyVolume(db: Db, now: number, days = VOLUME_DAYS): DayVolume[] {
  const firstDay = Math.floor(now / DAY_MS) - (days - 1);
  const since = firstDay * DAY_MS;
  const until = (firstDay + days) * DAY_MS;
  const out: DayVolume[] = Array.from({ length: days }, (_, i) => ({ day: utcDay(since + i * DAY_MS), sent: 0, delivered: 0, bounced: 0, deferred: 0, complained: 0 }));
  const at = (dayNumber: number) => out[dayNumber - firstDay];

  const sent = db.all<{ d: number; n: number }>(sql`
    select created_at / ${DAY} as d, sum(json_array_length("to")) as n
    from emails
    where id >= ${idFloor(since)} and created_at >= ${since} and created_at < ${until} and status = 'sent'
    group by d`);
  for (const r of sent) {
    const day = at(r.d);
    if (day) day.sent = r.n;
  }

  const outcomes = db.all<{ d: number; status: EventStatus; n: number }>(sql`
    select occurred_at / ${DAY} as d, status, count(*) as n
    from email_events
    where id >= ${idFloor(since)} and occurred_at >= ${since} and occurred_at < ${until}
    group by d, status`);
  for (const r of outcomes) {
    const day = at(r.d);
    if (day) day[r.status] = r.n;
  }
  return out;
}

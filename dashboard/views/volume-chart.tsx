import type { FC } from 'hono/jsx';
import { type DayVolume, VOLUME_LABELS, VOLUME_SERIES, type VolumeSeries } from '../queries/mail-volume.js';
import { plural } from '../format.js';
import { TableRegion } from '../ui.js';

/**
 * The overview's chart: one line per series over the days, as inline SVG drawn on the server (no script, no inline
 * style: the colours come from the .series-* classes). The same numbers follow in a table for screen readers and for
 * anyone who wants them exact.
 */

const WIDTH = 720;
const HEIGHT = 240;
/** Room for the y axis' counts at a phone's larger type (main.css: .chart .tick at max-width 600px). */
const PAD = { left: 60, right: 12, top: 12, bottom: 30 };

/** The smallest 1, 2 or 5 times a power of ten at or above `n` (the y axis' top), at least 1. */
export function niceCeiling(n: number): number {
  if (n <= 1) return 1;
  const power = 10 ** Math.floor(Math.log10(n));
  for (const step of [1, 2, 5, 10]) if (step * power >= n) return step * power;
  return 10 * power;
}

/** A count on the y axis, short: 1,000 as 1k and 2,000,000 as 2M (the scale's steps are whole 1, 2 or 5 times ten^n). */
export function shortCount(n: number): string {
  if (n >= 1_000_000 && n % 1_000_000 === 0) return `${n / 1_000_000}M`;
  if (n >= 1_000 && n % 1_000 === 0) return `${n / 1_000}k`;
  return String(n);
}

/**
 * Which days get a label along the x axis: every `every` days from the first, and the last day, dropping the label
 * before it when the two would sit closer than half a step.
 */
export function labelledDays(count: number, every: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < count; i += every) out.push(i);
  const last = count - 1;
  if (last > 0 && out[out.length - 1] !== last) {
    if (last - out[out.length - 1]! < every / 2) out.pop();
    out.push(last);
  }
  return out;
}

const total = (days: DayVolume[], s: VolumeSeries) => days.reduce((sum, d) => sum + d[s], 0);
const totalEmails = (days: DayVolume[]) => days.reduce((sum, d) => sum + d.emails, 0);

/** How many of what a legend entry counts: "9 recipients (3 emails)" for what was sent, recipients for the outcomes. */
function legendCount(days: DayVolume[], s: VolumeSeries): string {
  const recipients = plural(total(days, s), 'recipient');
  return s === 'sent' ? `${recipients}, ${plural(totalEmails(days), 'email')}` : recipients;
}

export const VolumeChart: FC<{ days: DayVolume[] }> = ({ days }) => {
  const top = niceCeiling(Math.max(0, ...days.flatMap((d) => VOLUME_SERIES.map((s) => d[s]))));
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (i: number) => PAD.left + (days.length <= 1 ? plotW / 2 : (i * plotW) / (days.length - 1));
  const y = (n: number) => PAD.top + plotH - (n / top) * plotH;
  const r = (n: number) => Math.round(n * 10) / 10;
  const first = days[0]?.day ?? '';
  const last = days[days.length - 1]?.day ?? '';
  const outcomes = VOLUME_SERIES.filter((s) => s !== 'sent')
    .map((s) => `${total(days, s)} ${VOLUME_LABELS[s].toLowerCase()}`)
    .join(', ');
  const summary = `Mail flow per UTC day from ${first} to ${last}, in recipients: ${plural(totalEmails(days), 'email')} sent to ${plural(total(days, 'sent'), 'recipient')}; ${outcomes}. The numbers are in the table below.`;
  // About six day labels on a wide screen; on a phone (main.css) only every other one of those, in larger type.
  const every = Math.max(1, Math.ceil(days.length / 6));
  const wide = labelledDays(days.length, every);
  const narrow = new Set(labelledDays(days.length, every * 2));
  return (
    <figure class="volume">
      <svg class="chart" viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label={summary} preserveAspectRatio="xMidYMid meet">
        <title>{summary}</title>
        {(top % 2 === 0 ? [0, 0.5, 1] : [0, 1]).map((f) => (
          <g>
            <line class="axis" x1={PAD.left} x2={WIDTH - PAD.right} y1={r(y(top * f))} y2={r(y(top * f))} />
            <text class="tick count" x={PAD.left - 6} y={r(y(top * f))} dominant-baseline="middle" text-anchor="end">
              {shortCount(top * f)}
            </text>
          </g>
        ))}
        {wide.map((i) => (
          <text
            class={narrow.has(i) ? 'tick day' : 'tick day wide-only'}
            x={r(x(i))}
            y={HEIGHT - 6}
            text-anchor={i === 0 && days.length > 1 ? 'start' : i === days.length - 1 && days.length > 1 ? 'end' : 'middle'}
          >
            {days[i]!.day.slice(5)}
          </text>
        ))}
        {VOLUME_SERIES.map((s) => (
          <g class={`series-${s}`}>
            <polyline class="line" points={days.map((d, i) => `${r(x(i))},${r(y(d[s]))}`).join(' ')} />
            {days.map((d, i) => (d[s] > 0 ? <circle cx={r(x(i))} cy={r(y(d[s]))} r="2.5" /> : null))}
          </g>
        ))}
      </svg>
      <figcaption>
        <p class="muted small">Each line counts recipients: an email to three people is one email and three recipients sent to, each with its own outcome.</p>
        <ul class="legend">
          {VOLUME_SERIES.map((s) => (
            <li>
              <span class={`swatch series-${s}`} aria-hidden="true"></span>
              {VOLUME_LABELS[s]} <span class="muted">({legendCount(days, s)})</span>
            </li>
          ))}
        </ul>
      </figcaption>
    </figure>
  );
};

/** The chart's numbers, day by day, with the totals: the emails sent, then each series in recipients. */
export const VolumeTable: FC<{ days: DayVolume[] }> = ({ days }) => (
  <details class="numbers">
    <summary>Show the numbers</summary>
    <TableRegion label="Mail flow per UTC day, in numbers">
      <table id="volume-table">
        <caption class="visually-hidden">Mail flow per UTC day: emails sent, then recipients</caption>
        <thead>
          <tr>
            <th scope="col">Day (UTC)</th>
            <th scope="col" class="num">
              Emails sent
            </th>
            {VOLUME_SERIES.map((s) => (
              <th scope="col" class="num">
                {VOLUME_LABELS[s]} (recipients)
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {[...days].reverse().map((d) => (
            <tr data-day={d.day}>
              <th scope="row">{d.day}</th>
              <td class="num" data-series="emails">
                {String(d.emails)}
              </td>
              {VOLUME_SERIES.map((s) => (
                <td class="num" data-series={s}>
                  {String(d[s])}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
        <tfoot>
          <tr>
            <th scope="row">Total</th>
            <td class="num">{String(totalEmails(days))}</td>
            {VOLUME_SERIES.map((s) => (
              <td class="num">{String(total(days, s))}</td>
            ))}
          </tr>
        </tfoot>
      </table>
    </TableRegion>
  </details>
);

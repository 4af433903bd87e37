import type { FC } from 'hono/jsx';
import { type DayVolume, VOLUME_LABELS, VOLUME_SERIES, type VolumeSeries } from '../queries/mail-volume.js';
import { TableRegion } from '../ui.js';

/**
 * The overview's chart: one line per series over the days, as inline SVG drawn on the server (no script, no inline
 * style: the colours come from the .series-* classes). The same numbers follow in a table for screen readers and for
 * anyone who wants them exact.
 */

const WIDTH = 720;
const HEIGHT = 240;
const PAD = { left: 44, right: 12, top: 12, bottom: 28 };

/** The smallest 1, 2 or 5 times a power of ten at or above `n` (the y axis' top), at least 1. */
export function niceCeiling(n: number): number {
  if (n <= 1) return 1;
  const power = 10 ** Math.floor(Math.log10(n));
  for (const step of [1, 2, 5, 10]) if (step * power >= n) return step * power;
  return 10 * power;
}

const total = (days: DayVolume[], s: VolumeSeries) => days.reduce((sum, d) => sum + d[s], 0);

export const VolumeChart: FC<{ days: DayVolume[] }> = ({ days }) => {
  const top = niceCeiling(Math.max(0, ...days.flatMap((d) => VOLUME_SERIES.map((s) => d[s]))));
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (i: number) => PAD.left + (days.length <= 1 ? plotW / 2 : (i * plotW) / (days.length - 1));
  const y = (n: number) => PAD.top + plotH - (n / top) * plotH;
  const r = (n: number) => Math.round(n * 10) / 10;
  const first = days[0]?.day ?? '';
  const last = days[days.length - 1]?.day ?? '';
  const summary = `Mail flow per UTC day from ${first} to ${last}: ${VOLUME_SERIES.map((s) => `${total(days, s)} ${VOLUME_LABELS[s].toLowerCase()}`).join(', ')}. The numbers are in the table below.`;
  const labelEvery = Math.max(1, Math.ceil(days.length / 6));
  return (
    <figure class="volume">
      <svg class="chart" viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label={summary} preserveAspectRatio="xMidYMid meet">
        <title>{summary}</title>
        {(top % 2 === 0 ? [0, 0.5, 1] : [0, 1]).map((f) => (
          <g>
            <line class="axis" x1={PAD.left} x2={WIDTH - PAD.right} y1={r(y(top * f))} y2={r(y(top * f))} />
            <text class="tick" x={PAD.left - 6} y={r(y(top * f)) + 3} text-anchor="end">
              {String(top * f)}
            </text>
          </g>
        ))}
        {days.map((d, i) =>
          i % labelEvery === 0 || i === days.length - 1 ? (
            <text class="tick" x={r(x(i))} y={HEIGHT - 8} text-anchor="middle">
              {d.day.slice(5)}
            </text>
          ) : null,
        )}
        {VOLUME_SERIES.map((s) => (
          <g class={`series-${s}`}>
            <polyline class="line" points={days.map((d, i) => `${r(x(i))},${r(y(d[s]))}`).join(' ')} />
            {days.map((d, i) => (d[s] > 0 ? <circle cx={r(x(i))} cy={r(y(d[s]))} r="2.5" /> : null))}
          </g>
        ))}
      </svg>
      <figcaption>
        <ul class="legend">
          {VOLUME_SERIES.map((s) => (
            <li>
              <span class={`swatch series-${s}`} aria-hidden="true"></span>
              {VOLUME_LABELS[s]} <span class="muted">({total(days, s)})</span>
            </li>
          ))}
        </ul>
      </figcaption>
    </figure>
  );
};

/** The chart's numbers, day by day, with the totals. */
export const VolumeTable: FC<{ days: DayVolume[] }> = ({ days }) => (
  <details class="numbers">
    <summary>Show the numbers</summary>
    <TableRegion label="Mail flow per UTC day, in numbers">
      <table id="volume-table">
        <caption class="visually-hidden">Mail flow per UTC day</caption>
        <thead>
          <tr>
            <th scope="col">Day (UTC)</th>
            {VOLUME_SERIES.map((s) => (
              <th scope="col" class="num">
                {VOLUME_LABELS[s]}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {[...days].reverse().map((d) => (
            <tr data-day={d.day}>
              <th scope="row">{d.day}</th>
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
            {VOLUME_SERIES.map((s) => (
              <td class="num">{String(total(days, s))}</td>
            ))}
          </tr>
        </tfoot>
      </table>
    </TableRegion>
  </details>
);

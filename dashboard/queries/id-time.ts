/**
 * Time ranges over UUIDv7 ids (server/shared/ids.ts). An id made at `ms` carries max(ms, the process's last id time) in its
 * first 48 bits, so it never sorts before the smallest id of its own millisecond: `id >= idFloor(t)` keeps every row
 * made at or after `t`, read as a range of the primary key instead of a scan of a timestamp nobody indexed.
 */
export function idFloor(ms: number): string {
  const h = Math.max(0, Math.floor(ms)).toString(16).padStart(12, '0');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-0000-0000-000000000000`;
}

/**
 * How far past its time a row's id can sort: only when the clock stepped back while the process ran (NTP moves it by
 * milliseconds). An upper bound of `idFloor(t + ID_CLOCK_SLACK_MS)` keeps every row made before `t`.
 */
export const ID_CLOCK_SLACK_MS = 3_600_000;

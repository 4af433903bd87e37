/** How the dashboard writes numbers and durations. */

const counts = new Intl.NumberFormat('en-US');

/** A count with thousands separators ("12,345"). */
export const formatCount = (n: number): string => counts.format(n);

/** A size as a person reads it: "812 bytes", "4.9 KB", "1.2 MB" (1 KB = 1,024 bytes). */
export function formatBytes(n: number): string {
  if (n < 1024) return n === 1 ? '1 byte' : `${formatCount(n)} bytes`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MB`;
}

/** "1 recipient", "3 recipients". */
export const plural = (n: number, one: string, many = `${one}s`) => `${formatCount(n)} ${n === 1 ? one : many}`;

/** A duration as a person reads it: the two largest units ("3 d 4 h", "2 h 5 min", "45 s"). */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const units: [number, string][] = [
    [Math.floor(s / 86_400), 'd'],
    [Math.floor((s % 86_400) / 3600), 'h'],
    [Math.floor((s % 3600) / 60), 'min'],
    [s % 60, 's'],
  ];
  const start = units.findIndex(([n]) => n > 0);
  if (start === -1) return '0 s';
  return units
    .slice(start, start + 2)
    .filter(([n]) => n > 0)
    .map(([n, u]) => `${n} ${u}`)
    .join(' ');
}

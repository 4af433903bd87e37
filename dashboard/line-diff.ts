/**
 * A plain line diff for the template versions page: which lines of `before` are gone, which of `after` are new, the
 * rest kept, in order. Common leading and trailing lines are matched first; the middle by a longest common
 * subsequence. A middle too large to compare line by line (past MAX_DIFF_CELLS pairs) is shown as all removed, then
 * all added, which is still a true diff, only not the smallest.
 */

export type DiffOp = 'same' | 'removed' | 'added';

export interface DiffLine {
  op: DiffOp;
  text: string;
}

/** The most line pairs the subsequence table compares (about 16 MB of table). */
export const MAX_DIFF_CELLS = 4_000_000;

function splitLines(text: string): string[] {
  return text === '' ? [] : text.replace(/\r\n?/g, '\n').split('\n');
}

/** The lines of `before` and `after`, each marked same, removed or added, in reading order. */
export function lineDiff(before: string, after: string): DiffLine[] {
  const a = splitLines(before);
  const b = splitLines(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const head = a.slice(0, start).map((text): DiffLine => ({ op: 'same', text }));
  const tail = a.slice(endA).map((text): DiffLine => ({ op: 'same', text }));
  return [...head, ...middleDiff(a.slice(start, endA), b.slice(start, endB)), ...tail];
}

function middleDiff(a: string[], b: string[]): DiffLine[] {
  const removed = (text: string): DiffLine => ({ op: 'removed', text });
  const added = (text: string): DiffLine => ({ op: 'added', text });
  if (a.length === 0 || b.length === 0 || a.length * b.length > MAX_DIFF_CELLS) return [...a.map(removed), ...b.map(added)];
  // lcs[i * w + j]: the longest common subsequence of a[i..] and b[j..].
  const w = b.length + 1;
  const lcs = new Uint32Array((a.length + 1) * w);
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i * w + j] = a[i] === b[j] ? lcs[(i + 1) * w + j + 1]! + 1 : Math.max(lcs[(i + 1) * w + j]!, lcs[i * w + j + 1]!);
    }
  }
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      out.push({ op: 'same', text: a[i]! });
      i++;
      j++;
    } else if (lcs[(i + 1) * w + j]! >= lcs[i * w + j + 1]!) {
      out.push(removed(a[i++]!));
    } else {
      out.push(added(b[j++]!));
    }
  }
  while (i < a.length) out.push(removed(a[i++]!));
  while (j < b.length) out.push(added(b[j++]!));
  return out;
}

/** True when the diff changes nothing. */
export function unchanged(diff: readonly DiffLine[]): boolean {
  return diff.every((l) => l.op === 'same');
}

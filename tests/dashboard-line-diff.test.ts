import { describe, expect, it } from 'vitest';
import { type DiffLine, MAX_DIFF_CELLS, lineDiff, unchanged } from '../dashboard/line-diff.js';

/** The template versions page's line diff: a pure function, checked on plain text. */

const render = (diff: DiffLine[]) => diff.map((l) => `${l.op === 'same' ? ' ' : l.op === 'added' ? '+' : '-'}${l.text}`);

/** Applying a diff gives back both texts: the kept and removed lines are `before`, the kept and added ones `after`. */
function expectTrue(before: string, after: string, diff: DiffLine[]) {
  const lines = (t: string) => (t === '' ? [] : t.replace(/\r\n?/g, '\n').split('\n'));
  expect(diff.filter((l) => l.op !== 'added').map((l) => l.text)).toEqual(lines(before));
  expect(diff.filter((l) => l.op !== 'removed').map((l) => l.text)).toEqual(lines(after));
}

describe('lineDiff', () => {
  it('marks nothing in equal texts', () => {
    const d = lineDiff('a\nb\nc', 'a\nb\nc');
    expect(render(d)).toEqual([' a', ' b', ' c']);
    expect(unchanged(d)).toBe(true);
  });

  it('marks a changed line as removed then added, keeping its neighbours', () => {
    const d = lineDiff('<p>Hello {{ name }}</p>\n<p>Thanks</p>\n<p>Bye</p>', '<p>Hello {{ name }}</p>\n<p>Thank you</p>\n<p>Bye</p>');
    expect(render(d)).toEqual([' <p>Hello {{ name }}</p>', '-<p>Thanks</p>', '+<p>Thank you</p>', ' <p>Bye</p>']);
    expect(unchanged(d)).toBe(false);
  });

  it('finds inserted and deleted lines in the middle by their longest common subsequence', () => {
    const before = 'a\nb\nc\nd\ne\nf';
    const after = 'a\nx\nc\nd\ny\nf\ng';
    const d = lineDiff(before, after);
    expect(render(d)).toEqual([' a', '-b', '+x', ' c', ' d', '-e', '+y', ' f', '+g']);
    expectTrue(before, after, d);
    // The kept lines are a longest common subsequence: a, c, d, f.
    expect(d.filter((l) => l.op === 'same')).toHaveLength(4);
  });

  it('handles empty sides and line endings', () => {
    expect(render(lineDiff('', 'one\ntwo'))).toEqual(['+one', '+two']);
    expect(render(lineDiff('one\ntwo', ''))).toEqual(['-one', '-two']);
    expect(lineDiff('', '')).toEqual([]);
    expect(render(lineDiff('a\r\nb', 'a\nb'))).toEqual([' a', ' b']);
  });

  it('is a true diff on shuffled input', () => {
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
    for (let n = 0; n < 50; n++) {
      const pick = () => Array.from({ length: next() % 12 }, () => 'abcd'[next() % 4]).join('\n');
      const [before, after] = [pick(), pick()];
      expectTrue(before, after, lineDiff(before, after));
    }
  });

  it('falls back to removed-then-added when the middle is too large to compare, still a true diff', () => {
    const side = Math.ceil(Math.sqrt(MAX_DIFF_CELLS)) + 1;
    const before = ['head', ...Array.from({ length: side }, (_, i) => `old ${i}`), 'tail'].join('\n');
    const after = ['head', ...Array.from({ length: side }, (_, i) => `new ${i}`), 'tail'].join('\n');
    const d = lineDiff(before, after);
    expectTrue(before, after, d);
    expect(d[0]).toEqual({ op: 'same', text: 'head' });
    expect(d[1]).toEqual({ op: 'removed', text: 'old 0' });
    expect(d[side + 1]).toEqual({ op: 'added', text: 'new 0' });
  });
});

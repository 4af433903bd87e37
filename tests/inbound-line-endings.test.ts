import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createLineEndingCheck } from '../mta/inbound/receive.js';

/** The rule, byte by byte: every CR is followed by an LF and every LF follows a CR. */
function bareLineEnd(bytes: number[]): boolean {
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] === 0x0d && bytes[i + 1] !== 0x0a) return true;
    if (bytes[i] === 0x0a && bytes[i - 1] !== 0x0d) return true;
  }
  return false;
}

function check(chunks: number[][]): boolean {
  const lineEnds = createLineEndingCheck();
  for (const c of chunks) lineEnds.feed(Buffer.from(c));
  return lineEnds.bad;
}

const split = (bytes: number[], cuts: number[]): number[][] => {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const chunks: number[][] = [];
  let from = 0;
  for (const c of [...at, bytes.length]) {
    chunks.push(bytes.slice(from, c));
    from = c;
  }
  return chunks;
};

const bytes = (s: string) => [...Buffer.from(s, 'latin1')];

describe('the bare CR and LF check of DATA', () => {
  it.each([
    ['CRLF lines', 'a\r\nb\r\n', false],
    ['a bare LF', 'a\nb\r\n', true],
    ['a bare CR', 'a\rb\r\n', true],
    ['an LF first', '\na\r\n', true],
    ['CR CR LF', 'a\r\r\n', true],
    ['LF CR', 'a\n\r', true],
    ['a CR left at the end', 'a\r\nb\r', true],
    ['the smuggling dot \\n.\\r\\n', 'a\r\n\n.\r\n', true],
  ])('%s', (_name, text, bad) => {
    expect(check([bytes(text)])).toBe(bad);
    // Every way of cutting it in two gives the same answer.
    const all = bytes(text);
    for (let cut = 0; cut <= all.length; cut++) expect(check([all.slice(0, cut), all.slice(cut)])).toBe(bad);
  });

  it('a chunk ending in the CR of a CRLF is no bare CR yet: sawBare stays false after every chunk of CRLF lines, cut anywhere', () => {
    const all = bytes('a\r\nb\r\n.\r\n');
    for (let cut = 0; cut <= all.length; cut++) {
      const lineEnds = createLineEndingCheck();
      for (const c of [all.slice(0, cut), all.slice(cut)]) {
        lineEnds.feed(Buffer.from(c));
        expect(lineEnds.sawBare, `cut at ${cut}`).toBe(false);
      }
      expect(lineEnds.bad).toBe(false);
    }
    const dangling = createLineEndingCheck();
    dangling.feed(Buffer.from('a\r'));
    expect([dangling.sawBare, dangling.bad]).toEqual([false, true]);
    dangling.feed(Buffer.from('b'));
    expect([dangling.sawBare, dangling.bad]).toEqual([true, true]);
  });

  it('agrees with the byte-by-byte rule on any bytes cut into any chunks', () => {
    const byte = fc.constantFrom(0x0d, 0x0a, 0x2e, 0x61);
    fc.assert(
      fc.property(fc.array(byte, { maxLength: 40 }), fc.array(fc.nat(), { maxLength: 6 }), (data, cuts) => {
        expect(check(split(data, cuts))).toBe(bareLineEnd(data));
      }),
      { numRuns: 5000 },
    );
  });
});

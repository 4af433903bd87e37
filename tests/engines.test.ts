import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/**
 * package.json's engines.node is a promise to the operator: the oldest Node it names must be one every locked
 * runtime dependency accepts (dev-only packages are the contributor's concern, not the operator's).
 */

type Version = [number, number, number];

const read = (file: string) => JSON.parse(readFileSync(new URL(`../${file}`, import.meta.url), 'utf8'));
const pkg = read('package.json') as { engines: { node: string } };
const lock = read('package-lock.json') as { packages: Record<string, { dev?: boolean; engines?: { node?: string } | string[] }> };

/** `20`, `20.18`, `20.18.1`, `10.x`, `6.*`: missing or wildcard parts are 0 for a lower bound. */
function parseVersion(text: string): Version | null {
  const m = /^(\d+)(?:\.(\d+|x|\*))?(?:\.(\d+|x|\*))?$/.exec(text.trim());
  if (!m) return null;
  const part = (s: string | undefined) => (s === undefined || s === 'x' || s === '*' ? 0 : Number(s));
  return [Number(m[1]), part(m[2]), part(m[3])];
}

const compare = (a: Version, b: Version) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2];

/** Whether `v` meets one alternative of an engines range: `>=x`, `x.x` / `x.*` (that major), `^x.y.z`, or `*`. */
function admits(alternative: string, v: Version): boolean | null {
  const s = alternative.trim();
  if (s === '*' || s === '') return true;
  const atLeast = /^>=\s*(.+)$/.exec(s);
  if (atLeast) {
    const floor = parseVersion(atLeast[1]!);
    return floor && compare(v, floor) >= 0;
  }
  const caret = /^\^(.+)$/.exec(s);
  const floor = parseVersion(caret ? caret[1]! : s);
  if (!floor) return null;
  return v[0] === floor[0] && compare(v, floor) >= 0;
}

describe('engines.node', () => {
  const floor = parseVersion(pkg.engines.node.replace(/^>=\s*/, ''));

  it('is a plain lower bound', () => {
    expect(pkg.engines.node).toMatch(/^>=\d+\.\d+\.\d+$/);
    expect(floor).not.toBeNull();
  });

  it('its oldest Node is accepted by every locked runtime dependency', () => {
    const refusing: string[] = [];
    for (const [path, entry] of Object.entries(lock.packages)) {
      const range = !path || entry.dev || Array.isArray(entry.engines) ? undefined : entry.engines?.node;
      if (range === undefined) continue;
      const verdicts = range.split('||').map((alt) => admits(alt, floor!));
      if (verdicts.includes(null)) refusing.push(`${path}: cannot read "${range}"`);
      else if (!verdicts.includes(true)) refusing.push(`${path}: ${range}`);
    }
    expect(refusing).toEqual([]);
  });
});

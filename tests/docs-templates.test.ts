import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { TEMPLATES } from '../server/core/templates.js';

/**
 * docs/api/behaviour.md lists each built-in template with its variables, each group marked `required` or `optional`
 * (decisions.md section 2: `password-reset` takes a required `resetUrl` and an optional `expiresIn`). The list must
 * say what the template table enforces, so a reader never sends a variable as required that the API treats as
 * optional, or the other way round.
 */

const doc = readFileSync(new URL('../docs/api/behaviour.md', import.meta.url), 'utf8');
const bullet = /^- \*\*Templates\*\*: ([\s\S]*?)\. A variable not marked required/m.exec(doc)?.[1]?.replace(/\s+/g, ' ');

/** `receipt` (required `total`; optional `a`, `b`) -> { receipt: { required: [total], optional: [a, b] } } */
function documented(text: string): Record<string, { required: string[]; optional: string[] }> {
  const out: Record<string, { required: string[]; optional: string[] }> = {};
  for (const m of text.matchAll(/`([a-z-]+)` \(([^)]*)\)/g)) {
    const entry = { required: [] as string[], optional: [] as string[] };
    for (const group of m[2]!.split(';')) {
      const g = /^\s*(required|optional) (.*)$/.exec(group);
      if (!g) throw new Error(`${m[1]}: "${group.trim()}" says neither required nor optional`);
      const names = [...g[2]!.split(':')[0]!.matchAll(/`([A-Za-z]+)`/g)].map((n) => n[1]!);
      entry[g[1] as 'required' | 'optional'].push(...names);
    }
    out[m[1]!] = entry;
  }
  return out;
}

describe('the built-in templates as documented', () => {
  it('name every template, and each variable as required or optional as the API treats it', () => {
    expect(bullet).toBeDefined();
    const expected = Object.fromEntries(
      Object.entries(TEMPLATES).map(([name, def]) => {
        const vars = Object.entries(def.variables);
        return [name, { required: vars.filter(([, v]) => v.required).map(([n]) => n), optional: vars.filter(([, v]) => !v.required).map(([n]) => n) }];
      }),
    );
    expect(documented(bullet!)).toEqual(expected);
  });
});

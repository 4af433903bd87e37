import { describe, expect, it } from 'vitest';
import { BUILT_IN_SOURCES } from '../server/core/built-in-sources.js';
import { compileTemplate } from '../server/core/template-language.js';
import { TEMPLATES, type Vars, renderTemplate } from '../server/core/templates.js';

/**
 * GET /templates shows each built-in's source as Liquid, so a team can copy one ("Duplicate" in the dashboard): the
 * source shown must be the one that renders it. Each is compiled by the language of own templates and rendered with
 * every variable given, with only the required ones, and with values that need escaping; the result must be the
 * built-in's own render, byte for byte.
 */

const HOSTILE = `<b>"Tom" & 'Jerry'</b>`;

function cases(name: string): Vars[] {
  const vars = TEMPLATES[name]!.variables;
  const value = (v: string, kind: string) =>
    kind === 'url' ? `https://example.com/${v}?a=1&b=2` : v === 'body' ? `Line one\nLine two ${HOSTILE}` : `${v} ${HOSTILE}`;
  const all = Object.fromEntries(Object.entries(vars).map(([v, d]) => [v, value(v, d.kind)]));
  const required = Object.fromEntries(
    Object.entries(vars)
      .filter(([, d]) => d.required)
      .map(([v, d]) => [v, value(v, d.kind)]),
  );
  return [all, required];
}

/**
 * The same html spelled alike: `&#34;` and `&quot;` are the same character, and Liquid's newline_to_br writes the
 * built-in's `<br>` as `<br />` and a line break (a line box drops the white space at its start, so it shows the same).
 */
const sameEntities = (r: { subject: string; html: string; text: string }) => ({
  ...r,
  html: r.html.replaceAll('&#34;', '&quot;').replaceAll('<br />\n', '<br>'),
});

describe('the built-in templates written as Liquid', () => {
  it('cover every built-in and no other', () => {
    expect(Object.keys(BUILT_IN_SOURCES)).toEqual(Object.keys(TEMPLATES));
  });

  it.each(Object.keys(TEMPLATES))('%s renders exactly as the built-in does', (name) => {
    const def = TEMPLATES[name]!;
    const source = BUILT_IN_SOURCES[name]!;
    const compiled = compileTemplate(
      { ...source, variables: Object.fromEntries(Object.entries(def.variables).map(([v, d]) => [v, { required: d.required, kind: d.kind }])) },
      null,
    );
    for (const vars of cases(name)) expect(sameEntities(compiled.render(vars))).toEqual(sameEntities(renderTemplate(name, vars)));
  });
});

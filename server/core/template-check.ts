import type { Liquid, Template } from 'liquidjs';
import { TokenKind, Tokenizer } from 'liquidjs';
import { ApiError } from '../shared/errors.js';
import { REMOVED_TAGS, TEMPLATE_LIMITS, htmlEngine, textEngine } from './template-engine.js';
import { OUTPUT_RULES, URL_ATTRIBUTES, headName, inlineCss, namesIn, scanHtml } from './template-html.js';
import type { Declarations, LayoutSource, TemplateSource } from './template-language.js';
import type { DeclaredVariable } from '../../db/schema/templates.js';

/**
 * The checks of an account's own template or layout at save (docs/api/templates.md "Checked when saved"): syntax,
 * declared variables, the layout's {{ content }}, and in html the URL rule and where values may stand. Each problem
 * is `422 invalid_template` naming the part and, where it can, the line and column.
 */

const VARIABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** The name a layout's html and text give the template's own content. */
const CONTENT = 'content';

export type Part = 'subject' | 'html' | 'text';

export const invalid = (message: string) => new ApiError('invalid_template', message);

/** The engine's reason without the position it appends (given separately) or the source it dumps. */
export function reasonOf(e: unknown): { reason: string; line?: number; col?: number } {
  if (e instanceof RangeError) return { reason: 'the template nests too deeply' };
  const err = e as { message?: string; token?: { getPosition?(): [number, number] }; originalError?: unknown };
  const message = String(err.message ?? e).split('\n')[0]!;
  const m = /, line:(\d+), col:(\d+)$/.exec(message);
  const reason = message.replace(/, line:\d+, col:\d+$/, '');
  if (/Maximum call stack/.test(reason)) return { reason: 'the template nests too deeply' };
  const pos = err.token?.getPosition?.();
  const line = pos?.[0] ?? (m ? Number(m[1]) : undefined);
  const col = pos?.[1] ?? (m ? Number(m[2]) : undefined);
  return { reason, ...(line !== undefined ? { line } : {}), ...(col !== undefined ? { col } : {}) };
}

/** A parse error in the words of docs/api/templates.md: the part, line and column, and what is wrong. */
export function parseProblem(part: Part, e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  let { reason, line, col } = reasonOf(e);
  const filter = /^undefined filter: (\S+)/.exec(reason)?.[1];
  const tag = /^tag "?([^"\s]+)"? not found/.exec(reason)?.[1];
  if (filter === 'raw') reason = 'the raw filter is not available: every value is HTML-escaped in html, so a value can never add markup';
  else if (filter) reason = `the filter ${filter} is not available (docs/api/templates.md lists the filters)`;
  else if (tag && REMOVED_TAGS.includes(tag)) reason = `the ${tag} tag is not available: a template cannot load other files`;
  else if (tag) reason = `there is no tag ${tag}`;
  const where = line !== undefined ? ` line ${line}${col !== undefined ? `, column ${col}` : ''}:` : '';
  return invalid(`${part}:${where} ${reason}`);
}

function position(source: string, offset: number): { line: number; col: number } {
  const before = source.slice(0, offset);
  const line = before.split('\n').length;
  return { line, col: offset - before.lastIndexOf('\n') };
}

/** Refuses blocks nested deeper than TEMPLATE_LIMITS.nesting before the parser recurses into them. */
function checkNesting(part: Part, source: string): void {
  let depth = 0;
  for (const token of new Tokenizer(source).readTopLevelTokens()) {
    if (token.kind !== TokenKind.Tag) continue;
    const tag = token as unknown as { name: string; args: string };
    const names = tag.name === 'liquid' ? tag.args.split('\n').map((l) => l.trim().split(/\s/)[0] ?? '') : [tag.name];
    for (const name of names) {
      if (['if', 'unless', 'case', 'for', 'tablerow', 'capture'].includes(name)) depth++;
      else if (/^end(if|unless|case|for|tablerow|capture)$/.test(name)) depth--;
      if (depth > TEMPLATE_LIMITS.nesting) {
        const { line } = position(source, token.begin);
        throw invalid(`${part}: line ${line}: blocks are nested more than ${TEMPLATE_LIMITS.nesting} deep`);
      }
    }
  }
}

interface CheckedPart {
  templates: Template[];
}

/**
 * Parses one part and checks the rules of docs/api/templates.md: syntax, declared variables, and in html the place of
 * every output. `layout` allows `{{ content }}` (required once in a layout's html).
 */
function checkPart(part: Part, source: string, decl: Declarations, layout: boolean): CheckedPart {
  const engine = part === 'html' ? htmlEngine : textEngine;
  let templates: Template[];
  try {
    checkNesting(part, source);
    templates = engine.parse(source);
  } catch (e) {
    throw parseProblem(part, e);
  }
  let analysis: ReturnType<Liquid['analyzeSync']>;
  try {
    analysis = engine.analyzeSync(templates, { partials: false });
  } catch (e) {
    throw parseProblem(part, e);
  }
  const undeclared = Object.entries(analysis.globals)
    .filter(([name]) => !Object.hasOwn(decl, name) && !(layout && name === CONTENT))
    .map(([name, at]) => ({ name, ...at[0]!.location }))
    .sort((a, b) => a.row - b.row || a.col - b.col)[0];
  if (undeclared) throw invalid(`${part}: line ${undeclared.row}: the variable ${undeclared.name} is used but not declared in variables`);
  if (layout && part !== 'subject') checkContent(part, source, templates, analysis.variables[CONTENT]?.length ?? 0);
  if (part === 'html') checkHtmlContexts(source, decl, layout);
  return { templates };
}

/** A layout's `{{ content }}`: once in html (at most once in text), at the top level, with no filter. */
function checkContent(part: Part, source: string, templates: Template[], uses: number): void {
  const top = templates.filter((t) => t.token.kind === TokenKind.Output && /^\{\{-?\s*content\s*-?\}\}$/.test(t.token.getText()));
  if (part === 'html' && uses === 0) throw invalid('html: a layout must hold {{ content }} once, where the template goes');
  if (uses === 0) return;
  if (uses > 1 || top.length !== 1) {
    const at = top[0] ? position(source, top[0].token.begin).line : null;
    throw invalid(
      `${part}:${at ? ` line ${at}:` : ''} a layout holds {{ content }} exactly once, as it is (no filter), outside any tag or loop; this one uses content ${uses === 1 ? 'inside a tag or with a filter' : `${uses} times`}`,
    );
  }
}

function checkHtmlContexts(source: string, decl: Declarations, layout: boolean): void {
  const { pieces, ends } = scanHtml(source);
  // A template's html goes into its layout's text: it must end there too, or the layout's own outputs after
  // {{ content }} would land in a tag or an attribute they were not checked for.
  if (ends !== 'text') throw invalid(`html: the html ends ${OUTPUT_RULES[ends].where.replace(/ \(.*\)$/, '')}: close it`);
  for (const piece of pieces) {
    if (piece.kind === 'html') continue;
    const { line } = position(source, piece.token.begin);
    if (piece.kind === 'tag' && !piece.writes) {
      if (piece.context === 'tag') {
        throw invalid(
          `html: line ${line}: a Liquid tag cannot stand inside an HTML tag outside an attribute value; put {% ${piece.name} %} around the element or inside the attribute's quotes`,
        );
      }
      if (piece.context === 'style')
        throw invalid(`html: line ${line}: a Liquid tag cannot stand inside a <style> element: its CSS is inlined when the template is saved`);
      continue;
    }
    const text = piece.token.getText();
    const expression = piece.kind === 'output' ? text.replace(/^\{\{-?|-?\}\}$/g, '') : (piece.token as unknown as { args: string }).args;
    if (layout && expression.trim() === CONTENT) {
      if (piece.context !== 'text')
        throw invalid(`html: line ${line}: {{ content }} must stand in the text of an element, not ${OUTPUT_RULES[piece.context].where}`);
      continue;
    }
    const rule = OUTPUT_RULES[piece.context];
    const names = namesIn(expression);
    const urls = names.filter((n) => Object.hasOwn(decl, n) && decl[n]!.kind === 'url');
    if (piece.context === 'url-attribute-start') {
      const head = piece.kind === 'output' ? headName(expression) : null;
      if (head === null || !Object.hasOwn(decl, head) || decl[head]!.kind !== 'url') {
        const what = head && Object.hasOwn(decl, head) ? `the text variable ${head}` : `${text.trim()}`;
        throw invalid(
          `html: line ${line}: ${what} cannot start the value of ${piece.attribute}: only a variable declared with kind "url" may start a URL attribute (a text value could be a javascript: link)`,
        );
      }
      continue;
    }
    if (urls.length > 0 && !rule.url) {
      throw invalid(
        `html: line ${line}: the url variable ${urls[0]} is output ${rule.where}; a url variable may only start the value of a URL attribute (${[...URL_ATTRIBUTES].slice(0, 4).join(', ')}, ...)`,
      );
    }
    if (!rule.text) throw invalid(`html: line ${line}: ${text.trim()} cannot be output ${rule.where}`);
  }
}

function checkDeclarations(decl: Declarations): void {
  if (typeof decl !== 'object' || decl === null || Array.isArray(decl)) throw invalid('variables: must be an object of declared variables');
  const names = Object.keys(decl);
  if (names.length > TEMPLATE_LIMITS.variables) throw invalid(`variables: at most ${TEMPLATE_LIMITS.variables} may be declared; this has ${names.length}`);
  for (const name of names) {
    if (!VARIABLE_NAME.test(name)) throw invalid(`variables: ${name.slice(0, 64)}: a variable name is 1 to 64 of A-Z a-z 0-9 _, not starting with a digit`);
    if (name === CONTENT) throw invalid('variables: content is reserved: a layout puts the template there');
    const v = decl[name] as Partial<DeclaredVariable> | null;
    if (typeof v !== 'object' || v === null || typeof v.required !== 'boolean' || (v.kind !== 'text' && v.kind !== 'url')) {
      throw invalid(`variables: ${name}: must be { "required": true or false, "kind": "text" or "url" }`);
    }
  }
}

function checkSize(parts: (string | null)[]): void {
  const size = parts.reduce((n, p) => n + (p ? Buffer.byteLength(p, 'utf8') : 0), 0);
  if (size > TEMPLATE_LIMITS.sourceBytes)
    throw invalid(`the source (subject, html and text) must be at most 256 KB (${TEMPLATE_LIMITS.sourceBytes} bytes of UTF-8); this one is ${size} bytes`);
}

export const given = (s: string | null | undefined): s is string => typeof s === 'string' && s.trim() !== '';

/** The CSS inliner keeps every Liquid token of the html in place, or the html is refused naming the first it lost. */
export function checkInlining(html: string): string {
  const r = inlineCss(html, TEMPLATE_LIMITS.inlinedElements);
  if ('html' in r) return r.html;
  if ('elements' in r) {
    throw invalid(
      `html: with a <style> element, the html (with its layout) may have at most ${TEMPLATE_LIMITS.inlinedElements} elements, whose CSS is inlined when it is saved; this has ${r.elements}`,
    );
  }
  const tokens = new Tokenizer(html).readTopLevelTokens().filter((t) => t.kind !== TokenKind.HTML);
  const token = tokens[r.lost];
  const at = token ? ` line ${position(html, token.begin).line}:` : '';
  throw invalid(
    `html:${at} the CSS inliner could not keep ${token ? token.getText() : 'a Liquid token'} in place; a style attribute takes CSS declarations (property: value)`,
  );
}

/** Throws ApiError('invalid_template', message) when the source does not compile or breaks a rule. */
export function checkTemplateSource(src: TemplateSource): void {
  checkTemplate(src, true);
}

/** The checks of a template; `inline` runs the CSS inliner on its html alone (compileTemplate inlines it with its layout). */
export function checkTemplate(src: TemplateSource, inline: boolean): void {
  checkDeclarations(src.variables);
  checkSize([src.subject, src.html, src.text]);
  if (!given(src.subject)) throw invalid('subject: is required');
  if (!given(src.html) && !given(src.text)) throw invalid('a template needs html, text or both');
  checkPart('subject', src.subject, src.variables, false);
  if (given(src.html)) {
    checkPart('html', src.html, src.variables, false);
    if (inline) checkInlining(src.html);
  }
  if (given(src.text)) checkPart('text', src.text, src.variables, false);
}

export function checkLayoutSource(src: LayoutSource): void {
  checkLayout(src, true);
}

export function checkLayout(src: LayoutSource, inline: boolean): void {
  checkDeclarations(src.variables);
  checkSize([src.html, src.text]);
  if (!given(src.html) && !given(src.text)) throw invalid('a layout needs html, text or both');
  if (given(src.html)) {
    checkPart('html', src.html, src.variables, true);
    if (inline) checkInlining(src.html);
  }
  if (given(src.text)) checkPart('text', src.text, src.variables, true);
}

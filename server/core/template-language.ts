import { Liquid, type Template, TokenKind, Tokenizer } from 'liquidjs';
import type { DeclaredVariable } from '../../db/schema/templates.js';
import { ApiError } from '../shared/errors.js';
import { isHttpUrl } from './http-url.js';
import { HTML_TO_TEXT_OPTIONS, OUTPUT_RULES, URL_ATTRIBUTES, headName, htmlToText, inlineCss, namesIn, scanHtml, textSourceFromHtml } from './template-html.js';
import { MAX_RENDERED_BYTES, type Rendered, type Vars, escapeHtml, variableTooLong } from './templates.js';

/**
 * The language of an account's own templates and layouts (docs/api/templates.md): Liquid through liquidjs, set up for
 * untrusted input from many accounts. Pure functions: checking a source at save, compiling it once, rendering it per
 * send.
 */

export type Declarations = Record<string, DeclaredVariable>;
export interface TemplateSource {
  subject: string;
  html: string | null;
  text: string | null;
  variables: Declarations;
}
export interface LayoutSource {
  html: string | null;
  text: string | null;
  variables: Declarations;
}

/** The engine's limits (docs/api/templates.md "Limits"): one account's template cannot hold the event loop or the memory. */
export const TEMPLATE_LIMITS = {
  /** Source of one template (subject, html and text as UTF-8), decisions.md section 9. */
  sourceBytes: 256 * 1024,
  /** liquidjs `parseLimit`: characters parsed per part; a part is at most the whole source. */
  parseLimit: 256 * 1024,
  /** liquidjs `renderLimit`, ms, shared by the parts of one render: a send of a legitimate template takes well under 1 ms. */
  renderLimit: 100,
  /**
   * liquidjs `memoryLimit`, per part: characters and array items a render may create (strings built, ranges, split
   * results). Two million is twice the 1 MB a message may hold, and creating that many items takes ~70 ms here.
   */
  memoryLimit: 2_000_000,
  /** Items of an array a filter may take: sorting or de-duplicating more holds the event loop too long. */
  filterArrayItems: 10_000,
  /** Blocks (if, for, case, capture...) nested in one another: the parser recurses, 10,000 would overflow its stack. */
  nesting: 50,
  variables: 50,
} as const;

const VARIABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** The name a layout's html and text give the template's own content. */
const CONTENT = 'content';

/** Filters left out: they read properties or evaluate expressions per item, which strings never need. */
const REMOVED_FILTERS = [
  'where',
  'where_exp',
  'reject',
  'reject_exp',
  'group_by',
  'group_by_exp',
  'find',
  'find_exp',
  'find_index',
  'find_index_exp',
  'has',
  'has_exp',
  'map',
];
/** Tags left out: no file system (include, render, layout, block). */
const REMOVED_TAGS = ['include', 'render', 'layout', 'block'];

/** Markup a filter made from an escaped value (newline_to_br), written as it is. */
class SafeHtml {
  constructor(readonly html: string) {}
  toString(): string {
    return this.html;
  }
}

type FilterThis = { context: { renderLimit: { check(now: number): void } } };

function makeEngine(html: boolean): Liquid {
  const engine = new Liquid({
    strictFilters: true,
    strictVariables: false,
    ownPropertyOnly: true,
    // No file system: an empty in-memory one, and the tags that would read it removed below.
    templates: {},
    dynamicPartials: false,
    timezoneOffset: 0,
    locale: 'en-US',
    parseLimit: TEMPLATE_LIMITS.parseLimit,
    renderLimit: TEMPLATE_LIMITS.renderLimit,
    memoryLimit: TEMPLATE_LIMITS.memoryLimit,
    ...(html ? { outputEscape: (v: unknown) => (v instanceof SafeHtml ? v.html : escapeHtml(v === null || v === undefined ? '' : String(v))) } : {}),
  });
  for (const tag of REMOVED_TAGS) delete engine.tags[tag];
  for (const name of REMOVED_FILTERS) engine.unregisterFilter(name);
  if (html) {
    engine.unregisterFilter('raw');
    // Every output is escaped once at the end: escaping before would show `&amp;lt;`.
    for (const name of ['escape', 'escape_once', 'xml_escape', 'h']) engine.registerFilter(name, (v: unknown) => v);
    engine.registerFilter('newline_to_br', (v: unknown) => new SafeHtml(escapeHtml(String(v ?? '')).replace(/\r?\n/g, '<br />\n')));
  }
  // Each filter checks the time left and the size of an array it is given, so no single filter runs long.
  for (const [name, impl] of Object.entries(engine.filters)) {
    const handler = typeof impl === 'function' ? impl : impl.handler;
    if (!handler) continue;
    engine.registerFilter(name, function (this: FilterThis, ...args: unknown[]) {
      this.context.renderLimit.check(performance.now());
      for (const a of args) {
        if (Array.isArray(a) && a.length > TEMPLATE_LIMITS.filterArrayItems) {
          throw new Error(`the ${name} filter takes at most ${TEMPLATE_LIMITS.filterArrayItems} items`);
        }
      }
      return handler.apply(this as never, args as never);
    });
  }
  return engine;
}

const htmlEngine = makeEngine(true);
const textEngine = makeEngine(false);

type Part = 'subject' | 'html' | 'text';

const invalid = (message: string) => new ApiError('invalid_template', message);

/** The engine's reason without the position it appends (given separately) or the source it dumps. */
function reasonOf(e: unknown): { reason: string; line?: number; col?: number } {
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
function parseProblem(part: Part, e: unknown): ApiError {
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
  for (const piece of scanHtml(source)) {
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

const given = (s: string | null | undefined): s is string => typeof s === 'string' && s.trim() !== '';

/** The CSS inliner keeps every Liquid token of the html in place, or the html is refused naming the first it lost. */
function checkInlining(html: string): string {
  const r = inlineCss(html);
  if ('html' in r) return r.html;
  const tokens = new Tokenizer(html).readTopLevelTokens().filter((t) => t.kind !== TokenKind.HTML);
  const token = tokens[r.lost];
  const at = token ? ` line ${position(html, token.begin).line}:` : '';
  throw invalid(
    `html:${at} the CSS inliner could not keep ${token ? token.getText() : 'a Liquid token'} in place; a style attribute takes CSS declarations (property: value)`,
  );
}

/** Throws ApiError('invalid_template', message) when the source does not compile or breaks a rule. */
export function checkTemplateSource(src: TemplateSource): void {
  checkDeclarations(src.variables);
  checkSize([src.subject, src.html, src.text]);
  if (!given(src.subject)) throw invalid('subject: is required');
  if (!given(src.html) && !given(src.text)) throw invalid('a template needs html, text or both');
  checkPart('subject', src.subject, src.variables, false);
  if (given(src.html)) {
    checkPart('html', src.html, src.variables, false);
    checkInlining(src.html);
  }
  if (given(src.text)) checkPart('text', src.text, src.variables, false);
}

export function checkLayoutSource(src: LayoutSource): void {
  checkDeclarations(src.variables);
  checkSize([src.html, src.text]);
  if (!given(src.html) && !given(src.text)) throw invalid('a layout needs html, text or both');
  if (given(src.html)) {
    checkPart('html', src.html, src.variables, true);
    checkInlining(src.html);
  }
  if (given(src.text)) checkPart('text', src.text, src.variables, true);
}

export interface CompiledTemplate {
  /** Variables a send may give: the template's declarations merged with its layout's (the template's win on a clash). */
  readonly variables: Declarations;
  /** Renders validated vars: subject (one line), html (layout applied, CSS inlined), text (given, or generated from html). Throws ApiError('invalid_request', 'template: ...') when a render limit is hit. */
  render(vars: Vars): Rendered;
}

/** The layout's source with its one top-level `{{ content }}` replaced by the template's source. */
function wrapIn(layoutSource: string, content: string): string {
  const token = new Tokenizer(layoutSource).readTopLevelTokens().find((t) => t.kind === TokenKind.Output && /^\{\{-?\s*content\s*-?\}\}$/.test(t.getText()));
  if (!token) return content;
  return layoutSource.slice(0, token.begin) + content + layoutSource.slice(token.end);
}

/**
 * Merges declarations: the template's win, except that a name either declares a `url` stays a url, so a value a
 * layout puts at the start of a link is always checked as one.
 */
function mergeDeclarations(template: Declarations, layout: Declarations | undefined): Declarations {
  const merged: Declarations = { ...layout, ...template };
  for (const [name, v] of Object.entries(layout ?? {})) {
    if (v.kind === 'url' && Object.hasOwn(template, name)) merged[name] = { required: template[name]!.required, kind: 'url' };
  }
  return merged;
}

function renderProblem(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  const { reason } = reasonOf(e);
  if (/template render limit exceeded/.test(reason))
    return new ApiError('invalid_request', `template: rendering took longer than ${TEMPLATE_LIMITS.renderLimit} ms, the limit`);
  if (/memory alloc limit exceeded/.test(reason)) {
    return new ApiError('invalid_request', `template: rendering made more than ${TEMPLATE_LIMITS.memoryLimit} characters or items, the memory limit`);
  }
  if (/Invalid string length|Invalid array length/.test(reason)) return new ApiError('invalid_request', 'template: the rendered message is larger than 1 MB');
  return new ApiError('invalid_request', `template: ${reason}`);
}

/** Compiles a template (with its layout) once; render() reuses the parsed parts. */
export function compileTemplate(src: TemplateSource, layout: LayoutSource | null): CompiledTemplate {
  checkTemplateSource(src);
  if (layout) checkLayoutSource(layout);
  const variables = mergeDeclarations(src.variables, layout?.variables);

  const htmlSource = given(src.html) ? (layout && given(layout.html) ? wrapIn(layout.html, src.html) : src.html) : null;
  const inlined = htmlSource === null ? null : checkInlining(htmlSource);
  const parse = (part: Part, engine: Liquid, source: string) => {
    try {
      return engine.parse(source);
    } catch (e) {
      throw parseProblem(part, e);
    }
  };
  const subjectTpl = parse('subject', textEngine, src.subject);
  const htmlTpl = inlined === null ? null : parse('html', htmlEngine, inlined);
  let textTpl: Template[] | null = null;
  let textFromHtml = false;
  if (given(src.text)) {
    textTpl = parse('text', textEngine, layout && given(layout.text) ? wrapIn(layout.text, src.text) : src.text);
  } else if (inlined !== null) {
    const derived = textSourceFromHtml(inlined);
    try {
      textTpl = derived === null ? null : textEngine.parse(derived);
    } catch {
      textTpl = null;
    }
    textFromHtml = true;
  }
  const names = Object.keys(variables);

  return {
    variables,
    render(vars: Vars): Rendered {
      const scope: Record<string, string> = Object.create(null);
      for (const name of names) if (Object.hasOwn(vars, name)) scope[name] = vars[name]!;
      const deadline = performance.now() + TEMPLATE_LIMITS.renderLimit;
      const run = (engine: Liquid, tpl: Template[]): string => {
        try {
          const out = String(engine.renderSync(tpl, scope, { renderLimit: Math.max(1, deadline - performance.now()) }));
          if (out.length > MAX_RENDERED_BYTES) throw new ApiError('invalid_request', 'template: the rendered message is larger than 1 MB');
          return out;
        } catch (e) {
          throw renderProblem(e);
        }
      };
      const subject = run(textEngine, subjectTpl)
        .replace(/[\r\n]+/g, ' ')
        .trim();
      const html = htmlTpl ? run(htmlEngine, htmlTpl) : '';
      let text = textTpl ? run(textEngine, textTpl) : textFromHtml ? htmlToText(html) : '';
      if (textFromHtml)
        text = `${text
          .replace(/[ \t]+\n/g, '\n')
          .replace(/\n{3,}/g, '\n\n')
          .trim()}\n`;
      return { subject, html, text };
    },
  };
}

/** The first problem of a send's variables against the declarations, as { field, message }, or null. */
export function checkDeclaredVariables(templateName: string, decl: Declarations, vars: Record<string, string>): { field: string; message: string } | null {
  for (const key of Object.keys(vars)) {
    if (!Object.hasOwn(decl, key))
      return { field: key.length > 64 ? `${key.slice(0, 64)}…` : key, message: `is not a variable of the ${templateName} template` };
  }
  for (const [key, spec] of Object.entries(decl)) {
    const value = Object.hasOwn(vars, key) ? vars[key] : undefined;
    if (value === undefined) {
      if (spec.required) return { field: key, message: `is required by the ${templateName} template` };
      continue;
    }
    const tooLong = variableTooLong(value, spec.kind === 'url' ? 'link' : 'body');
    if (tooLong) return { field: key, message: tooLong };
    if (spec.kind === 'url' && !isHttpUrl(value)) return { field: key, message: 'must be an http or https URL' };
  }
  return null;
}

export { HTML_TO_TEXT_OPTIONS, isHttpUrl };

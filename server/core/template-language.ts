import { type Liquid, type Template, TokenKind } from 'liquidjs';
import type { DeclaredVariable } from '../../db/schema/templates.js';
import { ApiError } from '../shared/errors.js';
import { isHttpUrl } from './http-url.js';
import { TEMPLATE_LIMITS, htmlEngine, textEngine } from './template-engine.js';
import { type FastRender, compileFast } from './template-fast.js';
import { type Part, checkInlining, checkLayout, checkTemplate, given, parseProblem, reasonOf } from './template-check.js';
import { HTML_TO_TEXT_OPTIONS, htmlToText, textSourceFromHtml } from './template-html.js';
import { MAX_RENDERED_BYTES, type Rendered, type Vars, variableTooLong } from './templates.js';

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

export { checkLayoutSource, checkTemplateSource } from './template-check.js';

export interface CompiledTemplate {
  /** Variables a send may give: the template's declarations merged with its layout's (the template's win on a clash). */
  readonly variables: Declarations;
  /** Renders validated vars: subject (one line), html (layout applied, CSS inlined), text (given, or generated from html). Throws ApiError('invalid_request', 'template: ...') when a render limit is hit. */
  render(vars: Vars): Rendered;
}

/** The layout's source with its one top-level `{{ content }}` replaced by the template's source. */
function wrapIn(engine: Liquid, layoutSource: string, content: string): string {
  // The parsed top level, not the tokens: a `{{ content }}` inside `{% comment %}` or `{% raw %}` is a token too.
  const token = engine
    .parse(layoutSource)
    .map((t) => t.token)
    .find((t) => t.kind === TokenKind.Output && /^\{\{-?\s*content\s*-?\}\}$/.test(t.getText()));
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
  checkTemplate(src, false);
  if (layout) checkLayout(layout, false);
  const variables = mergeDeclarations(src.variables, layout?.variables);

  const htmlSource = given(src.html) ? (layout && given(layout.html) ? wrapIn(htmlEngine, layout.html, src.html) : src.html) : null;
  const inlined = htmlSource === null ? null : checkInlining(htmlSource);
  const parse = (part: Part, engine: Liquid, source: string) => {
    try {
      return engine.parse(source);
    } catch (e) {
      throw parseProblem(part, e);
    }
  };
  const names = Object.keys(variables);
  const declared = new Set(names);
  /** A part: rendered by concatenation when it is that simple (server/core/template-fast.ts), else by liquidjs. */
  const part = (name: Part, engine: Liquid, source: string): Renderer => {
    const fast = compileFast(source, declared, engine === htmlEngine);
    return fast ? { fast } : { engine, templates: parse(name, engine, source) };
  };
  const subjectPart = part('subject', textEngine, src.subject);
  const htmlPart = inlined === null ? null : part('html', htmlEngine, inlined);
  let textPart: Renderer | null = null;
  let textFromHtml = false;
  if (given(src.text)) {
    textPart = part('text', textEngine, layout && given(layout.text) ? wrapIn(textEngine, layout.text, src.text) : src.text);
  } else if (inlined !== null) {
    const derived = inlined.length <= TEMPLATE_LIMITS.textFromHtml ? textSourceFromHtml(inlined) : null;
    try {
      textPart = derived === null ? null : part('text', textEngine, derived);
    } catch {
      textPart = null;
    }
    textFromHtml = true;
  }

  return {
    variables,
    render(vars: Vars): Rendered {
      const scope: Record<string, string> = Object.create(null);
      for (const name of names) if (Object.hasOwn(vars, name)) scope[name] = vars[name]!;
      const deadline = performance.now() + TEMPLATE_LIMITS.renderLimit;
      const run = (r: Renderer): string => {
        try {
          const out = 'fast' in r ? r.fast(scope) : renderLimited(r.engine, r.templates, scope, deadline);
          if (out.length > MAX_RENDERED_BYTES) throw new ApiError('invalid_request', 'template: the rendered message is larger than 1 MB');
          return out;
        } catch (e) {
          throw renderProblem(e);
        }
      };
      const subject = run(subjectPart)
        .replace(/[\r\n]+/g, ' ')
        .trim();
      const html = htmlPart ? run(htmlPart) : '';
      let text = textPart ? run(textPart) : textFromHtml ? textAtSend(html) : '';
      if (textFromHtml)
        text = `${text
          .replace(/[ \t]+\n/g, '\n')
          .replace(/\n{3,}/g, '\n\n')
          .trim()}\n`;
      return { subject, html, text };
    },
  };
}

/**
 * The text part made from a rendered html, when it could not be derived at compile (html-to-text left a Liquid tag
 * out even with tables laid out a row a line): bounded, as html-to-text takes ~60 ms per 256 KB here.
 */
export function textAtSend(html: string): string {
  if (html.length > TEMPLATE_LIMITS.textFromHtml) {
    throw new ApiError(
      'invalid_request',
      `template: the html is over ${TEMPLATE_LIMITS.textFromHtml / 1024} KB and its text part would be made at each send (a Liquid tag stands where html-to-text leaves it out): give the template a text part`,
    );
  }
  return htmlToText(html);
}

type Renderer = { fast: FastRender } | { engine: Liquid; templates: Template[] };

/**
 * liquidjs's render within what is left of the render's time. Its limit is wall-clock time: when it is hit while the
 * process got less than half of that time on a CPU (another process ran, the machine was busy), the render is tried
 * once more, so a legitimate template is not refused because the machine paused; a hostile one burns its CPU and is
 * refused.
 */
function renderLimited(engine: Liquid, templates: Template[], scope: Record<string, string>, deadline: number): string {
  const wall0 = performance.now();
  const cpu0 = process.cpuUsage();
  try {
    return String(engine.renderSync(templates, scope, { renderLimit: Math.max(1, deadline - wall0) }));
  } catch (e) {
    if (!/template render limit exceeded/.test(String((e as Error).message))) throw e;
    const cpu = process.cpuUsage(cpu0);
    const cpuMs = (cpu.user + cpu.system) / 1000;
    if (cpuMs >= (performance.now() - wall0) / 2) throw e;
    return String(engine.renderSync(templates, scope, { renderLimit: TEMPLATE_LIMITS.renderLimit }));
  }
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

/** One part rendered by liquidjs alone, with the engine and limits a compiled template uses (to hold the fast path against). */
export function renderWithLiquid(html: boolean, source: string, vars: Vars): string {
  const engine = html ? htmlEngine : textEngine;
  return String(engine.renderSync(engine.parse(source), { ...vars }));
}

export { HTML_TO_TEXT_OPTIONS, TEMPLATE_LIMITS, isHttpUrl };

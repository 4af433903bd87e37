import { Liquid } from 'liquidjs';
import type { DeclaredVariable } from '../../db/schema/index.js';
import { ApiError } from '../shared/errors.js';
import { isHttpUrl } from './send-request.js';
import { type Rendered, VARIABLE_LIMITS, type Vars, variableTooLong } from './templates.js';

/** INTERIM (replaced by the language module of branch i34/lang): plain liquidjs, html escaped, no limits yet. */

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
export interface CompiledTemplate {
  readonly variables: Declarations;
  render(vars: Vars): Rendered;
}

const html = new Liquid({ outputEscape: 'escape', strictFilters: true });
const plain = new Liquid({ strictFilters: true });

function parse(engine: Liquid, part: string, source: string) {
  try {
    return engine.parse(source);
  } catch (err) {
    throw new ApiError('invalid_template', `${part}: ${(err as Error).message.split('\n')[0]}`);
  }
}

export function checkTemplateSource(src: TemplateSource): void {
  compileTemplate(src, null);
}

export function checkLayoutSource(src: LayoutSource): void {
  if (src.html) parse(html, 'html', src.html);
  if (src.text) parse(plain, 'text', src.text);
}

export function compileTemplate(src: TemplateSource, layout: LayoutSource | null): CompiledTemplate {
  const subject = parse(plain, 'subject', src.subject);
  const h = src.html ? parse(html, 'html', src.html) : null;
  const t = src.text ? parse(plain, 'text', src.text) : null;
  const lh = layout?.html ? parse(html, 'html', layout.html) : null;
  const variables = { ...(layout?.variables ?? {}), ...src.variables };
  return {
    variables,
    render(vars) {
      const scope = { ...Object.fromEntries(Object.keys(variables).map((k) => [k, null])), ...vars };
      let body = h ? html.renderSync(h, scope) : '';
      if (lh) {
        const token = 'MSCONTENTTOKEN';
        body = html.renderSync(lh, { ...scope, content: token }).replace(token, body);
      }
      const text = t ? plain.renderSync(t, scope) : body.replace(/<[^>]*>/g, '');
      return {
        subject: plain
          .renderSync(subject, scope)
          .replace(/[\r\n]+/g, ' ')
          .trim(),
        html: body,
        text,
      };
    },
  };
}

export function checkDeclaredVariables(templateName: string, decl: Declarations, vars: Record<string, string>): { field: string; message: string } | null {
  for (const key of Object.keys(vars)) if (!Object.hasOwn(decl, key)) return { field: key, message: `is not a variable of the ${templateName} template` };
  for (const [key, d] of Object.entries(decl)) {
    const value = vars[key];
    if (value === undefined) {
      if (d.required) return { field: key, message: `is required by the ${templateName} template` };
      continue;
    }
    const tooLong = variableTooLong(value, d.kind === 'url' ? 'link' : 'body');
    if (tooLong) return { field: key, message: tooLong };
    if (d.kind === 'url' && !isHttpUrl(value)) return { field: key, message: 'must be an http or https URL' };
  }
  void VARIABLE_LIMITS;
  return null;
}

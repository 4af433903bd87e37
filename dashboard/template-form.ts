import type { DeclaredVariable, TemplateKind } from '../db/schema/index.js';
import type { TemplateVariableView } from '../server/core/template-catalog.js';
import type { ApiError } from '../server/shared/errors.js';

/**
 * The template editor's form as plain data: what the operator typed (kept as typed when a save is refused), the body
 * it makes for the API's own schema (createTemplateBody, replaceTemplateBody), the sample values of a preview or a test
 * send, and where on the form a refusal belongs. No Hono, no store: the pages and actions call these.
 */

export interface VariableRow {
  name: string;
  required: boolean;
  kind: DeclaredVariable['kind'];
}

export interface EditorFields {
  name: string;
  kind: TemplateKind;
  subject: string;
  html: string;
  text: string;
  /** The name of a layout, or '' for none. */
  layout: string;
  variables: VariableRow[];
}

/** The fields of the form a refusal can name; anything else is shown above the form. */
export const EDITOR_FIELDS = ['name', 'kind', 'subject', 'html', 'text', 'layout', 'variables'] as const;
export type EditorField = (typeof EDITOR_FIELDS)[number];

/** Blank variable rows the editor offers beyond the declared ones (a preview adds more: no script needed). */
export const BLANK_VARIABLE_ROWS = 2;
/** The most variable rows a form is read for. */
export const MAX_VARIABLE_ROWS = 100;

export const emptyFields = (): EditorFields => ({ name: '', kind: 'template', subject: '', html: '', text: '', layout: '', variables: [] });

/** The editor's fields from a posted form (`var.N.name`, `var.N.required`, `var.N.kind` for the variable rows). */
export function fieldsFromForm(form: Record<string, string>): EditorFields {
  const variables: VariableRow[] = [];
  for (let i = 0; i < MAX_VARIABLE_ROWS; i++) {
    const name = (form[`var.${i}.name`] ?? '').trim();
    if (name === '') continue;
    variables.push({ name, required: form[`var.${i}.required`] !== undefined, kind: form[`var.${i}.kind`] === 'url' ? 'url' : 'text' });
  }
  return {
    name: (form.name ?? '').trim(),
    kind: form.kind === 'layout' ? 'layout' : 'template',
    subject: form.subject ?? '',
    html: normaliseNewlines(form.html ?? ''),
    text: normaliseNewlines(form.text ?? ''),
    layout: form.layout ?? '',
    variables,
  };
}

/** A browser posts a textarea's newlines as CRLF; the source keeps LF, as an API client would send it. */
function normaliseNewlines(value: string): string {
  return value.replace(/\r\n?/g, '\n');
}

/** The editor's fields from a saved template or version (as the catalog shows it). */
export function fieldsFromSource(
  name: string,
  kind: TemplateKind,
  source: {
    subject: string | null;
    html: string | null;
    text: string | null;
    layout: string | null;
    variables: Record<string, Pick<TemplateVariableView, 'required' | 'kind'>>;
  },
): EditorFields {
  return {
    name,
    kind,
    subject: source.subject ?? '',
    html: source.html ?? '',
    text: source.text ?? '',
    layout: source.layout ?? '',
    variables: Object.entries(source.variables).map(([n, v]) => ({ name: n, required: v.required, kind: v.kind })),
  };
}

/**
 * The request body the fields make, as an API client would send it: an empty part is left out (the API refuses an
 * empty string), a variable named twice is kept twice in `duplicates` for the caller to refuse.
 */
export function bodyFromFields(fields: EditorFields, withName: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = { kind: fields.kind };
  if (withName) body.name = fields.name;
  if (fields.subject !== '') body.subject = fields.subject;
  if (fields.html !== '') body.html = fields.html;
  if (fields.text !== '') body.text = fields.text;
  if (fields.layout !== '') body.layout = fields.layout;
  body.variables = Object.fromEntries(fields.variables.map((v) => [v.name, { required: v.required, kind: v.kind }]));
  return body;
}

/** The first variable name declared twice, or null. */
export function duplicateVariable(fields: EditorFields): string | null {
  const seen = new Set<string>();
  for (const v of fields.variables) {
    if (seen.has(v.name)) return v.name;
    seen.add(v.name);
  }
  return null;
}

/** A sample value per declared variable: a text variable its name in brackets, a URL one https://example.com/. */
export function sampleValues(variables: Record<string, Pick<DeclaredVariable, 'kind'>> | readonly VariableRow[]): Record<string, string> {
  const rows = Array.isArray(variables) ? (variables as readonly VariableRow[]) : Object.entries(variables).map(([name, v]) => ({ name, kind: v.kind }));
  return Object.fromEntries(rows.map((v) => [v.name, v.kind === 'url' ? 'https://example.com/' : `[${v.name}]`]));
}

/** Refusals whose message names no field but which belong to one: a name taken (by the account or a built-in). */
const FIELD_OF_CODE: Partial<Record<string, EditorField>> = { template_exists: 'name' };

/** A refusal placed on the form: the field it names (or null: above the form), the line and column it gives. */
export interface FieldError {
  field: EditorField | null;
  line: number | null;
  column: number | null;
  code: string;
  message: string;
}

/**
 * Where a refusal belongs. The API's messages start with the field they name (`html: line 3, column 14: ...`,
 * `subject: is required`, `variables.x.kind: must be text or url`); the line and column follow the field, or (in the
 * engine's own words) sit at the end as `line:3, col:14`.
 */
export function fieldErrorOf(err: Pick<ApiError, 'code' | 'message'>): FieldError {
  const m = /^([a-z]+)(?:\.[^:\s]+)?: /.exec(err.message);
  const named = m?.[1];
  const field = named !== undefined && (EDITOR_FIELDS as readonly string[]).includes(named) ? (named as EditorField) : (FIELD_OF_CODE[err.code] ?? null);
  const at = /^[a-z.]+: line (\d+)(?:, column (\d+))?/.exec(err.message) ?? /\bline:\s?(\d+)(?:, col:\s?(\d+))?/.exec(err.message);
  return {
    field,
    line: at ? Number(at[1]) : null,
    column: at?.[2] !== undefined ? Number(at[2]) : null,
    code: err.code,
    message: err.message,
  };
}

/** The text of line `line` (from 1) of `source`, or null when there is no such line. */
export function lineOf(source: string, line: number): string | null {
  const lines = source.split('\n');
  return line >= 1 && line <= lines.length ? lines[line - 1]! : null;
}

import { z } from 'zod';
import { TEMPLATE_KINDS } from '../../db/schema/index.js';
import type { TemplateInput } from './own-templates.js';
import { templateVariables } from './send-request.js';
import { TEMPLATE_NAME } from './template-name.js';

/** The bodies of POST and PUT /templates and of a preview's unsaved source (docs/api/decisions.md section 9). */

const templateName = z.string().regex(TEMPLATE_NAME, 'must be 1 to 64 of a-z, 0-9 and -, starting with a letter or a digit');

const part = z.string().min(1, 'must not be empty (leave it out instead)');

const declaredVariable = z.strictObject({
  required: z.boolean().optional(),
  kind: z.enum(['text', 'url'], { error: 'must be text or url' }).optional(),
});

/** Declared variables: `required` defaults to false, `kind` to text (the names are the language's to check). */
const variables = z
  .record(z.string(), declaredVariable)
  .transform((v) => Object.fromEntries(Object.entries(v).map(([name, d]) => [name, { required: d.required ?? false, kind: d.kind ?? 'text' }] as const)));

const source = {
  kind: z.enum(TEMPLATE_KINDS, { error: 'must be template or layout' }).optional(),
  subject: part.optional(),
  html: part.optional(),
  text: part.optional(),
  layout: templateName.nullable().optional(),
  variables: variables.optional(),
};

export const createTemplateBody = z.strictObject({ name: templateName, ...source });

/** PUT: the whole source again; `name`, when given, must be the path's (a template is not renamed). */
export const replaceTemplateBody = z.strictObject({ name: templateName.optional(), ...source });

/** An unsaved source to preview: a template's body without its name. */
export const unsavedSourceBody = z.strictObject(source);

/** A preview with an unsaved source: `{ source, variables }` (a variable is a string, so no variable is an object). */
export const renderWithSourceBody = z.strictObject({ source: unsavedSourceBody, variables: templateVariables.optional() });

/**
 * The body of POST /templates/{name}/render, for the API document: the variables as a send's `template` holds them
 * (without `name`), or `{ source, variables }`. The route tells the two apart by `source` being an object, and checks
 * flat variables by the named template's own rules.
 */
export const renderTemplateBody = z.union([templateVariables, renderWithSourceBody]);

type SourceFields = z.output<typeof unsavedSourceBody>;

/** The source as the store takes it; `kind` null when not given (a new one is a template, a replaced one keeps its own). */
export function toTemplateInput(body: SourceFields): Omit<TemplateInput, 'kind'> & { kind: TemplateInput['kind'] | null } {
  return {
    kind: body.kind ?? null,
    subject: body.subject ?? null,
    html: body.html ?? null,
    text: body.text ?? null,
    layout: body.layout ?? null,
    variables: body.variables ?? {},
  };
}

import { renderChecked } from './send-request.js';
import { type Rendered, TEMPLATES, VARIABLE_LIMITS, type VariableKind, type Vars } from './templates.js';

/** GET /templates and POST /templates/{name}/render: the built-in templates as a client sees them, and a dry render. */

export interface TemplateVariableView {
  name: string;
  required: boolean;
  /** `url`: must be an http or https URL. */
  kind: VariableKind;
  /** The longest value accepted, counted in `lengthUnit`. */
  maxLength: number;
  lengthUnit: 'characters' | 'bytes';
}

export interface TemplateView {
  name: string;
  description: string;
  variables: TemplateVariableView[];
}

/** Every built-in template with its variables, in the order of the templates table (a fixed list, not paged). */
export function listTemplates(): { data: TemplateView[] } {
  return {
    data: Object.entries(TEMPLATES).map(([name, def]) => ({
      name,
      description: def.description,
      variables: Object.entries(def.variables).map(([variable, spec]) => ({
        name: variable,
        required: spec.required,
        kind: spec.kind,
        maxLength: VARIABLE_LIMITS[spec.limit].max,
        lengthUnit: VARIABLE_LIMITS[spec.limit].unit,
      })),
    })),
  };
}

/**
 * The message a send of this template would carry, rendered exactly as the send path renders it (the same size rule);
 * nothing is sent, logged, counted or charged. `vars` were validated by `templateVariablesInput(name)`.
 */
export function renderPreview(name: string, vars: Vars): Rendered {
  return renderChecked({ name, vars });
}

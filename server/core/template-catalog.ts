import type { Db } from '../../db/client.js';
import type { AccountRow, DeclaredVariable, TemplateKind, TemplateVersionRow } from '../../db/schema/index.js';
import { iso } from '../shared/clock.js';
import { ApiError } from '../shared/errors.js';
import { BUILT_IN_SOURCES } from './built-in-sources.js';
import {
  type OwnTemplate,
  type TemplateInput,
  compileUnsaved,
  findOwnTemplate,
  listOwnTemplates,
  templateNotFound,
  templateVersionsOf,
} from './own-templates.js';
import { assertRenderedSize, renderChecked } from './send-request.js';
import { checkDeclaredVariables } from './template-language.js';
import { TEMPLATE_NAME } from './template-name.js';
import { type Rendered, TEMPLATES, VARIABLE_LIMITS, type VariableLimit, type Vars, findTemplate } from './templates.js';

/**
 * GET /templates and its neighbours: the built-in templates and the account's own as one kind of object
 * (docs/api/decisions.md section 9), and a dry render. Built-ins show their source as Liquid, so a team can copy one.
 */

export interface TemplateVariableView {
  required: boolean;
  /** `url`: must be an http or https URL. */
  kind: DeclaredVariable['kind'];
  /** The longest value accepted, counted in `lengthUnit`. */
  maxLength: number;
  lengthUnit: 'characters' | 'bytes';
}

export interface TemplateView {
  name: string;
  kind: TemplateKind;
  /** A template of the service, read-only. */
  builtIn: boolean;
  /** The parent account's, read-only for this sub-account (it may save its own under the same name). */
  inherited: boolean;
  /** What a built-in is for; null for an account's own. */
  description: string | null;
  subject: string | null;
  html: string | null;
  text: string | null;
  layout: string | null;
  variables: Record<string, TemplateVariableView>;
  /** From 1; null for a built-in. */
  version: number | null;
  createdAt: string | null;
  updatedAt: string | null;
}

export interface TemplateVersionView {
  version: number;
  subject: string | null;
  html: string | null;
  text: string | null;
  layout: string | null;
  variables: Record<string, TemplateVariableView>;
  createdAt: string;
}

/** An own template's variable limit: a link's for a URL, free body text's for text. */
export const OWN_VARIABLE_LIMIT: Record<DeclaredVariable['kind'], VariableLimit> = { text: 'body', url: 'link' };

function variableView(required: boolean, kind: DeclaredVariable['kind'], limit: VariableLimit): TemplateVariableView {
  return { required, kind, maxLength: VARIABLE_LIMITS[limit].max, lengthUnit: VARIABLE_LIMITS[limit].unit };
}

function ownVariables(declared: Record<string, DeclaredVariable>): Record<string, TemplateVariableView> {
  return Object.fromEntries(Object.entries(declared).map(([name, d]) => [name, variableView(d.required, d.kind, OWN_VARIABLE_LIMIT[d.kind])]));
}

function builtInView(name: string): TemplateView {
  const def = TEMPLATES[name]!;
  const source = BUILT_IN_SOURCES[name]!;
  return {
    name,
    kind: 'template',
    builtIn: true,
    inherited: false,
    description: def.description,
    subject: source.subject,
    html: source.html,
    text: source.text,
    layout: null,
    variables: Object.fromEntries(Object.entries(def.variables).map(([v, spec]) => [v, variableView(spec.required, spec.kind, spec.limit)])),
    version: null,
    createdAt: null,
    updatedAt: null,
  };
}

/** The built-in templates as GET /templates shows them, in the order of the templates table. */
export function builtInViews(): TemplateView[] {
  return Object.keys(TEMPLATES).map(builtInView);
}

export function ownView(t: OwnTemplate): TemplateView {
  return {
    name: t.row.name,
    kind: t.row.kind,
    builtIn: false,
    inherited: t.origin === 'parent',
    description: null,
    subject: t.version.subject,
    html: t.version.html,
    text: t.version.text,
    layout: t.version.layout,
    variables: ownVariables(t.version.variables),
    version: t.version.version,
    createdAt: iso(t.row.createdAt),
    updatedAt: iso(t.row.updatedAt),
  };
}

export function versionView(v: TemplateVersionRow): TemplateVersionView {
  return {
    version: v.version,
    subject: v.subject,
    html: v.html,
    text: v.text,
    layout: v.layout,
    variables: ownVariables(v.variables),
    createdAt: iso(v.createdAt),
  };
}

/**
 * Every template the account can send or name, sorted by name: the built-ins, its own and (for a sub-account) its
 * parent's that it has not shadowed; those after `after` when paging. At most 6 + 2 x 100 entries, so they are read
 * whole and paged here.
 */
export async function listTemplateViews(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>, after: string | null): Promise<TemplateView[]> {
  const views = [...builtInViews(), ...(await listOwnTemplates(db, account)).map(ownView)];
  views.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return after === null ? views : views.filter((v) => v.name > after);
}

/** GET /templates/{name}: a built-in, or the account's own, or its parent's; else 404 template_not_found. */
export async function getTemplateView(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>, name: string): Promise<TemplateView> {
  if (findTemplate(name)) return builtInView(name);
  const own = await findOwnTemplate(db, account, name);
  if (!own) throw templateNotFound(name);
  return ownView(own);
}

/** GET /templates/{name}/versions: the kept versions, newest first (a built-in has none). */
export async function listVersionViews(
  db: Db,
  account: Pick<AccountRow, 'id' | 'parentId'>,
  name: string,
  before: number | null,
  limit: number,
): Promise<TemplateVersionView[]> {
  if (findTemplate(name)) return [];
  const own = await findOwnTemplate(db, account, name);
  if (!own) throw templateNotFound(name);
  return (await templateVersionsOf(db, own.row.id, before, limit)).map(versionView);
}

/** A preview's request: variables, and an unsaved source when the editor has not saved yet. */
export interface PreviewRequest {
  vars: Vars;
  source: (Omit<TemplateInput, 'kind'> & { kind: TemplateKind | null }) | null;
}

const invalidVariable = (issue: { field: string; message: string }) => new ApiError('invalid_request', `${issue.field}: ${issue.message}`);

/**
 * POST /templates/{name}/render: the message a send of these variables would carry, rendered as the send path renders
 * it (the same variable rules, the same size rule), or an unsaved source rendered for a preview (its name need not be
 * saved yet). A layout renders around a sample paragraph. Nothing is sent, stored, logged, counted or charged.
 */
export async function renderPreview(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>, name: string, req: PreviewRequest): Promise<Rendered> {
  if (req.source) {
    if (!TEMPLATE_NAME.test(name)) throw new ApiError('invalid_request', 'name: must be 1 to 64 of a-z, 0-9 and -, starting with a letter or a digit');
    const compiled = await compileUnsaved(db, account, { ...req.source, kind: req.source.kind ?? 'template' });
    return renderCompiled(name, compiled, req.vars);
  }
  if (findTemplate(name)) return renderChecked({ name, vars: req.vars });
  const own = await findOwnTemplate(db, account, name);
  if (!own) throw templateNotFound(name);
  const v = own.version;
  const compiled = await compileUnsaved(
    db,
    { id: own.row.accountId },
    { kind: own.row.kind, subject: v.subject, html: v.html, text: v.text, layout: v.layout, variables: v.variables },
  );
  return renderCompiled(name, compiled, req.vars);
}

function renderCompiled(name: string, compiled: Awaited<ReturnType<typeof compileUnsaved>>, vars: Vars): Rendered {
  const issue = checkDeclaredVariables(name, compiled.variables, vars);
  if (issue) throw invalidVariable(issue);
  const rendered = compiled.render(vars);
  assertRenderedSize(rendered);
  return rendered;
}

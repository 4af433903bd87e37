import { z } from 'zod';
import type { Db } from '../../db/client.js';
import type { AccountRow } from '../../db/schema/index.js';
import { type Attachment, attachmentsInput, checkInlineReferences } from './attachments.js';
import { findOwnTemplate, resolveOwnTemplate } from './own-templates.js';
import { checkDeclaredVariables } from './template-language.js';
import { ApiError } from '../shared/errors.js';
import { type Mailbox, parseAddress, parseMailbox } from './addresses.js';
import { TEMPLATE_NAME } from './template-name.js';
import {
  MAX_RENDERED_BYTES,
  type Rendered,
  TEMPLATES,
  type TemplateDef,
  type Vars,
  findTemplate,
  renderTemplate,
  renderedBytes,
  variableTooLong,
} from './templates.js';
import { isHttpUrl } from './http-url.js';

/** The send request of docs/api/contract.md and docs/api/decisions.md section 2, validated field by field in the order written. */

export const MAX_RECIPIENTS = 50;
export const MAX_TAGS = 10;
export const MAX_TAG_VALUE = 256;
/** `from` and `replyTo` as given: one header line. What is kept is shorter still (parsed, 80-character name). */
export const MAX_MAILBOX_INPUT = 998;
/** A recipient as given (RFC 5321 caps a path at 256 octets; surrounding spaces are trimmed). */
export const MAX_RECIPIENT_INPUT = 320;

/** A field name for a message: a long unknown key is cut, so an error never echoes a huge input. */
const fieldName = (key: string): string => (key.length > 64 ? `${key.slice(0, 64)}…` : key);

const mailbox = z
  .string()
  .max(MAX_MAILBOX_INPUT, `must be at most ${MAX_MAILBOX_INPUT} characters`)
  .transform((v, ctx): Mailbox => {
    const r = parseMailbox(v);
    if (!r.ok) {
      ctx.addIssue({ code: 'custom', message: r.reason });
      return z.NEVER;
    }
    return r.value;
  });

const recipient = z
  .string()
  .max(MAX_RECIPIENT_INPUT, `must be at most ${MAX_RECIPIENT_INPUT} characters`)
  .transform((v, ctx) => {
    if (/[,<>]/.test(v)) {
      ctx.addIssue({ code: 'custom', message: 'must be one bare address' });
      return z.NEVER;
    }
    const r = parseAddress(v);
    if (!r.ok) {
      ctx.addIssue({ code: 'custom', message: r.reason });
      return z.NEVER;
    }
    return r.value;
  });

const variableValue = z.string({ error: 'must be a string' });

const UNKNOWN_TEMPLATE = `must be one of ${Object.keys(TEMPLATES).join(', ')}`;

/** A send's template that is neither a built-in nor a name an account's own template can have. */
export const UNKNOWN_OWN_TEMPLATE = `must be a built-in template (${Object.keys(TEMPLATES).join(', ')}) or the name of one of this account's own templates`;

/**
 * The rules of a template's variables, for a send's `template` and for POST /templates/{name}/render alike: an unknown
 * template is an issue at `name`; then each given key must be a variable of the template, each required variable
 * given, each value within its declared limit, each link an http(s) URL. Issues name the variable.
 */
function checkTemplateVariables(name: string, vars: Record<string, string>, ctx: z.RefinementCtx): void {
  const def = findTemplate(name);
  if (!def) {
    ctx.addIssue({ code: 'custom', path: ['name'], message: UNKNOWN_TEMPLATE });
    return;
  }
  checkBuiltInVariables(name, def, vars, ctx);
}

function checkBuiltInVariables(name: string, def: TemplateDef, vars: Record<string, string>, ctx: z.RefinementCtx): void {
  for (const key of Object.keys(vars)) {
    if (!Object.hasOwn(def.variables, key)) ctx.addIssue({ code: 'custom', path: [fieldName(key)], message: `is not a variable of the ${name} template` });
  }
  for (const [key, spec] of Object.entries(def.variables)) {
    const value = vars[key];
    if (value === undefined) {
      if (spec.required) ctx.addIssue({ code: 'custom', path: [key], message: `is required by the ${name} template` });
      continue;
    }
    // The length first: a URL check need not parse a megabyte.
    const tooLong = variableTooLong(value, spec.limit);
    if (tooLong) ctx.addIssue({ code: 'custom', path: [key], message: tooLong });
    else if (spec.kind === 'url' && !isHttpUrl(value)) ctx.addIssue({ code: 'custom', path: [key], message: 'must be an http or https URL' });
  }
}

/**
 * A send's `template`: `name` plus the variables of that template. A built-in's variables are checked here, field by
 * field; another name is an account's own template (docs/api/decisions.md section 9), looked up and checked by the
 * core at check 5, since which templates exist depends on the acting account.
 */
const templateInput = z
  .object({ name: variableValue })
  .catchall(variableValue)
  .superRefine(({ name, ...vars }, ctx) => {
    const def = findTemplate(name);
    if (def) checkBuiltInVariables(name, def, vars, ctx);
    else if (!TEMPLATE_NAME.test(name)) ctx.addIssue({ code: 'custom', path: ['name'], message: UNKNOWN_OWN_TEMPLATE });
  });

/** A flat object of string variables: a send's `template` without `name`. */
export const templateVariables = z.object({}).catchall(variableValue);

/**
 * The body of POST /templates/{name}/render: a send's `template` without `name`, the path naming the template (an
 * unknown one is an issue at `name`, as in a send). A `name` key in the body is not a variable of any template.
 */
export function templateVariablesInput(name: string) {
  return templateVariables.superRefine((vars, ctx) => checkTemplateVariables(name, vars, ctx));
}

/** Code points in `text`, counting no further than a limit needs. */
function codePoints(text: string): number {
  if (text.length <= MAX_TAG_VALUE) return text.length;
  let n = 0;
  for (const _ of text) n++;
  return n;
}

const tags = z.record(z.string(), z.string()).superRefine((t, ctx) => {
  const keys = Object.keys(t);
  if (keys.length > MAX_TAGS) ctx.addIssue({ code: 'custom', message: `must have at most ${MAX_TAGS} entries` });
  for (const key of keys) {
    if (!/^[A-Za-z0-9_-]{1,40}$/.test(key)) ctx.addIssue({ code: 'custom', path: [fieldName(key)], message: 'tag names are 1 to 40 of A-Z a-z 0-9 _ -' });
    // Characters are code points, as for every other length the API states (an emoji is one, not two).
    else if (codePoints(t[key]!) > MAX_TAG_VALUE) ctx.addIssue({ code: 'custom', path: [key], message: `must be at most ${MAX_TAG_VALUE} characters` });
  }
});

export const sendRequestSchema = z.strictObject({
  from: mailbox,
  // One address is the same as a list of one.
  to: z.preprocess(
    (v) => (typeof v === 'string' ? [v] : v),
    z
      .array(recipient, { error: (issue) => (issue.input === undefined ? undefined : 'must be an address or an array of 1 to 50 addresses') })
      .min(1, 'must name 1 to 50 recipients')
      .max(MAX_RECIPIENTS, 'must name 1 to 50 recipients'),
  ),
  replyTo: mailbox.optional(),
  template: templateInput,
  tags: tags.optional(),
  sandbox: z.boolean().optional(),
  attachments: attachmentsInput.optional(),
});

export interface SendRequest {
  from: Mailbox;
  /** De-duplicated (compared lower-cased), in the order given. */
  to: { address: string; domain: string }[];
  replyTo: Mailbox | null;
  template: { name: string; vars: Vars };
  tags: Record<string, string> | null;
  sandbox: boolean;
  /** Decoded; an empty list when none were given (docs/api/decisions.md section 9). */
  attachments: Attachment[];
}

export function toSendRequest(parsed: z.output<typeof sendRequestSchema>): SendRequest {
  const seen = new Set<string>();
  const to = parsed.to.filter((r) => {
    const k = r.address.toLowerCase();
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
  const { name, ...vars } = parsed.template;
  return {
    from: parsed.from,
    to,
    replyTo: parsed.replyTo ?? null,
    template: { name, vars },
    tags: parsed.tags ?? null,
    sandbox: parsed.sandbox ?? false,
    attachments: parsed.attachments ?? [],
  };
}

/** A send's message as rendered, and the version of the account's own template that rendered it (null: a built-in). */
export interface SendContent {
  rendered: Rendered;
  templateVersion: number | null;
}

/**
 * The send's message, rendered (check 5): a built-in by name, else the acting account's own template of that name,
 * else its parent's (docs/api/decisions.md section 9), its variables checked against what it declares. One over
 * MAX_RENDERED_BYTES (subject, html and text together) is refused.
 */
export async function renderSend(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>, send: SendRequest): Promise<SendContent> {
  const content = await renderTemplateOf(db, account, send.template);
  // An inline part must be shown by the html it belongs to.
  const unreferenced = checkInlineReferences(content.rendered.html, send.attachments);
  if (unreferenced) throw new ApiError('invalid_request', `${unreferenced.field}: ${unreferenced.message}`);
  return content;
}

async function renderTemplateOf(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>, template: SendRequest['template']): Promise<SendContent> {
  const { name, vars } = template;
  if (findTemplate(name)) return { rendered: renderChecked(template), templateVersion: null };
  const own = await resolveOwnTemplate(db, account, name);
  if (!own) {
    const layout = (await findOwnTemplate(db, account, name))?.row.kind === 'layout';
    throw new ApiError('invalid_request', `template.name: ${layout ? `${name} is a layout: send a template that names it` : UNKNOWN_OWN_TEMPLATE}`);
  }
  const issue = checkDeclaredVariables(name, own.variables, vars);
  if (issue) throw new ApiError('invalid_request', `template.${fieldName(issue.field)}: ${issue.message}`);
  const rendered = own.compiled.render(vars);
  assertRenderedSize(rendered);
  return { rendered, templateVersion: own.version };
}

/** A validated template rendered, refused when over MAX_RENDERED_BYTES (subject, html and text together). */
export function renderChecked(template: { name: string; vars: Vars }): Rendered {
  const rendered = renderTemplate(template.name, template.vars);
  assertRenderedSize(rendered);
  return rendered;
}

export function assertRenderedSize(rendered: Rendered): void {
  const size = renderedBytes(rendered);
  if (size > MAX_RENDERED_BYTES) {
    throw new ApiError(
      'invalid_request',
      `template: the rendered message (subject, html and text) must be at most 1 MB (${MAX_RENDERED_BYTES} bytes); this one is ${size} bytes`,
    );
  }
}

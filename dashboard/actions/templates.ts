import type { AccountRow } from '../../db/schema/index.js';
import { readSendRequest } from '../../server/api/routes/emails.js';
import type { Deps } from '../../server/core/deps.js';
import { listDomains } from '../../server/core/domains.js';
import { type OwnTemplate, createTemplate, deleteTemplate, findOwnTemplate, replaceTemplate, templateVersionsOf } from '../../server/core/own-templates.js';
import { type TemplateView, getTemplateView, renderPreview } from '../../server/core/template-catalog.js';
import { createTemplateBody, replaceTemplateBody, toTemplateInput } from '../../server/core/template-input.js';
import type { Rendered } from '../../server/core/templates.js';
import { sendEmail } from '../../server/core/sending.js';
import { isSimulatorAddress } from '../../server/core/simulator.js';
import type { Config } from '../../server/shared/config.js';
import { ApiError } from '../../server/shared/errors.js';
import { parseInput } from '../../server/api/http/validate.js';
import { operatorContext } from '../on-behalf.js';
import type { Outcome } from '../render.js';
import { type EditorFields, bodyFromFields, duplicateVariable, sampleValues } from '../template-form.js';

/**
 * The Templates page's actions, each through the function POST, PUT and DELETE /templates and
 * POST /templates/{name}/render call, with the form read by the API's own body schemas: the dashboard refuses what
 * the API refuses, in its words. A refusal is an ApiError, which the page places on its form.
 */

/** The paths of the Templates pages for an account. */
export const templatesPath = (accountId: string) => `/dashboard/templates?account=${accountId}`;
export const newTemplatePath = (accountId: string) => `/dashboard/templates/${accountId}/new`;
export const templatePath = (accountId: string, name: string) => `/dashboard/templates/${accountId}/edit/${name}`;
export const versionsPath = (accountId: string, name: string) => `/dashboard/templates/${accountId}/versions/${name}`;

function checkedBody(fields: EditorFields, withName: boolean) {
  const twice = duplicateVariable(fields);
  if (twice !== null) throw new ApiError('invalid_request', `variables: ${twice} is declared twice`);
  return bodyFromFields(fields, withName);
}

/** POST /templates (`existing` null) or PUT /templates/{existing}: the saved template, or the API's refusal thrown. */
export async function saveTemplate(deps: Pick<Deps, 'clock' | 'db'>, account: AccountRow, existing: string | null, fields: EditorFields): Promise<OwnTemplate> {
  if (existing === null) {
    const body = parseInput(createTemplateBody, checkedBody(fields, true), 'form');
    const given = toTemplateInput(body);
    return await createTemplate(deps.db, deps.clock, account, body.name, { ...given, kind: given.kind ?? 'template' });
  }
  const body = parseInput(replaceTemplateBody, checkedBody(fields, false), 'form');
  return await replaceTemplate(deps.db, deps.clock, account, existing, toTemplateInput(body));
}

/** The name a preview renders under: the typed one, or a stand-in while the name is blank or not yet valid. */
const PREVIEW_NAME = 'preview';

/** POST /templates/{name}/render with the unsaved source and a sample value per declared variable. */
export async function previewTemplate(deps: Pick<Deps, 'db'>, account: AccountRow, fields: EditorFields): Promise<Rendered> {
  const body = parseInput(createTemplateBody, checkedBody({ ...fields, name: PREVIEW_NAME }, true), 'form');
  const { name: _name, ...source } = body;
  return await renderPreview(deps.db, account, PREVIEW_NAME, { vars: sampleValues(fields.variables), source: toTemplateInput(source) });
}

/** DELETE /templates/{name}; a layout still named answers 409 template_in_use, flashed with its message. */
export async function deleteOwnTemplate(deps: Pick<Deps, 'db'>, account: AccountRow, name: string): Promise<Outcome> {
  await deleteTemplate(deps.db, account, name);
  return { kind: 'ok', message: `Deleted ${name} and its versions from ${account.name}.`, to: templatesPath(account.id) };
}

/** PUT /templates/{name} with the source of a kept version: the current one becomes a version, the restored one the newest. */
export async function restoreVersion(deps: Pick<Deps, 'clock' | 'db'>, account: AccountRow, name: string, version: number): Promise<Outcome> {
  const own = await findOwnTemplate(deps.db, account, name);
  if (own?.origin !== 'own') throw new ApiError('template_not_found', `No template named ${name} on this account.`);
  const kept = Number.isSafeInteger(version) ? (await templateVersionsOf(deps.db, own.row.id, version + 1, 1))[0] : undefined;
  if (!kept || kept.version !== version) throw new ApiError('not_found', `Version ${version} of ${name} is not kept (the newest 50 are).`);
  const saved = await replaceTemplate(deps.db, deps.clock, account, name, {
    kind: null,
    subject: kept.subject,
    html: kept.html,
    text: kept.text,
    layout: kept.layout,
    variables: kept.variables,
  });
  return { kind: 'ok', message: `Version ${version} of ${name} restored as version ${saved.version.version}.`, to: versionsPath(account.id, name) };
}

/** How a test send of a template goes: captured when the server captures all mail, else a sandbox send. */
export type TemplateTestMode = 'capture' | 'sandbox';

export function templateTestMode(config: Pick<Config, 'deliveryMode'>): TemplateTestMode {
  return config.deliveryMode === 'capture' ? 'capture' : 'sandbox';
}

/** The sender a test send offers: test@ the account's first domain that may send (else its first domain). */
export async function defaultTestSender(deps: Pick<Deps, 'config' | 'db'>, account: AccountRow): Promise<string> {
  const domains = await listDomains({ deps, ctx: operatorContext(account), page: { after: null, limit: 50 } });
  const domain = domains.find((d) => d.sending) ?? domains[0];
  return domain ? `test@${domain.name}` : '';
}

/** The send request of a test send, as a client would post it to POST /emails. */
export function templateTestRequest(view: Pick<TemplateView, 'name' | 'variables'>, from: string, to: string, mode: TemplateTestMode) {
  return {
    from,
    to,
    template: { name: view.name, ...sampleValues(view.variables) },
    tags: { source: 'dashboard-test' },
    ...(mode === 'sandbox' ? { sandbox: true } : {}),
  };
}

/**
 * "Send a test": the saved template with its sample values through POST /emails's own path (readSendRequest, then
 * sendEmail), as the account: a sandbox send (every check, nothing sent or charged), or in capture mode a send that
 * is captured. The email's id is linked.
 */
export async function sendTemplateTest(deps: Deps, account: AccountRow, name: string, from: string, to: string): Promise<Outcome> {
  const view = await getTemplateView(deps.db, account, name);
  if (view.kind === 'layout') throw new ApiError('invalid_request', 'A layout is not sent on its own: send a template that names it.');
  const mode = templateTestMode(deps.config);
  const rawBody = Buffer.from(JSON.stringify(templateTestRequest(view, from, to, mode)));
  let id: string;
  try {
    ({ id } = (await sendEmail({ deps, ctx: operatorContext(account), rawBody, body: readSendRequest(rawBody), idempotencyKey: null })).result);
  } catch (err) {
    if (!(err instanceof ApiError) || err.code === 'internal_error') throw err;
    return { kind: 'error', message: `The test send was refused as POST /emails refuses it: ${err.status} ${err.code}: ${err.message}` };
  }
  const email = { href: `/dashboard/emails/${id}`, label: `Open email ${id} in the send log` };
  if (mode === 'sandbox') {
    return { kind: 'ok', message: `Sandboxed: email ${id}, ${name} to ${to}, passed every check of POST /emails; nothing was sent.`, links: [email] };
  }
  const captured = { href: `/dashboard/captured/${id}`, label: 'Open the captured message' };
  return {
    kind: 'ok',
    message: `Captured: email ${id}, ${name} to ${to}, was signed and kept on this server (capture mode), not delivered.`,
    links: isSimulatorAddress(to) ? [email] : [captured, email],
  };
}

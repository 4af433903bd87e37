import { Hono } from 'hono';
import type { Deps } from '../../core/deps.js';
import { createTemplate, deleteTemplate, replaceTemplate } from '../../core/own-templates.js';
import { templateVariables, templateVariablesInput } from '../../core/send-request.js';
import { getTemplateView, listTemplateViews, listVersionViews, ownView, renderPreview } from '../../core/template-catalog.js';
import { createTemplateBody, renderWithSourceBody, replaceTemplateBody, toTemplateInput } from '../../core/template-input.js';
import { findTemplate } from '../../core/templates.js';
import { ApiError } from '../../shared/errors.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { LISTS, readPage, toPageBy } from '../http/paging.js';
import { parseInput } from '../http/validate.js';

/** The body of a render: the variables as a send's `template` holds them, or `{ source, variables }`. */
function readPreview(name: string, body: unknown) {
  const withSource = typeof body === 'object' && body !== null && !Array.isArray(body) && typeof (body as Record<string, unknown>).source === 'object';
  if (withSource) {
    const parsed = parseInput(renderWithSourceBody, body);
    return { vars: parsed.variables ?? {}, source: toTemplateInput(parsed.source) };
  }
  // A built-in's variables are checked by its own rules, field by field, as a send checks them.
  const vars = findTemplate(name) ? parseInput(templateVariablesInput(name), body) : parseInput(templateVariables, body);
  return { vars, source: null };
}

/**
 * The templates: the built-in catalog and the account's own (docs/api/decisions.md section 9). The catalog and the
 * render keep answering keys that hold `emails:send`, as before own templates.
 */
export function templateRoutes(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'rateLimiter'>) {
  return new Hono<AppEnv>()
    .get('/templates', guard(deps, 'templates:read', 'accepted', 'emails:send'), async (c) => {
      const ctx = c.var.auth;
      const page = await readPage(deps.db, LISTS.templates, ctx.account.id, c.req.query());
      const views = await listTemplateViews(deps.db, ctx.account, page.after);
      return c.json(await toPageBy(deps.db, LISTS.templates, ctx.account.id, page, views, (v) => v.name));
    })
    .post('/templates', guard(deps, 'templates:write'), async (c) => {
      const body = parseInput(createTemplateBody, jsonBody(c.var.rawBody));
      const given = toTemplateInput(body);
      const saved = await createTemplate(deps.db, deps.clock, c.var.auth.account, body.name, { ...given, kind: given.kind ?? 'template' });
      return c.json(ownView(saved), 201);
    })
    .get('/templates/:name', guard(deps, 'templates:read'), async (c) => c.json(await getTemplateView(deps.db, c.var.auth.account, c.req.param('name'))))
    .put('/templates/:name', guard(deps, 'templates:write'), async (c) => {
      const name = c.req.param('name');
      const body = parseInput(replaceTemplateBody, jsonBody(c.var.rawBody));
      if (body.name !== undefined && body.name !== name) throw new ApiError('invalid_request', 'name: must be the name in the path; a template is not renamed');
      return c.json(ownView(await replaceTemplate(deps.db, deps.clock, c.var.auth.account, name, toTemplateInput(body))));
    })
    .delete('/templates/:name', guard(deps, 'templates:write'), async (c) => {
      await deleteTemplate(deps.db, c.var.auth.account, c.req.param('name'));
      return c.body(null, 204);
    })
    .get('/templates/:name/versions', guard(deps, 'templates:read'), async (c) => {
      const ctx = c.var.auth;
      const name = c.req.param('name');
      // A cursor of one template's versions is no cursor of another's.
      const scope = `${ctx.account.id}/${name}`;
      const page = await readPage(deps.db, LISTS.templateVersions, scope, c.req.query());
      const versions = await listVersionViews(deps.db, ctx.account, name, page.after === null ? null : Number(page.after), page.limit + 1);
      return c.json(await toPageBy(deps.db, LISTS.templateVersions, scope, page, versions, (v) => String(v.version)));
    })
    .post('/templates/:name/render', guard(deps, 'templates:read', 'accepted', 'emails:send'), async (c) => {
      const name = c.req.param('name');
      return c.json(await renderPreview(deps.db, c.var.auth.account, name, readPreview(name, jsonBody(c.var.rawBody))));
    });
}

import type { Context } from 'hono';
import { Hono } from 'hono';
import type { AccountRow } from '../../db/schema/index.js';
import type { Deps } from '../../server/core/deps.js';
import { findOwnTemplate, listOwnTemplates } from '../../server/core/own-templates.js';
import { type TemplateView, getTemplateView, listTemplateViews, listVersionViews, ownView } from '../../server/core/template-catalog.js';
import type { Rendered } from '../../server/core/templates.js';
import { ApiError } from '../../server/shared/errors.js';
import {
  defaultTestSender,
  deleteOwnTemplate,
  previewTemplate,
  restoreVersion,
  saveTemplate,
  sendTemplateTest,
  templatePath,
  templateTestMode,
  templatesPath,
} from '../actions/templates.js';
import type { DashEnv } from '../env.js';
import { lineDiff } from '../line-diff.js';
import { accountFilter, requireAccount } from '../on-behalf.js';
import { createPreviewStore } from '../preview-store.js';
import { accountChoices } from '../queries/accounts.js';
import { field, formAction, redirectWithFlash, render } from '../render.js';
import { CAPTURED_HTML_HEADERS } from '../security.js';
import { type EditorFields, type FieldError, emptyFields, fieldErrorOf, fieldsFromForm, fieldsFromSource } from '../template-form.js';
import { DiffSection, type PartDiff, VersionTable } from '../views/template-versions.js';
import { PreviewSection, ReadOnlyTemplate, TemplateAccountPicker, TemplateEditor, TemplateTable, TemplateTools } from '../views/templates.js';

const current = '/dashboard/templates' as const;

/** Every kept version fits one page (section 9 keeps 50). */
const VERSION_PAGE = 50;

/**
 * Templates: for a chosen account (or sub-account), every template it can use (built-ins, its own, its parent's);
 * an editor for its own with a preview in the captured-mail frame, save (a new version each time), the kept versions
 * with a diff and restore, a test send, delete; a built-in or a parent's template read-only, with Duplicate. Each
 * change is the function the templates API calls.
 */
export function templatePages(deps: Deps) {
  const previews = createPreviewStore(deps.clock);

  const layoutsOf = async (account: AccountRow) => (await listOwnTemplates(deps.db, account)).flatMap((t) => (t.row.kind === 'layout' ? [t.row.name] : []));

  /** The editor page, with what was typed, where a refusal belongs, and a preview when one was rendered. */
  const editorPage = async (
    c: Context<DashEnv>,
    account: AccountRow,
    existing: TemplateView | null,
    fields: EditorFields,
    extra: { error?: FieldError | null; preview?: Rendered | null; status?: number } = {},
  ) => {
    const preview = extra.preview ?? null;
    const frameSrc = preview ? `/dashboard/templates/preview/${previews.put(c.var.session.tokenHash, preview.html)}` : '';
    const csrf = c.var.session.csrfToken;
    return render(
      deps,
      c,
      { title: existing ? `Template ${existing.name}` : 'New template', current, status: extra.status },
      <>
        <p>
          <a href={templatesPath(account.id)}>All templates of {account.name}</a>
        </p>
        {preview && <PreviewSection rendered={preview} frameSrc={frameSrc} />}
        <TemplateEditor accountId={account.id} existing={existing} fields={fields} error={extra.error ?? null} layouts={await layoutsOf(account)} csrf={csrf} />
        {existing && (
          <TemplateTools
            accountId={account.id}
            view={existing}
            csrf={csrf}
            mode={templateTestMode(deps.config)}
            from={await defaultTestSender(deps, account)}
            to="you@example.com"
          />
        )}
      </>,
    );
  };

  /** Preview or save the posted form; a refusal (an ApiError) goes back to the editor with the form as typed. */
  const editorPost = async (c: Context<DashEnv>, account: AccountRow, existing: TemplateView | null) => {
    const fields = fieldsFromForm(c.var.form);
    if (existing) fields.name = existing.name;
    try {
      if (field(c, 'intent') === 'preview') return await editorPage(c, account, existing, fields, { preview: await previewTemplate(deps, account, fields) });
      const saved = await saveTemplate(deps, account, existing ? existing.name : null, fields);
      const what = saved.version.version === 1 ? 'Saved' : `Saved as version ${saved.version.version}`;
      return await redirectWithFlash(deps, c, templatePath(account.id, saved.row.name), { kind: 'ok', message: `${what}: ${saved.row.name}.` });
    } catch (err) {
      if (!(err instanceof ApiError) || err.code === 'internal_error') throw err;
      return editorPage(c, account, existing, fields, { error: fieldErrorOf(err), status: err.status });
    }
  };

  /** The account's own template of this name (not a built-in, not its parent's), or the 404 page. */
  const ownOf = async (account: AccountRow, name: string): Promise<TemplateView> => {
    const own = await findOwnTemplate(deps.db, account, name);
    if (own?.origin !== 'own') throw new ApiError('template_not_found', `No template named ${name} on ${account.name}.`);
    return ownView(own);
  };

  return new Hono<DashEnv>()
    .get('/templates/preview/:token', (c) => {
      const html = previews.get(c.var.session.tokenHash, c.req.param('token'));
      // Answered inside the frame (so not the error page, which no frame may show), under the frame's own policy.
      const framed = { ...CAPTURED_HTML_HEADERS, 'X-Frame-Options': 'SAMEORIGIN' };
      if (html === undefined) return c.body('This preview has expired: press Preview again.', 404, { ...framed, 'Content-Type': 'text/plain; charset=utf-8' });
      return c.body(html, 200, { ...framed, 'Content-Type': 'text/html; charset=utf-8' });
    })
    .get('/templates', async (c) => {
      const account = await accountFilter(deps.db, c.req.query('account'));
      const choices = await accountChoices(deps.db, account?.id);
      return render(
        deps,
        c,
        { title: 'Templates', current },
        <>
          <TemplateAccountPicker choices={choices} accountId={account?.id} />
          {account === null ? (
            <p class="muted">Choose the account (or sub-account) whose templates to see: the built-ins, its own, and a sub-account’s parent’s.</p>
          ) : (
            <>
              <p>
                <a class="button" href={`/dashboard/templates/${account.id}/new`}>
                  New template
                </a>
              </p>
              <TemplateTable accountId={account.id} views={await listTemplateViews(deps.db, account, null)} />
            </>
          )}
        </>,
      );
    })
    .get('/templates/:accountId/new', async (c) => {
      const account = await requireAccount(deps.db, c.req.param('accountId'));
      const from = c.req.query('from');
      if (from === undefined) return editorPage(c, account, null, emptyFields());
      // Duplicate: a built-in as <name>-copy; a parent's under its own name (the copy then wins for this account).
      const source = await getTemplateView(deps.db, account, from);
      const name = source.builtIn ? `${source.name}-copy` : source.name;
      return editorPage(c, account, null, fieldsFromSource(name, source.kind, source));
    })
    .post('/templates/:accountId/new', async (c) => editorPost(c, await requireAccount(deps.db, c.req.param('accountId')), null))
    .get('/templates/:accountId/edit/:name', async (c) => {
      const account = await requireAccount(deps.db, c.req.param('accountId'));
      const view = await getTemplateView(deps.db, account, c.req.param('name'));
      if (view.builtIn || view.inherited) {
        return render(
          deps,
          c,
          { title: `Template ${view.name}`, current },
          <>
            <p>
              <a href={templatesPath(account.id)}>All templates of {account.name}</a>
            </p>
            <ReadOnlyTemplate accountId={account.id} view={view} />
          </>,
        );
      }
      return editorPage(c, account, view, fieldsFromSource(view.name, view.kind, view));
    })
    .post('/templates/:accountId/edit/:name', async (c) => {
      const account = await requireAccount(deps.db, c.req.param('accountId'));
      return editorPost(c, account, await ownOf(account, c.req.param('name')));
    })
    .post('/templates/:accountId/delete/:name', async (c) => {
      const account = await requireAccount(deps.db, c.req.param('accountId'));
      const name = c.req.param('name');
      return formAction(deps, c, templatePath(account.id, name), async () => await deleteOwnTemplate(deps, account, name));
    })
    .post('/templates/:accountId/test/:name', async (c) => {
      const account = await requireAccount(deps.db, c.req.param('accountId'));
      const name = c.req.param('name');
      return formAction(deps, c, `${templatePath(account.id, name)}#test`, () => sendTemplateTest(deps, account, name, field(c, 'from'), field(c, 'to')));
    })
    .get('/templates/:accountId/versions/:name', async (c) => {
      const account = await requireAccount(deps.db, c.req.param('accountId'));
      const view = await ownOf(account, c.req.param('name'));
      const versions = await listVersionViews(deps.db, account, view.name, null, VERSION_PAGE);
      const compare = Number(c.req.query('compare') ?? Number.NaN);
      const chosen = versions.find((v) => v.version === compare && v.version !== view.version) ?? null;
      const parts: PartDiff[] = chosen
        ? [
            { part: 'Subject', lines: lineDiff(chosen.subject ?? '', view.subject ?? '') },
            { part: 'HTML', lines: lineDiff(chosen.html ?? '', view.html ?? '') },
            { part: 'Text', lines: lineDiff(chosen.text ?? '', view.text ?? '') },
            { part: 'Layout', lines: lineDiff(chosen.layout ?? '', view.layout ?? '') },
            { part: 'Variables', lines: lineDiff(variablesText(chosen.variables), variablesText(view.variables)) },
          ]
        : [];
      return render(
        deps,
        c,
        { title: `Versions of ${view.name}`, current },
        <>
          <p>
            <a href={templatePath(account.id, view.name)}>Back to {view.name}</a>
          </p>
          <VersionTable
            accountId={account.id}
            name={view.name}
            current={view.version ?? 0}
            versions={versions}
            csrf={c.var.session.csrfToken}
            compared={chosen?.version ?? null}
          />
          {chosen && <DiffSection from={chosen.version} to={view.version ?? 0} parts={parts} />}
        </>,
      );
    })
    .post('/templates/:accountId/versions/:name/restore', async (c) => {
      const account = await requireAccount(deps.db, c.req.param('accountId'));
      const name = c.req.param('name');
      return formAction(
        deps,
        c,
        `/dashboard/templates/${account.id}/versions/${name}`,
        async () => await restoreVersion(deps, account, name, Number(field(c, 'version'))),
      );
    });
}

/** Declared variables as lines (`name: kind, required`), by name, for the diff. */
function variablesText(variables: TemplateView['variables']): string {
  return Object.entries(variables)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([name, v]) => `${name}: ${v.kind}, ${v.required ? 'required' : 'optional'}`)
    .join('\n');
}

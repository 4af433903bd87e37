import type { FC } from 'hono/jsx';
import type { TemplateView } from '../../server/core/template-catalog.js';
import type { Rendered } from '../../server/core/templates.js';
import { type TemplateTestMode, newTemplatePath, templatePath, versionsPath } from '../actions/templates.js';
import type { AccountChoice } from '../queries/accounts.js';
import { BLANK_VARIABLE_ROWS, type EditorField, type EditorFields, type FieldError, lineOf } from '../template-form.js';
import { AccountSelect, Badge, CsrfField, DataTable, Dash, PostButton, Time } from '../ui.js';

/** The Templates pages' parts: the account picker, the list, the editor, a preview, a read-only template, the tools. (The versions page: template-versions.tsx.) */

export const TemplateAccountPicker: FC<{ choices: AccountChoice[]; accountId: string | undefined }> = ({ choices, accountId }) => (
  <form method="get" action="/dashboard/templates" class="panel form-grid" aria-label="Choose an account">
    <div class="field">
      <label for="templates-account">Account</label>
      <AccountSelect
        id="templates-account"
        choices={choices}
        selected={accountId}
        blank={accountId === undefined ? 'Choose an account' : undefined}
        autosubmit
      />
    </div>
    <div class="field">
      <button type="submit">Show templates</button>
    </div>
  </form>
);

const Origin: FC<{ view: TemplateView }> = ({ view }) => (
  <>
    {view.builtIn && <Badge tone="info">Built in</Badge>}
    {view.inherited && <Badge tone="neutral">From the parent account</Badge>}
    {view.kind === 'layout' && <Badge tone="warn">Layout</Badge>}
  </>
);

/** Every template the account can use: built-ins, its own and (a sub-account) its parent's, by name. */
export const TemplateTable: FC<{ accountId: string; views: TemplateView[] }> = ({ accountId, views }) => (
  <DataTable
    caption="Templates the account can use"
    columns={['Name', 'Kind', 'Version', 'Updated']}
    items={views}
    id="template-list"
    row={(v) => (
      <tr>
        <td>
          <a href={templatePath(accountId, v.name)}>{v.name}</a> <Origin view={v} />
        </td>
        <td>{v.kind === 'layout' ? 'Layout' : 'Template'}</td>
        <td>{v.version ?? <Dash />}</td>
        <td>
          <Time at={v.updatedAt} />
        </td>
      </tr>
    )}
  />
);

const errorId = (field: EditorField) => `${field}-error`;

/** A refusal under the field it names: its line and column, the line's text, and the API's message. */
const FieldMessage: FC<{ field: EditorField; error: FieldError | null; source?: string }> = ({ field, error, source }) => {
  if (error?.field !== field) return null;
  const text = error.line !== null && source !== undefined ? lineOf(source, error.line) : null;
  return (
    <div class="field-error" id={errorId(field)}>
      {error.line !== null && (
        <strong>
          Line {error.line}
          {error.column !== null && `, column ${error.column}`}:{' '}
        </strong>
      )}
      {error.message}
      {text !== null && (
        <pre class="error-line">
          <code>{text}</code>
        </pre>
      )}
    </div>
  );
};

/** aria attributes of a field a refusal names. */
const invalid = (field: EditorField, error: FieldError | null) =>
  error?.field === field ? { 'aria-invalid': 'true' as const, 'aria-describedby': errorId(field) } : {};

/**
 * The editor, for a new template (`existing` null: name and kind editable) or a saved one (a save makes a new
 * version). Two submit buttons: Preview renders the unsaved source, Save saves it. Blank variable rows are offered;
 * Preview adds more, so no script is needed.
 */
export const TemplateEditor: FC<{
  accountId: string;
  existing: TemplateView | null;
  fields: EditorFields;
  error: FieldError | null;
  layouts: string[];
  csrf: string;
}> = ({ accountId, existing, fields, error, layouts, csrf }) => {
  const action = existing ? templatePath(accountId, existing.name) : newTemplatePath(accountId);
  const layoutChoices = fields.layout !== '' && !layouts.includes(fields.layout) ? [...layouts, fields.layout] : layouts;
  const rows = [...fields.variables, ...Array.from({ length: BLANK_VARIABLE_ROWS }, () => ({ name: '', required: false, kind: 'text' as const }))];
  return (
    <section class="panel" aria-labelledby="editor-heading" id="editor">
      <h2 id="editor-heading">{existing ? `Edit ${existing.name} (version ${existing.version})` : 'New template'}</h2>
      {error !== null && error.field === null && (
        <div class="flash error" role="alert">
          <div>{error.message}</div>
        </div>
      )}
      {error !== null && error.field !== null && (
        <div class="flash error" role="alert">
          <div>
            Not saved: <a href={`#${error.field}`}>{error.field}</a> has a problem{error.line !== null ? ` at line ${error.line}` : ''}. What you typed is kept
            below.
          </div>
        </div>
      )}
      <form method="post" action={action} class="template-editor">
        <CsrfField token={csrf} />
        {existing ? (
          <p>
            <strong>{existing.kind === 'layout' ? 'Layout' : 'Template'}</strong> <code>{existing.name}</code>
            <input type="hidden" name="kind" value={existing.kind} />
          </p>
        ) : (
          <div class="form-grid">
            <div class="field">
              <label for="name">Name</label>
              <input id="name" name="name" type="text" required maxlength={64} value={fields.name} {...invalid('name', error)} />
              <span class="hint">a-z, 0-9 and -, starting with a letter or digit</span>
              <FieldMessage field="name" error={error} />
            </div>
            <div class="field">
              <label for="kind">Kind</label>
              <select id="kind" name="kind" {...invalid('kind', error)}>
                <option value="template" selected={fields.kind === 'template'}>
                  Template
                </option>
                <option value="layout" selected={fields.kind === 'layout'}>
                  Layout (holds {'{{ content }}'} once)
                </option>
              </select>
              <FieldMessage field="kind" error={error} />
            </div>
          </div>
        )}
        <div class="field">
          <label for="subject">Subject</label>
          <input id="subject" name="subject" type="text" value={fields.subject} {...invalid('subject', error)} />
          <span class="hint">Required for a template; a layout has none.</span>
          <FieldMessage field="subject" error={error} source={fields.subject} />
        </div>
        <div class="field">
          <label for="html">HTML</label>
          <textarea id="html" name="html" rows={14} spellcheck={false} class="source" {...invalid('html', error)}>
            {fields.html}
          </textarea>
          <FieldMessage field="html" error={error} source={fields.html} />
        </div>
        <div class="field">
          <label for="text">Text</label>
          <textarea id="text" name="text" rows={8} spellcheck={false} class="source" {...invalid('text', error)}>
            {fields.text}
          </textarea>
          <span class="hint">Left empty, it is made from the HTML.</span>
          <FieldMessage field="text" error={error} source={fields.text} />
        </div>
        <div class="field">
          <label for="layout">Layout</label>
          <select id="layout" name="layout" {...invalid('layout', error)}>
            <option value="">No layout</option>
            {layoutChoices.map((l) => (
              <option value={l} selected={l === fields.layout}>
                {l}
              </option>
            ))}
          </select>
          <FieldMessage field="layout" error={error} />
        </div>
        <fieldset class="variables" {...(error?.field === 'variables' ? { 'aria-describedby': errorId('variables') } : {})}>
          <legend id="variables">Declared variables</legend>
          <p class="hint">Every variable the source uses. To add more rows, fill these and press Preview.</p>
          <table>
            <caption class="visually-hidden">Declared variables</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Required</th>
                <th scope="col">Kind</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((v, i) => (
                <tr>
                  <td>
                    <input type="text" name={`var.${i}.name`} value={v.name} maxlength={64} aria-label={`Variable ${i + 1} name`} />
                  </td>
                  <td>
                    <input type="checkbox" name={`var.${i}.required`} checked={v.required} aria-label={`Variable ${i + 1} required`} />
                  </td>
                  <td>
                    <select name={`var.${i}.kind`} aria-label={`Variable ${i + 1} kind`}>
                      <option value="text" selected={v.kind === 'text'}>
                        text
                      </option>
                      <option value="url" selected={v.kind === 'url'}>
                        url
                      </option>
                    </select>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <FieldMessage field="variables" error={error} />
        </fieldset>
        <div class="actions">
          <button type="submit" name="intent" value="preview" class="secondary">
            Preview
          </button>
          <button type="submit" name="intent" value="save">
            {existing ? 'Save as a new version' : 'Save'}
          </button>
        </div>
      </form>
    </section>
  );
};

/** A rendered preview: the subject, the HTML in the captured-mail frame, the text part. */
export const PreviewSection: FC<{ rendered: Rendered; frameSrc: string }> = ({ rendered, frameSrc }) => (
  <section class="panel" aria-labelledby="preview-heading" id="preview">
    <h2 id="preview-heading">Preview</h2>
    <p class="muted">Rendered with sample values: a text variable shows its name in brackets, a URL one https://example.com/. Nothing was saved or sent.</p>
    <p>
      <strong>Subject:</strong> <span id="preview-subject">{rendered.subject}</span>
    </p>
    <iframe class="message-frame" sandbox="" src={frameSrc} title="HTML part of the preview" referrerpolicy="no-referrer"></iframe>
    <h3 id="preview-text">Text part</h3>
    <pre tabindex={0} aria-labelledby="preview-text" class="text-part">
      {rendered.text}
    </pre>
  </section>
);

const SourceBlock: FC<{ id: string; label: string; value: string | null }> = ({ id, label, value }) => (
  <>
    <h3 id={id}>{label}</h3>
    {value === null ? (
      <p class="muted">None.</p>
    ) : (
      <pre tabindex={0} aria-labelledby={id} class="text-part">
        {value}
      </pre>
    )}
  </>
);

const VariablesList: FC<{ variables: TemplateView['variables'] }> = ({ variables }) => {
  const entries = Object.entries(variables);
  return entries.length === 0 ? (
    <p class="muted">No variables.</p>
  ) : (
    <ul>
      {entries.map(([name, v]) => (
        <li>
          <code>{name}</code>: {v.kind}, {v.required ? 'required' : 'optional'}
        </li>
      ))}
    </ul>
  );
};

/**
 * A template the account reads but cannot change (a built-in, or its parent's): its Liquid source, and Duplicate,
 * which opens the editor pre-filled (a built-in as `<name>-copy`; a parent's under its own name, which then wins for
 * this account's sends).
 */
export const ReadOnlyTemplate: FC<{ accountId: string; view: TemplateView }> = ({ accountId, view }) => (
  <section class="panel" aria-labelledby="source-heading">
    <h2 id="source-heading">
      <code>{view.name}</code> <Origin view={view} />
    </h2>
    {view.description !== null && <p>{view.description}</p>}
    <p class="muted">
      {view.builtIn
        ? 'A built-in template is read-only. Duplicate it to start your own from its source.'
        : 'This is the parent account’s template: read-only here. Duplicate it to save this account’s own under the same name, which then wins for its sends.'}
    </p>
    <p>
      <a class="button" href={`${newTemplatePath(accountId)}?from=${encodeURIComponent(view.name)}`}>
        Duplicate
      </a>
    </p>
    <h3>Subject</h3>
    <p>{view.subject === null ? <Dash /> : <code>{view.subject}</code>}</p>
    <SourceBlock id="source-html" label="HTML" value={view.html} />
    <SourceBlock id="source-text" label="Text" value={view.text} />
    <h3>Variables</h3>
    <VariablesList variables={view.variables} />
  </section>
);

/** The editor page's other actions: versions, test send, delete. */
export const TemplateTools: FC<{
  accountId: string;
  view: TemplateView;
  csrf: string;
  mode: TemplateTestMode;
  from: string;
  to: string;
}> = ({ accountId, view, csrf, mode, from, to }) => (
  <>
    <section class="panel" aria-labelledby="versions-heading">
      <h2 id="versions-heading">Versions</h2>
      <p>
        Version {view.version}, saved <Time at={view.updatedAt} />. <a href={versionsPath(accountId, view.name)}>See the kept versions, compare, restore</a>
      </p>
    </section>
    {view.kind === 'template' && (
      <section class="panel" aria-labelledby="test-heading" id="test">
        <h2 id="test-heading">Send a test</h2>
        <p class="muted">
          {mode === 'capture'
            ? 'This server runs DELIVERY_MODE=capture: the saved template, with sample values, is sent through the checks of POST /emails and captured here, never delivered.'
            : 'A sandbox send: the saved template, with sample values, runs every check of POST /emails; nothing is sent or charged.'}
        </p>
        <form method="post" action={`/dashboard/templates/${accountId}/test/${view.name}`} class="form-grid">
          <CsrfField token={csrf} />
          <div class="field">
            <label for="test-from">From</label>
            <input id="test-from" name="from" type="text" inputmode="email" required maxlength={320} value={from} />
          </div>
          <div class="field">
            <label for="test-to">To</label>
            <input id="test-to" name="to" type="text" inputmode="email" autocomplete="email" required maxlength={320} value={to} />
          </div>
          <div class="field">
            <button type="submit">Send test</button>
          </div>
        </form>
      </section>
    )}
    <section class="panel" aria-labelledby="delete-heading">
      <h2 id="delete-heading">Delete</h2>
      <p class="muted">
        The {view.kind} and every kept version go. {view.kind === 'layout' ? 'A layout that templates still name is not deleted.' : ''}
      </p>
      <PostButton
        action={`/dashboard/templates/${accountId}/delete/${view.name}`}
        csrf={csrf}
        label={`Delete ${view.name}`}
        variant="danger"
        confirm={`Delete ${view.name} and all its versions?`}
      />
    </section>
  </>
);

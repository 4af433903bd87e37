import type { Child, FC } from 'hono/jsx';
import { Document } from '../ui.js';

/**
 * The API reference at /docs, rendered from the OpenAPI document itself (GET /api/v1/openapi.json): a table of contents
 * by tag, then each operation with its parameters, its request body's fields and example, and each response status with
 * its examples (one per error code). Server-rendered, no script needed: it lives under the dashboard's CSP.
 */

type Json = Record<string, unknown>;

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

export interface ReferenceOperation {
  method: string;
  path: string;
  op: Json;
}

const obj = (v: unknown): Json => (typeof v === 'object' && v !== null ? (v as Json) : {});
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const text = (v: unknown): string => (typeof v === 'string' ? v : '');

/** Every operation of a section of the document (`paths` or `webhooks`), in the document's order. */
export function operationsOf(section: unknown): ReferenceOperation[] {
  return Object.entries(obj(section)).flatMap(([path, item]) =>
    METHODS.filter((m) => obj(item)[m] !== undefined).map((method) => ({ method, path, op: obj(obj(item)[method]) })),
  );
}

/** Text with the document's markup: blank lines part paragraphs, `backticks` are code. */
const Prose: FC<{ text: string; class?: string }> = ({ text: source, class: cls }) => (
  <>
    {source
      .split(/\n\n+/)
      .filter((p) => p.trim() !== '')
      .map((paragraph) => (
        <p class={cls}>{inline(paragraph)}</p>
      ))}
  </>
);

function inline(source: string): Child[] {
  return source.split(/`([^`]+)`/).map((part, i) => (i % 2 === 1 ? <code>{part}</code> : part));
}

/** The component a `$ref` names. */
const refName = (schema: Json): string | undefined => (typeof schema.$ref === 'string' ? schema.$ref.split('/').pop() : undefined);

/** A short reading of a schema's type: `string (date-time)`, `array of Email`, `one of sent, failed`. */
export function typeOf(schema: Json): string {
  const name = refName(schema);
  if (name) return name;
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (Array.isArray(schema.enum)) return `one of ${schema.enum.map((v) => String(v)).join(', ')}`;
  const alternatives = list(schema.anyOf).length > 0 ? list(schema.anyOf) : list(schema.oneOf);
  if (alternatives.length > 0) {
    return alternatives.map((a) => (obj(a).title ? `${text(obj(a).title)} (object)` : typeOf(obj(a)))).join(' or ');
  }
  const types = Array.isArray(schema.type) ? schema.type.map(String) : typeof schema.type === 'string' ? [schema.type] : [];
  const one = (type: string) => {
    if (type === 'array') return `array of ${typeOf(obj(schema.items))}`;
    if (type === 'string' && typeof schema.format === 'string') return `string (${schema.format})`;
    if (type === 'object' && schema.additionalProperties && typeof schema.additionalProperties === 'object')
      return `map of ${typeOf(obj(schema.additionalProperties))}`;
    return type;
  };
  return types.length > 0 ? types.map(one).join(' or ') : 'any';
}

/** The fields of an object schema (a component resolved): name, type, whether required, description. */
function fieldsOf(schema: Json, components: Json): { name: string; type: string; required: boolean; description: string }[] {
  // A webhook post's schema narrows a component (allOf): its fields are the component's.
  const first = list(schema.allOf).length > 0 ? obj(list(schema.allOf)[0]) : schema;
  const resolved = refName(first) ? obj(components[refName(first)!]) : first;
  const required = new Set(list(resolved.required).map(String));
  return Object.entries(obj(resolved.properties)).map(([name, property]) => ({
    name,
    type: typeOf(obj(property)),
    required: required.has(name),
    description: text(obj(property).description),
  }));
}

/** A body that takes one of several forms (oneOf, as the render's): each form's title and description, one paragraph each. */
function alternativesOf(schema: Json, components: Json): string {
  const resolved = refName(schema) ? obj(components[refName(schema)!]) : schema;
  return list(resolved.oneOf)
    .map((alternative) => `One of: ${text(obj(alternative).title)}. ${text(obj(alternative).description)}`)
    .join('\n\n');
}

const pretty = (value: unknown) => (typeof value === 'string' ? value : JSON.stringify(value, null, 2));

/** Each example of a media type: its name (a code, for an error) and value. */
function examplesOf(media: Json): { name: string; summary: string; value: unknown }[] {
  const out: { name: string; summary: string; value: unknown }[] = [];
  if (media.example !== undefined) out.push({ name: 'example', summary: '', value: media.example });
  for (const [name, e] of Object.entries(obj(media.examples))) out.push({ name, summary: text(obj(e).summary), value: obj(e).value });
  return out;
}

const anchor = (op: ReferenceOperation) => text(op.op.operationId) || `${op.method}-${op.path}`.replace(/[^A-Za-z0-9_-]+/g, '-');

/** An example with a copy button; its block scrolls when long, so a keyboard can reach it (tabindex). */
const Example: FC<{ id: string; label: string; value: unknown }> = ({ id, label, value }) => (
  <div class="example">
    <div class="example-head">
      <span class="muted">{label}</span>
      <button type="button" class="secondary" data-copy={id} aria-label={`Copy ${label.toLowerCase()}`}>
        Copy
      </button>
    </div>
    <pre tabindex={0}>
      <code id={id}>{pretty(value)}</code>
    </pre>
  </div>
);

const Fields: FC<{ caption: string; fields: ReturnType<typeof fieldsOf> }> = ({ caption, fields }) =>
  fields.length === 0 ? null : (
    <div class="table-wrap" tabindex={0} role="region" aria-label={caption}>
      <table class="fields">
        <caption class="visually-hidden">{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Field</th>
            <th scope="col">Type</th>
            <th scope="col">Description</th>
          </tr>
        </thead>
        <tbody>
          {fields.map((f) => (
            <tr>
              <td>
                <code>{f.name}</code>
                {f.required && <span class="required"> required</span>}
              </td>
              <td class="type">{f.type}</td>
              <td>{inline(f.description)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );

const Parameters: FC<{ op: ReferenceOperation }> = ({ op }) => {
  const params = list(op.op.parameters).map(obj);
  if (params.length === 0) return null;
  return (
    <>
      <h4>Parameters</h4>
      <div class="table-wrap" tabindex={0} role="region" aria-label={`Parameters of ${op.method.toUpperCase()} ${op.path}`}>
        <table class="fields">
          <caption class="visually-hidden">{`Parameters of ${op.method.toUpperCase()} ${op.path}`}</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">In</th>
              <th scope="col">Type</th>
              <th scope="col">Description</th>
            </tr>
          </thead>
          <tbody>
            {params.map((p) => (
              <tr>
                <td>
                  <code>{text(p.name)}</code>
                  {p.required === true && <span class="required"> required</span>}
                </td>
                <td>{text(p.in)}</td>
                <td class="type">{typeOf(obj(p.schema))}</td>
                <td>{inline(text(p.description))}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
};

const Operation: FC<{ op: ReferenceOperation; base: string; components: Json; webhook?: boolean }> = ({ op, base, components, webhook }) => {
  const id = anchor(op);
  const body = obj(obj(obj(op.op.requestBody).content)['application/json']);
  const security = list(op.op.security);
  return (
    <section class="operation panel" id={id} aria-labelledby={`${id}-title`}>
      <h3 id={`${id}-title`}>
        <span class={`method ${op.method}`}>{op.method.toUpperCase()}</span>{' '}
        <code class="path">{webhook ? `${op.path} (to your endpoint)` : `${base}${op.path}`}</code>
      </h3>
      <p class="summary">{text(op.op.summary)}</p>
      {/* Alternatives: the template list and render take either of two scopes. */}
      {!webhook && (
        <p class="muted">
          {security.length === 0
            ? 'No key needed.'
            : `Key scope: ${security.map((requirement) => list(obj(requirement).apiKey).map(String).join(', ')).join(' or ')}`}
        </p>
      )}
      <Prose text={text(op.op.description).replace(/^Scope: `[^`]+`( \(or `[^`]+`, which opens it too\))?\.(\n\n)?|^No key needed\.(\n\n)?/, '')} />
      <Parameters op={op} />
      {op.op.requestBody !== undefined && (
        <>
          <h4>Request body</h4>
          <Fields caption={`Request body of ${op.method.toUpperCase()} ${op.path}`} fields={fieldsOf(obj(body.schema), components)} />
          <Prose text={alternativesOf(obj(body.schema), components)} />
          {examplesOf(body).map((e, i) => (
            <Example
              id={i === 0 ? `${id}-request` : `${id}-request-${i + 1}`}
              label={e.name === 'example' ? 'Request example' : `Request example: ${e.name}`}
              value={e.value}
            />
          ))}
        </>
      )}
      <h4>Responses</h4>
      {Object.entries(obj(op.op.responses)).map(([status, r]) => {
        const response = obj(r);
        const [mediaType, media] = Object.entries(obj(response.content))[0] ?? [];
        const examples = media ? examplesOf(obj(media)) : [];
        const error = Number(status) >= 400;
        return (
          <div class={`response ${error ? 'error' : 'success'}`} id={`${id}-${status}`}>
            <h5>
              <span class={`status s${status.slice(0, 1)}`}>{status}</span> {mediaType && <span class="muted">{mediaType}</span>}
            </h5>
            <Prose text={text(response.description)} class="response-text" />
            {!error && examples.map((e) => <Example id={`${id}-${status}-example`} label={`${status} example`} value={e.value} />)}
            {!error && !media && <p class="muted">No body.</p>}
            {error &&
              examples.map((e) => (
                <details class="error-example">
                  <summary>
                    <code>{e.name}</code> example
                  </summary>
                  <pre tabindex={0}>
                    <code>{pretty(e.value)}</code>
                  </pre>
                </details>
              ))}
          </div>
        );
      })}
    </section>
  );
};

/** Which tag each operation is filed under, in the document's tag order. */
function byTag(document: Json): { name: string; description: string; operations: ReferenceOperation[] }[] {
  const operations = operationsOf(document.paths);
  return list(document.tags)
    .map(obj)
    .map((tag) => ({
      name: text(tag.name),
      description: text(tag.description),
      operations: operations.filter((o) => list(o.op.tags).includes(tag.name)),
    }))
    .filter((t) => t.operations.length > 0);
}

const tagAnchor = (name: string) => `tag-${name.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;

export const ApiReference: FC<{ document: Json }> = ({ document }) => {
  const info = obj(document.info);
  const base = text(obj(list(document.servers)[0]).url);
  const components = obj(obj(document.components).schemas);
  const tags = byTag(document);
  const webhooks = operationsOf(document.webhooks);
  return (
    <Document title="API reference">
      <a class="skip-link" href="#main">
        Skip to content
      </a>
      <header class="site-header">
        <a class="brand" href="/docs">
          Mailstead API reference
        </a>
        <nav class="header-links" aria-label="Elsewhere">
          <a href={`${base}/openapi.json`}>openapi.json</a>
          <a href="/dashboard">Dashboard</a>
        </nav>
      </header>
      <div class="layout reference">
        <nav class="site-nav toc" aria-label="Contents">
          {tags.map((tag) => (
            <>
              <a class="toc-tag" href={`#${tagAnchor(tag.name)}`}>
                {tag.name}
              </a>
              <ul>
                {tag.operations.map((o) => (
                  <li>
                    <a href={`#${anchor(o)}`}>
                      <span class={`method ${o.method}`}>{o.method.toUpperCase()}</span> {o.path}
                    </a>
                  </li>
                ))}
              </ul>
            </>
          ))}
          <a class="toc-tag" href="#webhook-posts">
            Webhook posts
          </a>
          <ul>
            {webhooks.map((o) => (
              <li>
                <a href={`#${anchor(o)}`}>{o.path}</a>
              </li>
            ))}
          </ul>
        </nav>
        <main id="main" tabindex={-1}>
          <h1>{`${text(info.title)} ${text(info.version)}`}</h1>
          <Prose text={text(info.description)} />
          <p>
            Every path below is under <code>{base}</code>. This page is built from the API document,{' '}
            <a href={`${base}/openapi.json`}>
              <code>{`${base}/openapi.json`}</code>
            </a>{' '}
            (OpenAPI 3.1): the same schemas, statuses, error codes and examples.
          </p>
          {tags.map((tag) => (
            <section class="tag" id={tagAnchor(tag.name)} aria-labelledby={`${tagAnchor(tag.name)}-title`}>
              <h2 id={`${tagAnchor(tag.name)}-title`}>{tag.name}</h2>
              <p class="muted">{tag.description}</p>
              {tag.operations.map((o) => (
                <Operation op={o} base={base} components={components} />
              ))}
            </section>
          ))}
          <section class="tag" id="webhook-posts" aria-labelledby="webhook-posts-title">
            <h2 id="webhook-posts-title">Webhook posts</h2>
            <p class="muted">What each endpoint registered with POST /webhooks receives: one signed POST per event.</p>
            {webhooks.map((o) => (
              <Operation op={o} base={base} components={components} webhook />
            ))}
          </section>
        </main>
      </div>
    </Document>
  );
};

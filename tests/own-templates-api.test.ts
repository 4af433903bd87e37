import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Scope } from '../server/core/scopes.js';
import { expectDocumented } from './helpers/openapi.js';
import { type Sender, emailRows, expectError, newSender, newSubSender, queued, sendEmail } from './helpers/sending.js';
import { type ApiResponse, type TestService, startService } from './helpers/service.js';

/**
 * An account's own templates and layouts through the API (docs/api/decisions.md section 9, docs/api/templates.md):
 * each endpoint's answers and every error it gives, the scopes, keyset paging of the list and of the versions, the
 * 50 kept versions, tenancy, the lookup order of a sub-account, and sending an own template through POST /emails.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(async () => {
  await service.close();
});

type Body = Record<string, unknown>;

const create = (key: string, body: unknown, account?: string) => service.api('POST', '/templates', { key, body, account });
const get = (key: string, name: string, account?: string) => service.api('GET', `/templates/${encodeURIComponent(name)}`, { key, account });
const put = (key: string, name: string, body: unknown, account?: string) =>
  service.api('PUT', `/templates/${encodeURIComponent(name)}`, { key, body, account });
const del = (key: string, name: string, account?: string) => service.api('DELETE', `/templates/${encodeURIComponent(name)}`, { key, account });
const versions = (key: string, name: string, query = '', account?: string) =>
  service.api('GET', `/templates/${encodeURIComponent(name)}/versions${query}`, { key, account });
const render = (key: string, name: string, body: unknown, account?: string) =>
  service.api('POST', `/templates/${encodeURIComponent(name)}/render`, { key, body, account });
const list = (key: string, query = '', account?: string) => service.api('GET', `/templates${query}`, { key, account });

/** A fresh account and a key holding every scope: most tests want an account of their own. */
const fresh = async (name = 'Templates') => (await service.newAccount({ name })).key;

/** The shipping notice: a required text, a required link and an optional text. */
const shipped = (extra: Body = {}): Body => ({
  name: 'order-shipped',
  subject: 'Order {{ orderNumber }} has shipped',
  html: '<p>Hi{% if firstName %} {{ firstName }}{% endif %},</p>\n<p>Order <b>{{ orderNumber }}</b> is on its way.</p>\n<p><a href="{{ trackingUrl }}">Track it</a></p>',
  variables: { orderNumber: { required: true }, trackingUrl: { required: true, kind: 'url' }, firstName: {} },
  ...extra,
});

const brand = (extra: Body = {}): Body => ({
  name: 'brand',
  kind: 'layout',
  html: '<html><head><style>.brand { color: #0b6e4f }</style></head><body><p class="brand">Acme Shop</p>{{ content }}</body></html>',
  ...extra,
});

const shippedVars = { orderNumber: '1042', trackingUrl: 'https://track.example/p/1' };

/** An own variable's limits as GET /templates shows them: free text up to 100 KB of UTF-8, a link up to 8,192 characters. */
const TEXT = { kind: 'text', maxLength: 102_400, lengthUnit: 'bytes' } as const;
const URL_VAR = { kind: 'url', maxLength: 8192, lengthUnit: 'characters' } as const;

async function created(key: string, body: Body, account?: string): Promise<ApiResponse> {
  const res = await create(key, body, account);
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res;
}

const notFound = (name: string) => `No template named ${name} on this account.`;

describe('POST /templates', () => {
  it('saves a template at version 1 and answers the template object', async () => {
    const key = await fresh();
    const now = new Date(service.clock.now()).toISOString();
    const res = await created(key, shipped());
    expectDocumented(res);
    expect(res.body).toEqual({
      name: 'order-shipped',
      kind: 'template',
      builtIn: false,
      inherited: false,
      description: null,
      subject: 'Order {{ orderNumber }} has shipped',
      html: shipped().html,
      text: null,
      layout: null,
      variables: {
        orderNumber: { required: true, ...TEXT },
        trackingUrl: { required: true, ...URL_VAR },
        firstName: { required: false, ...TEXT },
      },
      version: 1,
      createdAt: now,
      updatedAt: now,
    });
    const read = await get(key, 'order-shipped');
    expect(read.status).toBe(200);
    expect(read.body).toEqual(res.body);
  });

  it('saves a layout, and a template that names it', async () => {
    const key = await fresh();
    const layout = await created(key, brand());
    expectDocumented(layout);
    expect(layout.body).toMatchObject({ name: 'brand', kind: 'layout', subject: null, layout: null, version: 1, builtIn: false });
    const template = await created(key, shipped({ layout: 'brand', text: 'Order {{ orderNumber }}: {{ trackingUrl }}' }));
    expect(template.body).toMatchObject({ layout: 'brand', text: 'Order {{ orderNumber }}: {{ trackingUrl }}', kind: 'template' });
  });

  it('a name the account already has is 409 template_exists, whatever its kind', async () => {
    const key = await fresh();
    await created(key, shipped());
    const again = await create(key, shipped({ subject: 'Another' }));
    expectError(again, 409, 'template_exists', 'A template named order-shipped already exists on this account.');
    expectDocumented(again);
    await created(key, brand());
    expectError(await create(key, shipped({ name: 'brand' })), 409, 'template_exists');
    // The first one stands as saved.
    expect((await get(key, 'order-shipped')).body.subject).toBe('Order {{ orderNumber }} has shipped');
  });

  it.each(['receipt', 'welcome', 'password-reset', 'magic-link', 'verify-email', 'notification'])(
    'the built-in name %s is 409 template_exists',
    async (name) => {
      const res = await create(await fresh(), shipped({ name }));
      expectError(res, 409, 'template_exists', `${name} is the name of a built-in template; choose another name.`);
      expectDocumented(res);
    },
  );

  it('the 101st template (layouts included) is 409 template_limit; deleting one makes room', async () => {
    const key = await fresh('Template limit');
    await created(key, brand());
    for (let i = 1; i < 100; i++) await created(key, { name: `t-${i}`, subject: `Subject ${i}`, text: 'Hello' });
    const over = await create(key, { name: 't-100', subject: 'One too many', text: 'Hello' });
    expectError(over, 409, 'template_limit', /100 templates/);
    expectDocumented(over);
    expectError(await create(key, brand({ name: 'brand-2' })), 409, 'template_limit');
    expect((await del(key, 't-1')).status).toBe(204);
    await created(key, { name: 't-100', subject: 'Now it fits', text: 'Hello' });
    expectError(await create(key, { name: 't-101', subject: 'Full again', text: 'Hello' }), 409, 'template_limit');
  });

  describe('a source that does not compile is 422 invalid_template, naming the part and the line', () => {
    it('a Liquid syntax error (with its line and column)', async () => {
      const key = await fresh();
      const res = await create(key, shipped({ html: '<p>Hi</p>\n<p>Order</p>\n<p>Order {{ orderNumber </p>' }));
      expectError(res, 422, 'invalid_template', /^html: /);
      expect(res.body.error.message).toMatch(/line:? ?3/);
      expectDocumented(res);
      const tag = await create(key, shipped({ html: '<p>{% if orderNumber %}open</p>' }));
      expectError(tag, 422, 'invalid_template', /^html: /);
      const subject = await create(key, shipped({ subject: 'Order {{ orderNumber' }));
      expectError(subject, 422, 'invalid_template', /^subject: /);
      const text = await create(key, shipped({ text: 'Line one\n{% endif %}' }));
      expectError(text, 422, 'invalid_template', /^text: /);
      expect((await get(key, 'order-shipped')).status).toBe(404);
    });

    it('a variable used but not declared names itself and its line', async () => {
      const res = await create(await fresh(), shipped({ html: '<p>Hi</p>\n<p>{{ customerName }}</p>' }));
      expectError(res, 422, 'invalid_template', /^html: /);
      expect(res.body.error.message).toContain('customerName');
      expect(res.body.error.message).toMatch(/line:? ?2/);
      expectDocumented(res);
      const inSubject = await create(await fresh(), shipped({ subject: 'For {{ customerName }}' }));
      expectError(inSubject, 422, 'invalid_template', /^subject: .*customerName/);
    });

    it('a layout without {{ content }}, or with it twice', async () => {
      const key = await fresh();
      const none = await create(key, brand({ html: '<div>Acme Shop</div>' }));
      expectError(none, 422, 'invalid_template', /^html: .*content/);
      expectDocumented(none);
      expectError(await create(key, brand({ html: '<div>{{ content }}</div><div>{{ content }}</div>' })), 422, 'invalid_template', /^html: .*content/);
      expect((await get(key, 'brand')).status).toBe(404);
      // Nor can a PUT take it out.
      await created(key, brand());
      expectError(await put(key, 'brand', { html: '<main>no content here</main>' }), 422, 'invalid_template', /^html: .*content/);
      expect((await get(key, 'brand')).body.version).toBe(1);
    });

    it('a source over 256 KB (subject, html and text together)', async () => {
      const res = await create(await fresh(), shipped({ html: `<p>{{ orderNumber }}</p>${'x'.repeat(200 * 1024)}`, text: 'y'.repeat(60 * 1024) }));
      expectError(res, 422, 'invalid_template', /256 KB/);
      expectDocumented(res);
    });
  });

  const refused: [string, Body, RegExp][] = [
    ['a name with capitals and a space', shipped({ name: 'Order Shipped' }), /^name: /],
    ['a name starting with -', shipped({ name: '-shipped' }), /^name: /],
    ['a name of 65 characters', shipped({ name: 'a'.repeat(65) }), /^name: /],
    ['no name', { subject: 'Hi', text: 'Hello' }, /^name: /],
    ['a template without subject', { name: 'no-subject', text: 'Hello' }, /^subject: /],
    ['a template without html or text', { name: 'empty', subject: 'Hi' }, /^html: /],
    ['an empty html', { name: 'empty-html', subject: 'Hi', html: '' }, /^html: /],
    ['a layout with a subject', brand({ subject: 'Hi' }), /^subject: /],
    ['a layout naming a layout', brand({ layout: 'other' }), /^layout: /],
    ['a layout without html', { name: 'brand', kind: 'layout', text: '{{ content }}' }, /^html: /],
    ['a template naming a layout the account does not have', shipped({ layout: 'nope' }), /^layout: /],
    ['an unknown kind', shipped({ kind: 'partial' }), /^kind: /],
    ['a variable of an unknown kind', shipped({ variables: { orderNumber: { kind: 'number' }, trackingUrl: { kind: 'url' } } }), /^variables\./],
    ['a variable whose required is not a boolean', shipped({ variables: { orderNumber: { required: 'yes' }, trackingUrl: {} } }), /^variables\./],
    ['a declaration with an unknown field', shipped({ variables: { orderNumber: { default: '1' }, trackingUrl: {} } }), /^variables\./],
    ['variables that are not an object', shipped({ variables: ['orderNumber'] }), /^variables: /],
    ['an unknown field', shipped({ from: 'a@b.example' }), /from/],
  ];

  it.each(refused)('%s is 422 invalid_request naming the field', async (_label, body, message) => {
    const key = await fresh();
    const res = await create(key, body);
    expectError(res, 422, 'invalid_request', message);
    expectDocumented(res);
  });

  it('a template naming a template (not a layout) as its layout is 422 invalid_request', async () => {
    const key = await fresh();
    await created(key, shipped());
    expectError(await create(key, shipped({ name: 'wrapped', layout: 'order-shipped' })), 422, 'invalid_request', /^layout: /);
  });
});

describe('GET /templates/{name}', () => {
  it('a built-in shows its source, read-only', async () => {
    const res = await get(await fresh(), 'password-reset');
    expect(res.status).toBe(200);
    expectDocumented(res);
    expect(res.body).toMatchObject({
      name: 'password-reset',
      kind: 'template',
      builtIn: true,
      inherited: false,
      description: expect.any(String),
      layout: null,
      version: null,
      createdAt: null,
      updatedAt: null,
      variables: {
        resetUrl: { required: true, kind: 'url', maxLength: 8192, lengthUnit: 'characters' },
        expiresIn: { required: false, kind: 'text', maxLength: 998, lengthUnit: 'characters' },
      },
    });
    expect(res.body.html).toContain('{{ resetUrl }}');
  });

  it('an unknown name is 404 template_not_found', async () => {
    const res = await get(await fresh(), 'order-shipped');
    expectError(res, 404, 'template_not_found', notFound('order-shipped'));
    expectDocumented(res);
    expectError(await get(await fresh(), 'Not A Name'), 404, 'template_not_found');
  });
});

describe('PUT /templates/{name}', () => {
  it('replaces the source as a new version; createdAt stays, updatedAt moves', async () => {
    const key = await fresh();
    const first = await created(key, shipped());
    service.clock.advance(60_000);
    const res = await put(key, 'order-shipped', { ...shipped({ subject: 'Your order {{ orderNumber }} is on its way' }), name: undefined });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectDocumented(res);
    expect(res.body).toMatchObject({ version: 2, subject: 'Your order {{ orderNumber }} is on its way', createdAt: first.body.createdAt });
    expect(Date.parse(res.body.updatedAt) - Date.parse(first.body.updatedAt)).toBe(60_000);
    expect((await get(key, 'order-shipped')).body).toEqual(res.body);
    // The name may be repeated, when it is the path's; a field left out is gone from the new version.
    const again = await put(key, 'order-shipped', shipped({ text: 'Order {{ orderNumber }}' }));
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ version: 3, subject: 'Order {{ orderNumber }} has shipped', text: 'Order {{ orderNumber }}' });
    const dropped = await put(key, 'order-shipped', shipped());
    expect(dropped.body).toMatchObject({ version: 4, text: null });
  });

  it('a layout keeps its kind when the body leaves kind out', async () => {
    const key = await fresh();
    await created(key, brand());
    const res = await put(key, 'brand', { html: '<main>{{ content }}</main>' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ kind: 'layout', version: 2, html: '<main>{{ content }}</main>' });
  });

  it('an unknown name is 404 template_not_found', async () => {
    const res = await put(await fresh(), 'order-shipped', shipped());
    expectError(res, 404, 'template_not_found', notFound('order-shipped'));
    expectDocumented(res);
  });

  it('a built-in is 409 conflict: read-only', async () => {
    const res = await put(await fresh(), 'receipt', { subject: 'Mine', text: 'Hello' });
    expectError(res, 409, 'conflict', /receipt is a built-in template and cannot be changed/);
    expectDocumented(res);
  });

  it('a kind change, a name other than the path, or a bad source is refused and the version stays', async () => {
    const key = await fresh();
    await created(key, shipped());
    await created(key, brand());
    const kind = await put(key, 'order-shipped', { ...brand(), name: undefined });
    expectError(kind, 422, 'invalid_request', /^kind: /);
    expectDocumented(kind);
    expectError(await put(key, 'brand', { kind: 'template', subject: 'Hi', text: 'Hello' }), 422, 'invalid_request', /^kind: /);
    const renamed = await put(key, 'order-shipped', shipped({ name: 'order-sent' }));
    expectError(renamed, 422, 'invalid_request', /^name: must be the name in the path/);
    expectError(await put(key, 'order-shipped', shipped({ subject: undefined })), 422, 'invalid_request', /^subject: /);
    expectError(await put(key, 'order-shipped', shipped({ layout: 'nope' })), 422, 'invalid_request', /^layout: /);
    const broken = await put(key, 'order-shipped', shipped({ html: '<p>{{ orderNumber </p>' }));
    expectError(broken, 422, 'invalid_template', /^html: /);
    expectDocumented(broken);
    expect((await get(key, 'order-shipped')).body.version).toBe(1);
    expect((await get(key, 'brand')).body.version).toBe(1);
  });
});

describe('PUT of a layout is checked against the templates that use it', () => {
  it('a change that would break a template using the layout is 422 invalid_template naming it; nothing is saved', async () => {
    const key = await fresh();
    const layout = { name: 'frame', kind: 'layout', html: '<div>{{ content }}</div>' };
    await created(key, layout);
    // A long list: fine without CSS, past the 1,000 elements whose CSS can be inlined once the layout brings a <style>.
    await created(key, { name: 'digest', subject: 'Digest', html: '<p>item</p>'.repeat(1100), layout: 'frame' });
    const res = await put(key, 'frame', { ...layout, name: undefined, html: '<style>p { color: #333 }</style><div>{{ content }}</div>' });
    expectError(res, 422, 'invalid_template', /^With this source the layout frame would break the template digest: html: with a <style> element/);
    expect((await get(key, 'frame')).body).toMatchObject({ version: 1, html: '<div>{{ content }}</div>' });
    // A change the template survives is saved.
    const fine = await put(key, 'frame', { ...layout, name: undefined, html: '<section>{{ content }}</section>' });
    expect(fine.status, JSON.stringify(fine.body)).toBe(200);
    expect(fine.body.version).toBe(2);
  });
});

describe('DELETE /templates/{name}', () => {
  it('deletes the template and its versions; the name can be used again from version 1', async () => {
    const key = await fresh();
    await created(key, shipped());
    expect((await put(key, 'order-shipped', shipped())).body.version).toBe(2);
    const res = await del(key, 'order-shipped');
    expect(res.status).toBe(204);
    expectDocumented(res);
    expectError(await get(key, 'order-shipped'), 404, 'template_not_found');
    expectError(await versions(key, 'order-shipped'), 404, 'template_not_found');
    expectError(await del(key, 'order-shipped'), 404, 'template_not_found', notFound('order-shipped'));
    expect((await created(key, shipped())).body.version).toBe(1);
    expect((await versions(key, 'order-shipped')).body.data.map((v: { version: number }) => v.version)).toEqual([1]);
  });

  it('a built-in is 409 conflict', async () => {
    const res = await del(await fresh(), 'welcome');
    expectError(res, 409, 'conflict', 'welcome is a built-in template and cannot be deleted.');
    expectDocumented(res);
  });

  it('a layout that templates name is 409 template_in_use, naming them; once none does, it goes', async () => {
    const key = await fresh();
    await created(key, brand());
    await created(key, shipped({ layout: 'brand' }));
    await created(key, { name: 'welcome-back', subject: 'Welcome back', text: 'Hello', layout: 'brand' });
    const res = await del(key, 'brand');
    expectError(res, 409, 'template_in_use', 'The layout brand is still named by 2 templates: order-shipped, welcome-back.');
    expectDocumented(res);
    expect((await get(key, 'brand')).status).toBe(200);
    // A template whose older version named the layout does not hold it.
    expect((await put(key, 'order-shipped', shipped())).status).toBe(200);
    expect((await del(key, 'welcome-back')).status).toBe(204);
    expect((await del(key, 'brand')).status).toBe(204);
  });

  it("a layout that a sub-account's template names is 409 template_in_use for the parent", async () => {
    const key = await fresh();
    const sub = await service.api('POST', '/accounts', { key, body: { name: 'Layout user' } });
    expect(sub.status).toBe(201);
    await created(key, brand());
    await created(key, shipped({ layout: 'brand' }), sub.body.id);
    expect((await del(key, 'order-shipped')).status).toBe(404);
    const res = await del(key, 'brand');
    expectError(res, 409, 'template_in_use', /order-shipped/);
    expect((await del(key, 'order-shipped', sub.body.id)).status).toBe(204);
    expect((await del(key, 'brand')).status).toBe(204);
  });

  it('an unknown name is 404 template_not_found', async () => {
    const res = await del(await fresh(), 'order-shipped');
    expectError(res, 404, 'template_not_found', notFound('order-shipped'));
    expectDocumented(res);
  });
});

describe('GET /templates/{name}/versions', () => {
  it('the kept versions, newest first, each with its source', async () => {
    const key = await fresh();
    await created(key, shipped());
    service.clock.advance(1000);
    await put(key, 'order-shipped', shipped({ subject: 'Second' }));
    service.clock.advance(1000);
    await put(key, 'order-shipped', shipped({ subject: 'Third', text: 'Order {{ orderNumber }}' }));
    const res = await versions(key, 'order-shipped');
    expect(res.status).toBe(200);
    expectDocumented(res);
    expect(res.body.nextCursor).toBeNull();
    expect(res.body.data.map((v: Body) => [v.version, v.subject])).toEqual([
      [3, 'Third'],
      [2, 'Second'],
      [1, 'Order {{ orderNumber }} has shipped'],
    ]);
    expect(res.body.data[0]).toEqual({
      version: 3,
      subject: 'Third',
      html: shipped().html,
      text: 'Order {{ orderNumber }}',
      layout: null,
      variables: { orderNumber: { required: true, ...TEXT }, trackingUrl: { required: true, ...URL_VAR }, firstName: { required: false, ...TEXT } },
      createdAt: new Date(service.clock.now()).toISOString(),
    });
  });

  it('a built-in has none; an unknown name is 404 template_not_found', async () => {
    const key = await fresh();
    const builtIn = await versions(key, 'receipt');
    expect(builtIn.status).toBe(200);
    expect(builtIn.body).toEqual({ data: [], nextCursor: null });
    const res = await versions(key, 'order-shipped');
    expectError(res, 404, 'template_not_found', notFound('order-shipped'));
    expectDocumented(res);
  });

  it('pages by limit and cursor; a cursor of another template, list or account is 422 invalid_request', async () => {
    const key = await fresh();
    await created(key, shipped());
    await created(key, brand());
    for (let i = 0; i < 4; i++) await put(key, 'order-shipped', shipped({ subject: `v${i + 2}` }));
    const first = await versions(key, 'order-shipped', '?limit=2');
    expect(first.body.data.map((v: Body) => v.version)).toEqual([5, 4]);
    expect(first.body.nextCursor).toEqual(expect.any(String));
    const second = await versions(key, 'order-shipped', `?limit=2&cursor=${encodeURIComponent(first.body.nextCursor)}`);
    expect(second.body.data.map((v: Body) => v.version)).toEqual([3, 2]);
    const third = await versions(key, 'order-shipped', `?limit=2&cursor=${encodeURIComponent(second.body.nextCursor)}`);
    expect(third.body).toMatchObject({ data: [{ version: 1 }], nextCursor: null });
    expectDocumented(third);

    const cursor = encodeURIComponent(first.body.nextCursor);
    const otherTemplate = await versions(key, 'brand', `?cursor=${cursor}`);
    expectError(otherTemplate, 422, 'invalid_request', /^cursor: /);
    expectDocumented(otherTemplate);
    const page = await list(key, '?limit=1');
    expectError(await versions(key, 'order-shipped', `?cursor=${encodeURIComponent(page.body.nextCursor)}`), 422, 'invalid_request', /^cursor: /);
    expectError(await list(key, `?cursor=${cursor}`), 422, 'invalid_request', /^cursor: /);
    // The same name on another account: its cursor is not this one's.
    const other = await fresh('Other versions');
    await created(other, shipped());
    expectError(await versions(other, 'order-shipped', `?cursor=${cursor}`), 422, 'invalid_request', /^cursor: /);
    expectError(await versions(key, 'order-shipped', '?cursor=bm90LWEtY3Vyc29y'), 422, 'invalid_request', /^cursor: /);
    for (const limit of ['0', '101', 'x']) expectError(await versions(key, 'order-shipped', `?limit=${limit}`), 422, 'invalid_request', /^limit: /);
  });

  it('keeps the newest 50 versions; version numbers keep counting', async () => {
    const key = await fresh('Fifty versions');
    await created(key, shipped());
    for (let i = 2; i <= 52; i++) {
      const res = await put(key, 'order-shipped', shipped({ subject: `Version ${i}` }));
      expect(res.body.version).toBe(i);
    }
    const kept = await versions(key, 'order-shipped', '?limit=100');
    expect(kept.body.data.map((v: Body) => v.version)).toEqual(Array.from({ length: 50 }, (_, i) => 52 - i));
    expect(kept.body.nextCursor).toBeNull();
    expect((await put(key, 'order-shipped', shipped({ subject: 'Version 53' }))).body.version).toBe(53);
    const after = await versions(key, 'order-shipped', '?limit=100');
    expect(after.body.data).toHaveLength(50);
    expect(after.body.data.at(-1).version).toBe(4);
    expect(after.body.data[0]).toMatchObject({ version: 53, subject: 'Version 53' });
  });
});

describe('GET /templates', () => {
  const BUILT_INS = ['magic-link', 'notification', 'password-reset', 'receipt', 'verify-email', 'welcome'];

  it("lists the built-ins and the account's own, sorted by name, each marked", async () => {
    const key = await fresh();
    await created(key, brand());
    await created(key, shipped({ layout: 'brand' }));
    const res = await list(key);
    expect(res.status).toBe(200);
    expectDocumented(res);
    expect(res.body.nextCursor).toBeNull();
    expect(res.body.data.map((t: Body) => t.name)).toEqual([...BUILT_INS, 'brand', 'order-shipped'].sort());
    for (const t of res.body.data) expect(t.builtIn).toBe(BUILT_INS.includes(t.name));
    expect(res.body.data.find((t: Body) => t.name === 'order-shipped')).toEqual((await get(key, 'order-shipped')).body);
    expect(res.body.data.find((t: Body) => t.name === 'brand')).toMatchObject({ kind: 'layout', inherited: false });
  });

  it('pages by name: limit, cursor, default 25; a cursor of another account or list is 422 invalid_request', async () => {
    const key = await fresh('Paged catalog');
    for (let i = 0; i < 30; i++) await created(key, { name: `n-${String(i).padStart(2, '0')}`, subject: 'Hi', text: 'Hello' });
    const all = [...BUILT_INS, ...Array.from({ length: 30 }, (_, i) => `n-${String(i).padStart(2, '0')}`)].sort();
    const firstDefault = await list(key);
    expect(firstDefault.body.data).toHaveLength(25);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: ApiResponse = await list(key, `?limit=10${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      expect(res.status).toBe(200);
      expectDocumented(res);
      seen.push(...res.body.data.map((t: Body) => t.name));
      cursor = res.body.nextCursor;
      pages++;
    } while (cursor);
    expect(pages).toBe(4);
    expect(seen).toEqual(all);

    const page = await list(key, '?limit=5');
    const other = await fresh('Other catalog');
    const foreign = await list(other, `?cursor=${encodeURIComponent(page.body.nextCursor)}`);
    expectError(foreign, 422, 'invalid_request', /^cursor: /);
    expectDocumented(foreign);
    expectError(await list(key, '?cursor=nope'), 422, 'invalid_request', /^cursor: /);
    for (const limit of ['0', '101', '-1']) expectError(await list(key, `?limit=${limit}`), 422, 'invalid_request', /^limit: /);
  });
});

describe('POST /templates/{name}/render', () => {
  it('renders a saved template in its layout with the variables, escaped in html, sending nothing', async () => {
    const { account, key } = await service.newAccount({ name: 'Render own' });
    await created(key, brand());
    await created(key, shipped({ layout: 'brand' }));
    const res = await render(key, 'order-shipped', { ...shippedVars, firstName: '<script>x</script>' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectDocumented(res);
    expect(res.body.subject).toBe('Order 1042 has shipped');
    expect(res.body.html).toContain('Acme Shop');
    expect(res.body.html).toContain('<b>1042</b>');
    expect(res.body.html).toContain('&lt;script&gt;x&lt;/script&gt;');
    expect(res.body.html).not.toContain('<script>');
    expect(res.body.html).toContain('href="https://track.example/p/1"');
    // No text part given: one is made from the html.
    expect(res.body.text).toContain('1042');
    expect(res.body.text).not.toContain('<b>');
    expect(await emailRows(service, account.id)).toEqual([]);
  });

  it('refuses variables as a send would: undeclared, a missing required one, a link that is not http(s)', async () => {
    const key = await fresh();
    await created(key, shipped());
    const cases: [Body, RegExp][] = [
      [{ ...shippedVars, coupon: 'X' }, /^coupon: /],
      [{ orderNumber: '1' }, /^trackingUrl: /],
      [{ ...shippedVars, trackingUrl: 'javascript:alert(1)' }, /^trackingUrl: must be an http or https URL$/],
      [{ ...shippedVars, orderNumber: 1042 }, /^orderNumber: must be a string$/],
    ];
    for (const [vars, message] of cases) {
      const res = await render(key, 'order-shipped', vars);
      expectError(res, 422, 'invalid_request', message);
      expectDocumented(res);
    }
  });

  it('an unknown name is 404 template_not_found', async () => {
    const res = await render(await fresh(), 'order-shipped', shippedVars);
    expectError(res, 404, 'template_not_found', notFound('order-shipped'));
    expectDocumented(res);
  });

  it('renders an unsaved source with sample variables, storing nothing', async () => {
    const key = await fresh();
    await created(key, brand());
    const { name: _name, ...source } = shipped({ layout: 'brand', subject: 'Preview {{ orderNumber }}' });
    const res = await render(key, 'order-shipped', { source, variables: shippedVars });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectDocumented(res);
    expect(res.body.subject).toBe('Preview 1042');
    expect(res.body.html).toContain('Acme Shop');
    expectError(await get(key, 'order-shipped'), 404, 'template_not_found');
    // A layout renders around a sample paragraph.
    const layout = await render(key, 'new-brand', { source: { kind: 'layout', html: '<main class="x">{{ content }}</main>' } });
    expect(layout.status, JSON.stringify(layout.body)).toBe(200);
    expect(layout.body.html).toMatch(/<main class="x">.+<\/main>/s);
    // A saved layout, by name, renders the same way.
    const saved = await render(key, 'brand', {});
    expect(saved.status, JSON.stringify(saved.body)).toBe(200);
    expect(saved.body.html).toContain('Acme Shop');
  });

  it('an unsaved source is checked as a save checks it', async () => {
    const key = await fresh();
    const { name: _name, ...source } = shipped();
    const broken = await render(key, 'order-shipped', { source: { ...source, html: '<p>{{ orderNumber </p>' }, variables: shippedVars });
    expectError(broken, 422, 'invalid_template', /^html: /);
    expectDocumented(broken);
    expectError(await render(key, 'order-shipped', { source: { ...source, subject: undefined } }), 422, 'invalid_request', /^subject: /);
    expectError(await render(key, 'order-shipped', { source: { ...source, layout: 'nope' } }), 422, 'invalid_request', /^layout: /);
    expectError(await render(key, 'order-shipped', { source, variables: { orderNumber: '1' } }), 422, 'invalid_request', /^trackingUrl: /);
    expectError(await render(key, 'Order Shipped', { source, variables: shippedVars }), 422, 'invalid_request', /^name: /);
    expectError(await render(key, 'order-shipped', { source, variables: shippedVars, extra: 1 }), 422, 'invalid_request', /extra/);
  });
});

describe('scopes: templates:read reads, templates:write writes, emails:send lists and renders', () => {
  type Call = [string, (key: string) => Promise<ApiResponse>, number];
  const calls = (name: string): Call[] => [
    ['GET /templates', (k) => list(k), 200],
    ['GET /templates/{name}', (k) => get(k, name), 200],
    ['GET /templates/{name}/versions', (k) => versions(k, name), 200],
    ['POST /templates/{name}/render', (k) => render(k, name, shippedVars), 200],
    ['POST /templates', (k) => create(k, shipped({ name: `${name}-copy-${Math.random().toString(36).slice(2, 8)}` })), 201],
    ['PUT /templates/{name}', (k) => put(k, name, shipped({ name: undefined })), 200],
    ['DELETE /templates/{name}', (k) => del(k, name), 204],
  ];
  const OPENS: Record<string, Scope[]> = {
    'GET /templates': ['templates:read', 'emails:send'],
    'GET /templates/{name}': ['templates:read'],
    'GET /templates/{name}/versions': ['templates:read'],
    'POST /templates/{name}/render': ['templates:read', 'emails:send'],
    'POST /templates': ['templates:write'],
    'PUT /templates/{name}': ['templates:write'],
    'DELETE /templates/{name}': ['templates:write'],
  };

  it.each(['templates:read', 'templates:write', 'emails:send', 'emails:read'] as Scope[])('a key holding only %s', async (scope) => {
    const { account, key: owner } = await service.newAccount({ name: `Scope ${scope}` });
    await created(owner, shipped());
    const key = await service.newKey(account.id, [scope]);
    for (const [label, call, ok] of calls('order-shipped')) {
      const res = await call(key);
      expectDocumented(res);
      if (OPENS[label]!.includes(scope)) expect(res.status, `${label}: ${JSON.stringify(res.body)}`).toBe(ok);
      else {
        expectError(res, 403, 'insufficient_scope');
        const also = OPENS[label]![1];
        expect(res.body.error.message, label).toBe(`This key lacks the scope ${OPENS[label]![0]}${also ? ` (or ${also})` : ''}.`);
      }
    }
  });
});

describe("tenancy: another account's template answers exactly like one that does not exist", () => {
  it('GET, PUT, DELETE, versions and render are 404 template_not_found with the same message; it stays untouched', async () => {
    const owner = await fresh('Owner');
    await created(owner, shipped());
    const other = await fresh('Stranger');
    const pairs: [string, (name: string) => Promise<ApiResponse>][] = [
      ['GET', (n) => get(other, n)],
      ['PUT', (n) => put(other, n, shipped({ name: undefined }))],
      ['DELETE', (n) => del(other, n)],
      ['versions', (n) => versions(other, n)],
      ['render', (n) => render(other, n, shippedVars)],
    ];
    for (const [label, call] of pairs) {
      const theirs = await call('order-shipped');
      const nobodys = await call('order-lost');
      expectError(theirs, 404, 'template_not_found');
      expectError(nobodys, 404, 'template_not_found');
      expect(theirs.body.error.message.replace('order-shipped', 'NAME'), label).toBe(nobodys.body.error.message.replace('order-lost', 'NAME'));
    }
    expect((await list(other)).body.data.map((t: Body) => t.name)).not.toContain('order-shipped');
    expect((await get(owner, 'order-shipped')).body.version).toBe(1);
    // The stranger may have its own of the same name.
    expect((await create(other, shipped({ subject: 'Mine' }))).status).toBe(201);
    expect((await get(owner, 'order-shipped')).body.subject).toBe('Order {{ orderNumber }} has shipped');
  });

  it("another account's template cannot be sent, nor named as a layout: 422 invalid_request as for no template at all", async () => {
    const owner = await fresh('Owner of a layout');
    await created(owner, brand());
    await created(owner, shipped());
    const stranger = await newSender(service, { name: 'Stranger sender' });
    const send = (name: string) =>
      sendEmail(service, stranger.key, { from: stranger.from, to: 'ann@example.net', sandbox: true, template: { name, ...shippedVars } });
    const theirs = await send('order-shipped');
    const nobodys = await send('order-lost');
    expectError(theirs, 422, 'invalid_request', /^template\.name: /);
    expect(theirs.body.error.message).toBe(nobodys.body.error.message);
    expectError(await create(stranger.key, shipped({ layout: 'brand' })), 422, 'invalid_request', /^layout: /);
  });
});

describe("sub-accounts: their own, then the parent's, then the built-ins", () => {
  it("a sub-account reads and sends its parent's template, cannot change it, and may shadow it with its own", async () => {
    const parent = await newSender(service, { name: 'Parent', credits: 100 });
    const sub = await newSubSender(service, parent.key, 'Child');
    await created(parent.key, brand());
    await created(parent.key, shipped({ layout: 'brand' }));

    const seen = await get(parent.key, 'order-shipped', sub.id);
    expect(seen.status).toBe(200);
    expectDocumented(seen);
    expect(seen.body).toMatchObject({ inherited: true, builtIn: false, version: 1 });
    const listed = await list(parent.key, '', sub.id);
    expect(listed.body.data.filter((t: Body) => !t.builtIn).map((t: Body) => [t.name, t.inherited])).toEqual([
      ['brand', true],
      ['order-shipped', true],
    ]);
    expect((await versions(parent.key, 'order-shipped', '', sub.id)).body.data).toHaveLength(1);
    expect((await render(parent.key, 'order-shipped', shippedVars, sub.id)).body.subject).toBe('Order 1042 has shipped');

    const sendAs = (key: string, from: string, account?: string) =>
      sendEmail(service, key, { from, to: 'ann@example.net', sandbox: true, template: { name: 'order-shipped', ...shippedVars } }, { account });
    const inherited = await sendAs(parent.key, sub.from, sub.id);
    expect(inherited.status, JSON.stringify(inherited.body)).toBe(200);
    expect((await service.api('GET', `/emails/${inherited.body.id}`, { key: parent.key, account: sub.id })).body.subject).toBe('Order 1042 has shipped');

    expectError(await put(parent.key, 'order-shipped', shipped({ name: undefined, subject: 'Hijack' }), sub.id), 404, 'template_not_found');
    expectError(await del(parent.key, 'order-shipped', sub.id), 404, 'template_not_found');
    expectError(await del(parent.key, 'brand', sub.id), 404, 'template_not_found');

    const own = await create(parent.key, shipped({ subject: 'Child order {{ orderNumber }}' }), sub.id);
    expect(own.status, JSON.stringify(own.body)).toBe(201);
    expect(own.body).toMatchObject({ inherited: false, version: 1 });
    expect((await get(parent.key, 'order-shipped', sub.id)).body).toMatchObject({ inherited: false, subject: 'Child order {{ orderNumber }}' });
    const viaChild = await sendAs(parent.key, sub.from, sub.id);
    expect((await service.api('GET', `/emails/${viaChild.body.id}`, { key: parent.key, account: sub.id })).body.subject).toBe('Child order 1042');
    const viaParent = await sendAs(parent.key, parent.from);
    expect((await service.api('GET', `/emails/${viaParent.body.id}`, { key: parent.key })).body.subject).toBe('Order 1042 has shipped');
    expect((await get(parent.key, 'order-shipped')).body).toMatchObject({ inherited: false, subject: 'Order {{ orderNumber }} has shipped' });
  });

  it("a name that is neither its own nor its parent's is 404 for a sub-account too; a sibling's stays hidden", async () => {
    const key = await fresh('Family');
    const a = await service.api('POST', '/accounts', { key, body: { name: 'Sibling A' } });
    const b = await service.api('POST', '/accounts', { key, body: { name: 'Sibling B' } });
    await created(key, shipped(), a.body.id);
    expectError(await get(key, 'order-shipped', b.body.id), 404, 'template_not_found');
    expectError(await get(key, 'order-shipped'), 404, 'template_not_found');
  });
});

describe('POST /emails with an own template', () => {
  let sender: Sender;
  beforeAll(async () => {
    sender = await newSender(service, { name: 'Own sender', credits: 100 });
    await created(sender.key, brand());
    await created(sender.key, shipped({ layout: 'brand' }));
  });
  const send = (template: Body, extra: Body = {}, key = sender.key, account?: string) =>
    sendEmail(service, key, { from: sender.from, to: 'ann@example.net', template, ...extra }, { account });

  it('a layout named as the template of a send is 422 invalid_request saying it is a layout', async () => {
    const res = await send({ name: 'brand' }, { sandbox: true });
    expectError(res, 422, 'invalid_request', 'template.name: brand is a layout: send a template that names it');
  });

  it('is sent as a built-in is: rendered at check 5, logged with its rendered subject and its version', async () => {
    const sandboxed = await send({ name: 'order-shipped', ...shippedVars }, { sandbox: true });
    expect(sandboxed.status, JSON.stringify(sandboxed.body)).toBe(200);
    const logged = await service.api('GET', `/emails/${sandboxed.body.id}`, { key: sender.key });
    expect(logged.body).toMatchObject({ subject: 'Order 1042 has shipped', template: 'order-shipped', status: 'sandboxed' });
    expect((await emailRows(service, sender.account.id)).find((r) => r.id === sandboxed.body.id)?.templateVersion).toBe(1);

    const sent = await send({ name: 'order-shipped', ...shippedVars, firstName: 'Ann & Bob' });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const message = (await queued(service, sent.body.id)).message!;
    expect(message.subject).toBe('Order 1042 has shipped');
    expect(message.html).toContain('Acme Shop');
    expect(message.html).toContain('Ann &amp; Bob');
    expect(message.text).toContain('1042');
    // What the render answers is what is sent.
    const preview = await render(sender.key, 'order-shipped', { ...shippedVars, firstName: 'Ann & Bob' });
    expect(preview.body).toEqual({ subject: message.subject, html: message.html, text: message.text });

    // A new version is what the next send renders.
    expect((await put(sender.key, 'order-shipped', shipped({ name: undefined, layout: 'brand', subject: 'Shipped: {{ orderNumber }}' }))).status).toBe(200);
    const next = await send({ name: 'order-shipped', ...shippedVars }, { sandbox: true });
    expect((await service.api('GET', `/emails/${next.body.id}`, { key: sender.key })).body.subject).toBe('Shipped: 1042');
    expect((await emailRows(service, sender.account.id)).find((r) => r.id === next.body.id)?.templateVersion).toBe(2);
  });

  it.each([
    ['an undeclared variable', { ...shippedVars, coupon: 'X' }, /^template\.coupon: /],
    ['a missing required variable', { orderNumber: '1042' }, /^template\.trackingUrl: /],
    ['a url that is not http(s)', { ...shippedVars, trackingUrl: 'javascript:alert(1)' }, /^template\.trackingUrl: must be an http or https URL$/],
    ['a value that is not a string', { ...shippedVars, orderNumber: 1042 }, /^template\.orderNumber: must be a string$/],
  ])('%s is 422 invalid_request naming template.<variable>, nothing logged', async (_label, vars, message) => {
    const before = (await emailRows(service, sender.account.id)).length;
    const res = await send({ name: 'order-shipped', ...vars }, { sandbox: true });
    expectError(res, 422, 'invalid_request', message);
    expectDocumented(res);
    expect(await emailRows(service, sender.account.id)).toHaveLength(before);
  });

  it('a layout is not a template a send can name', async () => {
    expectError(await send({ name: 'brand' }, { sandbox: true }), 422, 'invalid_request', /^template\.name: /);
  });

  it('the checks keep their order: a suspended sub-account with a bad own-template variable is answered 403 suspended', async () => {
    const sub = await newSubSender(service, sender.key, 'Suspended child');
    await created(sender.key, { name: 'child-note', subject: 'Note {{ n }}', text: '{{ n }}', variables: { n: { required: true } } }, sub.id);
    const suspended = await service.api('POST', `/accounts/${sub.id}/suspend`, { key: sender.key, body: { suspended: true, reason: 'Paused for review.' } });
    expect(suspended.status, JSON.stringify(suspended.body)).toBe(200);
    const body = (template: Body) => ({ from: sub.from, to: 'ann@example.net', sandbox: true, template });
    const bad = await sendEmail(service, sender.key, body({ name: 'child-note', coupon: 'X' }), { account: sub.id });
    expectError(bad, 403, 'suspended', 'Paused for review.');
    const parentsBad = await sendEmail(service, sender.key, body({ name: 'order-shipped', orderNumber: '1' }), { account: sub.id });
    expectError(parentsBad, 403, 'suspended', 'Paused for review.');
    await service.api('POST', `/accounts/${sub.id}/suspend`, { key: sender.key, body: { suspended: false } });
    expectError(
      await sendEmail(service, sender.key, body({ name: 'child-note', coupon: 'X' }), { account: sub.id }),
      422,
      'invalid_request',
      /^template\.coupon: /,
    );
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEMPLATES } from '../server/core/templates.js';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { expectDocumented } from './helpers/openapi.js';
import { type Sender, emailRows, expectError, newSender, queued, sendEmail } from './helpers/sending.js';
import { startService, type ApiResponse, type TestService } from './helpers/service.js';

/**
 * The template catalog: GET /templates lists the built-in templates with their source and variables;
 * POST /templates/{name}/render answers { subject, html, text } for a send's `template` without `name`, with the
 * send's own validation, and sends nothing. An account's own templates: tests/own-templates-api.test.ts.
 */

let service: TestService;
let s: Sender;

beforeAll(async () => {
  service = await startService();
  s = await newSender(service, { name: 'Templates' });
});
afterAll(async () => {
  await service.close();
});

const render = (name: string, body: unknown, key = s.key) => service.api('POST', `/templates/${encodeURIComponent(name)}/render`, { key, body });

describe('GET /templates', () => {
  it('lists the six built-in templates (sorted by name, as a page), each with its source and its variables: required, kind, maximum length and its unit', async () => {
    const res = await service.api('GET', '/templates', { key: s.key });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectDocumented(res);
    expect(res.body.nextCursor).toBeNull();
    expect(res.body.data.map((t: { name: string }) => t.name)).toEqual(['magic-link', 'notification', 'password-reset', 'receipt', 'verify-email', 'welcome']);
    const byName = Object.fromEntries(res.body.data.map((t: { name: string }) => [t.name, t]));
    expect(byName.receipt).toEqual({
      name: 'receipt',
      kind: 'template',
      builtIn: true,
      inherited: false,
      description: expect.stringMatching(/receipt/),
      subject: expect.stringContaining('{{ receiptNumber }}'),
      html: expect.stringContaining('{{ total }}'),
      text: expect.stringContaining('{{ total }}'),
      layout: null,
      variables: {
        receiptNumber: { required: false, kind: 'text', maxLength: 998, lengthUnit: 'characters' },
        paidOn: { required: false, kind: 'text', maxLength: 998, lengthUnit: 'characters' },
        paymentMethod: { required: false, kind: 'text', maxLength: 998, lengthUnit: 'characters' },
        total: { required: true, kind: 'text', maxLength: 998, lengthUnit: 'characters' },
      },
      version: null,
      createdAt: null,
      updatedAt: null,
    });
    expect(byName['password-reset'].variables).toEqual({
      resetUrl: { required: true, kind: 'url', maxLength: 8192, lengthUnit: 'characters' },
      expiresIn: { required: false, kind: 'text', maxLength: 998, lengthUnit: 'characters' },
    });
    expect(byName.notification.variables).toEqual({
      subject: { required: true, kind: 'text', maxLength: 998, lengthUnit: 'characters' },
      body: { required: true, kind: 'text', maxLength: 102_400, lengthUnit: 'bytes' },
    });
    expect(byName.welcome.variables).toEqual({ firstName: { required: false, kind: 'text', maxLength: 998, lengthUnit: 'characters' } });
  });

  it('names exactly the variables the send path accepts, from the same table', async () => {
    const res = await service.api('GET', '/templates', { key: s.key });
    const listed = Object.fromEntries(
      res.body.data.map((t: { name: string; variables: Record<string, { required: boolean }> }) => [
        t.name,
        Object.entries(t.variables).map(([v, spec]) => [v, spec.required]),
      ]),
    );
    const table = Object.fromEntries(
      Object.entries(TEMPLATES).map(([name, def]) => [name, Object.entries(def.variables).map(([v, spec]) => [v, spec.required])]),
    );
    expect(listed).toEqual(table);
  });

  it('a sub-account sees the same catalog through X-Service-Account', async () => {
    const sub = await service.api('POST', '/accounts', { key: s.key, body: { name: 'Catalog sub' } });
    expect(sub.status).toBe(201);
    const own = await service.api('GET', '/templates', { key: s.key });
    const viaHeader = await service.api('GET', '/templates', { key: s.key, account: sub.body.id });
    expect(viaHeader.status).toBe(200);
    expect(viaHeader.body).toEqual(own.body);
  });

  it('a key with only emails:read is 403 insufficient_scope; one with emails:send or templates:read is let in', async () => {
    const reader = await service.newKey(s.account.id, ['emails:read']);
    const res = await service.api('GET', '/templates', { key: reader });
    expectError(res, 403, 'insufficient_scope', 'This key lacks the scope templates:read (or emails:send).');
    expectDocumented(res);
    for (const scope of ['emails:send', 'templates:read'] as const) {
      expect((await service.api('GET', '/templates', { key: await service.newKey(s.account.id, [scope]) })).status).toBe(200);
    }
  });
});

describe('POST /templates/{name}/render', () => {
  it('answers { subject, html, text } and sends nothing: no log entry, no queue row, no charge', async () => {
    const before = await service.api('GET', '/account', { key: s.key });
    const res = await render('receipt', { receiptNumber: 'R-77', paidOn: '2026-03-10', total: '$42.00' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectDocumented(res);
    expect(Object.keys(res.body).sort()).toEqual(['html', 'subject', 'text']);
    expect(res.body.subject).toBe('Your receipt R-77');
    expect(res.body.text).toBe('Receipt R-77\n\nPaid on: 2026-03-10\nTotal: $42.00\n\nThank you for your payment.\n');
    expect(res.body.html).toContain('<strong>$42.00</strong>');
    expect(res.body.html).not.toContain('Payment method');
    expect(await emailRows(service, s.account.id)).toEqual([]);
    const after = await service.api('GET', '/account', { key: s.key });
    expect(after.body.sending).toEqual(before.body.sending);
    expect(after.body.credits).toEqual(before.body.credits);
  });

  it('renders exactly the message a send of the same variables queues', async () => {
    const vars = { receiptNumber: 'R-1&2', paymentMethod: '<i>Visa</i>', total: '"$5" & more' };
    const preview = await render('receipt', vars);
    expect(preview.status).toBe(200);
    const sent = await sendEmail(service, s.key, { from: s.from, to: 'ann@example.net', template: { name: 'receipt', ...vars } });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const message = (await queued(service, sent.body.id)).message!;
    expect(preview.body).toEqual({ subject: message.subject, html: message.html, text: message.text });
  });

  it('HTML-escapes every value in html and leaves text as written', async () => {
    const res = await render('notification', { subject: '<img src=x onerror=alert(1)>', body: `<script>alert("x")</script> & 'quoted'\nline two` });
    expect(res.status).toBe(200);
    expect(res.body.html).not.toMatch(/<img|<script/);
    expect(res.body.html).toContain('<title>&lt;img src=x onerror=alert(1)&gt;</title>');
    expect(res.body.html).toContain('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;quoted&#39;<br>line two');
    expect(res.body.text).toBe(`<script>alert("x")</script> & 'quoted'\nline two\n`);
    expect(res.body.subject).toBe('<img src=x onerror=alert(1)>');
  });

  it('a quote in a link stays inside the href; a line break in a subject variable becomes a space', async () => {
    const link = await render('magic-link', { url: 'https://example.com/x"onmouseover="alert(1)' });
    expect(link.status).toBe(200);
    expect(link.body.html).not.toContain('"onmouseover="');
    expect(link.body.html).toContain('href="https://example.com/x&quot;onmouseover=&quot;alert(1)"');
    const subject = await render('notification', { subject: 'Hello\r\nBcc: victim@evil.example', body: 'b' });
    expect(subject.body.subject).toBe('Hello Bcc: victim@evil.example');
  });

  it('a template without required variables renders from an empty object; optional ones change the output', async () => {
    const bare = await render('welcome', {});
    expect(bare.status).toBe(200);
    expect(bare.body.text).toBe('Welcome!\n\nYour account is ready.\n');
    const named = await render('welcome', { firstName: 'Ann' });
    expect(named.body.text).toBe('Welcome, Ann!\n\nYour account is ready.\n');
  });

  it('acts for a sub-account through X-Service-Account', async () => {
    const sub = await service.api('POST', '/accounts', { key: s.key, body: { name: 'Render sub' } });
    const res = await service.api('POST', '/templates/magic-link/render', { key: s.key, account: sub.body.id, body: { url: 'https://example.com/in' } });
    expect(res.status).toBe(200);
    expect(res.body.text).toContain('https://example.com/in');
  });
});

describe('POST /templates/{name}/render refuses what a send refuses, with the same code and message', () => {
  /** The error a sandbox send answers for the same template and variables, its field named inside `template`. */
  async function sendError(name: string, vars: Record<string, unknown>): Promise<ApiResponse> {
    return sendEmail(service, s.key, { from: s.from, to: 'ann@example.net', sandbox: true, template: { name, ...vars } });
  }

  const long = (n: number) => 'x'.repeat(n);
  const cases: [string, string, Record<string, unknown>, string, RegExp][] = [
    ['an unknown variable', 'receipt', { total: '$1', discount: '10%' }, 'discount', /^discount: is not a variable of the receipt template$/],
    ['a variable of another template', 'welcome', { url: 'https://example.com' }, 'url', /^url: is not a variable of the welcome template$/],
    ['a missing required variable', 'receipt', { receiptNumber: 'R-1' }, 'total', /^total: is required by the receipt template$/],
    ['a missing required link', 'password-reset', { expiresIn: '1 hour' }, 'resetUrl', /^resetUrl: is required by the password-reset template$/],
    ['a variable over 998 characters', 'receipt', { total: long(999) }, 'total', /^total: must be at most 998 characters$/],
    ['a link over 8,192 characters', 'magic-link', { url: `https://example.com/${long(8192)}` }, 'url', /^url: must be at most 8192 characters$/],
    [
      'a body over 100 KB of UTF-8',
      'notification',
      { subject: 's', body: 'é'.repeat(51_201) },
      'body',
      /^body: must be at most 100 KB \(102400 bytes of UTF-8\)$/,
    ],
    ['a link that is not http(s)', 'verify-email', { url: 'javascript:alert(1)' }, 'url', /^url: must be an http or https URL$/],
    ['a value that is not a string', 'receipt', { total: 42 }, 'total', /^total: must be a string$/],
    ['a null value', 'receipt', { total: null }, 'total', /^total: must be a string$/],
  ];

  it.each(cases)('%s is 422 invalid_request naming it', async (_label, name, vars, field, message) => {
    const res = await render(name, vars);
    expectError(res, 422, 'invalid_request', message);
    expectDocumented(res);
    expect(res.body.error.message.startsWith(`${field}: `)).toBe(true);
    const viaSend = await sendError(name, vars);
    expectError(viaSend, 422, 'invalid_request');
    expect(viaSend.body.error.message).toBe(`template.${res.body.error.message}`);
  });

  it.each(['invoice', 'constructor', 'toString', '__proto__'])(
    'an unknown template %s is 404 template_not_found; a send naming it is 422 invalid_request naming template.name',
    async (name) => {
      const res = await render(name, { total: '$1' });
      expectError(res, 404, 'template_not_found', `No template named ${name} on this account.`);
      expectDocumented(res);
      const viaSend = await sendError(name, { total: '$1' });
      expectError(
        viaSend,
        422,
        'invalid_request',
        /^template\.name: must be a built-in template \(receipt, welcome, password-reset, magic-link, verify-email, notification\) or the name of one of this account's own templates$/,
      );
    },
  );

  it('name in the body is not a variable: the template is named by the path', async () => {
    expectError(await render('receipt', { name: 'welcome', total: '$1' }), 422, 'invalid_request', /^name: is not a variable of the receipt template$/);
  });

  it('a __proto__ key is refused, never read as the prototype', async () => {
    const res = await service.api('POST', '/templates/receipt/render', {
      key: s.key,
      rawBody: '{"total":"$1","__proto__":{"x":"y"}}',
      headers: { 'content-type': 'application/json' },
    });
    expectError(res, 422, 'invalid_request', /^__proto__: /);
  });

  it('a body that is not a JSON object is 422; one that is not JSON, or is empty, is 400 invalid_json', async () => {
    expectError(await render('receipt', ['$1']), 422, 'invalid_request', /^body: must be a JSON object$/);
    expectError(await render('receipt', '$1'), 422, 'invalid_request', /^body: must be a JSON object$/);
    const raw = (rawBody: string) => service.api('POST', '/templates/receipt/render', { key: s.key, rawBody, headers: { 'content-type': 'application/json' } });
    const notJson = await raw('{"total":');
    expectError(notJson, 400, 'invalid_json');
    expectDocumented(notJson);
    expectError(await raw(''), 400, 'invalid_json');
  });

  it('a body of 1 MB or more is 413 body_too_large', async () => {
    const res = await render('notification', { subject: 's', body: long(1024 * 1024) });
    expectError(res, 413, 'body_too_large');
    expectDocumented(res);
  });
});

describe('the standard failures', () => {
  runCommonAuthTests(() => service, { method: 'GET', path: '/templates', scope: 'templates:read', alsoScope: 'emails:send' });
  runCommonAuthTests(() => service, {
    method: 'POST',
    path: '/templates/receipt/render',
    scope: 'templates:read',
    alsoScope: 'emails:send',
    body: { total: '$1' },
  });
  runCommonAuthTests(() => service, {
    method: 'POST',
    path: '/templates',
    scope: 'templates:write',
    body: { name: 'auth-case', subject: 'Hi', text: 'Hello' },
  });
  runCommonAuthTests(() => service, { method: 'GET', path: '/templates/receipt', scope: 'templates:read' });
  runCommonAuthTests(() => service, { method: 'PUT', path: '/templates/order-shipped', scope: 'templates:write', body: { subject: 'Hi', text: 'Hello' } });
  runCommonAuthTests(() => service, { method: 'DELETE', path: '/templates/order-shipped', scope: 'templates:write' });
  runCommonAuthTests(() => service, { method: 'GET', path: '/templates/receipt/versions', scope: 'templates:read' });
});

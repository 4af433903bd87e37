import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectError, expectOk, newSender, queued, receipt, recipients, type Sender, sendEmail } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * The send request (docs/api/contract.md, Send request; docs/api/decisions.md section 2): `to` as one address or 1 to 50,
 * de-duplicated; `replyTo`; `tags`; `sandbox`; the six built-in templates with their variables, rendering subject,
 * html and text with values HTML-escaped; an unknown field or variable refused naming it. Every refusal is
 * `422 invalid_request` (or `400 invalid_json`) and queues nothing.
 */

let service: TestService;
let s: Sender;

beforeAll(async () => {
  service = await startService({ DEFAULT_DAILY_QUOTA: '100000' });
  s = await newSender(service, { credits: 100_000 });
});
afterAll(async () => {
  await service.close();
});

const send = (body: unknown) => sendEmail(service, s.key, body);
const template = (name: string, vars: Record<string, unknown> = {}) => ({ from: s.from, to: 'customer@example.net', template: { name, ...vars } });

/** A refusal names the field: the message mentions it. */
async function expectRefused(body: unknown, field: string): Promise<void> {
  const res = await send(body);
  expectError(res, 422, 'invalid_request');
  expect(res.body.error.message).toContain(field);
}

describe('a body that is not a JSON object', () => {
  const json = { 'content-type': 'application/json' };
  it.each([
    ['truncated JSON', '{"from": "a@example.com", '],
    ['not JSON at all', 'from=a@example.com'],
    ['an empty body', ''],
  ])('%s is 400 invalid_json', async (_, raw) => {
    expectError(await service.api('POST', '/emails', { key: s.key, rawBody: raw, headers: json }), 400, 'invalid_json');
  });

  it.each([
    ['an array', '[]'],
    ['null', 'null'],
    ['a string', '"hello"'],
    ['a number', '42'],
  ])('%s is 422 invalid_request', async (_, raw) => {
    expectError(await service.api('POST', '/emails', { key: s.key, rawBody: raw, headers: json }), 422, 'invalid_request');
  });
});

describe('required and unknown fields', () => {
  it.each(['from', 'to', 'template'])('a missing %s is 422 naming it', async (field) => {
    const body = receipt(s.from);
    delete body[field];
    await expectRefused(body, field);
  });

  it.each(['cc', 'bcc', 'subject', 'html', 'headers', 'attachments'])('an unknown top-level field %s is 422 naming it', async (field) => {
    await expectRefused({ ...receipt(s.from), [field]: 'x' }, field);
  });

  it('sandbox must be a boolean', async () => {
    await expectRefused({ ...receipt(s.from), sandbox: 'true' }, 'sandbox');
    await expectRefused({ ...receipt(s.from), sandbox: 1 }, 'sandbox');
  });
});

describe('to: one address, or an array of 1 to 50', () => {
  it('a string is one recipient', async () => {
    const res = await send(receipt(s.from, 'ann@example.net'));
    expectOk(res);
    expect((await queued(service, res.body.id)).recipients.map((r) => r.recipient)).toEqual(['ann@example.net']);
  });

  it('50 addresses are accepted, 51 are 422 naming to', async () => {
    const res = await send(receipt(s.from, recipients(50)));
    expectOk(res);
    expect((await queued(service, res.body.id)).recipients).toHaveLength(50);
    const refused = await send(receipt(s.from, recipients(51)));
    expectError(refused, 422, 'invalid_request', /\bto\b/);
  });

  it('an address of 254 characters is accepted, 255 (more than SMTP carries, RFC 5321) is 422 naming to', async () => {
    // 64 + 1 + labels of 59 and dots, then `.net`: every label valid, only the length differs.
    const at = (n: number) => `${'a'.repeat(64)}@${'b'.repeat(59)}.${'c'.repeat(59)}.${'d'.repeat(59)}.${'e'.repeat(n - 65 - 180 - 4)}.net`;
    expect(at(254)).toHaveLength(254);
    expectOk(await send(receipt(s.from, at(254))));
    await expectRefused(receipt(s.from, at(255)), 'to');
    await expectRefused(receipt(s.from, 'ok@example.net', { replyTo: at(255) }), 'replyTo');
  });

  it('an empty array is 422 naming to', async () => {
    await expectRefused(receipt(s.from, []), 'to');
  });

  it('duplicates, compared lower-cased, are dropped: one queued row and one log entry address each', async () => {
    const res = await send(receipt(s.from, ['Ann@Example.net', 'ann@example.net', 'ANN@EXAMPLE.NET', 'bob@example.net', 'bob@example.net']));
    expectOk(res);
    const rows = (await queued(service, res.body.id)).recipients.map((r) => r.recipient.toLowerCase());
    expect(rows.sort()).toEqual(['ann@example.net', 'bob@example.net']);
    const email = await service.api('GET', `/emails/${res.body.id}`, { key: s.key });
    expect(email.body.to).toHaveLength(2);
    expect(email.body.to.map((a: string) => a.toLowerCase()).sort()).toEqual(['ann@example.net', 'bob@example.net']);
  });

  it.each([
    ['a display name', 'Ann <ann@example.net>'],
    ['two addresses in one string', 'ann@example.net, bob@example.net'],
    ['two addresses separated by a space', 'ann@example.net bob@example.net'],
    ['no @', 'ann.example.net'],
    ['no domain', 'ann@'],
    ['no local part', '@example.net'],
    ['a single-label domain', 'ann@localhost'],
    ['a line break', 'ann@example.net\r\nBcc: x@evil.example'],
    ['an empty string', ''],
  ])('a recipient with %s is 422 naming to', async (_, to) => {
    await expectRefused(receipt(s.from, to), 'to');
    await expectRefused(receipt(s.from, ['ok@example.net', to]), 'to');
  });

  it.each([
    ['a number', 42],
    ['an object', { address: 'ann@example.net' }],
    ['null', null],
  ])('to as %s is 422 naming to', async (_, to) => {
    await expectRefused(receipt(s.from, to as never), 'to');
  });
});

describe('replyTo: one mailbox, by the rules of from', () => {
  it('is rebuilt into the queued message', async () => {
    const res = await send(receipt(s.from, 'ann@example.net', { replyTo: 'Support Team <help@example.org>' }));
    expectOk(res);
    expect((await queued(service, res.body.id)).message?.replyToHeader).toBe('"Support Team" <help@example.org>');
  });

  it('a bare address is accepted', async () => {
    const res = await send(receipt(s.from, 'ann@example.net', { replyTo: 'help@example.org' }));
    expectOk(res);
    expect((await queued(service, res.body.id)).message?.replyToHeader).toBe('help@example.org');
  });

  it.each([
    ['a comma', '"Support, Team" <help@example.org>'],
    ['two addresses', 'help@example.org, sales@example.org'],
    ['a second address in brackets', 'Support <help@example.org> <sales@example.org>'],
    ['CR LF and a header', 'help@example.org\r\nBcc: x@evil.example'],
    ['a display name of 81 characters', `${'n'.repeat(81)} <help@example.org>`],
    ['no @', 'help.example.org'],
    ['a number', 7],
  ])('%s is 422 naming replyTo', async (_, replyTo) => {
    await expectRefused(receipt(s.from, 'ann@example.net', { replyTo }), 'replyTo');
  });
});

describe('tags: at most 10, key 1-40 of [A-Za-z0-9_-], value up to 256 characters', () => {
  const tenTags = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`tag_${i}`, `value-${i}`]));

  it('are returned on the Email', async () => {
    const tags = { plan: 'pro', 'order-id': 'A_1001', [`${'k'.repeat(40)}`]: 'v'.repeat(256), Empty: '' };
    const res = await send(receipt(s.from, 'ann@example.net', { tags }));
    expectOk(res);
    const email = await service.api('GET', `/emails/${res.body.id}`, { key: s.key });
    expect(email.body.tags).toEqual(tags);
    const list = await service.api('GET', '/emails?limit=1', { key: s.key });
    expect(list.body.data[0]).toMatchObject({ id: res.body.id, tags });
  });

  it('a value is counted in characters (code points): 256 emoji are accepted, 257 are 422', async () => {
    const res = await send(receipt(s.from, 'ann@example.net', { tags: { note: '😀'.repeat(256) } }));
    expectOk(res);
    expect((await service.api('GET', `/emails/${res.body.id}`, { key: s.key })).body.tags).toEqual({ note: '😀'.repeat(256) });
    await expectRefused(receipt(s.from, 'ann@example.net', { tags: { note: '😀'.repeat(257) } }), 'tags');
  });

  it('10 entries are accepted, 11 are 422 naming tags', async () => {
    expectOk(await send(receipt(s.from, 'ann@example.net', { tags: tenTags })));
    await expectRefused(receipt(s.from, 'ann@example.net', { tags: { ...tenTags, eleventh: 'x' } }), 'tags');
  });

  it.each([
    ['a key of 41 characters', { ['k'.repeat(41)]: 'v' }],
    ['an empty key', { '': 'v' }],
    ['a key with a dot', { 'order.id': 'v' }],
    ['a key with a space', { 'order id': 'v' }],
    ['a key with a non-ASCII letter', { commandé: 'v' }],
    ['a value of 257 characters', { plan: 'v'.repeat(257) }],
    ['a number value', { plan: 3 }],
    ['a null value', { plan: null }],
    ['a nested object', { plan: { tier: 'pro' } }],
  ])('%s is 422 naming tags', async (_, tags) => {
    await expectRefused(receipt(s.from, 'ann@example.net', { tags }), 'tags');
  });

  it.each([
    ['an array', ['plan']],
    ['a string', 'plan=pro'],
  ])('tags as %s is 422 naming tags', async (_, tags) => {
    await expectRefused(receipt(s.from, 'ann@example.net', { tags }), 'tags');
  });
});

describe('templates: name plus string variables', () => {
  const cases: [string, Record<string, string>, string[]][] = [
    ['receipt', { receiptNumber: 'R-77', paidOn: '2026-03-01', paymentMethod: 'Visa 4242', total: '€19.00' }, ['R-77', '2026-03-01', 'Visa 4242', '€19.00']],
    ['receipt', { total: '€19.00' }, ['€19.00']],
    ['welcome', { firstName: 'Ann' }, ['Welcome, Ann!']],
    ['welcome', {}, ['Welcome!']],
    ['password-reset', { resetUrl: 'https://app.example.com/reset?t=abc', expiresIn: '30 minutes' }, ['https://app.example.com/reset?t=abc', '30 minutes']],
    ['password-reset', { resetUrl: 'http://localhost:3000/reset' }, ['http://localhost:3000/reset']],
    ['magic-link', { url: 'https://app.example.com/login/xyz' }, ['https://app.example.com/login/xyz']],
    ['verify-email', { url: 'https://app.example.com/verify/xyz' }, ['https://app.example.com/verify/xyz']],
    ['notification', { subject: 'Your export is ready', body: 'Download it from the dashboard.' }, ['Download it from the dashboard.']],
  ];
  it.each(cases)('%s with %j renders subject, html and text carrying the values', async (name, vars, shown) => {
    const res = await send(template(name, vars));
    expectOk(res);
    const message = (await queued(service, res.body.id)).message!;
    expect(message.subject.length).toBeGreaterThan(0);
    expect(message.html).toMatch(/<html/i);
    expect(message.text.length).toBeGreaterThan(0);
    for (const value of shown) {
      expect(message.html).toContain(value.replace(/&/g, '&amp;'));
      expect(message.text).toContain(value);
    }
    const email = await service.api('GET', `/emails/${res.body.id}`, { key: s.key });
    expect(email.body).toMatchObject({ template: name, subject: message.subject });
  });

  it('the notification subject is the subject variable', async () => {
    const res = await send(template('notification', { subject: 'Your export is ready', body: 'Done.' }));
    expectOk(res);
    expect((await queued(service, res.body.id)).message!.subject).toBe('Your export is ready');
  });

  it('a receipt’s subject carries its number', async () => {
    const res = await send(template('receipt', { receiptNumber: 'R-9', total: '$1' }));
    expectOk(res);
    expect((await queued(service, res.body.id)).message!.subject).toContain('R-9');
  });

  it('an unknown template name is 422 naming template.name', async () => {
    await expectRefused(template('invoice', { total: '$1' }), 'template.name');
  });

  it.each(['constructor', 'toString', 'hasOwnProperty', 'valueOf', '__proto__'])(
    'a template named %s (a key every object inherits) is 422 naming template.name',
    async (name) => {
      await expectRefused(template(name, { total: '$1' }), 'template.name');
    },
  );

  it.each(['constructor', 'toString', 'hasOwnProperty'])('a variable named %s is 422 naming it, not silently dropped', async (variable) => {
    await expectRefused(template('receipt', { total: '$1', [variable]: 'x' }), `template.${variable}`);
  });

  it('a __proto__ key anywhere in the body is 422 naming it (JSON.parse keeps it; copying it would drop it)', async () => {
    const json = { 'content-type': 'application/json' };
    for (const [raw, field] of [
      [`{"from":"${s.from}","to":"ann@example.net","template":{"name":"receipt","total":"$1","__proto__":"x"}}`, 'template.__proto__'],
      [`{"from":"${s.from}","to":"ann@example.net","template":{"name":"receipt","total":"$1"},"tags":{"__proto__":"x"}}`, 'tags.__proto__'],
      [`{"from":"${s.from}","to":"ann@example.net","template":{"name":"receipt","total":"$1"},"tags":{"__proto__":{"a":"b"}}}`, 'tags.__proto__'],
      [`{"__proto__":{},"from":"${s.from}","to":"ann@example.net","template":{"name":"receipt","total":"$1"}}`, '__proto__'],
    ]) {
      const res = await service.api('POST', '/emails', { key: s.key, rawBody: raw, headers: json });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message).toContain(field);
    }
  });

  it('a template without a name is 422 naming template.name', async () => {
    await expectRefused({ from: s.from, to: 'ann@example.net', template: { total: '$1' } }, 'template.name');
  });

  it.each([
    ['receipt', { total: '$1', discount: '10%' }, 'template.discount'],
    ['welcome', { url: 'https://example.com' }, 'template.url'],
    ['magic-link', { url: 'https://example.com', resetUrl: 'https://example.com' }, 'template.resetUrl'],
    ['notification', { subject: 'a', body: 'b', html: '<b>x</b>' }, 'template.html'],
  ])('%s with a variable it does not take (%j) is 422 naming %s', async (name, vars, field) => {
    await expectRefused(template(name, vars), field);
  });

  it.each([
    ['receipt', { receiptNumber: 'R-1' }, 'template.total'],
    ['password-reset', { expiresIn: '1 hour' }, 'template.resetUrl'],
    ['magic-link', {}, 'template.url'],
    ['verify-email', {}, 'template.url'],
    ['notification', { body: 'b' }, 'template.subject'],
    ['notification', { subject: 's' }, 'template.body'],
  ])('%s without a required variable (%j) is 422 naming %s', async (name, vars, field) => {
    await expectRefused(template(name, vars), field);
  });

  it.each([
    ['a number', { total: 42 }],
    ['null', { total: null }],
    ['an object', { total: { amount: 42 } }],
    ['a boolean', { total: '$1', paidOn: true }],
  ])('a variable that is %s is 422 naming it', async (_, vars) => {
    const field = Object.keys(vars).find((k) => typeof (vars as Record<string, unknown>)[k] !== 'string')!;
    await expectRefused(template('receipt', vars), `template.${field}`);
  });

  it.each([
    ['a javascript: URL', 'javascript:alert(1)'],
    ['a data: URL', 'data:text/html,<script>alert(1)</script>'],
    ['an ftp URL', 'ftp://files.example.com/x'],
    ['a relative path', '/reset?t=abc'],
    ['not a URL', 'click here'],
  ])('a link variable with %s is 422', async (_, url) => {
    await expectRefused(template('magic-link', { url }), 'template.url');
    await expectRefused(template('verify-email', { url }), 'template.url');
    await expectRefused(template('password-reset', { resetUrl: url }), 'template.resetUrl');
  });

  it('template as a string is 422 naming template', async () => {
    await expectRefused({ from: s.from, to: 'ann@example.net', template: 'receipt' }, 'template');
  });
});

describe('rendering escapes values in html', () => {
  it('<script> in a variable arrives in html as &lt;script&gt;, as written in text', async () => {
    const evil = '<script>alert("x")</script>';
    const res = await send(template('receipt', { receiptNumber: 'R-1', paymentMethod: evil, total: '<b>$1</b> & "more"' }));
    expectOk(res);
    const message = (await queued(service, res.body.id)).message!;
    expect(message.html).not.toContain('<script>');
    expect(message.html).not.toContain('<b>$1</b>');
    expect(message.html).toContain('&lt;script&gt;');
    expect(message.html).toContain('&lt;b&gt;$1&lt;/b&gt; &amp;');
    expect(message.text).toContain(evil);
  });

  it('a quote in a link cannot leave the href attribute', async () => {
    const res = await send(template('magic-link', { url: 'https://example.com/x"onmouseover="alert(1)' }));
    if (res.status === 200) {
      const html = (await queued(service, res.body.id)).message!.html;
      expect(html).not.toContain('"onmouseover="');
    } else {
      expectError(res, 422, 'invalid_request');
    }
  });

  it('markup in a notification body and subject is escaped in html', async () => {
    const res = await send(template('notification', { subject: '<img src=x onerror=alert(1)>', body: '<iframe src="https://evil.example"></iframe>' }));
    expectOk(res);
    const html = (await queued(service, res.body.id)).message!.html;
    expect(html).not.toMatch(/<img|<iframe/);
    expect(html).toContain('&lt;iframe');
  });

  it('a line break in a subject variable cannot add a header', async () => {
    const res = await send(template('notification', { subject: 'Hello\r\nBcc: victim@evil.example', body: 'b' }));
    if (res.status === 200) {
      expect((await queued(service, res.body.id)).message!.subject).not.toMatch(/[\r\n]/);
    } else {
      expectError(res, 422, 'invalid_request');
    }
  });
});

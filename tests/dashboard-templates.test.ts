import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectAccessible, flashText, horizontalOverflow, newPage, pageProblems, screenshot, signIn, submit } from './helpers/browser.js';
import { type DashboardClient, UUID, openDashboard } from './helpers/dashboard.js';
import { newSender, newSubSender } from './helpers/sending.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * The Templates page against the real service in Chromium: an account's own template written, previewed in the
 * captured-mail frame, saved, saved again, compared and restored, test-sent in sandbox and deleted, each change read
 * back through the templates API; a layout in use kept; a syntax error shown at its line with the form kept; a
 * built-in duplicated; keyboard, axe and CSRF.
 */

let service: TestService;
let browser: Browser;
let token: string;
let http: DashboardClient;

beforeAll(async () => {
  service = await startService();
  ({ browser, token, client: http } = await openDashboard(service));
});
afterAll(async () => {
  await browser?.close();
  await service?.close();
});

const HTML_V1 = '<style>p { color: #123456; }</style>\n<p>Hello {{ firstName }},</p>\n<p><a href="{{ link }}">Open your account</a></p>';
const HTML_V2 = '<style>p { color: #123456; }</style>\n<p>Welcome, {{ firstName }}!</p>\n<p><a href="{{ link }}">Open your account</a></p>';

/** Fills the editor's fields (the variable rows by their labels). */
async function fillEditor(
  page: Page,
  f: { name?: string; subject?: string; html?: string; text?: string; variables?: { name: string; required: boolean; kind: 'text' | 'url' }[] },
) {
  if (f.name !== undefined) await page.getByLabel('Name', { exact: true }).fill(f.name);
  if (f.subject !== undefined) await page.getByLabel('Subject').fill(f.subject);
  if (f.html !== undefined) await page.getByLabel('HTML', { exact: true }).fill(f.html);
  if (f.text !== undefined) await page.getByLabel('Text', { exact: true }).fill(f.text);
  for (const [i, v] of (f.variables ?? []).entries()) {
    await page.getByLabel(`Variable ${i + 1} name`).fill(v.name);
    await page.getByLabel(`Variable ${i + 1} required`).setChecked(v.required);
    await page.getByLabel(`Variable ${i + 1} kind`).selectOption(v.kind);
  }
}

describe('the Templates page', () => {
  it('creates, previews, saves, saves a version, compares, restores, test-sends in sandbox and deletes a template', async () => {
    const s = await newSender(service, { name: 'Template Shop' });
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/templates?account=${s.account.id}`);
    // The list: the six built-ins, marked.
    const list = page.locator('#template-list');
    expect(await list.getByRole('row', { name: /receipt/ }).textContent()).toContain('Built in');
    await expectAccessible(page, 'templates list');
    await screenshot(page, 'i34-templates-list');

    await Promise.all([page.waitForEvent('load'), page.getByRole('link', { name: 'New template' }).click()]);
    await fillEditor(page, {
      name: 'greeting',
      subject: 'Hello {{ firstName }}',
      html: HTML_V1,
      variables: [
        { name: 'firstName', required: true, kind: 'text' },
        { name: 'link', required: true, kind: 'url' },
      ],
    });
    await expectAccessible(page, 'new template editor');

    // Preview: sample values, the HTML in the sandboxed frame under the captured-mail policy; nothing saved.
    await submit(page, 'Preview');
    expect(await page.locator('#preview-subject').textContent()).toBe('Hello [firstName]');
    const frame = page.locator('iframe.message-frame');
    expect(await frame.getAttribute('sandbox')).toBe('');
    const src = (await frame.getAttribute('src'))!;
    const framed = await page.context().request.get(`${service.url}${src}`);
    expect(framed.headers()['content-security-policy']).toBe("sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; frame-ancestors 'self'");
    const body = await framed.text();
    expect(body).toContain('Hello [firstName],');
    expect(body).toContain('href="https://example.com/"');
    expect(await page.frameLocator('iframe.message-frame').locator('a').getAttribute('href')).toBe('https://example.com/');
    expect(await page.locator('#preview').getByRole('region').or(page.locator('#preview pre')).first().textContent()).toContain('Hello [firstName],');
    // Another session cannot read the preview.
    expect((await http.get(src)).status).toBe(404);
    // The form kept what was typed, with two blank variable rows more.
    expect(await page.getByLabel('Name', { exact: true }).inputValue()).toBe('greeting');
    expect(await page.getByLabel('Variable 4 name').inputValue()).toBe('');
    expect((await service.api('GET', '/templates/greeting', { key: s.key })).status).toBe(404);
    await expectAccessible(page, 'editor with preview');
    await screenshot(page, 'i34-template-preview');

    await submit(page, 'Save');
    expect(new URL(page.url()).pathname).toBe(`/dashboard/templates/${s.account.id}/edit/greeting`);
    expect(await flashText(page, 'ok')).toBe('Saved: greeting.');
    const v1 = await service.api('GET', '/templates/greeting', { key: s.key });
    expect(v1.body).toMatchObject({ name: 'greeting', kind: 'template', version: 1, builtIn: false, subject: 'Hello {{ firstName }}', html: HTML_V1 });
    expect(v1.body.variables).toMatchObject({ firstName: { required: true, kind: 'text' }, link: { required: true, kind: 'url' } });

    // Edit and save: version 2.
    await fillEditor(page, { html: HTML_V2 });
    await submit(page, 'Save as a new version');
    expect(await flashText(page, 'ok')).toBe('Saved as version 2: greeting.');
    expect((await service.api('GET', '/templates/greeting', { key: s.key })).body).toMatchObject({ version: 2, html: HTML_V2 });

    // The versions, newest first, and the diff of version 1 against the current one.
    await Promise.all([page.waitForEvent('load'), page.getByRole('link', { name: /See the kept versions/ }).click()]);
    const rows = page.locator('#version-list tbody tr');
    expect(await rows.count()).toBe(2);
    expect((await rows.nth(0).textContent())?.startsWith('2 (current)')).toBe(true);
    await Promise.all([page.waitForEvent('load'), page.getByRole('link', { name: 'Compare version 1 with the current one' }).click()]);
    const diff = page.locator('#diff');
    const htmlDiff = (await diff.locator('pre[aria-labelledby="diff-HTML"]').textContent())!.split('\n');
    // Each changed line says so to a screen reader too.
    expect(htmlDiff).toContain('removed: - <p>Hello {{ firstName }},</p>');
    expect(htmlDiff).toContain('added: + <p>Welcome, {{ firstName }}!</p>');
    expect(htmlDiff).toContain('  <style>p { color: #123456; }</style>');
    expect(await diff.textContent()).toContain('No change.');
    await expectAccessible(page, 'versions with a diff');
    await screenshot(page, 'i34-template-versions-diff');

    // Restore version 1 as version 3.
    await submit(page, 'Restore as new version: version 1');
    expect(await flashText(page, 'ok')).toBe('Version 1 of greeting restored as version 3.');
    expect((await service.api('GET', '/templates/greeting', { key: s.key })).body).toMatchObject({ version: 3, html: HTML_V1 });
    const versions = await service.api('GET', '/templates/greeting/versions', { key: s.key });
    expect(versions.body.data.map((v: { version: number }) => v.version)).toEqual([3, 2, 1]);

    // A test send in sandbox: every check of POST /emails, nothing sent; the email's id linked.
    await page.goto(`${service.url}/dashboard/templates/${s.account.id}/edit/greeting`);
    expect(await page.getByLabel('From').inputValue()).toBe(`test@${s.domain}`);
    await page.getByLabel('To', { exact: true }).fill('dana@example.net');
    await submit(page, 'Send test');
    const sent = (await page.locator('.flash.ok > div').first().textContent())!;
    const id = UUID.exec(sent)![0];
    expect(sent).toBe(`Sandboxed: email ${id}, greeting to dana@example.net, passed every check of POST /emails; nothing was sent.`);
    expect(
      await page
        .locator('.flash')
        .getByRole('link', { name: `Open email ${id} in the send log` })
        .getAttribute('href'),
    ).toBe(`/dashboard/emails/${id}`);
    const email = await service.api('GET', `/emails/${id}`, { key: s.key });
    expect(email.body).toMatchObject({ from: `test@${s.domain}`, to: ['dana@example.net'], subject: 'Hello [firstName]', template: 'greeting', sandbox: true });

    // Delete, after the confirmation.
    page.once('dialog', (d) => void d.accept());
    await submit(page, 'Delete greeting');
    expect(new URL(page.url()).pathname + new URL(page.url()).search).toBe(`/dashboard/templates?account=${s.account.id}`);
    expect(await flashText(page, 'ok')).toBe('Deleted greeting and its versions from Template Shop.');
    const gone = await service.api('GET', '/templates/greeting', { key: s.key });
    expect([gone.status, gone.body.error.code]).toEqual([404, 'template_not_found']);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('refuses to delete a layout still in use, with the API’s message, and deletes it once free', async () => {
    const s = await newSender(service, { name: 'Layout Shop' });
    const layout = await service.api('POST', '/templates', {
      key: s.key,
      body: { name: 'brand', kind: 'layout', html: '<div class="brand">{{ content }}</div>' },
    });
    expect(layout.status).toBe(201);
    const user = await service.api('POST', '/templates', { key: s.key, body: { name: 'note', subject: 'Note', html: '<p>A note</p>', layout: 'brand' } });
    expect(user.status).toBe(201);
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/templates?account=${s.account.id}`);
    expect(await page.locator('#template-list').getByRole('row', { name: /brand/ }).textContent()).toContain('Layout');
    await Promise.all([page.waitForEvent('load'), page.getByRole('link', { name: 'brand', exact: true }).click()]);
    // The template's editor offers the layout.
    page.once('dialog', (d) => void d.accept());
    await submit(page, 'Delete brand');
    expect(new URL(page.url()).pathname).toBe(`/dashboard/templates/${s.account.id}/edit/brand`);
    expect(await flashText(page, 'error')).toBe('The layout brand is still named by 1 template: note.');
    expect((await service.api('GET', '/templates/brand', { key: s.key })).status).toBe(200);
    const api = await service.api('DELETE', '/templates/brand', { key: s.key });
    expect([api.status, api.body.error.code, api.body.error.message]).toEqual([409, 'template_in_use', 'The layout brand is still named by 1 template: note.']);
    await page.goto(`${service.url}/dashboard/templates/${s.account.id}/edit/note`);
    expect(await page.getByLabel('Layout').inputValue()).toBe('brand');
    page.once('dialog', (d) => void d.accept());
    await submit(page, 'Delete note');
    await page.goto(`${service.url}/dashboard/templates/${s.account.id}/edit/brand`);
    page.once('dialog', (d) => void d.accept());
    await submit(page, 'Delete brand');
    expect(await flashText(page, 'ok')).toBe('Deleted brand and its versions from Layout Shop.');
    expect((await service.api('GET', '/templates/brand', { key: s.key })).status).toBe(404);
    await page.context().close();
  });

  it('shows a 422 invalid_template at its field and line, keeping what was typed', { timeout: 60_000 }, async () => {
    const s = await newSender(service, { name: 'Typo Shop' });
    const html = '<p>Line one</p>\n<p>Line two</p>\n<p>{% endif %}</p>';
    const api = await service.api('POST', '/templates', { key: s.key, body: { name: 'typo', subject: 'Typo', html } });
    expect([api.status, api.body.error.code]).toEqual([422, 'invalid_template']);
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/templates/${s.account.id}/new`);
    await fillEditor(page, { name: 'typo', subject: 'Typo', html, text: 'Kept text', variables: [{ name: 'who', required: false, kind: 'text' }] });
    const [res] = await Promise.all([page.waitForResponse((r) => r.request().method() === 'POST'), submit(page, 'Save')]);
    expect(res.status()).toBe(422);
    const error = page.locator('#html-error');
    expect(await error.textContent()).toContain('Line 3');
    expect(await error.textContent()).toContain(api.body.error.message);
    expect(await error.locator('pre').textContent()).toBe('<p>{% endif %}</p>');
    const field = page.getByLabel('HTML', { exact: true });
    expect(await field.getAttribute('aria-invalid')).toBe('true');
    expect(await field.getAttribute('aria-describedby')).toBe('html-error');
    // Everything typed is still there.
    expect(await field.inputValue()).toBe(html);
    expect(await page.getByLabel('Name', { exact: true }).inputValue()).toBe('typo');
    expect(await page.getByLabel('Subject').inputValue()).toBe('Typo');
    expect(await page.getByLabel('Text', { exact: true }).inputValue()).toBe('Kept text');
    expect(await page.getByLabel('Variable 1 name').inputValue()).toBe('who');
    expect(await page.getByRole('alert').first().textContent()).toContain('at line 3');
    await expectAccessible(page, 'editor with a refusal');
    await screenshot(page, 'i34-template-invalid');
    expect((await service.api('GET', '/templates/typo', { key: s.key })).status).toBe(404);
    // Other refusals as the API words them: a missing subject at its field; a taken name at its field.
    await page.getByLabel('HTML', { exact: true }).fill('<p>Fine</p>');
    await page.getByLabel('Subject').fill('');
    await submit(page, 'Save');
    expect(await page.locator('#subject-error').textContent()).toBe('subject: is required');
    await page.getByLabel('Subject').fill('Hi');
    await page.getByLabel('Name', { exact: true }).fill('receipt');
    await submit(page, 'Save');
    expect(await page.locator('#name-error').textContent()).toBe('receipt is the name of a built-in template; choose another name.');
    await page.context().close();
  });

  it('shows a built-in read-only with its source, and Duplicate opens the editor pre-filled as <name>-copy', async () => {
    const s = await newSender(service, { name: 'Copy Shop' });
    const builtIn = await service.api('GET', '/templates/receipt', { key: s.key });
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/templates/${s.account.id}/edit/receipt`);
    expect(await page.locator('main').textContent()).toContain('Built in');
    expect(await page.locator('pre[aria-labelledby="source-html"]').textContent()).toBe(builtIn.body.html);
    expect(await page.getByRole('button', { name: 'Save' }).count()).toBe(0);
    await expectAccessible(page, 'built-in template');
    await Promise.all([page.waitForEvent('load'), page.getByRole('link', { name: 'Duplicate' }).click()]);
    expect(await page.getByLabel('Name', { exact: true }).inputValue()).toBe('receipt-copy');
    expect(await page.getByLabel('Subject').inputValue()).toBe(builtIn.body.subject);
    expect(await page.getByLabel('HTML', { exact: true }).inputValue()).toBe(builtIn.body.html);
    const names = Object.keys(builtIn.body.variables);
    for (const [i, n] of names.entries()) expect(await page.getByLabel(`Variable ${i + 1} name`).inputValue()).toBe(n);
    await submit(page, 'Save');
    expect(await flashText(page, 'ok')).toBe('Saved: receipt-copy.');
    const copy = await service.api('GET', '/templates/receipt-copy', { key: s.key });
    expect(copy.body).toMatchObject({ builtIn: false, version: 1, subject: builtIn.body.subject, html: builtIn.body.html });
    await page.context().close();
  });

  it('marks a sub-account’s inherited templates, read-only with Duplicate under the same name', async () => {
    const s = await newSender(service, { name: 'Parent Shop' });
    const sub = await newSubSender(service, s.key, 'Child Shop');
    expect((await service.api('POST', '/templates', { key: s.key, body: { name: 'family', subject: 'Family', text: 'Hello' } })).status).toBe(201);
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/templates?account=${sub.id}`);
    expect(
      await page
        .locator('#template-list')
        .getByRole('row', { name: /family/ })
        .textContent(),
    ).toContain('From the parent account');
    await Promise.all([page.waitForEvent('load'), page.getByRole('link', { name: 'family', exact: true }).click()]);
    await Promise.all([page.waitForEvent('load'), page.getByRole('link', { name: 'Duplicate' }).click()]);
    expect(await page.getByLabel('Name', { exact: true }).inputValue()).toBe('family');
    await submit(page, 'Save');
    expect(await flashText(page, 'ok')).toBe('Saved: family.');
    expect((await service.api('GET', '/templates/family', { key: s.key, account: sub.id })).body).toMatchObject({ inherited: false, version: 1 });
    await page.context().close();
  });

  it('can be used from the keyboard: Tab reaches every control of the list and the editor, with a visible focus ring', async () => {
    const s = await newSender(service, { name: 'Keyboard Shop' });
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/templates?account=${s.account.id}`);
    /** Tabs from the top until `last` has focus; returns what got focus, each as a label, and each one's outline. */
    const tabThrough = async (stop: string) => {
      const seen: string[] = [];
      for (let i = 0; i < 80; i++) {
        await page.keyboard.press('Tab');
        const [label, outline] = (await page.evaluate(
          `(() => { const e = document.activeElement; const l = e.getAttribute('aria-label') || (e.labels && e.labels[0] && e.labels[0].textContent.trim()) || e.textContent.trim(); return [l, getComputedStyle(e).outlineStyle]; })()`,
        )) as [string, string];
        seen.push(label);
        expect(outline, label).toBe('solid');
        if (label === stop) return seen;
      }
      throw new Error(`Tab never reached ${stop}: ${seen.join(', ')}`);
    };
    const listOrder = await tabThrough('receipt');
    expect(listOrder.indexOf('Account')).toBeLessThan(listOrder.indexOf('Show templates'));
    expect(listOrder.indexOf('Show templates')).toBeLessThan(listOrder.indexOf('New template'));
    await expectAccessible(page, 'templates list');

    await page.goto(`${service.url}/dashboard/templates/${s.account.id}/new`);
    const order = await tabThrough('Save');
    const controls = [
      'Name',
      'Kind',
      'Subject',
      'HTML',
      'Text',
      'Layout',
      'Variable 1 name',
      'Variable 1 required',
      'Variable 1 kind',
      'Variable 2 kind',
      'Preview',
      'Save',
    ];
    const at = controls.map((c) => order.indexOf(c));
    expect(
      at.every((i) => i >= 0),
      order.join(', '),
    ).toBe(true);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
    // Typing into the editor and pressing Enter on Preview works without a mouse.
    await page.getByLabel('Name', { exact: true }).focus();
    await page.keyboard.type('by-keys');
    await page.getByLabel('Subject').focus();
    await page.keyboard.type('Keys');
    await page.getByLabel('Text', { exact: true }).focus();
    await page.keyboard.type('Typed with keys');
    await page.getByRole('button', { name: 'Preview' }).focus();
    await Promise.all([page.waitForEvent('load'), page.keyboard.press('Enter')]);
    expect(await page.locator('#preview-subject').textContent()).toBe('Keys');
    await expectAccessible(page, 'editor');
    // At a phone's width nothing scrolls sideways.
    await page.setViewportSize({ width: 390, height: 844 });
    const wide = await page.evaluate(
      "[...document.querySelectorAll('main *')].filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth).map((e) => e.tagName + '.' + e.className + '#' + e.id).slice(0, 8).join(' ')",
    );
    expect(await horizontalOverflow(page), String(wide)).toBe(0);
    await page.goto(`${service.url}/dashboard/templates?account=${s.account.id}`);
    expect(await horizontalOverflow(page)).toBe(0);
    await page.context().close();
  });

  it('refuses a change without the CSRF token, changing nothing', async () => {
    const s = await newSender(service, { name: 'Csrf Shop' });
    const form = { name: 'forged', subject: 'Forged', text: 'x', kind: 'template', intent: 'save' };
    expect((await http.post(`/dashboard/templates/${s.account.id}/new`, { ...form, _csrf: '' })).status).toBe(403);
    expect((await http.post(`/dashboard/templates/${s.account.id}/new`, { ...form, _csrf: 'wrong' })).status).toBe(403);
    expect((await service.api('GET', '/templates/forged', { key: s.key })).status).toBe(404);
    // With it, the same form saves.
    const ok = await http.post(`/dashboard/templates/${s.account.id}/new`, form);
    expect([ok.status, ok.headers.get('location')]).toEqual([303, `/dashboard/templates/${s.account.id}/edit/forged`]);
    expect((await http.post(`/dashboard/templates/${s.account.id}/delete/forged`, { _csrf: '' })).status).toBe(403);
    expect((await service.api('GET', '/templates/forged', { key: s.key })).status).toBe(200);
    // An unknown account is the 404 page.
    expect((await http.get('/dashboard/templates/0190a000-0000-7000-8000-000000000000/new')).status).toBe(404);
  });
});

describe('DELIVERY_MODE=capture', () => {
  let capture: TestService;
  let captureBrowser: Browser;
  let captureToken: string;
  beforeAll(async () => {
    capture = await startService({ DELIVERY_MODE: 'capture' });
    ({ browser: captureBrowser, token: captureToken } = await openDashboard(capture));
  });
  afterAll(async () => {
    await captureBrowser?.close();
    await capture?.close();
  });

  it('sends the test as a normal send that is captured, and links the captured message', async () => {
    const { key, account } = await capture.newAccount({ name: 'Capture Templates' });
    const domain = `tpl-${process.pid}.test`;
    // A reserved name verifies without DNS in capture mode.
    const created = await capture.api('POST', '/domains', { key, body: { name: domain } });
    expect((await capture.api('POST', `/domains/${created.body.id}/verify`, { key })).body).toMatchObject({ sending: true });
    const made = await capture.api('POST', '/templates', {
      key,
      body: { name: 'order-note', subject: 'Order for {{ who }}', html: '<p>Hi {{ who }}</p>', variables: { who: { required: true, kind: 'text' } } },
    });
    expect(made.status).toBe(201);
    const page = await newPage(captureBrowser);
    await signIn(page, capture.url, captureToken, `/dashboard/templates/${account.id}/edit/order-note`);
    expect(await page.locator('#test').textContent()).toContain('captured here, never delivered');
    await page.getByLabel('To', { exact: true }).fill('pat@example.org');
    await submit(page, 'Send test');
    const message = (await page.locator('.flash.ok > div').first().textContent())!;
    const id = UUID.exec(message)![0];
    expect(message).toBe(`Captured: email ${id}, order-note to pat@example.org, was signed and kept on this server (capture mode), not delivered.`);
    const email = await capture.api('GET', `/emails/${id}`, { key });
    expect(email.body).toMatchObject({ from: `test@${domain}`, to: ['pat@example.org'], subject: 'Order for [who]', template: 'order-note', sandbox: false });
    await createDeliveryEngine(capture.deps).runOnce();
    await Promise.all([page.waitForEvent('load'), page.locator('.flash').getByRole('link', { name: 'Open the captured message' }).click()]);
    expect(new URL(page.url()).pathname).toBe(`/dashboard/captured/${id}`);
    expect(await page.locator('main').textContent()).toContain('Order for [who]');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

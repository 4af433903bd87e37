import { mkdirSync } from 'node:fs';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONTENT_SECURITY_POLICY, PAGE_HEADERS } from '../dashboard/security.js';
import { API_BASE } from '../server/app/http-app.js';
import { EXAMPLE_IDS } from '../server/api/openapi/examples.js';
import { SCREENSHOT_DIR, expectAccessible, horizontalOverflow, launchBrowser, newPage, pageProblems, signIn } from './helpers/browser.js';
import { adminTokenFor, dashboardClient } from './helpers/dashboard.js';
import { apiDocument } from './helpers/openapi.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * The API reference at GET /docs: served by the service itself without a key, one page built from the API document
 * (every operation, every example), under the dashboard's Content-Security-Policy, and linked from the dashboard. In
 * Chromium it loads nothing from any other origin and breaks no rule of its CSP.
 */

type Json = Record<string, any>;

let service: TestService;
let browser: Browser;

beforeAll(async () => {
  service = await startService();
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await service?.close();
});

const METHODS = ['get', 'post', 'delete', 'put', 'patch'];

/** Every operation of the document (its paths and its webhooks): anchor, method, path and the operation object. */
const operations = () =>
  (['paths', 'webhooks'] as const).flatMap((section) =>
    Object.entries(apiDocument[section] as Record<string, Json>).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([method]) => METHODS.includes(method))
        .map(([method, op]) => ({ section, method, path, op: op as Json })),
    ),
  );

/** As hono's JSX escapes text. */
const escapeHtml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
const shown = (value: unknown) => escapeHtml(typeof value === 'string' ? value : JSON.stringify(value, null, 2));

describe('GET /docs over HTTP', () => {
  it("answers 200 HTML without a key, with the dashboard's headers and its Content-Security-Policy", async () => {
    const res = await fetch(`${service.url}/docs`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
    for (const [name, value] of Object.entries(PAGE_HEADERS)) expect(res.headers.get(name), name).toBe(value);
    const html = await res.text();
    expect(html).toMatch(/^<!doctype html>/);
    // Nothing from another origin: every src and href is a path of this service or a fragment.
    const links = [...html.matchAll(/\b(?:src|href)="([^"]*)"/g)].map((m) => m[1]!);
    expect(links.length).toBeGreaterThan(50);
    expect(links.filter((l) => !(l.startsWith('/') || l.startsWith('#') || l === 'data:,')).map(String)).toEqual([]);
    expect(html).not.toMatch(/<script(?![^>]*\bsrc="\/)/);
    expect(html).not.toMatch(/\sstyle="/);
  });

  it('/docs/ redirects to /docs', async () => {
    const res = await fetch(`${service.url}/docs/`, { redirect: 'manual' });
    expect(res.status).toBe(301);
    expect(res.headers.get('location')).toBe('/docs');
  });

  it('shows every operation of the document, its path, and every example it carries', async () => {
    const html = await (await fetch(`${service.url}/docs`)).text();
    const missing: string[] = [];
    let examples = 0;
    for (const { section, method, path, op } of operations()) {
      const label = `${method.toUpperCase()} ${path}`;
      if (!html.includes(`id="${op.operationId}"`)) missing.push(`${label}: no section`);
      if (!html.includes(escapeHtml(section === 'paths' ? `${API_BASE}${path}` : path))) missing.push(`${label}: no path`);
      if (!html.includes(`href="#${op.operationId}"`)) missing.push(`${label}: not in the contents`);
      const media = [
        ...Object.values((op.requestBody?.content ?? {}) as Record<string, Json>),
        ...Object.values(op.responses as Record<string, Json>).flatMap((r) => Object.values((r.content ?? {}) as Record<string, Json>)),
      ];
      for (const m of media) {
        const values = [...(m.example !== undefined ? [m.example] : []), ...Object.values((m.examples ?? {}) as Record<string, Json>).map((e) => e.value)];
        for (const value of values) {
          examples++;
          if (!html.includes(shown(value))) missing.push(`${label}: an example is not shown (${shown(value).slice(0, 80)})`);
        }
      }
    }
    expect(missing).toEqual([]);
    expect(examples).toBeGreaterThan(250);
  });

  it('the dashboard links to it', async () => {
    const client = await dashboardClient(service);
    const html = await (await client.get('/dashboard')).text();
    expect(html).toContain('href="/docs"');
  });
});

describe('GET /docs in Chromium', () => {
  it('loads from the service alone, breaks no rule of its CSP, and shows the examples', async () => {
    const page = await newPage(browser);
    const origin = new URL(service.url).origin;
    const requests: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    // Every violation the page reports, whether or not it also reaches the console.
    await page.addInitScript(
      "window.cspViolations = []; document.addEventListener('securitypolicyviolation', (e) => window.cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));",
    );
    const res = await page.goto(`${service.url}/docs`, { waitUntil: 'load' });
    expect(res?.status()).toBe(200);

    await expect.poll(() => page.locator('#sendEmail-request').textContent()).toContain('"name": "receipt"');
    expect(await page.locator('#sendEmail-request').isVisible()).toBe(true);
    expect(await page.locator('#sendEmail-200-example').textContent()).toContain(EXAMPLE_IDS.email);
    expect(await page.locator('#getDomain-200-example').textContent()).toContain('shop.example');
    // An error example opens on a click and answers its code.
    const suppressed = page.locator('#sendEmail-422 details').filter({ hasText: 'recipient_suppressed' });
    await suppressed.locator('summary').click();
    expect(await suppressed.locator('pre').isVisible()).toBe(true);
    expect(await suppressed.locator('pre').textContent()).toContain('"code": "recipient_suppressed"');
    // The contents lead to each operation.
    await page.locator('nav.toc a[href="#createWebhook"]').click();
    await expect.poll(() => page.evaluate('location.hash')).toBe('#createWebhook');

    expect(await page.evaluate('window.cspViolations')).toEqual([]);
    expect(pageProblems(page)).toEqual([]);
    expect(requests.length).toBeGreaterThan(1);
    expect(requests.filter((url) => new URL(url).origin !== origin)).toEqual([]);
    await expectAccessible(page, '/docs');

    // The picture: a request example and the answer's, as a reader meets them.
    await page.evaluate("document.getElementById('sendEmail-request').closest('.example').scrollIntoView()");
    mkdirSync(SCREENSHOT_DIR, { recursive: true });
    await page.screenshot({ path: `${SCREENSHOT_DIR}/api-docs.png` });
    await page.context().close();
  });

  it("the dashboard's navigation leads to it", async () => {
    const page = await newPage(browser);
    await signIn(page, service.url, await adminTokenFor(service));
    await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name: 'API reference' }).click();
    await page.waitForURL(`${service.url}/docs`);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Mailstead API v1');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('fits a phone: nothing scrolls sideways', async () => {
    const page = await newPage(browser, 390);
    await page.goto(`${service.url}/docs#sendEmail`);
    expect(await horizontalOverflow(page)).toBe(0);
    mkdirSync(SCREENSHOT_DIR, { recursive: true });
    await page.screenshot({ path: `${SCREENSHOT_DIR}/api-docs-phone.png` });
    await expectAccessible(page, '/docs at phone width');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

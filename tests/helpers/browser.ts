import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type Page, chromium } from 'playwright-core';
import { expect } from 'vitest';

/**
 * Headless Chromium for the dashboard's browser tests: Debian's `chromium` package (CI installs it with apt-get), at
 * CHROMIUM_PATH or /usr/bin/chromium. playwright-core drives it; no browser is ever downloaded.
 */

export const SCREENSHOT_DIR = fileURLToPath(new URL('../output/screenshots', import.meta.url));

export function chromiumPath(): string {
  const path = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (!existsSync(path)) throw new Error(`Chromium is not at ${path}: install Debian's chromium package (apt-get install chromium) or set CHROMIUM_PATH`);
  return path;
}

export function launchBrowser(): Promise<Browser> {
  // --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
  return chromium.launch({ executablePath: chromiumPath(), headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'] });
}

/** A new page of the given width (1280 by default; 390 for a phone). */
export async function newPage(browser: Browser, width = 1280): Promise<Page> {
  const context = await browser.newContext({ viewport: { width, height: width > 800 ? 900 : 844 } });
  const page = await context.newPage();
  // Surface what the page itself reports: a CSP violation or a script error fails the test that looks at it.
  const problems: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(e.message));
  (page as Page & { problems: string[] }).problems = problems;
  return page;
}

/** Console errors and uncaught exceptions the page has reported so far (CSP violations show up here). */
export function pageProblems(page: Page): string[] {
  return (page as Page & { problems?: string[] }).problems ?? [];
}

/** Saves a full-page screenshot as tests/output/screenshots/<name>.png. */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const path = join(SCREENSHOT_DIR, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: unknown[] }[];
}

/**
 * Runs axe-core in the page (through the DevTools protocol, which the page's CSP does not govern) and expects no
 * serious or critical violation, naming each one found.
 */
export async function expectAccessible(page: Page, label = page.url()): Promise<void> {
  const violations = (await page.evaluate(
    `(async () => { ${axeSource}\n const r = await axe.run(document, { resultTypes: ['violations'] }); return r.violations.map(v => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => ({ target: n.target })) })); })()`,
  )) as AxeViolation[];
  const serious = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  expect(serious.map((v) => `${label}: ${v.id} (${v.impact}) ${v.help} at ${JSON.stringify(v.nodes.map((n) => n.target))}`)).toEqual([]);
}

/** How far the page scrolls sideways: 0 when it fits its viewport (the phone-width checks). */
export function horizontalOverflow(page: Page): Promise<number> {
  return page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth') as Promise<number>;
}

/** The flash a form's POST left on the page it redirected to (`kind`: only a success, or only a refusal). */
export async function flashText(page: Page, kind?: 'ok' | 'error'): Promise<string> {
  return (await page.locator(kind ? `.flash.${kind}` : '.flash').textContent()) ?? '';
}

/** Submits the form holding the button named `button` and waits for the page its POST redirects to. */
export async function submit(page: Page, button: string): Promise<void> {
  await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: button, exact: true }).click()]);
}

/** Signs in through the sign-in form; the page ends on the overview (or on `next`). */
export async function signIn(page: Page, baseUrl: string, token: string, next?: string): Promise<void> {
  await page.goto(`${baseUrl}/dashboard/sign-in${next ? `?next=${encodeURIComponent(next)}` : ''}`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((url) => !url.pathname.endsWith('/sign-in'));
}

import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetAdminToken } from '../server/core/admin-token.js';
import { SESSION_POLICY } from '../dashboard/session.js';
import { MAX_FORM_BYTES, SIGN_IN_LIMIT } from '../dashboard/security.js';
import { expectAccessible, horizontalOverflow, launchBrowser, newPage, pageProblems, screenshot, signIn } from './helpers/browser.js';
import { adminTokenFor, dashboardClient, postSignIn, signInForm } from './helpers/dashboard.js';
import { type TestService, startService } from './helpers/service.js';

const execFileAsync = promisify(execFile);

let service: TestService;
let browser: Browser;
let token: string;

beforeAll(async () => {
  service = await startService();
  token = await adminTokenFor(service);
  browser = await launchBrowser();
});
// Every test signs in from 127.0.0.1: each starts in a fresh window of the per-address sign-in limit.
beforeEach(() => service.clock.advance(SIGN_IN_LIMIT.windowMs));
afterAll(async () => {
  await browser?.close();
  await service?.close();
});

describe('dashboard sign-in in the browser', () => {
  it('signs in with the admin token, shows the overview, and signs out', async () => {
    const page = await newPage(browser);
    await page.goto(`${service.url}/dashboard`);
    // Not signed in: sent to the sign-in page, which remembers where the user was going.
    expect(new URL(page.url()).pathname).toBe('/dashboard/sign-in');
    await expectAccessible(page, 'sign-in');
    await screenshot(page, 'sign-in');
    await signIn(page, service.url, token);
    expect(new URL(page.url()).pathname).toBe('/dashboard');
    expect(await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name: 'Overview' }).getAttribute('aria-current')).toBe('page');
    const cookie = (await page.context().cookies()).find((c) => c.name === 'mailstead_session')!;
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict', secure: false, path: '/dashboard' });
    expect(cookie.expires).toBe(-1); // a browser-session cookie; the server ends it after inactivity
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(/sign-in\?signed-out/);
    expect(await page.getByRole('status').textContent()).toContain('signed out');
    // The old cookie no longer opens anything, even if replayed.
    await page.context().addCookies([{ ...cookie, sameSite: 'Strict' }]);
    await page.goto(`${service.url}/dashboard`);
    expect(new URL(page.url()).pathname).toBe('/dashboard/sign-in');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('refuses a wrong token without saying anything about the right one', async () => {
    const page = await newPage(browser);
    await page.goto(`${service.url}/dashboard/sign-in?next=/dashboard/accounts`);
    await page.getByLabel('Admin token').fill(`${token}x`);
    await page.getByRole('button', { name: 'Sign in' }).click();
    expect(await page.getByRole('alert').textContent()).toBe('That token is not right.');
    expect(new URL(page.url()).pathname).toBe('/dashboard/sign-in');
    await screenshot(page, 'sign-in-wrong-token');
    // The right token then lands where the user was going.
    await page.getByLabel('Admin token').fill(token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/dashboard\/accounts$/);
    await page.context().close();
  });

  it('can be used from the keyboard alone: skip link, sign-in, navigation, sign-out', async () => {
    const page = await newPage(browser);
    await page.goto(`${service.url}/dashboard/sign-in`);
    // The token field has focus on arrival; Enter submits.
    expect(await page.evaluate('document.activeElement && document.activeElement.id')).toBe('token');
    await page.keyboard.type(token);
    await page.keyboard.press('Enter');
    await page.waitForURL((url) => url.pathname === '/dashboard');
    // First Tab: the skip link, which moves focus to the page's main region.
    await page.keyboard.press('Tab');
    expect(await page.evaluate('document.activeElement.textContent')).toBe('Skip to content');
    await page.keyboard.press('Enter');
    expect(await page.evaluate('document.activeElement.id')).toBe('main');
    // Tab order from the top: skip link, the home link, sign out, then the navigation.
    await page.goto(`${service.url}/dashboard`);
    const order: string[] = [];
    for (let i = 0; i < 5; i++) {
      await page.keyboard.press('Tab');
      order.push(String(await page.evaluate('document.activeElement.textContent.trim()')));
    }
    expect(order).toEqual(['Skip to content', 'Mailstead', 'Sign out', 'Overview', 'Accounts']);
    // A visible focus ring: the focused link draws an outline.
    const outline = await page.evaluate('getComputedStyle(document.activeElement).outlineStyle');
    expect(outline).toBe('solid');
    await page.keyboard.press('Enter');
    await page.waitForURL((url) => url.pathname === '/dashboard/accounts');
    await page.context().close();
  });

  it('its error pages (404, a refused form) are accessible and lead back', async () => {
    const page = await newPage(browser);
    await signIn(page, service.url, token);
    const missing = await page.goto(`${service.url}/dashboard/no-such-page`);
    expect(missing?.status()).toBe(404);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Not found');
    await expectAccessible(page, '404 page');
    // A form whose CSRF token went stale (another tab signed out and in again): refused, with a way back.
    await page.goto(`${service.url}/dashboard`);
    await page.evaluate("document.querySelector('form[action=\"/dashboard/sign-out\"] input[name=_csrf]').value = 'stale'");
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForLoadState();
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Refused');
    await expectAccessible(page, '403 page');
    await page.getByRole('link', { name: 'Back to the dashboard' }).click();
    await page.waitForURL((url) => url.pathname === '/dashboard');
    await page.context().close();
  });

  it('works at phone width', async () => {
    const page = await newPage(browser, 390);
    await signIn(page, service.url, token);
    const overflow = await horizontalOverflow(page);
    expect(overflow).toBe(0);
    await expectAccessible(page, 'overview at phone width');
    await page.context().close();
  });
});

describe('dashboard sign-in rules over HTTP', () => {
  it('answers 401 to a wrong token, empty or not, and the same page for both', async () => {
    // One character off: a last character that differs from the token's own (a token ending in X is 1 in 64).
    const offByOne = `${token.slice(0, -1)}${token.endsWith('X') ? 'Y' : 'X'}`;
    for (const wrong of ['', 'nope', offByOne]) {
      const res = await postSignIn(service.url, wrong);
      expect(res.status).toBe(401);
      expect(res.headers.getSetCookie().some((c) => c.startsWith('mailstead_session='))).toBe(false);
      expect(await res.text()).toContain('That token is not right.');
    }
  });

  it('refuses a sign-in posted without the form cookie, or from another origin (no login CSRF)', async () => {
    const form = await signInForm(service.url);
    const noCookie = await fetch(`${service.url}/dashboard/sign-in`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: service.url },
      body: new URLSearchParams({ _sign_in: form.value, token }),
    });
    expect(noCookie.status).toBe(403);
    const otherOrigin = await postSignIn(service.url, token, { origin: 'http://evil.example' });
    expect(otherOrigin.status).toBe(403);
    expect(otherOrigin.headers.getSetCookie().some((c) => c.startsWith('mailstead_session='))).toBe(false);
  });

  const signsIn = (res: Response) => res.status === 303 && res.headers.getSetCookie().some((c) => c.startsWith('mailstead_session='));

  it('the right token signs in at once after 10 wrong ones from its address; further wrong ones are 429 until the window moves', async () => {
    // Behind a reverse proxy every client comes from the proxy's address: whoever sends wrong tokens from it must not
    // lock the operator out (docs/api/decisions.md section 13).
    const limited = await startService();
    const right = await adminTokenFor(limited);
    try {
      for (let i = 0; i < SIGN_IN_LIMIT.attempts; i++) expect((await postSignIn(limited.url, 'wrong')).status).toBe(401);
      expect(signsIn(await postSignIn(limited.url, right))).toBe(true);
      const refused = await postSignIn(limited.url, 'wrong');
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(await refused.text()).toContain('Too many wrong tokens from your address.');
      expect(limited.logger.entries.some((e) => e.event === 'dashboard.sign_in_limited')).toBe(true);
      // Still the right token signs in, as often as it is given, while wrong ones stay refused unread.
      expect(signsIn(await postSignIn(limited.url, right))).toBe(true);
      expect((await postSignIn(limited.url, 'wrong')).status).toBe(429);
      limited.clock.advance(SIGN_IN_LIMIT.windowMs - 1000);
      expect((await postSignIn(limited.url, 'wrong')).status).toBe(429);
      limited.clock.advance(1000);
      expect((await postSignIn(limited.url, 'wrong')).status).toBe(401);
    } finally {
      await limited.close();
    }
  });

  it('measures the window on the monotonic clock: a wall clock stepped an hour either way neither holds nor lifts the limit', async () => {
    const limited = await startService();
    try {
      for (let i = 0; i < SIGN_IN_LIMIT.attempts; i++) expect((await postSignIn(limited.url, 'wrong')).status).toBe(401);
      // Forward: the window has not passed for all that.
      limited.clock.stepWall(3_600_000);
      expect((await postSignIn(limited.url, 'wrong')).status).toBe(429);
      // Back: the window ends after its 15 minutes, not an hour and 15 minutes.
      limited.clock.stepWall(-2 * 3_600_000);
      limited.clock.advance(SIGN_IN_LIMIT.windowMs);
      expect((await postSignIn(limited.url, 'wrong')).status).toBe(401);
    } finally {
      await limited.close();
    }
  });

  it('counts attempts over any 15 minutes, not per fixed window: no more than the limit across a window’s end', async () => {
    const limited = await startService();
    try {
      expect((await postSignIn(limited.url, 'wrong-at-the-start')).status).toBe(401);
      limited.clock.advance(SIGN_IN_LIMIT.windowMs - 1000);
      const statuses: number[] = [];
      for (let i = 0; i < SIGN_IN_LIMIT.attempts - 1; i++) statuses.push((await postSignIn(limited.url, `wrong-late-${i}`)).status);
      // The first attempt's 15 minutes end: it no longer counts, the other nine still do.
      limited.clock.advance(2000);
      for (let i = 0; i < SIGN_IN_LIMIT.attempts; i++) statuses.push((await postSignIn(limited.url, `wrong-after-${i}`)).status);
      expect(statuses.filter((s) => s === 401)).toHaveLength(SIGN_IN_LIMIT.attempts);
      expect(statuses.filter((s) => s === 429)).toHaveLength(SIGN_IN_LIMIT.attempts - 1);
    } finally {
      await limited.close();
    }
  });

  it('sets the cookie Secure when the request came over https (a TLS proxy in front)', async () => {
    const res = await postSignIn(service.url, token, { 'x-forwarded-proto': 'https' });
    expect(res.status).toBe(303);
    const cookie = res.headers.getSetCookie().find((c) => c.startsWith('mailstead_session='))!;
    expect(cookie).toMatch(/; Secure/);
    expect(cookie).toMatch(/; HttpOnly/);
    expect(cookie).toMatch(/; SameSite=Strict/);
  });

  it('counts the idle time from the last request, whenever it came (even seconds after the one before)', async () => {
    const client = await dashboardClient(service, token);
    service.clock.advance(59_000);
    expect((await client.get('/dashboard/accounts')).status).toBe(200);
    service.clock.advance(SESSION_POLICY.idleMs - 30_000);
    expect((await client.get('/dashboard/accounts')).status).toBe(200);
    service.clock.advance(SESSION_POLICY.idleMs);
    expect((await client.get('/dashboard/accounts')).status).toBe(303);
  });

  it('ends a session after SESSION_POLICY.idleMs without a request, but not while it is used', async () => {
    const client = await dashboardClient(service, token);
    service.clock.advance(SESSION_POLICY.idleMs - 1000);
    expect((await client.get('/dashboard')).status).toBe(200);
    service.clock.advance(SESSION_POLICY.idleMs - 1000);
    expect((await client.get('/dashboard')).status).toBe(200);
    service.clock.advance(SESSION_POLICY.idleMs);
    const res = await client.get('/dashboard/accounts');
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe('/dashboard/sign-in?expired&next=%2Fdashboard%2Faccounts');
  });

  it('ends every session when the admin token is reset', async () => {
    const client = await dashboardClient(service, token);
    expect((await client.get('/dashboard')).status).toBe(200);
    token = await resetAdminToken(service.deps.db);
    expect((await client.get('/dashboard')).status).toBe(303);
  });

  it('never redirects off the dashboard after sign-in', async () => {
    const encodedDots = ['/dashboard/%2e%2e/api/v1/account', '/dashboard/.%2e/metrics', '/dashboard/%2E%2E/healthz', '/dashboard/%2e./healthz'];
    for (const next of ['https://evil.example/', '//evil.example/dashboard', '/dashboard/../api/v1/account', '/api/v1', ...encodedDots]) {
      const form = await signInForm(service.url);
      const res = await fetch(`${service.url}/dashboard/sign-in`, {
        method: 'POST',
        redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `mailstead_sign_in=${form.cookie}`, origin: service.url },
        body: new URLSearchParams({ _sign_in: form.value, token, next }),
      });
      expect(res.status).toBe(303);
      expect(res.headers.get('location')).toBe('/dashboard');
    }
  });
});

describe('the redirect of a signed-in operator to next', () => {
  it('stays on the dashboard for a link whose next holds a percent-encoded dot segment', async () => {
    const client = await dashboardClient(service, token);
    for (const next of ['/dashboard/%2e%2e/healthz', '/dashboard/.%2e/metrics', '/dashboard/%2E%2E/api/v1/account']) {
      const res = await client.get(`/dashboard/sign-in?next=${encodeURIComponent(next)}`);
      expect(res.status).toBe(303);
      expect(res.headers.get('location'), next).toBe('/dashboard');
    }
    const kept = await client.get(`/dashboard/sign-in?next=${encodeURIComponent('/dashboard/emails?status=bounced&q=a+b')}`);
    expect(kept.headers.get('location')).toBe('/dashboard/emails?status=bounced&q=a+b');
  });
});

describe('CSRF and headers', () => {
  it('refuses a state-changing request without the CSRF token, and one with the cookie from another origin', async () => {
    const client = await dashboardClient(service, token);
    const noToken = await client.post('/dashboard/sign-out', { _csrf: '' });
    expect(noToken.status).toBe(403);
    const wrongToken = await client.post('/dashboard/sign-out', { _csrf: `${client.csrf}x` });
    expect(wrongToken.status).toBe(403);
    const crossOrigin = await client.post('/dashboard/sign-out', {}, { origin: 'http://evil.example' });
    expect(crossOrigin.status).toBe(403);
    const crossSite = await client.post('/dashboard/sign-out', {}, { origin: '', 'sec-fetch-site': 'cross-site' });
    expect(crossSite.status).toBe(403);
    // A sibling subdomain is another site for this purpose, whatever its Origin says.
    const sameSite = await client.post('/dashboard/sign-out', {}, { origin: service.url, 'sec-fetch-site': 'same-site' });
    expect(sameSite.status).toBe(403);
    // Another origin is refused even when it claims to be the forwarded host of another name.
    const forged = await client.post('/dashboard/sign-out', {}, { origin: 'https://evil.example', 'x-forwarded-host': 'mail.example.com' });
    expect(forged.status).toBe(403);
    // None of them did anything: the session is still alive, and the real form signs out.
    expect((await client.get('/dashboard')).status).toBe(200);
    const ok = await client.post('/dashboard/sign-out');
    expect(ok.status).toBe(303);
    expect((await client.get('/dashboard')).status).toBe(303);
  });

  it('answers a form over the size limit with 413, not the CSRF refusal, and does nothing', async () => {
    const client = await dashboardClient(service, token);
    const big = await client.post('/dashboard/suppressions', { account: '', address: 'x'.repeat(MAX_FORM_BYTES) });
    expect(big.status).toBe(413);
    expect(await big.text()).toContain('64 KB');
    const signIn = await fetch(`${service.url}/dashboard/sign-in`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: service.url },
      body: new URLSearchParams({ token: 'x'.repeat(MAX_FORM_BYTES) }),
    });
    expect(signIn.status).toBe(413);
    // The session is untouched and a form within the limit still works.
    expect((await client.get('/dashboard')).status).toBe(200);
  });

  it("accepts its own forms behind a TLS proxy that rewrites Host (X-Forwarded-Host, or the browser's Sec-Fetch-Site)", async () => {
    const client = await dashboardClient(service, token);
    const proxied = { origin: 'https://mail.example.com', 'x-forwarded-host': 'mail.example.com', 'x-forwarded-proto': 'https' };
    const viaForwardedHost = await client.post('/dashboard/suppressions', { account: '', address: '' }, proxied);
    expect(viaForwardedHost.status).toBe(303); // past the CSRF check: the form's own error flash, not the 403 page
    const viaFetchMetadata = await client.post(
      '/dashboard/suppressions',
      { account: '', address: '' },
      { origin: 'https://mail.example.com', 'sec-fetch-site': 'same-origin' },
    );
    expect(viaFetchMetadata.status).toBe(303);
    const bare = await client.post('/dashboard/suppressions', { account: '', address: '' }, { origin: 'https://mail.example.com' });
    expect(bare.status).toBe(403);
  });

  it('sends a strict Content-Security-Policy and the other page headers on every page', async () => {
    const client = await dashboardClient(service, token);
    for (const res of [await fetch(`${service.url}/dashboard/sign-in`), await client.get('/dashboard'), await client.get('/dashboard/no-such-page')]) {
      const csp = res.headers.get('content-security-policy')!;
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("style-src 'self'");
      expect(csp).not.toContain('unsafe-inline');
      expect(csp).toContain("frame-ancestors 'none'");
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('cache-control')).toBe('no-store');
      const html = await res.text();
      // No inline script or style, nothing from another origin.
      expect(html).not.toMatch(/<script(?![^>]*\bsrc=)/);
      expect(html).not.toMatch(/<style|\sstyle="/);
      expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);
    }
  });

  it('serves the bundled assets by content hash with long-lived cache headers', async () => {
    const client = await dashboardClient(service, token);
    const html = await (await client.get('/dashboard')).text();
    const assets = [...html.matchAll(/(?:src|href)="(\/dashboard\/assets\/[^"]+)"/g)].map((m) => m[1]!);
    expect(assets.some((a) => /main-[A-Z0-9]+\.js$/.test(a))).toBe(true);
    expect(assets.some((a) => /main-[A-Z0-9]+\.css$/.test(a))).toBe(true);
    for (const asset of assets) {
      const res = await fetch(`${service.url}${asset}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    }
    expect((await fetch(`${service.url}/dashboard/assets/manifest.json`)).status).toBe(404);
    expect((await fetch(`${service.url}/dashboard/assets/..%2Fpackage.json`)).status).toBe(404);
  });

  it('keeps serving its assets while dist/ is built again beside it (each CLI run builds first)', { timeout: 60_000 }, async () => {
    const html = await (await fetch(`${service.url}/dashboard/sign-in`)).text();
    const assets = [...html.matchAll(/(?:src|href)="(\/dashboard\/assets\/[^"]+)"/g)].map((m) => m[1]!);
    const statuses = new Map<number, number>();
    let building = true;
    const rebuild = (async () => {
      for (let i = 0; i < 3; i++) {
        // Not spawnSync: the requests go on, in this same process, while the build runs.
        await execFileAsync(process.execPath, ['dist/scripts/build-dashboard.js'], { cwd: fileURLToPath(new URL('..', import.meta.url)) });
      }
      building = false;
    })();
    while (building) {
      for (const asset of assets) {
        const status = (await fetch(`${service.url}${asset}`)).status;
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    }
    await rebuild;
    expect([...statuses.keys()]).toEqual([200]);
  });
});

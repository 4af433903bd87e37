import type { Browser } from 'playwright-core';
import { expect } from 'vitest';
import { resetAdminToken } from '../../server/core/admin-token.js';
import { launchBrowser } from './browser.js';
import type { TestService } from './service.js';

/**
 * The dashboard over plain HTTP, for the rules a browser would hide (CSRF, cookies, headers): a signed-in client that
 * keeps its session cookie and reads the CSRF token from the pages.
 */

export async function adminTokenFor(service: TestService): Promise<string> {
  return await resetAdminToken(service.deps.db);
}

function cookiesOf(res: Response): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of res.headers.getSetCookie()) {
    const [pair] = line.split(';');
    const eq = pair!.indexOf('=');
    out[pair!.slice(0, eq)] = pair!.slice(eq + 1);
  }
  return out;
}

export interface DashboardClient {
  cookie: string;
  csrf: string;
  get(path: string): Promise<Response>;
  /** A form POST from the dashboard's own origin with the CSRF token (unless `fields._csrf` is given). */
  post(path: string, fields?: Record<string, string>, headers?: Record<string, string>): Promise<Response>;
  /** The page a POST redirected to (a 303), as the browser would then show it. */
  follow(res: Response): Promise<string>;
}

/** The sign-in form's cookie and hidden value, as a browser would get them. */
export async function signInForm(url: string): Promise<{ cookie: string; value: string }> {
  const res = await fetch(`${url}/dashboard/sign-in`);
  const cookie = cookiesOf(res).mailstead_sign_in!;
  const value = /name="_sign_in" value="([^"]+)"/.exec(await res.text())![1]!;
  return { cookie, value };
}

export async function postSignIn(url: string, token: string, extra: Record<string, string> = {}): Promise<Response> {
  const form = await signInForm(url);
  return fetch(`${url}/dashboard/sign-in`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `mailstead_sign_in=${form.cookie}`, origin: url, ...extra },
    body: new URLSearchParams({ _sign_in: form.value, token }),
  });
}

export async function dashboardClient(service: TestService, token?: string): Promise<DashboardClient> {
  const res = await postSignIn(service.url, token ?? (await adminTokenFor(service)));
  if (res.status !== 303) throw new Error(`sign-in answered ${res.status}`);
  const cookie = `mailstead_session=${cookiesOf(res).mailstead_session}`;
  const get = (path: string) => fetch(`${service.url}${path}`, { redirect: 'manual', headers: { cookie } });
  const page = await (await get('/dashboard')).text();
  const csrf = /name="_csrf" value="([^"]+)"/.exec(page)![1]!;
  return {
    cookie,
    csrf,
    get,
    post: (path, fields = {}, headers = {}) =>
      fetch(`${service.url}${path}`, {
        method: 'POST',
        redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded', cookie, origin: service.url, ...headers },
        body: new URLSearchParams({ _csrf: csrf, ...fields }),
      }),
    async follow(res) {
      expect(res.status).toBe(303);
      return (await get(res.headers.get('location')!)).text();
    },
  };
}

/** POSTs a form that must be refused: back to `back` with an error flash, whose text it returns. */
export async function refusalOf(client: DashboardClient, path: string, fields: Record<string, string>, back: string): Promise<string> {
  const res = await client.post(path, fields);
  expect(res.status).toBe(303);
  expect(res.headers.get('location')).toBe(back);
  const html = await client.follow(res);
  const flash = /<div class="flash error" role="alert"><div>([^<]*)<\/div>/.exec(html);
  expect(flash, html.slice(0, 300)).not.toBeNull();
  return flash![1]!;
}

/** What a dashboard suite drives: Chromium, the admin token, and an HTTP client signed in with it. */
export async function openDashboard(service: TestService): Promise<{ browser: Browser; token: string; client: DashboardClient }> {
  const token = await adminTokenFor(service);
  const [browser, client] = await Promise.all([launchBrowser(), dashboardClient(service, token)]);
  return { browser, token, client };
}

/** A row id as the service writes them (UUIDv7), to pick out of a page's address. */
export const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;

import { resetAdminToken } from '../../server/core/admin-token.js';
import type { TestService } from './service.js';

/**
 * The dashboard over plain HTTP, for the rules a browser would hide (CSRF, cookies, headers): a signed-in client that
 * keeps its session cookie and reads the CSRF token from the pages.
 */

export function adminTokenFor(service: TestService): string {
  return resetAdminToken(service.deps.db);
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

export async function dashboardClient(service: TestService, token = adminTokenFor(service)): Promise<DashboardClient> {
  const res = await postSignIn(service.url, token);
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
  };
}

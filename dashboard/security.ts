import type { Context, MiddlewareHandler } from 'hono';
import type { WindowCounter } from '../server/core/rate-limit.js';
import { ApiError } from '../server/shared/errors.js';
import { readRequestBody } from '../server/api/http/body.js';
import type { AppEnv } from '../server/api/http/env.js';
import { constantTimeEqual } from '../server/shared/secrets.js';
import type { DashEnv } from './env.js';

/**
 * The browser-facing rules of the dashboard: its headers, CSRF, form bodies, and how often one address may try to
 * sign in.
 */

/**
 * No inline script or style, nothing from another origin. The captured-mail frame is the one page allowed inside a
 * frame, and only in ours (it sets its own, stricter policy: see CAPTURED_HTML_HEADERS).
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "frame-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

export const PAGE_HEADERS: Record<string, string> = {
  'Content-Security-Policy': CONTENT_SECURITY_POLICY,
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'same-origin',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cache-Control': 'no-store',
};

/**
 * For a captured message's HTML, shown in a sandboxed frame: no script, no network (images only as data: URLs),
 * framed only by the dashboard itself. The `sandbox` directive holds even if the page is opened outside its frame.
 */
export const CAPTURED_HTML_HEADERS: Record<string, string> = {
  'Content-Security-Policy': "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; frame-ancestors 'self'",
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

/**
 * Wrong tokens allowed from one client address in a window; beyond them a wrong token is answered 429 until the window
 * moves. The right token always signs in, limited or not: behind a reverse proxy not named in TRUST_PROXY every client
 * shares one address, and a limit that refused the right token too would let anyone lock the operator out.
 */
export const SIGN_IN_LIMIT = { attempts: 10, windowMs: 15 * 60_000 } as const;

/** The largest form body a dashboard page takes. */
export const MAX_FORM_BYTES = 64 * 1024;

export function securityHeaders(): MiddlewareHandler<DashEnv> {
  return async (c, next) => {
    await next();
    for (const [name, value] of Object.entries(PAGE_HEADERS)) if (!c.res.headers.has(name)) c.res.headers.set(name, value);
  };
}

/** True when the request arrived over https (directly, or through a proxy that says so): the cookie is then Secure. */
export function isHttps(c: Context<DashEnv>): boolean {
  return new URL(c.req.url).protocol === 'https:' || c.req.header('x-forwarded-proto')?.split(',')[0]?.trim() === 'https';
}

/**
 * A browser says where a request comes from (Sec-Fetch-Site, else Origin). A state change is refused when it names
 * another site; a client that sends neither (not a browser) still needs the session's CSRF token.
 */
export function isCrossSite(c: Context<DashEnv>): boolean {
  // The browser's own verdict, which no page can forge (a Sec- header), holds behind any proxy.
  const site = c.req.header('sec-fetch-site');
  if (site !== undefined) return site !== 'same-origin' && site !== 'none';
  const origin = c.req.header('origin');
  if (origin === undefined) return false;
  let host: string;
  try {
    host = new URL(origin).host;
  } catch {
    return true;
  }
  // Behind a proxy that rewrites Host, the public name arrives as X-Forwarded-Host (a form on another site cannot set it).
  const forwarded = c.req.header('x-forwarded-host')?.split(',')[0]?.trim();
  return host !== (c.req.header('host') ?? new URL(c.req.url).host) && host !== forwarded;
}

const formTooLarge = () => new ApiError('body_too_large', `This form is larger than the dashboard takes (${MAX_FORM_BYTES / 1024} KB); nothing was changed.`);

/**
 * A POST's urlencoded form; any other body is an empty form. One over MAX_FORM_BYTES is refused (413, the dashboard's
 * error page), before the CSRF check could take its missing token for a forged request.
 */
export async function readForm(c: Context<DashEnv>): Promise<Record<string, string>> {
  const type = c.req.header('content-type') ?? '';
  if (!type.startsWith('application/x-www-form-urlencoded')) return {};
  const declared = Number(c.req.header('content-length') ?? 0);
  if (declared > MAX_FORM_BYTES) throw formTooLarge();
  const raw = await readRequestBody(c as unknown as Context<AppEnv>);
  if (raw.length > MAX_FORM_BYTES) throw formTooLarge();
  const form: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(raw.toString('utf8'))) if (!(k in form)) form[k] = v;
  return form;
}

/** True when the form (or X-CSRF-Token header) carries the session's CSRF token. */
export function hasCsrfToken(c: Context<DashEnv>, form: Record<string, string>, expected: string): boolean {
  const given = form._csrf ?? c.req.header('x-csrf-token') ?? '';
  return given !== '' && constantTimeEqual(given, expected);
}

/**
 * A sliding window per client address: no 15 minutes (whenever they start) ever hold more than `attempts` failed
 * attempts from it (a fixed window let twice as many through across its boundary). Counted in the service's windows
 * (server/core/rate-limit.ts): this process's memory on the monotonic clock on SQLite (a step of the wall clock neither
 * stretches nor ends the window), the state database on Postgres, so every node counts the same attempts.
 */
export function createAttemptLimiter(windows: WindowCounter, limit: { attempts: number; windowMs: number } = SIGN_IN_LIMIT) {
  return {
    /** Counts one failed attempt; returns the seconds to wait when it is over the limit (and then it does not count). */
    async take(address: string): Promise<{ ok: true } | { ok: false; retryAfterSeconds: number }> {
      const decided = await windows.take([{ scope: `signin:${address}`, limit: limit.attempts, windowMs: limit.windowMs }]);
      return decided.ok ? decided : { ok: false, retryAfterSeconds: Math.max(1, Math.ceil(decided.retryAfterMs / 1000)) };
    },
  };
}

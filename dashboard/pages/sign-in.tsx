import { type Context, Hono } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import type { Deps } from '../../server/core/deps.js';
import { constantTimeEqual, randomBase62 } from '../../server/shared/secrets.js';
import type { DashEnv } from '../env.js';
import { createAttemptLimiter, isCrossSite, isHttps, readForm } from '../security.js';
import { closeSession, findSession, isAdminToken, openSession } from '../session.js';
import { Document } from '../ui.js';
import { clientKey } from '../../server/shared/ip-ranges.js';
import { clientAddress } from '../../server/api/http/client-address.js';

export const SESSION_COOKIE = 'mailstead_session';
/** The sign-in form's double-submit value (a sign-in cannot be forged from another site either). */
const SIGN_IN_COOKIE = 'mailstead_sign_in';

/** Where to go after signing in: only a dashboard path of this site. */
export function safeNext(next: string | undefined): string {
  // `+` too: a browser writes a space in a GET form's query as one (a search for "Globex Mail").
  if (!next || !/^\/dashboard(\/[A-Za-z0-9/_.?=&%+-]*)?$/.test(next) || next.includes('..')) return '/dashboard';
  // A browser resolves dot segments, percent-encoded ones too (`/dashboard/%2e%2e/metrics` is `/metrics`): the path
  // must read the same once resolved.
  const path = next.split('?', 1)[0];
  return new URL(next, 'http://dashboard.invalid').pathname === path ? next : '/dashboard';
}

function SignInPage(props: { formToken: string; next: string; message?: { kind: 'ok' | 'error'; text: string } }) {
  return (
    <Document title="Sign in">
      <main id="main" class="sign-in">
        <div class="panel">
          <h1>Sign in to Mailstead</h1>
          {props.message && (
            <div class={`flash ${props.message.kind}`} role={props.message.kind === 'error' ? 'alert' : 'status'}>
              {props.message.text}
            </div>
          )}
          <form method="post" action="/dashboard/sign-in">
            <input type="hidden" name="_sign_in" value={props.formToken} />
            <input type="hidden" name="next" value={props.next} />
            <div class="field">
              <label for="token">Admin token</label>
              <input id="token" name="token" type="password" autocomplete="current-password" required autofocus />
              <span class="hint">
                Printed once on the first start, or set with ADMIN_TOKEN. <code>npm run -s cli -- admin-token reset</code>, run with the server's{' '}
                <code>DATA_DIR</code>, issues a new one.
              </span>
            </div>
            <p>
              <button type="submit">Sign in</button>
            </p>
          </form>
        </div>
      </main>
    </Document>
  );
}

function cookieOptions(c: Context<DashEnv>, path: string) {
  return { path, httpOnly: true, sameSite: 'Strict' as const, secure: isHttps(c) };
}

/** GET and POST /sign-in, POST /sign-out: the only dashboard pages served without a session (sign-out needs one). */
export function signInRoutes(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'windows'>) {
  const limiter = createAttemptLimiter(deps.windows);
  const form = (c: Context<DashEnv>, status: number, next: string, message?: { kind: 'ok' | 'error'; text: string }) => {
    const formToken = randomBase62(32);
    setCookie(c, SIGN_IN_COOKIE, formToken, cookieOptions(c, '/dashboard/sign-in'));
    return c.html(<SignInPage formToken={formToken} next={next} message={message} />, status as 200);
  };
  return new Hono<DashEnv>()
    .get('/sign-in', async (c) => {
      const token = getCookie(c, SESSION_COOKIE);
      if (token && (await findSession(deps, token))) return c.redirect(safeNext(c.req.query('next')), 303);
      const message =
        c.req.query('signed-out') !== undefined
          ? { kind: 'ok' as const, text: 'You are signed out.' }
          : c.req.query('expired') !== undefined
            ? { kind: 'error' as const, text: 'Your session has ended; sign in again.' }
            : undefined;
      return form(c, 200, safeNext(c.req.query('next')), message);
    })
    .post('/sign-in', async (c) => {
      const fields = await readForm(c);
      const next = safeNext(fields.next);
      const expected = getCookie(c, SIGN_IN_COOKIE) ?? '';
      if (isCrossSite(c) || expected === '' || !constantTimeEqual(fields._sign_in ?? '', expected)) {
        return form(c, 403, next, { kind: 'error', text: 'This sign-in form came from elsewhere or has expired. Try again.' });
      }
      // The right token always signs in, however many wrong ones came from its address (behind a proxy, every
      // client's): checking it costs one hash. Only wrong tokens are counted and limited, per address (an IPv6 client
      // by its /64, server/shared/ip-ranges.ts clientKey). Guessing is hopeless whatever the limit: a generated token
      // holds 238 random bits (server/core/admin-token.ts).
      // The client's address: the TCP peer, or the one a proxy of TRUST_PROXY names.
      const remoteAddress = clientAddress(c, deps.config.trustProxy);
      if (!(await isAdminToken(deps.db, fields.token ?? ''))) {
        const counted = await limiter.take(clientKey(remoteAddress));
        if (!counted.ok) {
          c.header('Retry-After', String(counted.retryAfterSeconds));
          deps.logger.warn('dashboard.sign_in_limited', { remoteAddress });
          return form(c, 429, next, {
            kind: 'error',
            text: `Too many wrong tokens from your address. Try again in ${Math.ceil(counted.retryAfterSeconds / 60)} minutes.`,
          });
        }
        deps.logger.warn('dashboard.sign_in_failed', { remoteAddress });
        return form(c, 401, next, { kind: 'error', text: 'That token is not right.' });
      }
      const { token } = await openSession(deps);
      deleteCookie(c, SIGN_IN_COOKIE, cookieOptions(c, '/dashboard/sign-in'));
      setCookie(c, SESSION_COOKIE, token, cookieOptions(c, '/dashboard'));
      deps.logger.info('dashboard.signed_in', { remoteAddress });
      return c.redirect(next, 303);
    });
}

/** POST /sign-out (behind the session and CSRF checks). */
export function signOutRoutes(deps: Pick<Deps, 'db'>) {
  return new Hono<DashEnv>().post('/sign-out', async (c) => {
    await closeSession(deps.db, c.var.session);
    deleteCookie(c, SESSION_COOKIE, cookieOptions(c, '/dashboard'));
    return c.redirect('/dashboard/sign-in?signed-out', 303);
  });
}

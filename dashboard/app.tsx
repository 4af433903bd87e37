import { Hono } from 'hono';
import { getCookie } from 'hono/cookie';
import type { Deps } from '../server/core/deps.js';
import { ApiError } from '../server/shared/errors.js';
import { storeFaultOf, storeUnavailable } from '../server/shared/store-health.js';
import { assetRoutes } from './assets.js';
import type { DashEnv } from './env.js';
import { SESSION_COOKIE, signInRoutes, signOutRoutes } from './pages/sign-in.js';
import { PAGE_MODULES } from './pages/index.js';
import { hasCsrfToken, isCrossSite, readForm, securityHeaders } from './security.js';
import { findSession } from './session.js';
import { Document } from './ui.js';

function ErrorPage(props: { status: number; title: string; message: string }) {
  return (
    <Document title={props.title}>
      <main id="main" class="sign-in">
        <div class="panel">
          <h1>{props.title}</h1>
          <p>{props.message}</p>
          <p>
            <a href="/dashboard">Back to the dashboard</a>
          </p>
        </div>
      </main>
    </Document>
  );
}

/**
 * The admin dashboard, mounted at /dashboard: server-rendered pages over the same domain functions as the API and
 * the CLI. Order matters: assets and sign-in are served before the session check; every other page needs a live
 * session, and every POST past it must come from this site and carry the session's CSRF token.
 */
export function dashboardApp(deps: Deps) {
  const app = new Hono<DashEnv>();
  app.use(securityHeaders());
  app.route('/', assetRoutes());
  app.route('/', signInRoutes(deps));

  app.use(async (c, next) => {
    const token = getCookie(c, SESSION_COOKIE);
    const session = token ? await findSession(deps, token) : null;
    if (!session) {
      const expired = token ? 'expired&' : '';
      const next = c.req.method === 'GET' ? `?${expired}next=${encodeURIComponent(c.req.path + (new URL(c.req.url).search || ''))}` : token ? '?expired' : '';
      return c.redirect(`/dashboard/sign-in${next}`, 303);
    }
    c.set('session', session);
    if (c.req.method !== 'GET' && c.req.method !== 'HEAD') {
      const form = await readForm(c);
      // The session may have ended while the body arrived (signed out elsewhere, the admin token reset): the request
      // is then one of an ended session, whatever it carries.
      if (!(await findSession(deps, token!))) return c.redirect('/dashboard/sign-in?expired', 303);
      if (isCrossSite(c) || !hasCsrfToken(c, form, session.csrfToken)) {
        deps.logger.warn('dashboard.csrf_refused', { method: c.req.method, path: c.req.path });
        return c.html(
          <ErrorPage
            status={403}
            title="Refused"
            message="This request did not come from a dashboard page of this site, or its page is too old. Go back, reload the page and try again."
          />,
          403,
        );
      }
      c.set('form', form);
    } else {
      c.set('form', {});
    }
    await next();
  });

  app.route('/', signOutRoutes(deps));
  for (const pages of PAGE_MODULES) app.route('/', pages(deps));

  app.all('*', (c) => c.html(<ErrorPage status={404} title="Not found" message={`There is no dashboard page at ${c.req.path}.`} />, 404));
  app.onError((err, c) => {
    if (err instanceof ApiError && err.status < 500) {
      return c.html(<ErrorPage status={err.status} title={err.status === 404 ? 'Not found' : 'Cannot do that'} message={err.message} />, err.status as 400);
    }
    deps.storeHealth.note(err);
    const unavailable = storeUnavailable(err, { closed: deps.storeHealth.unsafe() && storeFaultOf(err) });
    if (unavailable) {
      deps.logger.error('dashboard.store_unavailable', { method: c.req.method, path: c.req.path, err });
      return c.html(<ErrorPage status={503} title="Storage unavailable" message={unavailable.message} />, 503);
    }
    const requestId = c.var.requestId ?? 'unknown';
    deps.logger.error('dashboard.unhandled_error', { requestId, method: c.req.method, path: c.req.path, err });
    return c.html(
      <ErrorPage
        status={500}
        title="Something went wrong"
        message={`The dashboard could not show this page; request id ${requestId}. The service log has the details.`}
      />,
      500,
    );
  });
  return app;
}

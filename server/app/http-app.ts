import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { TrieRouter } from 'hono/router/trie-router';
import { apiReferenceApp } from '../../dashboard/api-reference.js';
import { dashboardApp } from '../../dashboard/app.js';
import type { Deps } from '../core/deps.js';
import { ApiError } from '../shared/errors.js';
import { storeFaultOf, storeUnavailable } from '../shared/store-health.js';
import { accessLog } from '../api/http/access-log.js';
import { refuseDotSegments } from '../api/http/dot-segments.js';
import { RequestAbortedError } from '../api/http/body.js';
import type { AppEnv } from '../api/http/env.js';
import { accountRoutes } from '../api/routes/accounts.js';
import { databaseRoutes } from '../api/routes/database.js';
import { domainRoutes } from '../api/routes/domains.js';
import { emailRoutes } from '../api/routes/emails.js';
import { keyRoutes } from '../api/routes/keys.js';
import { metricsRoutes } from '../api/routes/metrics.js';
import { apiDocumentRoutes, apiIndexRoute } from '../api/routes/openapi.js';
import { eventRoutes } from '../api/routes/events.js';
import { suppressionRoutes } from '../api/routes/suppressions.js';
import { templateRoutes } from '../api/routes/templates.js';
import { webhookRoutes } from '../api/routes/webhooks.js';
import { queryRow } from '../../db/sql.js';

export const API_BASE = '/api/v1';

/**
 * The methods a path is served with, read from the app's own routes (so `Allow` cannot drift from them). Hono
 * answers HEAD wherever it answers GET. Empty for a path no route serves.
 */
export function allowedMethods(routes: readonly { method: string; path: string }[]): (path: string) => string[] {
  const router = new TrieRouter<string>();
  const methods = new Set<string>();
  for (const route of routes) {
    // 'ALL' is middleware, not a method a client can be told to use.
    if (route.method === 'ALL') continue;
    router.add(route.method, route.path, route.method);
    methods.add(route.method);
  }
  return (path) => {
    const allowed = [...methods].filter((method) => router.match(method, path)[0].length > 0);
    if (allowed.includes('GET')) allowed.push('HEAD');
    return allowed.sort();
  };
}

/** The HTTP surface: `/api/v1`, `GET /healthz`, `GET /metrics`, the dashboard, the API reference (`/docs`), and one envelope for every API error. */
export function createApp(deps: Deps) {
  // No middleware before the routes but the access log, which only wraps next() and reads nothing of the request: a
  // body is read only by a route's guard, once the headers have passed.
  const api = new Hono<AppEnv>()
    .route('/', accountRoutes(deps))
    .route('/', keyRoutes(deps))
    .route('/', domainRoutes(deps))
    .route('/', emailRoutes(deps))
    .route('/', suppressionRoutes(deps))
    .route('/', webhookRoutes(deps))
    .route('/', eventRoutes(deps))
    .route('/', databaseRoutes(deps))
    .route('/', templateRoutes(deps))
    .route('/', apiDocumentRoutes(API_BASE));

  const app = new Hono<AppEnv>();
  app.use(accessLog(deps));
  app.use(refuseDotSegments());
  // The delivery mode too, so a probe or a person can tell a capturing (development) server from one that delivers.
  // 503 too for a while after any part of the service failed on the store itself (server/shared/store-health.ts): `select 1`
  // never reads the file, and a damaged file fails only the work that reads it.
  app.get('/healthz', async (c) => {
    const deliveryMode = deps.config.deliveryMode;
    // Where the state lives (docs/api/decisions.md section 11): `sqlite` in DATA_DIR, or `postgres` (STATE_URL).
    const state = deps.store.engine;
    // A node stopping is taken out by its load balancer: it still answers what reaches it meanwhile.
    if (deps.drain.draining) return c.json({ status: 'draining', deliveryMode, state }, 503);
    try {
      await queryRow(deps.db, sql`select 1`);
      if (deps.storeHealth.faulty()) return c.json({ status: 'unavailable', deliveryMode, state }, 503);
      return c.json({ status: 'ok', deliveryMode, state });
    } catch (err) {
      deps.logger.error('healthz.failed', { err });
      return c.json({ status: 'unavailable', deliveryMode, state }, 503);
    }
  });
  app.route('/', metricsRoutes(deps));
  app.route(API_BASE, api);
  app.get('/dashboard/', (c) => c.redirect('/dashboard', 301));
  app.route('/dashboard', dashboardApp(deps));
  // The API reference, built from the API document, under the dashboard's headers; public like the document.
  app.get('/docs/', (c) => c.redirect('/docs', 301));
  app.route('/docs', apiReferenceApp(API_BASE));
  app.route(`${API_BASE}/`, apiIndexRoute(API_BASE));

  let allowed: ((path: string) => string[]) | undefined;
  app.notFound((c) => {
    // Built on first use, when every route is in place.
    allowed ??= allowedMethods(app.routes);
    const path = c.req.path;
    const methods = allowed(path);
    if (methods.length > 0) {
      c.header('Allow', methods.join(', '));
      return c.json(new ApiError('method_not_allowed', `${path} does not take ${c.req.method}; it takes ${methods.join(', ')}.`).toBody(), 405);
    }
    return c.json({ error: { code: 'not_found', message: `No endpoint ${c.req.method} ${path}.` } }, 404);
  });
  app.onError((err, c) => {
    if (err instanceof ApiError) {
      for (const [k, v] of Object.entries(err.headers)) c.header(k, v);
      return c.json(err.toBody(), err.status as 400);
    }
    if (err instanceof HTTPException && err.status < 500) {
      return c.json({ error: { code: 'invalid_request', message: err.message || 'Bad request.' } }, err.status);
    }
    if (err instanceof RequestAbortedError) {
      // The client is gone (or the server cut it off): nobody reads this answer, and the service did nothing wrong.
      deps.logger.debug('http.request_aborted', { method: c.req.method, path: c.req.path });
      return c.json({ error: { code: 'invalid_request', message: err.message } }, 400);
    }
    deps.storeHealth.note(err);
    // The store failed under a change (a full disk): 503 naming the cause, not a 500 (docs/api/decisions.md section 13).
    const unavailable = storeUnavailable(err, { closed: deps.storeHealth.unsafe() && storeFaultOf(err) });
    if (unavailable) {
      deps.logger.error('http.store_unavailable', { method: c.req.method, path: c.req.path, err });
      return c.json(unavailable.toBody(), 503);
    }
    // The access log's id, so the answer, this line and the request's line name the same request.
    const requestId = c.var.requestId ?? randomUUID();
    deps.logger.error('http.unhandled_error', { requestId, method: c.req.method, path: c.req.path, err });
    return c.json({ error: { code: 'internal_error', message: `Internal error; request id ${requestId}.` } }, 500);
  });
  return app;
}

export type App = ReturnType<typeof createApp>;

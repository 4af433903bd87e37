import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { Deps } from './deps.js';
import { ApiError } from './errors.js';
import { readBody } from './http/body.js';
import type { AppEnv } from './http/env.js';
import { accountRoutes } from './routes/accounts.js';
import { domainRoutes } from './routes/domains.js';
import { emailRoutes } from './routes/emails.js';
import { keyRoutes } from './routes/keys.js';
import { suppressionRoutes } from './routes/suppressions.js';

export const API_BASE = '/api/v1';

/** The HTTP surface: `/api/v1`, `GET /healthz`, and one envelope for every error. */
export function createApp(deps: Deps) {
  const api = new Hono<AppEnv>()
    .use(readBody())
    .route('/', accountRoutes(deps))
    .route('/', keyRoutes(deps))
    .route('/', domainRoutes(deps))
    .route('/', emailRoutes(deps))
    .route('/', suppressionRoutes(deps));

  const app = new Hono<AppEnv>();
  app.get('/healthz', (c) => {
    try {
      deps.db.get(sql`select 1`);
      return c.json({ status: 'ok' });
    } catch (err) {
      deps.logger.error('healthz.failed', { err });
      return c.json({ status: 'unavailable' }, 503);
    }
  });
  app.route(API_BASE, api);

  app.notFound((c) =>
    c.json({ error: { code: 'not_found', message: `No endpoint ${c.req.method} ${new URL(c.req.url).pathname}.` } }, 404),
  );
  app.onError((err, c) => {
    if (err instanceof ApiError) {
      for (const [k, v] of Object.entries(err.headers)) c.header(k, v);
      return c.json(err.toBody(), err.status as 400);
    }
    if (err instanceof HTTPException && err.status < 500) {
      return c.json({ error: { code: 'invalid_request', message: err.message || 'Bad request.' } }, err.status);
    }
    const requestId = randomUUID();
    deps.logger.error('http.unhandled_error', { requestId, method: c.req.method, path: new URL(c.req.url).pathname, err });
    return c.json({ error: { code: 'internal_error', message: `Internal error; request id ${requestId}.` } }, 500);
  });
  return app;
}

export type App = ReturnType<typeof createApp>;

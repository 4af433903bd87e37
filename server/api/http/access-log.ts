import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Context, MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import type { RequestContext } from '../../core/context.js';
import type { Deps } from '../../core/deps.js';
import { UNMATCHED_ROUTE } from '../../shared/metrics.js';
import type { AppEnv } from './env.js';

/** Paths a health check or a scraper calls every few seconds: their successes are logged at debug, not info. */
const PROBES = new Set(['/healthz', '/metrics']);

/** The pattern of the route that answered (`/api/v1/emails/:id`), or null when none matched (404, 405). */
export function routePattern(c: Context<AppEnv>): string | null {
  // Middleware is registered for 'ALL'; the route that answers is the last one with a method.
  const routes = matchedRoutes(c).filter((r) => r.method !== 'ALL');
  return routes.at(-1)?.path ?? null;
}

/**
 * One `http.request` line per request, after its answer: method, route pattern, status, duration, request id and
 * the acting account once the key was accepted. Never the raw path (an address can sit in it), a header, a key or a
 * body. It only wraps `next()`: nothing of the body is read here, so a body is still read only by a route's guard.
 * The same line counts the request for `/metrics`.
 */
export function accessLog(deps: Pick<Deps, 'logger' | 'metrics'>): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const requestId = randomUUID();
    c.set('requestId', requestId);
    // A monotonic timer, not the clock: a duration, not a time of day (and tests move the clock by hand).
    const started = performance.now();
    let status = 500;
    try {
      await next();
      status = c.res.status;
    } finally {
      const durationMs = Math.round((performance.now() - started) * 10) / 10;
      const route = routePattern(c);
      const auth = c.var.auth as RequestContext | undefined;
      deps.metrics.httpRequest(c.req.method, route ?? UNMATCHED_ROUTE, status);
      const quiet = status < 400 && route !== null && PROBES.has(route);
      (quiet ? deps.logger.debug : deps.logger.info)('http.request', {
        method: c.req.method,
        route,
        status,
        durationMs,
        requestId,
        accountId: auth?.account.id ?? null,
      });
    }
  };
}

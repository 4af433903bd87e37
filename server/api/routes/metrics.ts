import { createHash, timingSafeEqual } from 'node:crypto';
import { Hono } from 'hono';
import type { Deps } from '../../core/deps.js';
import { ApiError } from '../../shared/errors.js';
import type { AppEnv } from '../http/env.js';

const BEARER = /^Bearer +(\S+) *$/i;

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

/** Whether `given` is the token, in time that tells nothing of either (both hashed first: equal lengths). */
export function metricsTokenMatches(expected: string, given: string | undefined): boolean {
  return given !== undefined && timingSafeEqual(digest(expected), digest(given));
}

/**
 * `GET /metrics`, outside `/api/v1` like `/healthz`: the Prometheus text format. With METRICS_TOKEN set it answers
 * only its Bearer token (`401 invalid_key` otherwise, in the one error envelope); unset, it is open.
 */
export function metricsRoutes(deps: Pick<Deps, 'config' | 'metrics'>) {
  return new Hono<AppEnv>().get('/metrics', async (c) => {
    const token = deps.config.metricsToken;
    if (token !== null && !metricsTokenMatches(token, BEARER.exec(c.req.header('authorization') ?? '')?.[1])) {
      throw new ApiError('invalid_key', 'Missing or wrong metrics token: send Authorization: Bearer <METRICS_TOKEN>.');
    }
    const { registry } = deps.metrics;
    return c.body(await registry.metrics(), 200, { 'Content-Type': registry.contentType });
  });
}

import { Hono } from 'hono';
import { eventFilter, listEvents } from '../../core/events.js';
import { replayInput, replayWebhook } from '../../core/webhook-replay.js';
import type { Deps } from '../../core/deps.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { LISTS, readPage, toPage } from '../http/paging.js';
import { parseInput } from '../http/validate.js';

/** GET /events (the account's recorded outcomes, for reconciling without webhooks) and POST /webhooks/{id}/replay. */
export function eventRoutes(deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'keyUsage' | 'logger' | 'rateLimiter'>) {
  return new Hono<AppEnv>()
    .get('/events', guard(deps, 'emails:read'), async (c) => {
      const ctx = c.var.auth;
      const filter = parseInput(eventFilter, c.req.query(), 'query');
      const page = await readPage(deps.db, LISTS.events, ctx.account.id, filter);
      return c.json(await toPage(deps.db, LISTS.events, ctx.account.id, page, await listEvents({ deps, ctx, page, filter })));
    })
    .post('/webhooks/:id/replay', guard(deps, 'webhooks:write'), async (c) => {
      const input = parseInput(replayInput, jsonBody(c.var.rawBody));
      return c.json(await replayWebhook({ deps, ctx: c.var.auth, endpointId: c.req.param('id'), input }));
    });
}

import { Hono } from 'hono';
import { createWebhook, createWebhookInput, deleteWebhook, getWebhook, listDeliveries, listWebhooks } from '../../core/webhooks.js';
import { testWebhook } from '../../webhooks/test-webhook.js';
import type { Deps } from '../../core/deps.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { LISTS, listScope, readPage, toPage } from '../http/paging.js';
import { parseInput } from '../http/validate.js';

export function webhookRoutes(deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'keyUsage' | 'logger' | 'rateLimiter' | 'resolver' | 'secretKey'>) {
  return new Hono<AppEnv>()
    .get('/webhooks', guard(deps, 'webhooks:read'), async (c) => {
      const ctx = c.var.auth;
      const page = await readPage(deps.db, LISTS.webhooks, ctx.account.id, c.req.query());
      return c.json(await toPage(deps.db, LISTS.webhooks, ctx.account.id, page, await listWebhooks({ deps, ctx, page })));
    })
    .post('/webhooks', guard(deps, 'webhooks:write'), async (c) => {
      const input = parseInput(createWebhookInput, jsonBody(c.var.rawBody));
      return c.json(await createWebhook({ deps, ctx: c.var.auth, input }), 201);
    })
    .get('/webhooks/:id', guard(deps, 'webhooks:read'), async (c) => c.json(await getWebhook({ deps, ctx: c.var.auth, id: c.req.param('id') })))
    .delete('/webhooks/:id', guard(deps, 'webhooks:write'), async (c) => {
      await deleteWebhook({ deps, ctx: c.var.auth, id: c.req.param('id') });
      return c.body(null, 204);
    })
    .post('/webhooks/:id/test', guard(deps, 'webhooks:write'), async (c) => c.json(await testWebhook({ deps, ctx: c.var.auth, id: c.req.param('id') })))
    .get('/webhooks/:id/deliveries', guard(deps, 'webhooks:read'), async (c) => {
      const ctx = c.var.auth;
      const id = c.req.param('id');
      // The cursor of one endpoint's deliveries is refused on another's.
      const scope = listScope(ctx.account.id, id);
      const page = await readPage(deps.db, LISTS.webhookDeliveries, scope, c.req.query());
      return c.json(await toPage(deps.db, LISTS.webhookDeliveries, scope, page, await listDeliveries({ deps, ctx, id, page })));
    });
}

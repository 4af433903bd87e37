import { Hono } from 'hono';
import { createDomain, createDomainInput, deleteDomain, getDomain, listDomains, verifyDomain } from '../../core/domains.js';
import type { Deps } from '../../core/deps.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { LISTS, readPage, toPage } from '../http/paging.js';
import { parseInput } from '../http/validate.js';

export function domainRoutes(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'logger' | 'rateLimiter' | 'resolver' | 'secretKey'>) {
  return new Hono<AppEnv>()
    .get('/domains', guard(deps, 'domains:read'), async (c) => {
      const ctx = c.var.auth;
      const page = await readPage(deps.db, LISTS.domains, ctx.account.id, c.req.query());
      return c.json(await toPage(deps.db, LISTS.domains, ctx.account.id, page, await listDomains({ deps, ctx, page })));
    })
    .post('/domains', guard(deps, 'domains:write'), async (c) => {
      const input = parseInput(createDomainInput, jsonBody(c.var.rawBody));
      return c.json(await createDomain({ deps, ctx: c.var.auth, input }), 201);
    })
    .get('/domains/:id', guard(deps, 'domains:read'), async (c) => c.json(await getDomain({ deps, ctx: c.var.auth, id: c.req.param('id') })))
    .delete('/domains/:id', guard(deps, 'domains:write'), async (c) => {
      await deleteDomain({ deps, ctx: c.var.auth, id: c.req.param('id') });
      return c.body(null, 204);
    })
    .post('/domains/:id/verify', guard(deps, 'domains:write'), async (c) => c.json(await verifyDomain({ deps, ctx: c.var.auth, id: c.req.param('id') })));
}

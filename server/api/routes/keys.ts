import { Hono } from 'hono';
import { listKeys, mintKey, mintKeyInput, revokeKey } from '../../core/keys.js';
import type { Deps } from '../../core/deps.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { LISTS, readPage, toPage } from '../http/paging.js';
import { parseInput } from '../http/validate.js';

export function keyRoutes(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'logger' | 'rateLimiter'>) {
  return new Hono<AppEnv>()
    .get('/keys', guard(deps, 'keys:read'), async (c) => {
      const ctx = c.var.auth;
      const page = await readPage(deps.db, LISTS.keys, ctx.account.id, c.req.query());
      return c.json(await toPage(deps.db, LISTS.keys, ctx.account.id, page, await listKeys({ deps, ctx, page })));
    })
    .post('/keys', guard(deps, 'keys:write'), async (c) => {
      const input = parseInput(mintKeyInput, jsonBody(c.var.rawBody));
      return c.json(await mintKey({ deps, ctx: c.var.auth, input }), 201);
    })
    .delete('/keys/:id', guard(deps, 'keys:write'), async (c) => {
      await revokeKey({ deps, ctx: c.var.auth, id: c.req.param('id') });
      return c.body(null, 204);
    });
}

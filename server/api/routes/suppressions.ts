import { Hono } from 'hono';
import { addSuppression, addSuppressionInput, listSuppressions, removeSuppression, suppressionFilter } from '../../core/suppressions.js';
import type { Deps } from '../../core/deps.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { LISTS, readPage, toPage } from '../http/paging.js';
import { parseInput } from '../http/validate.js';

export function suppressionRoutes(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'rateLimiter'>) {
  return new Hono<AppEnv>()
    .get('/suppressions', guard(deps, 'suppressions:read'), async (c) => {
      const ctx = c.var.auth;
      const filter = parseInput(suppressionFilter, c.req.query(), 'query');
      const page = await readPage(deps.db, LISTS.suppressions, ctx.account.id, filter);
      return c.json(await toPage(deps.db, LISTS.suppressions, ctx.account.id, page, await listSuppressions({ deps, ctx, page, address: filter.address })));
    })
    .post('/suppressions', guard(deps, 'suppressions:write'), async (c) => {
      const { address } = parseInput(addSuppressionInput, jsonBody(c.var.rawBody));
      const { entry, created } = await addSuppression({ deps, ctx: c.var.auth, address });
      return c.json(entry, created ? 201 : 200);
    })
    .delete('/suppressions/:address', guard(deps, 'suppressions:write'), async (c) => {
      await removeSuppression({ deps, ctx: c.var.auth, address: c.req.param('address') });
      return c.body(null, 204);
    });
}

import { Hono } from 'hono';
import {
  accountView,
  createSubAccount,
  createSubAccountInput,
  deleteSubAccount,
  getSubAccount,
  listSubAccounts,
  setSuspensionByApi,
  suspendInput,
} from '../../core/accounts.js';
import type { Deps } from '../../core/deps.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { LISTS, readPage, toPage } from '../http/paging.js';
import { parseInput } from '../http/validate.js';

export function accountRoutes(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'logger' | 'rateLimiter'>) {
  return new Hono<AppEnv>()
    .get('/account', guard(deps, 'accounts:read'), async (c) => c.json(await accountView(deps, c.var.auth.account)))
    .get('/accounts', guard(deps, 'accounts:read'), async (c) => {
      const ctx = c.var.auth;
      const page = await readPage(deps.db, LISTS.accounts, ctx.account.id, c.req.query());
      return c.json(await toPage(deps.db, LISTS.accounts, ctx.account.id, page, await listSubAccounts({ deps, ctx, page })));
    })
    .post('/accounts', guard(deps, 'accounts:write', 'passed'), async (c) => {
      const input = parseInput(createSubAccountInput, jsonBody(c.var.rawBody));
      return c.json(await createSubAccount({ deps, ctx: c.var.auth, input }), 201);
    })
    .get('/accounts/:id', guard(deps, 'accounts:read', 'refused'), async (c) => c.json(await getSubAccount({ deps, ctx: c.var.auth, id: c.req.param('id') })))
    .delete('/accounts/:id', guard(deps, 'accounts:write', 'refused'), async (c) => {
      await deleteSubAccount({ deps, ctx: c.var.auth, id: c.req.param('id') });
      return c.body(null, 204);
    })
    .post('/accounts/:id/suspend', guard(deps, 'accounts:write', 'refused'), async (c) => {
      const input = parseInput(suspendInput, jsonBody(c.var.rawBody));
      return c.json(await setSuspensionByApi({ deps, ctx: c.var.auth, id: c.req.param('id'), input }));
    });
}

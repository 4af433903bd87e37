import { Hono } from 'hono';
import { connectDatabaseInput, deleteDatabase, getDatabaseStatus } from '../../core/customer-db.js';
import { connectDatabase, testDatabase } from '../../customer-db/operations.js';
import type { Deps } from '../../core/deps.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { parseInput } from '../http/validate.js';

export function databaseRoutes(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'logger' | 'rateLimiter' | 'resolver' | 'secretKey'>) {
  return new Hono<AppEnv>()
    .get('/database', guard(deps, 'database:read'), async (c) => c.json(await getDatabaseStatus({ deps, ctx: c.var.auth })))
    .post('/database', guard(deps, 'database:write'), async (c) => {
      const input = parseInput(connectDatabaseInput, jsonBody(c.var.rawBody));
      return c.json(await connectDatabase({ deps, ctx: c.var.auth, input }));
    })
    .post('/database/test', guard(deps, 'database:write'), async (c) => c.json(await testDatabase({ deps, ctx: c.var.auth })))
    .delete('/database', guard(deps, 'database:write'), async (c) => {
      await deleteDatabase({ deps, ctx: c.var.auth });
      return c.body(null, 204);
    });
}

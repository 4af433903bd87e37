import { Hono } from 'hono';
import { templateVariablesInput } from '../../core/send-request.js';
import { listTemplates, renderPreview } from '../../core/template-catalog.js';
import type { Deps } from '../../core/deps.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { parseInput } from '../http/validate.js';

/** The template catalog: what a send's `template` may hold, and a render that sends nothing. */
export function templateRoutes(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'rateLimiter'>) {
  return new Hono<AppEnv>()
    .get('/templates', guard(deps, 'emails:send'), (c) => c.json(listTemplates()))
    .post('/templates/:name/render', guard(deps, 'emails:send'), (c) => {
      const name = c.req.param('name');
      const vars = parseInput(templateVariablesInput(name), jsonBody(c.var.rawBody));
      return c.json(renderPreview(name, vars));
    });
}

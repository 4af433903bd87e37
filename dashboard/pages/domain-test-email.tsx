import { Hono } from 'hono';
import { getDomain } from '../../server/core/domains.js';
import type { Deps } from '../../server/core/deps.js';
import { sendTestEmail } from '../actions/test-email.js';
import type { DashEnv } from '../env.js';
import { operatorContext } from '../on-behalf.js';
import { requireDomainAccount } from '../queries/domains.js';
import { field, formAction } from '../render.js';

/** The domain page's test email (its section is views/test-email.tsx): sent as the domain's account, the outcome flashed. */
export function domainTestEmailPages(deps: Deps) {
  return new Hono<DashEnv>().post('/domains/:id/test-email', async (c) => {
    const id = c.req.param('id');
    const account = await requireDomainAccount(deps, id);
    const view = await getDomain({ deps, ctx: operatorContext(account), id });
    return formAction(deps, c, `/dashboard/domains/${id}#test-email`, () => sendTestEmail(deps, account, view, field(c, 'to')));
  });
}

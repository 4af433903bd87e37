import { Hono } from 'hono';
import { verifiesWithoutDns } from '../../server/core/domain-checks.js';
import { createDomain, createDomainInput, deleteDomain, getDomain, verifyDomain } from '../../server/core/domains.js';
import type { Deps } from '../../server/core/deps.js';
import { parseInput } from '../../server/api/http/validate.js';
import type { DashEnv } from '../env.js';
import { accountById, accountFilter, operatorContext } from '../on-behalf.js';
import { accountChoices } from '../queries/accounts.js';
import { hasDatabase, lastChecks, listAllDomains, requireDomainAccount } from '../queries/domains.js';
import { readPageLink } from '../queries/id-pages.js';
import { field, formAction, refuse, render } from '../render.js';
import { pageHrefs, withQuery } from '../ui.js';
import { DomainPageBody, DomainsListBody, verifySummary } from '../views/domains.js';
import { TestEmailSection } from '../views/test-email.js';
import { defaultTestRecipient, testSendMode } from '../actions/test-email.js';

/**
 * Domains: every account's, connect one for an account, and a domain's records, verification and removal. The
 * dashboard acts as the domain's account through the functions the API's /domains routes call.
 */

const current = '/dashboard/domains' as const;

export function domainPages(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>) {
  const app = new Hono<DashEnv>();

  app.get('/domains', async (c) => {
    const q = (c.req.query('q') ?? '').slice(0, 253);
    const account = await accountFilter(deps.db, c.req.query('account'));
    const accountId = account?.id ?? null;
    const page = await listAllDomains(
      deps,
      { accountId, search: q },
      readPageLink((n) => c.req.query(n)),
    );
    const pager = pageHrefs(page, (p) => withQuery(current, { account: accountId, q, ...p }));
    return render(
      deps,
      c,
      { title: 'Domains', current },
      <DomainsListBody
        q={q}
        account={account}
        rows={page.items}
        pager={pager}
        csrf={c.var.session.csrfToken}
        choices={await accountChoices(deps.db, accountId)}
      />,
    );
  });

  app.post('/domains', async (c) => {
    const account = await accountById(deps.db, field(c, 'accountId'));
    // A refusal goes back to the connect form of the account it was for, as the account page's link opened it.
    const back = account ? `${withQuery(current, { account: account.id })}#connect` : current;
    return formAction(deps, c, back, async () => {
      if (!account) refuse('Choose the account the domain belongs to.');
      const input = parseInput(createDomainInput, { name: field(c, 'name') }, 'form');
      const domain = await createDomain({ deps, ctx: operatorContext(account), input });
      return { kind: 'ok', message: `Connected ${domain.name} to ${account.name}. Publish the records below, then verify.`, to: `${current}/${domain.id}` };
    });
  });

  app.get('/domains/:id', async (c) => {
    const id = c.req.param('id');
    const account = await requireDomainAccount(deps, id);
    const view = await getDomain({ deps, ctx: operatorContext(account), id });
    return render(
      deps,
      c,
      { title: view.name, current },
      <>
        <DomainPageBody
          view={view}
          account={account}
          checks={await lastChecks(deps, id)}
          csrf={c.var.session.csrfToken}
          withoutDns={verifiesWithoutDns(deps.config.deliveryMode, view.name)}
          hasDatabase={await hasDatabase(deps.db, account.id)}
        />
        <TestEmailSection view={view} mode={testSendMode(view, deps.config)} to={defaultTestRecipient(deps.config)} csrf={c.var.session.csrfToken} />
      </>,
    );
  });

  app.post('/domains/:id/verify', async (c) => {
    const id = c.req.param('id');
    const account = await requireDomainAccount(deps, id);
    return formAction(deps, c, `${current}/${id}`, async () => {
      const result = await verifyDomain({ deps, ctx: operatorContext(account), id });
      return {
        kind: result.status === 'verified' ? 'ok' : 'error',
        message: verifySummary(result, result.checks, verifiesWithoutDns(deps.config.deliveryMode, result.name)),
        to: `${current}/${id}#last-check`,
      };
    });
  });

  app.post('/domains/:id/delete', async (c) => {
    const id = c.req.param('id');
    const account = await requireDomainAccount(deps, id);
    return formAction(deps, c, `${current}/${id}`, async () => {
      const { name } = await getDomain({ deps, ctx: operatorContext(account), id });
      await deleteDomain({ deps, ctx: operatorContext(account), id });
      return { kind: 'ok', message: `Deleted ${name} from ${account.name}.`, to: withQuery(current, { account: account.id }) };
    });
  });

  return app;
}

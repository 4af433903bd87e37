import { Hono } from 'hono';
import { addSuppression, addSuppressionInput, removeSuppression } from '../../server/core/suppressions.js';
import type { Deps } from '../../server/core/deps.js';
import { parseInput } from '../../server/api/http/validate.js';
import type { DashEnv } from '../env.js';
import { accountFilter, actForAccount } from '../on-behalf.js';
import { accountChoices } from '../queries/accounts.js';
import { readForwardLink } from '../queries/id-pages.js';
import { listAllSuppressions, searchKey } from '../queries/suppressions.js';
import { field, formAction, render } from '../render.js';
import { Pager, pageHrefs, withQuery } from '../ui.js';
import { AddSuppressionForm, SearchForm, SuppressionTable } from '../views/suppressions.js';

const current = '/dashboard/suppressions' as const;

/** The list a form came from (its `back` field), rebuilt from the list's own parameters only: never another page. */
function backTo(back: string): string {
  // Only its query is read; a value that is no URL at all (a tampered form) goes back to the plain list.
  const params = URL.canParse(back, 'http://dashboard.invalid') ? new URL(back, 'http://dashboard.invalid').searchParams : new URLSearchParams();
  return withQuery(current, { account: params.get('account'), q: params.get('q') });
}

/**
 * Suppressions: every account's list, searched by address (exact or prefix, any case) and filtered by account; add
 * and remove call what POST and DELETE /suppressions call, for the chosen account.
 */
export function suppressionPages(deps: Pick<Deps, 'clock' | 'db'>) {
  return (
    new Hono<DashEnv>()
      .get('/suppressions', async (c) => {
        const accountId = (await accountFilter(deps.db, c.req.query('account')))?.id;
        const q = c.req.query('q') ?? '';
        const page = await listAllSuppressions(
          deps.db,
          { accountId, search: searchKey(q) },
          readForwardLink((n) => c.req.query(n)),
        );
        const csrf = c.var.session.csrfToken;
        const accounts = await accountChoices(deps.db, accountId);
        const back = withQuery(current, { account: accountId, q });
        return render(
          deps,
          c,
          { title: 'Suppressions', current },
          <>
            <AddSuppressionForm accounts={accounts} accountId={accountId} csrf={csrf} back={back} />
            <h2>Suppressed addresses</h2>
            <SearchForm accounts={accounts} accountId={accountId} search={q} />
            <SuppressionTable rows={page.items} csrf={csrf} back={back} />
            <Pager
              label="Suppression list pages"
              {...pageHrefs(page, (p) => withQuery(current, { account: accountId, q, ...p }), { forwardOnly: true })}
              newerLabel="First page"
              olderLabel="Next page"
            />
          </>,
        );
      })
      // The form's account is the one acted for: an unknown one, like a bad or unlisted address, is an error flash.
      .post('/suppressions', (c) =>
        formAction(deps, c, backTo(field(c, 'back')), async () => {
          const ctx = await actForAccount(deps.db, field(c, 'account'));
          const { address } = parseInput(addSuppressionInput, { address: field(c, 'address') });
          const { entry, created } = await addSuppression({ deps, ctx, address });
          return created
            ? { kind: 'ok', message: `${entry.address} is on ${ctx.account.name}'s suppression list (manual).` }
            : { kind: 'ok', message: `${entry.address} was already on ${ctx.account.name}'s suppression list (${entry.reason}).` };
        }),
      )
      .post('/suppressions/remove', (c) =>
        formAction(deps, c, backTo(field(c, 'back')), async () => {
          const ctx = await actForAccount(deps.db, field(c, 'account'));
          const address = field(c, 'address');
          await removeSuppression({ deps, ctx, address });
          return { kind: 'ok', message: `${address} is off ${ctx.account.name}'s suppression list: the account may send to it again.` };
        }),
      )
  );
}

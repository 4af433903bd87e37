import { Hono } from 'hono';
import type { AccountRow } from '../../db/schema/index.js';
import {
  OPERATOR_NUMBER_MIN,
  accountNameSchema,
  accountView,
  createSubAccount,
  createSubAccountInput,
  createTopLevelAccount,
  findAccount,
  grantCredits,
  listSubAccounts,
  operatorSuspensionReasonSchema,
  readOperatorNumber,
  setDailyQuota,
  suspendByOperator,
  unsuspendByOperator,
} from '../../server/core/accounts.js';
import { listDomains } from '../../server/core/domains.js';
import { insertKey, listKeys, mintKeyInput, revokeKey } from '../../server/core/keys.js';
import { SCOPES, isScope } from '../../server/core/scopes.js';
import type { Deps } from '../../server/core/deps.js';
import { ApiError } from '../../server/shared/errors.js';
import { parseInput } from '../../server/api/http/validate.js';
import type { DashEnv } from '../env.js';
import { formatCount } from '../format.js';
import { operatorContext, requireAccount } from '../on-behalf.js';
import { listAccounts } from '../queries/accounts.js';
import { PAGE_SIZE, forwardPage, readForwardLink, readPageLink } from '../queries/id-pages.js';
import { type Outcome, field, formAction, refuse, render } from '../render.js';
import { pageHrefs, withQuery } from '../ui.js';
import { AccountPageBody } from '../views/account-page.js';
import { hasDatabase } from '../queries/domains.js';
import { AccountsListBody } from '../views/accounts.js';

/**
 * Accounts: list and search, create, and on an account's page its quota, suspension, credits, sub-accounts and keys.
 * Every change calls the function the CLI or the API calls for it (server/core/accounts.ts, keys.ts).
 */

const current = '/dashboard/accounts' as const;
const DOMAINS_ON_ACCOUNT_PAGE = 20;

/** An operator's number from a form field, by the CLI's rule (readOperatorNumber); anything else is refused. */
function operatorNumber(text: string, label: string, min: number): number {
  const n = readOperatorNumber(text.trim(), min);
  if (n === null) refuse(`${label}: must be a whole number of at least ${min}`);
  return n;
}

/** The keys the form's checkboxes name (`scope.<name>`), in the order of SCOPES. */
function checkedScopes(form: Record<string, string>): string[] {
  return SCOPES.filter((s) => form[`scope.${s}`] !== undefined);
}

export function accountPages(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'keyUsage' | 'logger' | 'secretKey'>) {
  const app = new Hono<DashEnv>();

  app.get('/accounts', async (c) => {
    const q = (c.req.query('q') ?? '').slice(0, 200);
    const page = await listAccounts(
      deps,
      q,
      readPageLink((n) => c.req.query(n)),
    );
    const pager = pageHrefs(page, (p) => withQuery(current, { q, ...p }));
    return render(
      deps,
      c,
      { title: 'Accounts', current },
      <AccountsListBody q={q} rows={page.items} pager={pager} csrf={c.var.session.csrfToken} config={deps.config} />,
    );
  });

  app.post('/accounts', (c) =>
    formAction(deps, c, current, async () => {
      const name = parseInput(accountNameSchema, field(c, 'name'), 'name');
      const credits = field(c, 'credits').trim();
      const quota = field(c, 'dailyQuota').trim();
      const row = await createTopLevelAccount(deps, {
        name,
        credits: credits === '' ? undefined : operatorNumber(credits, 'credits', OPERATOR_NUMBER_MIN.credits),
        dailyQuota: quota === '' ? undefined : operatorNumber(quota, 'dailyQuota', OPERATOR_NUMBER_MIN.dailyQuota),
      });
      return { kind: 'ok', message: `Account ${row.name} created.`, to: `${current}/${row.id}` };
    }),
  );

  app.get('/accounts/:id', async (c) => {
    const row = await requireAccount(deps.db, c.req.param('id'));
    const parent = row.parentId === null ? null : ((await findAccount(deps.db, row.parentId)) ?? null);
    const ctx = operatorContext(row);
    const query = (n: string) => c.req.query(n);
    const here = `${current}/${row.id}`;

    // The key and sub-account lists are the API's, which walk forward only: their pagers link back to the newest page.
    const keysAfter = readForwardLink(query, 'keys_').after;
    const keyPage = forwardPage(await listKeys({ deps, ctx, page: { limit: PAGE_SIZE, after: keysAfter } }), PAGE_SIZE, keysAfter, (k) => k.id);
    const keys = { items: keyPage.items, ...pageHrefs(keyPage, (p) => `${withQuery(here, p)}#keys`, { prefix: 'keys_', forwardOnly: true }) };
    let subAccounts = null;
    if (row.parentId === null) {
      const subsAfter = readForwardLink(query, 'subs_').after;
      const subPage = forwardPage(await listSubAccounts({ deps, ctx, page: { limit: PAGE_SIZE, after: subsAfter } }), PAGE_SIZE, subsAfter, (s) => s.id);
      subAccounts = { items: subPage.items, ...pageHrefs(subPage, (p) => `${withQuery(here, p)}#sub-accounts`, { prefix: 'subs_', forwardOnly: true }) };
    }
    const domainRows = await listDomains({ deps, ctx, page: { limit: DOMAINS_ON_ACCOUNT_PAGE, after: null } });
    const domains = {
      items: domainRows.slice(0, DOMAINS_ON_ACCOUNT_PAGE),
      more: domainRows.length > DOMAINS_ON_ACCOUNT_PAGE,
      hasDatabase: await hasDatabase(deps.db, row.id),
    };

    return render(
      deps,
      c,
      { title: row.name, current },
      <AccountPageBody
        view={await accountView(deps, row, parent ?? undefined)}
        row={row}
        parent={parent}
        subAccounts={subAccounts}
        keys={keys}
        domains={domains}
        csrf={c.var.session.csrfToken}
      />,
    );
  });

  /** The account-page actions: each finds the account (unknown: the 404 page), then changes it or flashes why not. */
  const action = (path: string, run: (row: AccountRow, form: Record<string, string>) => Outcome | Promise<Outcome>) =>
    app.post(`/accounts/:id/${path}`, async (c) => {
      const row = await requireAccount(deps.db, c.req.param('id'));
      return formAction(deps, c, `${current}/${row.id}`, async () => await run(row, c.var.form));
    });

  action('quota', async (row, form) => {
    const quota = operatorNumber(form.dailyQuota ?? '', 'dailyQuota', OPERATOR_NUMBER_MIN.dailyQuota);
    await setDailyQuota(deps, row.id, quota);
    return { kind: 'ok', message: `Daily quota set to ${formatCount(quota)}.` };
  });

  action('credits', async (row, form) => {
    if (row.parentId !== null) refuse("Credits are granted to the top-level account: a sub-account's sends are paid by its parent.");
    const amount = operatorNumber(form.amount ?? '', 'amount', OPERATOR_NUMBER_MIN.amount);
    const updated = await grantCredits(deps, row.id, amount);
    if (!updated) throw new ApiError('not_found', 'The account no longer exists.');
    return { kind: 'ok', message: `Granted ${formatCount(amount)} credits; the balance is now ${formatCount(updated.creditsBalance)}.` };
  });

  action('suspend', async (row, form) => {
    const reason = parseInput(operatorSuspensionReasonSchema, form.reason ?? '', 'reason');
    await suspendByOperator(deps, row.id, reason);
    return { kind: 'ok', message: `${row.name} is suspended: every send is refused with your reason.` };
  });

  action('unsuspend', async (row) => {
    await unsuspendByOperator(deps, row.id);
    return { kind: 'ok', message: `${row.name} may send again.` };
  });

  action('sub-accounts', async (row, form) => {
    const input = parseInput(createSubAccountInput, { name: form.name ?? '' }, 'form');
    const sub = await createSubAccount({ deps, ctx: operatorContext(row), input });
    return { kind: 'ok', message: `Sub-account ${sub.name} created.` };
  });

  action('keys', async (row, form) => {
    // The CLI's `keys create`: the API's input rules (mintKeyInput), minted by the operator (insertKey).
    const input = parseInput(mintKeyInput, { name: form.name ?? '', scopes: checkedScopes(form) }, 'form');
    const key = await insertKey(deps, { accountId: row.id, name: input.name, scopes: (input.scopes ?? SCOPES).filter(isScope) });
    return { kind: 'ok', message: `Key ${key.name} created. Copy it now: it is shown only this once.`, secret: key.key };
  });

  app.post('/accounts/:id/keys/:keyId/revoke', async (c) => {
    const row = await requireAccount(deps.db, c.req.param('id'));
    return formAction(deps, c, `${current}/${row.id}`, async () => {
      await revokeKey({ deps, ctx: operatorContext(row), id: c.req.param('keyId') });
      return { kind: 'ok', message: 'Key revoked: it stopped working at once.' };
    });
  });

  return app;
}

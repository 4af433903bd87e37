import type { FC } from 'hono/jsx';
import type { SuspendedBy } from '../../db/schema/index.js';
import type { AccountView } from '../../server/core/accounts.js';
import type { CreditState } from '../../server/core/credits.js';
import type { Tier } from '../../server/core/tiers.js';
import type { Config } from '../../server/shared/config.js';
import type { AccountListRow } from '../queries/accounts.js';
import { formatCount } from '../format.js';
import { Badge, type BadgeTone, CsrfField, Dash, DataTable, Pager, Time } from '../ui.js';

/**
 * The accounts pages' pieces: the badges every page shows an account's state with, the list with its search and the
 * create form. (An account's own page: account-page.tsx.)
 */

/** How each state reads at a glance: policy as data, so every page badges a tier or a credit state the same way. */
export const TIER_TONE: Record<Tier, BadgeTone> = { healthy: 'ok', warning: 'warn', throttled: 'warn', paused: 'bad' };
export const CREDIT_TONE: Record<CreditState, BadgeTone> = { trial: 'info', ok: 'ok', grace: 'warn', exhausted: 'bad' };
export const SUSPENDED_BY: Record<SuspendedBy, string> = {
  api: 'the parent account (through the API)',
  operator: 'the operator',
  breaker: 'the reputation breaker',
};

export const AccountLink: FC<{ id: string; name: string }> = ({ id, name }) => <a href={`/dashboard/accounts/${id}`}>{name}</a>;

export const StatusBadge: FC<{ view: AccountView }> = ({ view }) =>
  view.sending.suspended ? <Badge tone="bad">Suspended</Badge> : <Badge tone="ok">Active</Badge>;

export const TierBadge: FC<{ tier: Tier }> = ({ tier }) => <Badge tone={TIER_TONE[tier]}>{tier}</Badge>;

/** A top-level account's balance and state; a sub-account's sends are paid by its parent. */
export const CreditsSummary: FC<{ view: AccountView }> = ({ view }) =>
  view.parentId !== null ? (
    <span class="muted">paid by parent</span>
  ) : (
    <span class="row">
      <span>{formatCount(view.credits.balance)}</span>
      <Badge tone={CREDIT_TONE[view.credits.state]}>{view.credits.state}</Badge>
    </span>
  );

/** Recipients sent today against the quota in force (a tenth while throttled). */
export const QuotaUsage: FC<{ view: AccountView }> = ({ view }) => (
  <span>
    {formatCount(view.sending.sentToday)} / {formatCount(view.sending.effectiveQuota)}
    {view.sending.effectiveQuota !== view.sending.dailyQuota && <span class="muted"> (of {formatCount(view.sending.dailyQuota)}, throttled)</span>}
  </span>
);

const ACCOUNT_COLUMNS = [
  'Name',
  'Id',
  'Status',
  'Tier',
  'Credits',
  { label: 'Recipients today / quota', class: 'num' },
  { label: 'Sub-accounts', class: 'num' },
  'Created',
] as const;

export const AccountsTable: FC<{ rows: AccountListRow[]; caption: string; empty: string }> = ({ rows, caption, empty }) => (
  <DataTable
    caption={caption}
    columns={ACCOUNT_COLUMNS}
    items={rows}
    empty={<p class="panel muted">{empty}</p>}
    row={({ view, parentName, subAccounts }) => (
      <tr>
        <td>
          <AccountLink id={view.id} name={view.name} />
          {view.parentId !== null && (
            <div class="muted small">
              sub-account of <AccountLink id={view.parentId} name={parentName ?? view.parentId} />
            </div>
          )}
        </td>
        <td>
          <code>{view.id}</code>
        </td>
        <td>
          <StatusBadge view={view} />
          {view.sending.suspendedReason !== undefined && <div class="small reason">{view.sending.suspendedReason}</div>}
        </td>
        <td>
          <TierBadge tier={view.sending.tier} />
        </td>
        <td>
          <CreditsSummary view={view} />
        </td>
        <td class="num">
          <QuotaUsage view={view} />
        </td>
        <td class="num">{view.parentId === null ? formatCount(subAccounts) : <Dash />}</td>
        <td>
          <Time at={view.createdAt} />
        </td>
      </tr>
    )}
  />
);

export const AccountSearch: FC<{ q: string }> = ({ q }) => (
  <form method="get" action="/dashboard/accounts" class="row search" role="search">
    <label for="account-search">Search by name or id</label>
    <input id="account-search" type="search" name="q" value={q} maxlength={200} />
    <button type="submit">Search</button>
    {q !== '' && <a href="/dashboard/accounts">Show all</a>}
  </form>
);

export const CreateAccountForm: FC<{ csrf: string; config: Pick<Config, 'defaultDailyQuota' | 'trialDays'> }> = ({ csrf, config }) => (
  <section class="panel" aria-labelledby="create-account">
    <h2 id="create-account">Create an account</h2>
    <form method="post" action="/dashboard/accounts">
      <CsrfField token={csrf} />
      <div class="form-grid">
        <div class="field">
          <label for="new-account-name">Name</label>
          <input id="new-account-name" name="name" required minlength={2} maxlength={80} autocomplete="off" aria-describedby="new-account-name-hint" />
          <span class="hint" id="new-account-name-hint">
            2 to 80 characters.
          </span>
        </div>
        <div class="field">
          <label for="new-account-credits">Credits</label>
          <input id="new-account-credits" name="credits" type="number" min={0} step={1} inputmode="numeric" aria-describedby="new-account-credits-hint" />
          <span class="hint" id="new-account-credits-hint">
            Optional: purchased credits. Without, a {config.trialDays}-day trial.
          </span>
        </div>
        <div class="field">
          <label for="new-account-quota">Daily quota</label>
          <input id="new-account-quota" name="dailyQuota" type="number" min={1} step={1} inputmode="numeric" aria-describedby="new-account-quota-hint" />
          <span class="hint" id="new-account-quota-hint">
            Optional: recipients a day; {formatCount(config.defaultDailyQuota)} by default.
          </span>
        </div>
        <div>
          <button type="submit">Create account</button>
        </div>
      </div>
    </form>
  </section>
);

export const AccountsListBody: FC<{
  q: string;
  rows: AccountListRow[];
  pager: { newer: string | null; older: string | null };
  csrf: string;
  config: Pick<Config, 'defaultDailyQuota' | 'trialDays'>;
}> = ({ q, rows, pager, csrf, config }) => (
  <>
    <AccountSearch q={q} />
    <AccountsTable
      rows={rows}
      caption={q === '' ? 'Accounts, newest first' : 'Accounts matching the search, newest first'}
      empty={q === '' ? 'No accounts yet: create the first below.' : 'No account matches that search.'}
    />
    <Pager label="Accounts pages" {...pager} />
    <CreateAccountForm csrf={csrf} config={config} />
  </>
);

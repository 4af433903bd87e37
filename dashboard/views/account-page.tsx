import type { FC } from 'hono/jsx';
import type { AccountRow } from '../../db/schema/index.js';
import type { AccountView } from '../../server/core/accounts.js';
import type { DomainView } from '../../server/core/domains.js';
import type { KeyView } from '../../server/core/keys.js';
import { SCOPES } from '../../server/core/scopes.js';
import { formatCount } from '../format.js';
import { Badge, Copyable, CsrfField, DataTable, Pager, PostButton, Time } from '../ui.js';
import { AccountLink, CreditsSummary, QuotaUsage, StatusBadge, SUSPENDED_BY, TierBadge } from './accounts.js';
import { DomainStatusBadges, ReceivingNote } from './domains.js';

/** An account's page: its facts, the operator's actions on it, its sub-accounts, keys and domains. */

export interface AccountPageProps {
  view: AccountView;
  row: AccountRow;
  parent: AccountRow | null;
  subAccounts: { items: AccountView[]; newer: string | null; older: string | null } | null;
  keys: { items: KeyView[]; newer: string | null; older: string | null };
  domains: { items: DomainView[]; more: boolean; hasDatabase: boolean };
  csrf: string;
}

const Facts: FC<{ view: AccountView; row: AccountRow; parent: AccountRow | null }> = ({ view, row, parent }) => (
  <section class="panel" aria-labelledby="facts">
    <h2 id="facts">Details</h2>
    <dl class="facts">
      <dt>Id</dt>
      <dd>
        <Copyable id="account-id" value={view.id} label="account id" />
      </dd>
      <dt>Kind</dt>
      <dd>
        {parent ? (
          <>
            Sub-account of <AccountLink id={parent.id} name={parent.name} />
          </>
        ) : (
          'Top-level account'
        )}
      </dd>
      <dt>Created</dt>
      <dd>
        <Time at={view.createdAt} />
      </dd>
      <dt>Status</dt>
      <dd>
        <StatusBadge view={view} />
        {row.suspendedBy !== null && (
          <>
            {' '}
            by {SUSPENDED_BY[row.suspendedBy]}
            {row.suspendedAt !== null && (
              <>
                {' '}
                since <Time at={row.suspendedAt} />
              </>
            )}
          </>
        )}
      </dd>
      {view.sending.suspendedReason !== undefined && (
        <>
          <dt>Reason shown on every refused send</dt>
          <dd class="reason">{view.sending.suspendedReason}</dd>
        </>
      )}
      <dt>Tier</dt>
      <dd>
        <TierBadge tier={view.sending.tier} />
      </dd>
      <dt>Sent (lifetime)</dt>
      <dd>
        {formatCount(view.sending.totalSent)} recipients, {formatCount(view.sending.totalBounced)} bounced, {formatCount(view.sending.totalComplained)}{' '}
        complained
      </dd>
      <dt>Recipients today / quota</dt>
      <dd>
        <QuotaUsage view={view} />
      </dd>
      <dt>Credits</dt>
      <dd>
        <CreditsSummary view={view} />
      </dd>
      {view.parentId === null && (
        <>
          <dt>Credits bought / used</dt>
          <dd>
            {formatCount(view.credits.totalPurchased)} / {formatCount(view.credits.totalUsed)}
          </dd>
          <dt>Free until</dt>
          <dd>
            <Time at={view.credits.freeUntil} />
          </dd>
          {view.credits.state === 'grace' && (
            <>
              <dt>Grace left</dt>
              <dd>
                {view.credits.graceDaysLeft} days or {formatCount(view.credits.graceEmailsLeft)} emails, whichever ends first
              </dd>
            </>
          )}
        </>
      )}
    </dl>
  </section>
);

const SendingActions: FC<{ view: AccountView; csrf: string }> = ({ view, csrf }) => (
  <section class="panel" aria-labelledby="sending">
    <h2 id="sending">Sending</h2>
    <form method="post" action={`/dashboard/accounts/${view.id}/quota`}>
      <CsrfField token={csrf} />
      <div class="form-grid">
        <div class="field">
          <label for="daily-quota">Daily quota</label>
          <input id="daily-quota" name="dailyQuota" type="number" min={1} step={1} inputmode="numeric" required value={String(view.sending.dailyQuota)} />
        </div>
        <div>
          <button type="submit">Set quota</button>
        </div>
      </div>
    </form>
    {view.sending.suspended ? (
      <div class="action-row">
        <p>Lifting the suspension lets the account send again, whoever placed it.</p>
        <PostButton action={`/dashboard/accounts/${view.id}/unsuspend`} csrf={csrf} label="Lift suspension" variant="primary" />
      </div>
    ) : (
      <form method="post" action={`/dashboard/accounts/${view.id}/suspend`} class="action-row">
        <CsrfField token={csrf} />
        <div class="field">
          <label for="suspend-reason">Reason for suspending</label>
          <textarea id="suspend-reason" name="reason" required maxlength={500} aria-describedby="suspend-reason-hint"></textarea>
          <span class="hint" id="suspend-reason-hint">
            Shown verbatim on every send the account tries while suspended. The API cannot lift an operator's suspension.
          </span>
        </div>
        <div>
          <button type="submit" class="danger">
            Suspend sending
          </button>
        </div>
      </form>
    )}
  </section>
);

const GrantCredits: FC<{ view: AccountView; csrf: string }> = ({ view, csrf }) => (
  <section class="panel" aria-labelledby="credits">
    <h2 id="credits">Credits</h2>
    <form method="post" action={`/dashboard/accounts/${view.id}/credits`}>
      <CsrfField token={csrf} />
      <div class="form-grid">
        <div class="field">
          <label for="grant-amount">Credits to grant</label>
          <input id="grant-amount" name="amount" type="number" min={1} step={1} inputmode="numeric" required />
        </div>
        <div>
          <button type="submit">Grant credits</button>
        </div>
      </div>
    </form>
  </section>
);

const SubAccounts: FC<{ view: AccountView; subs: NonNullable<AccountPageProps['subAccounts']>; csrf: string }> = ({ view, subs, csrf }) => (
  <section aria-labelledby="sub-accounts">
    <h2 id="sub-accounts">Sub-accounts</h2>
    <DataTable
      caption={`Sub-accounts of ${view.name}, newest first`}
      columns={['Name', 'Status', 'Tier', { label: 'Today / quota', class: 'num' }, 'Created']}
      items={subs.items}
      empty={<p class="muted">No sub-accounts.</p>}
      row={(sub) => (
        <tr>
          <td>
            <AccountLink id={sub.id} name={sub.name} />
          </td>
          <td>
            <StatusBadge view={sub} />
          </td>
          <td>
            <TierBadge tier={sub.sending.tier} />
          </td>
          <td class="num">
            <QuotaUsage view={sub} />
          </td>
          <td>
            <Time at={sub.createdAt} />
          </td>
        </tr>
      )}
    />
    <Pager label="Sub-account pages" newer={subs.newer} older={subs.older} newerLabel="Newest" />
    <form method="post" action={`/dashboard/accounts/${view.id}/sub-accounts`} class="panel">
      <CsrfField token={csrf} />
      <div class="form-grid">
        <div class="field">
          <label for="sub-account-name">New sub-account's name</label>
          <input id="sub-account-name" name="name" required minlength={2} maxlength={80} autocomplete="off" />
        </div>
        <div>
          <button type="submit">Create sub-account</button>
        </div>
      </div>
    </form>
  </section>
);

const ScopeList: FC<{ scopes: readonly string[] }> = ({ scopes }) =>
  scopes.length === SCOPES.length ? <span>all {SCOPES.length}</span> : <span class="small">{scopes.join(', ')}</span>;

const Keys: FC<{ view: AccountView; keys: AccountPageProps['keys']; csrf: string }> = ({ view, keys, csrf }) => (
  <section aria-labelledby="keys">
    <h2 id="keys">API keys</h2>
    <DataTable
      caption={`API keys of ${view.name}, newest first`}
      columns={['Name', 'Prefix', 'Scopes', 'Created', 'Last used', 'State']}
      items={keys.items}
      empty={<p class="muted">No keys yet.</p>}
      row={(key) => (
        <tr>
          <td>{key.name}</td>
          <td>
            <code>{key.prefix}</code>
          </td>
          <td>
            <ScopeList scopes={key.scopes} />
          </td>
          <td>
            <Time at={key.createdAt} />
          </td>
          <td>
            <Time at={key.lastUsedAt} />
          </td>
          <td>
            {key.revokedAt !== null ? (
              <span>
                <Badge tone="neutral">revoked</Badge> <Time at={key.revokedAt} />
              </span>
            ) : (
              <span class="row">
                <Badge tone="ok">live</Badge>
                <PostButton
                  action={`/dashboard/accounts/${view.id}/keys/${key.id}/revoke`}
                  csrf={csrf}
                  label="Revoke"
                  variant="danger"
                  confirm={`Revoke the key "${key.name}"? It stops working at once.`}
                  accessibleLabel={`Revoke key ${key.name}`}
                />
              </span>
            )}
          </td>
        </tr>
      )}
    />
    <Pager label="Key pages" newer={keys.newer} older={keys.older} newerLabel="Newest" />
    <form method="post" action={`/dashboard/accounts/${view.id}/keys`} class="panel">
      <CsrfField token={csrf} />
      <div class="field">
        <label for="key-name">New key's name</label>
        <input id="key-name" name="name" required maxlength={60} autocomplete="off" />
      </div>
      <fieldset class="scopes">
        <legend>Scopes</legend>
        {SCOPES.map((scope) => (
          <span class="scope">
            <input type="checkbox" id={`scope-${scope.replace(':', '-')}`} name={`scope.${scope}`} value="on" checked />
            <label for={`scope-${scope.replace(':', '-')}`}>{scope}</label>
          </span>
        ))}
      </fieldset>
      <p class="hint muted">The full key is shown once, right after it is made: only its hash is kept.</p>
      <button type="submit">Create key</button>
    </form>
  </section>
);

const Domains: FC<{ view: AccountView; domains: AccountPageProps['domains'] }> = ({ view, domains }) => (
  <section aria-labelledby="domains">
    <h2 id="domains">Domains</h2>
    {domains.items.length === 0 ? (
      <p class="muted">No domains connected.</p>
    ) : (
      <ul class="plain">
        {domains.items.map((d) => (
          <li class="row">
            <a href={`/dashboard/domains/${d.id}`}>{d.name}</a> <DomainStatusBadges view={d} />
            <ReceivingNote view={d} hasDatabase={domains.hasDatabase} accountName={view.name} short />
          </li>
        ))}
      </ul>
    )}
    <p class="row">
      {domains.more && <a href={`/dashboard/domains?account=${view.id}`}>All of this account's domains</a>}
      <a class="button secondary" href={`/dashboard/domains?account=${view.id}#connect`}>
        Connect a domain
      </a>
    </p>
  </section>
);

export const AccountPageBody: FC<AccountPageProps> = (p) => (
  <>
    <p>
      <a href="/dashboard/accounts">All accounts</a>
      {p.parent && (
        <>
          {' '}
          · sub-account of <AccountLink id={p.parent.id} name={p.parent.name} />
        </>
      )}
    </p>
    <Facts view={p.view} row={p.row} parent={p.parent} />
    <SendingActions view={p.view} csrf={p.csrf} />
    {p.view.parentId === null && <GrantCredits view={p.view} csrf={p.csrf} />}
    {p.subAccounts && <SubAccounts view={p.view} subs={p.subAccounts} csrf={p.csrf} />}
    <Keys view={p.view} keys={p.keys} csrf={p.csrf} />
    <Domains view={p.view} domains={p.domains} />
  </>
);

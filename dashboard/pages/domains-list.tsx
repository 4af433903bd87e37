import type { FC } from 'hono/jsx';
import type { RecordStatus } from '../../db/schema/index.js';
import type { DomainView } from '../../server/core/domains.js';
import type { AccountChoice } from '../queries/accounts.js';
import type { DomainListRow } from '../queries/domains.js';
import { AccountSelect, Badge, type BadgeTone, CsrfField, Pager, Time } from '../ui.js';

/** Badges for a domain's state as the API's Domain resource states it (api.md, Domain; its transitions). */
export const RECORD_TONE: Record<RecordStatus, BadgeTone> = { published: 'ok', pending: 'warn' };

export const DomainStatusBadges: FC<{ view: DomainView }> = ({ view }) => (
  <span class="row badges">
    <Badge tone={view.status === 'verified' ? 'ok' : 'warn'}>{view.status}</Badge>
    <Badge tone={view.sending ? 'ok' : 'neutral'}>{view.sending ? (view.direct ? 'sending direct' : 'sending via relay') : 'not sending'}</Badge>
    <Badge tone={view.receiving ? 'ok' : 'neutral'}>{view.receiving ? 'receiving' : 'not receiving'}</Badge>
  </span>
);

/** Each record's status, named, in the order of the records to publish. */
export const RecordBadges: FC<{ view: DomainView }> = ({ view }) => (
  <ul class="plain row badges" aria-label={`Records of ${view.name}`}>
    {view.records.map((r) => (
      <li>
        <Badge tone={RECORD_TONE[r.status]}>
          {r.record}: {r.status}
        </Badge>
      </li>
    ))}
  </ul>
);

export const DomainsTable: FC<{ rows: DomainListRow[] }> = ({ rows }) => (
  <div class="table-wrap">
    <table>
      <caption class="visually-hidden">Domains, newest first</caption>
      <thead>
        <tr>
          <th scope="col">Domain</th>
          <th scope="col">Account</th>
          <th scope="col">Status</th>
          <th scope="col">Records</th>
          <th scope="col">Created</th>
        </tr>
      </thead>
      <tbody>
        {rows.map(({ view, account }) => (
          <tr>
            <td>
              <a href={`/dashboard/domains/${view.id}`}>{view.name}</a>
            </td>
            <td>
              <a href={`/dashboard/accounts/${account.id}`}>{account.name}</a>
            </td>
            <td>
              <DomainStatusBadges view={view} />
            </td>
            <td>
              <RecordBadges view={view} />
            </td>
            <td>
              <Time ms={Date.parse(view.createdAt)} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  </div>
);

export const ConnectDomainForm: FC<{ csrf: string; choices: AccountChoice[]; selected: string | null }> = ({ csrf, choices, selected }) => (
  <section class="panel" aria-labelledby="connect-heading" id="connect">
    <h2 id="connect-heading">Connect a domain</h2>
    {choices.length === 0 ? (
      <p class="muted">
        Create an <a href="/dashboard/accounts">account</a> first: a domain belongs to an account.
      </p>
    ) : (
      <form method="post" action="/dashboard/domains">
        <CsrfField token={csrf} />
        <div class="form-grid">
          <div class="field">
            <label for="connect-account">Account</label>
            <AccountSelect id="connect-account" name="accountId" choices={choices} selected={selected} blank={selected === null ? 'Choose an account' : undefined} required />
          </div>
          <div class="field">
            <label for="connect-name">Domain name</label>
            <input id="connect-name" name="name" required maxlength={253} autocomplete="off" placeholder="example.com" aria-describedby="connect-name-hint" />
            <span class="hint" id="connect-name-hint">
              The bare name: no scheme, no path.
            </span>
          </div>
          <div>
            <button type="submit">Connect domain</button>
          </div>
        </div>
      </form>
    )}
  </section>
);

export const DomainFilter: FC<{ q: string; account: { id: string; name: string } | null }> = ({ q, account }) => (
  <form method="get" action="/dashboard/domains" class="row search" role="search">
    {account && <input type="hidden" name="account" value={account.id} />}
    <label for="domain-search">Search by domain name</label>
    <input id="domain-search" type="search" name="q" value={q} maxlength={253} />
    <button type="submit">Search</button>
    {(q !== '' || account) && <a href="/dashboard/domains">Show all domains</a>}
  </form>
);

export const DomainsListBody: FC<{
  q: string;
  account: { id: string; name: string } | null;
  rows: DomainListRow[];
  pager: { newer: string | null; older: string | null };
  csrf: string;
  choices: AccountChoice[];
}> = ({ q, account, rows, pager, csrf, choices }) => (
  <>
    {account && (
      <p>
        Domains of <a href={`/dashboard/accounts/${account.id}`}>{account.name}</a>.
      </p>
    )}
    <DomainFilter q={q} account={account} />
    {rows.length === 0 ? (
      <p class="panel muted">{q !== '' ? 'No domain matches that search.' : 'No domains connected yet.'}</p>
    ) : (
      <DomainsTable rows={rows} />
    )}
    <Pager label="Domain pages" {...pager} />
    <ConnectDomainForm csrf={csrf} choices={choices} selected={account?.id ?? null} />
  </>
);

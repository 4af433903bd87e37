import type { FC } from 'hono/jsx';
import type { AccountRow, CheckValue, RecordKind, RecordStatus } from '../../db/schema/index.js';
import type { DnsRecordView, DomainView } from '../../server/core/domains.js';
import type { AccountChoice } from '../queries/accounts.js';
import type { DomainListRow } from '../queries/domains.js';
import { AccountField, AccountFormPanel, Badge, type BadgeTone, Copyable, DataTable, Pager, PostButton, Time } from '../ui.js';

/**
 * The domains pages' pieces: the list across accounts with its filter and the connect form; a domain's page with the
 * records to publish, what the last verification found, and the actions on it.
 */

/** Badges for a domain's state as the API's Domain resource states it (docs/api/contract.md, Domain; its transitions). */
export const RECORD_TONE: Record<RecordStatus, BadgeTone> = { published: 'ok', pending: 'warn' };

export const DomainStatusBadges: FC<{ view: DomainView }> = ({ view }) => (
  <span class="row badges">
    <Badge tone={view.status === 'verified' ? 'ok' : 'warn'}>{view.status}</Badge>
    <Badge tone={view.sending ? 'ok' : 'neutral'}>{view.sending ? (view.direct ? 'sending direct' : 'sending via relay') : 'not sending'}</Badge>
    <Badge tone={view.receiving ? 'ok' : 'neutral'}>{view.receiving ? 'receiving' : 'not receiving'}</Badge>
  </span>
);

/**
 * Beside a `receiving` badge when the account (and its parent) has no database: inbound mail is written into the
 * customer's own Postgres, so until one is connected the MX record brings mail that is refused at RCPT
 * (mta/inbound/recipients.ts). `short` for the list's Status cell, the sentence for the domain's page.
 */
export const ReceivingNote: FC<{ view: DomainView; hasDatabase: boolean; accountName: string; short?: boolean }> = ({
  view,
  hasDatabase,
  accountName,
  short,
}) =>
  !view.receiving || hasDatabase ? null : short ? (
    <p class="receiving-note small">
      Mail refused: <a href="/dashboard/database">no database</a>
    </p>
  ) : (
    <p class="receiving-note" role="note">
      <Badge tone="warn">mail refused</Badge> {view.name} is receiving, but its mail is refused until <bdi>{accountName}</bdi> has a database: inbound mail is
      written into the account’s own Postgres (or its parent’s), and neither has one. Connect one with <code>POST /api/v1/database</code>; connected databases
      are listed on the <a href="/dashboard/database">Database page</a>.
    </p>
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

export const DomainsTable: FC<{ rows: DomainListRow[]; empty: string }> = ({ rows, empty }) => (
  <DataTable
    caption="Domains, newest first"
    columns={['Domain', 'Account', 'Status', 'Records', 'Created']}
    items={rows}
    empty={<p class="panel muted">{empty}</p>}
    row={({ view, account, hasDatabase }) => (
      <tr>
        <td>
          <a href={`/dashboard/domains/${view.id}`}>{view.name}</a>
        </td>
        <td>
          <a href={`/dashboard/accounts/${account.id}`}>{account.name}</a>
        </td>
        <td>
          <DomainStatusBadges view={view} />
          <ReceivingNote view={view} hasDatabase={hasDatabase} accountName={account.name} short />
        </td>
        <td>
          <RecordBadges view={view} />
        </td>
        <td>
          <Time at={view.createdAt} />
        </td>
      </tr>
    )}
  />
);

export const ConnectDomainForm: FC<{ csrf: string; choices: AccountChoice[]; selected: string | null }> = ({ csrf, choices, selected }) => (
  <AccountFormPanel
    id="connect"
    headingId="connect-heading"
    heading="Connect a domain"
    thing="a domain"
    action="/dashboard/domains"
    csrf={csrf}
    choices={choices}
  >
    <div class="form-grid">
      <AccountField id="connect-account" choices={choices} selected={selected} />
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
  </AccountFormPanel>
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
    <DomainsTable rows={rows} empty={q !== '' ? 'No domain matches that search.' : 'No domains connected yet.'} />
    <Pager label="Domain pages" {...pager} />
    <ConnectDomainForm csrf={csrf} choices={choices} selected={account?.id ?? null} />
  </>
);

/** Which record each check of verifyDomain reads. */
export const CHECKED_RECORD: Record<RecordKind, DnsRecordView['record']> = { ownership: 'Ownership', spf: 'SPF', receiving: 'Receiving', signing: 'Signing' };

/** What each check value of docs/api/contract.md's verify response means, as the operator reads it. */
export const CHECK_RESULT: Record<CheckValue, { tone: BadgeTone; found: boolean; says: string }> = {
  proven: { tone: 'ok', found: true, says: 'Found, with this domain’s token: ownership is proven.' },
  published: { tone: 'ok', found: true, says: 'Found, with the expected value.' },
  missing: { tone: 'bad', found: false, says: 'Not found: DNS answered without this value.' },
  unknown: { tone: 'warn', found: false, says: 'No answer from DNS: the record keeps the status it had.' },
};

/** The top-level name of a domain (`test` for shop.test), as the notes about reserved names say it. */
const tldOf = (name: string) => name.split('.').pop() ?? name;

/**
 * What the page says a check found. A name verifyDomain checks without DNS (capture mode, a reserved TLD:
 * verifiesWithoutDns) was not looked up at all, whatever the stored value; the MX record is optional, so its absence
 * is no fault.
 */
export function checkResult(kind: RecordKind, value: CheckValue, withoutDns: string | null): { tone: BadgeTone; says: string } {
  if (withoutDns !== null) {
    return { tone: 'info', says: `Not looked up: in capture mode, names under .${withoutDns} are verified without DNS, every record counted as found.` };
  }
  if (kind === 'receiving' && value === 'missing') {
    return { tone: 'neutral', says: `${CHECK_RESULT.missing.says} It is optional: needed only to receive mail at this domain.` };
  }
  return CHECK_RESULT[value];
}

/** The flash after a verification: how many records were found (or that DNS was not asked), and where the domain stands. */
export function verifySummary(view: DomainView, checks: Record<RecordKind, CheckValue>, withoutDns = false): string {
  const values = Object.values(checks);
  if (withoutDns) {
    return `Verified ${view.name} without asking DNS: in capture mode, names under .${tldOf(view.name)} count every record as found. The domain is ${view.status}.`;
  }
  const found = values.filter((v) => CHECK_RESULT[v].found).length;
  const unanswered = values.filter((v) => v === 'unknown').length;
  return `Checked DNS for ${view.name}: ${found} of ${values.length} records found${unanswered > 0 ? `, ${unanswered} without an answer` : ''}. The domain is ${view.status}.`;
}

/** Why the MX record is optional, and what publishing it does (docs/operating/dns.md, Receiving). */
const MxNote: FC<{ name: string }> = ({ name }) => (
  <p class="record-note small" id="mx-note">
    <strong>Optional.</strong> Only needed to receive mail at {name} (inbound mail, replies, bounces sent to its addresses). An MX record sends all of the
    domain’s mail to Mailstead: it replaces the domain’s current mail host, so leave it out if people read mail at {name} elsewhere. Sending needs no MX record.
  </p>
);

const Records: FC<{ view: DomainView; withoutDns: string | null }> = ({ view, withoutDns }) => (
  <section aria-labelledby="records">
    <h2 id="records">Records to publish</h2>
    <p class="muted">
      Add these at the domain’s DNS host, then verify; copy each value exactly as shown. Ownership, SPF and Signing are needed to send; the MX record
      (Receiving) is optional and takes over all of the domain’s mail.
    </p>
    {withoutDns !== null && (
      <p class="panel" role="note" id="without-dns">
        <Badge tone="info">no DNS needed</Badge> In capture mode, names under <code>.{withoutDns}</code> are verified without asking DNS (no DNS can hold them,
        and their mail never leaves this machine): the statuses below say so, not that DNS holds these records. A real domain publishes them.
      </p>
    )}
    <DataTable
      class="records"
      caption={`DNS records for ${view.name}`}
      columns={['Record', 'Type', 'Name', 'Value', 'Status']}
      items={view.records}
      row={(r, i) => (
        <tr>
          <th scope="row">{r.record}</th>
          <td>{r.type}</td>
          <td class="name">
            <Copyable id={`record-${i}-name`} value={r.name} label={`${r.record} record name`} />
          </td>
          <td class="value">
            <Copyable id={`record-${i}-value`} value={r.value} label={`${r.record} record value`} />
            {r.type === 'MX' && <MxNote name={view.name} />}
          </td>
          <td>
            <Badge tone={RECORD_TONE[r.status]}>{r.status}</Badge>
          </td>
        </tr>
      )}
    />
  </section>
);

const Checks: FC<{ view: DomainView; checks: Record<RecordKind, CheckValue> | null; withoutDns: string | null }> = ({ view, checks, withoutDns }) => (
  <section aria-labelledby="checks" id="last-check">
    <h2 id="checks">Last verification</h2>
    {checks === null ? (
      <p class="muted">Not verified yet: publish the records above, then press “Verify now”.</p>
    ) : (
      <>
        <p>
          {withoutDns !== null ? 'Verified without asking DNS' : 'Checked'} <Time at={view.lastCheckedAt} />.
        </p>
        <DataTable
          class="records"
          caption="What the last verification found for each record"
          columns={['Record', 'Expected', 'Found']}
          items={Object.keys(CHECKED_RECORD) as RecordKind[]}
          row={(kind) => {
            const record = view.records.find((r) => r.record === CHECKED_RECORD[kind])!;
            const result = checkResult(kind, checks[kind], withoutDns);
            return (
              <tr>
                <th scope="row">{record.record}</th>
                <td class="value">
                  <code>
                    {record.type} {record.name}
                  </code>
                  <div>
                    <code class="small">{record.value}</code>
                  </div>
                </td>
                <td class="result">
                  <Badge tone={result.tone}>{checks[kind]}</Badge>
                  <div class="small">{result.says}</div>
                </td>
              </tr>
            );
          }}
        />
      </>
    )}
  </section>
);

export const DomainPageBody: FC<{
  view: DomainView;
  account: AccountRow;
  checks: Record<RecordKind, CheckValue> | null;
  csrf: string;
  /** Whether verify skips DNS for this name (verifiesWithoutDns: capture mode, a reserved TLD). */
  withoutDns: boolean;
  hasDatabase: boolean;
}> = ({ view, account, checks, csrf, withoutDns, hasDatabase }) => (
  <>
    <p>
      <a href="/dashboard/domains">All domains</a> · account <a href={`/dashboard/accounts/${account.id}`}>{account.name}</a>
    </p>
    <div class="panel spread">
      <DomainStatusBadges view={view} />
      <span class="row">
        <PostButton action={`/dashboard/domains/${view.id}/verify`} csrf={csrf} label="Verify now" variant="primary" />
        <PostButton
          action={`/dashboard/domains/${view.id}/delete`}
          csrf={csrf}
          label="Delete domain"
          variant="danger"
          confirm={`Delete ${view.name} from ${account.name}? The account can no longer send from it; its token and key are kept for a reconnect.`}
        />
      </span>
    </div>
    <ReceivingNote view={view} hasDatabase={hasDatabase} accountName={account.name} />
    <Records view={view} withoutDns={withoutDns ? tldOf(view.name) : null} />
    <Checks view={view} checks={checks} withoutDns={withoutDns ? tldOf(view.name) : null} />
    <p class="muted small">
      Connected <Time at={view.createdAt} />.
    </p>
  </>
);

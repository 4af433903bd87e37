import type { FC } from 'hono/jsx';
import { EMAIL_STATUSES } from '../../db/schema/index.js';
import type { EmailView } from '../../server/core/emails.js';
import { plural } from '../format.js';
import type { AccountChoice } from '../queries/accounts.js';
import type { SendLogRow } from '../queries/send-log.js';
import { AccountSelect, Badge, type BadgeTone, DataTable, Time } from '../ui.js';

/** The send log's pieces: an email's status badges, the filter form, the list. (One email's page: email-trail.tsx.) */

/** The Email statuses of docs/api/contract.md and how the dashboard shows each. */
const STATUS_TONE: Record<EmailView['status'], BadgeTone> = { sent: 'info', failed: 'bad', sandboxed: 'neutral' };

/** The email's status (the API's), then the first outcomes recorded for any recipient (its *At timestamps). */
export const EmailStatusBadges: FC<{ email: EmailView }> = ({ email }) => (
  <span class="row">
    <Badge tone={STATUS_TONE[email.status]}>{email.status}</Badge>
    {email.deliveredAt && <Badge tone="ok">delivered</Badge>}
    {email.bouncedAt && <Badge tone="bad">bounced</Badge>}
    {email.complainedAt && <Badge tone="bad">complained</Badge>}
  </span>
);

/** The tone of one recorded outcome: its badge's, and its timeline entry's class (.timeline li.ok/.bad/.warn). */
export const OUTCOME_TONE: Record<string, 'ok' | 'bad' | 'warn'> = { delivered: 'ok', bounced: 'bad', deferred: 'warn', complained: 'bad' };

/** The filter fields the form sends and the pager keeps. */
export const FILTER_FIELDS = ['account', 'status', 'from', 'to', 'recipient'] as const;
export type FilterValues = Record<(typeof FILTER_FIELDS)[number], string>;

export const FilterForm: FC<{ values: FilterValues; accounts: AccountChoice[] }> = ({ values, accounts }) => (
  <form method="get" action="/dashboard/emails" class="panel filters" role="search" aria-label="Filter the send log">
    <div class="form-grid">
      <div class="field">
        <label for="filter-account">Account</label>
        <AccountSelect id="filter-account" choices={accounts} selected={values.account} blank="All accounts" />
      </div>
      <div class="field">
        <label for="filter-status">Status</label>
        <select id="filter-status" name="status">
          <option value="">Any status</option>
          {EMAIL_STATUSES.map((s) => (
            <option value={s} selected={s === values.status}>
              {s}
            </option>
          ))}
        </select>
      </div>
      <div class="field">
        <label for="filter-from">From (UTC day)</label>
        <input id="filter-from" name="from" type="date" value={values.from} />
      </div>
      <div class="field">
        <label for="filter-to">To (UTC day, included)</label>
        <input id="filter-to" name="to" type="date" value={values.to} />
      </div>
      <div class="field">
        <label for="filter-recipient">Recipient</label>
        <input
          id="filter-recipient"
          name="recipient"
          type="email"
          value={values.recipient}
          placeholder="alice@example.com"
          aria-describedby="filter-recipient-hint"
        />
        <span class="hint" id="filter-recipient-hint">
          The exact address, any case.
        </span>
      </div>
      <div class="actions">
        <button type="submit">Filter</button>
        <a class="button secondary" href="/dashboard/emails">
          Clear
        </a>
      </div>
    </div>
  </form>
);

const Recipients: FC<{ to: string[] }> = ({ to }) => {
  const shown = to.slice(0, 2);
  return (
    <>
      {shown.join(', ')}
      {to.length > shown.length && <span class="muted"> and {String(to.length - shown.length)} more</span>}
      <span class="muted"> ({plural(to.length, 'recipient')})</span>
    </>
  );
};

export const SendLogTable: FC<{ rows: SendLogRow[]; filtered: boolean }> = ({ rows, filtered }) => (
  <DataTable
    region="Send log"
    id="send-log"
    caption="Emails, newest first"
    columns={['Created', 'Account', 'From', 'To', 'Subject', 'Status']}
    items={rows}
    empty={<p class="panel">{filtered ? 'No email matches these filters.' : 'Nothing has been sent yet.'}</p>}
    row={({ email, accountId, accountName }) => (
      <tr data-email-id={email.id}>
        <td class="nowrap">
          <Time at={email.createdAt} />
        </td>
        <td class="cell-wrap">
          <a href={`/dashboard/emails?account=${accountId}`}>{accountName}</a>
        </td>
        <td class="cell-wrap">{email.from}</td>
        <td class="cell-wrap">
          <Recipients to={email.to} />
        </td>
        <td class="cell-wrap">
          <a href={`/dashboard/emails/${email.id}`}>{email.subject || '(no subject)'}</a>
        </td>
        <td>
          <EmailStatusBadges email={email} />
        </td>
      </tr>
    )}
  />
);

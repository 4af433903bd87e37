import { Hono } from 'hono';
import type { FC } from 'hono/jsx';
import { EMAIL_STATUSES } from '../../db/schema/index.js';
import type { Deps } from '../../server/deps.js';
import { EmailStatusBadges } from '../components/email-status.js';
import { EmailTrailView } from '../components/email-trail.js';
import { plural } from '../components/format.js';
import { TableRegion } from '../components/table-region.js';
import type { DashEnv } from '../env.js';
import { emailTrail } from '../queries/email-trail.js';
import { type AccountChoice, accountChoices } from '../queries/accounts.js';
import { readPageLink } from '../queries/id-pages.js';
import { type SendLogRow, listSendLog, parseSendLogQuery } from '../queries/send-log.js';
import { render } from '../render.js';
import { AccountSelect, Pager, Time, pageHrefs, withQuery } from '../ui.js';

/** The filter fields the form sends and the pager keeps. */
const FILTER_FIELDS = ['account', 'status', 'from', 'to', 'recipient'] as const;

/** GET /dashboard/emails: the send log of every account, filtered and paged; GET /dashboard/emails/:id: one email's trail. */
export function emailPages(deps: Deps) {
  return new Hono<DashEnv>()
    .get('/emails', (c) => {
      const query = c.req.query();
      const { filter, errors } = parseSendLogQuery(query);
      const link = readPageLink((n) => c.req.query(n));
      const values = Object.fromEntries(FILTER_FIELDS.map((f) => [f, query[f] ?? ''])) as Record<(typeof FILTER_FIELDS)[number], string>;
      const page = errors.length === 0 ? listSendLog(deps.db, filter, link) : null;
      return render(
        deps,
        c,
        { title: 'Send log', current: '/dashboard/emails', status: errors.length > 0 ? 400 : 200 },
        <>
          <FilterForm values={values} accounts={accountChoices(deps.db, filter.account)} />
          {errors.length > 0 && (
            <div class="flash error" role="alert">
              <div>The send log cannot be filtered like that:</div>
              <ul>
                {errors.map((e) => (
                  <li>{e}</li>
                ))}
              </ul>
            </div>
          )}
          {page && <SendLogTable rows={page.items} filtered={FILTER_FIELDS.some((f) => values[f].trim() !== '')} />}
          {page && <Pager label="Send log pages" {...pageHrefs(page, (params) => withQuery('/dashboard/emails', { ...values, ...params }))} />}
        </>,
      );
    })
    .get('/emails/:id', (c) => {
      const trail = emailTrail(deps, c.req.param('id'));
      const subject = trail.email.subject.length > 60 ? `${trail.email.subject.slice(0, 60)}…` : trail.email.subject;
      return render(deps, c, { title: `Email: ${subject}`, current: '/dashboard/emails' }, <EmailTrailView trail={trail} mode={deps.config.deliveryMode} />);
    });
}

const FilterForm: FC<{ values: Record<(typeof FILTER_FIELDS)[number], string>; accounts: AccountChoice[] }> = ({ values, accounts }) => (
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
        <input id="filter-recipient" name="recipient" type="email" value={values.recipient} placeholder="alice@example.com" aria-describedby="filter-recipient-hint" />
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

const SendLogTable: FC<{ rows: SendLogRow[]; filtered: boolean }> = ({ rows, filtered }) =>
  rows.length === 0 ? (
    <p class="panel">{filtered ? 'No email matches these filters.' : 'Nothing has been sent yet.'}</p>
  ) : (
    <TableRegion label="Send log">
      <table id="send-log">
        <caption class="visually-hidden">Emails, newest first</caption>
        <thead>
          <tr>
            <th scope="col">Created</th>
            <th scope="col">Account</th>
            <th scope="col">From</th>
            <th scope="col">To</th>
            <th scope="col">Subject</th>
            <th scope="col">Status</th>
          </tr>
        </thead>
        <tbody>
          {rows.map(({ email, accountId, accountName }) => (
            <tr data-email-id={email.id}>
              <td class="nowrap">
                <Time ms={Date.parse(email.createdAt)} />
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
          ))}
        </tbody>
      </table>
    </TableRegion>
  );

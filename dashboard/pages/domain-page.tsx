import type { FC } from 'hono/jsx';
import type { AccountRow, CheckValue, RecordKind } from '../../db/schema/index.js';
import type { DnsRecordView, DomainView } from '../../server/core/domains.js';
import { Badge, type BadgeTone, Copyable, PostButton, Time } from '../ui.js';
import { DomainStatusBadges, RECORD_TONE } from './domains-list.js';

/** A domain's page: the records to publish, what the last verification found, and the actions on it. */

/** Which record each check of verifyDomain reads. */
export const CHECKED_RECORD: Record<RecordKind, DnsRecordView['record']> = { ownership: 'Ownership', spf: 'SPF', receiving: 'Receiving', signing: 'Signing' };

/** What each check value of api.md's verify response means, as the operator reads it. */
export const CHECK_RESULT: Record<CheckValue, { tone: BadgeTone; found: boolean; says: string }> = {
  proven: { tone: 'ok', found: true, says: 'Found, with this domain’s token: ownership is proven.' },
  published: { tone: 'ok', found: true, says: 'Found, with the expected value.' },
  missing: { tone: 'bad', found: false, says: 'Not found: DNS answered without this value.' },
  unknown: { tone: 'warn', found: false, says: 'No answer from DNS: the record keeps the status it had.' },
};

/** The flash after a verification: how many records were found, and where the domain stands. */
export function verifySummary(view: DomainView, checks: Record<RecordKind, CheckValue>): string {
  const values = Object.values(checks);
  const found = values.filter((v) => CHECK_RESULT[v].found).length;
  const unanswered = values.filter((v) => v === 'unknown').length;
  return `Checked DNS for ${view.name}: ${found} of ${values.length} records found${unanswered > 0 ? `, ${unanswered} without an answer` : ''}. The domain is ${view.status}.`;
}

const Records: FC<{ view: DomainView }> = ({ view }) => (
  <section aria-labelledby="records">
    <h2 id="records">Records to publish</h2>
    <p class="muted">Add these at the domain’s DNS host, then verify. Each value is copied exactly as shown.</p>
    <div class="table-wrap">
      <table class="records">
        <caption class="visually-hidden">DNS records for {view.name}</caption>
        <thead>
          <tr>
            <th scope="col">Record</th>
            <th scope="col">Type</th>
            <th scope="col">Name</th>
            <th scope="col">Value</th>
            <th scope="col">Status</th>
          </tr>
        </thead>
        <tbody>
          {view.records.map((r, i) => (
            <tr>
              <th scope="row">{r.record}</th>
              <td>{r.type}</td>
              <td class="name">
                <Copyable id={`record-${i}-name`} value={r.name} label={`${r.record} record name`} />
              </td>
              <td class="value">
                <Copyable id={`record-${i}-value`} value={r.value} label={`${r.record} record value`} />
              </td>
              <td>
                <Badge tone={RECORD_TONE[r.status]}>{r.status}</Badge>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  </section>
);

const Checks: FC<{ view: DomainView; checks: Record<RecordKind, CheckValue> | null }> = ({ view, checks }) => (
  <section aria-labelledby="checks" id="last-check">
    <h2 id="checks">Last verification</h2>
    {checks === null ? (
      <p class="muted">Not verified yet: publish the records above, then press “Verify now”.</p>
    ) : (
      <>
        <p>
          Checked <Time ms={Date.parse(view.lastCheckedAt)} />.
        </p>
        <div class="table-wrap">
          <table class="records">
            <caption class="visually-hidden">What the last verification found for each record</caption>
            <thead>
              <tr>
                <th scope="col">Record</th>
                <th scope="col">Expected</th>
                <th scope="col">Found</th>
              </tr>
            </thead>
            <tbody>
              {(Object.keys(CHECKED_RECORD) as RecordKind[]).map((kind) => {
                const record = view.records.find((r) => r.record === CHECKED_RECORD[kind])!;
                const result = CHECK_RESULT[checks[kind]];
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
              })}
            </tbody>
          </table>
        </div>
      </>
    )}
  </section>
);

export const DomainPageBody: FC<{ view: DomainView; account: AccountRow; checks: Record<RecordKind, CheckValue> | null; csrf: string }> = ({ view, account, checks, csrf }) => (
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
    <Records view={view} />
    <Checks view={view} checks={checks} />
    <p class="muted small">
      Connected <Time ms={Date.parse(view.createdAt)} />.
    </p>
  </>
);

import { versionsPath } from '../actions/templates.js';
import type { FC } from 'hono/jsx';
import type { DeliveryMode } from '../../server/shared/config.js';
import type { EventView } from '../../server/core/emails.js';
import type { AttachmentRecord } from '../../db/schema/index.js';
import type { CausedDelivery, EmailTrail, QueuedRecipient, WriteItem, WriteState } from '../queries/email-trail.js';
import { formatBytes, formatCount, plural } from '../format.js';
import { Badge, type BadgeTone, Copyable, DataTable, TableRegion, Time } from '../ui.js';
import { EmailStatusBadges, OUTCOME_TONE } from './emails.js';
import { DatabaseStateBadge } from './database.js';
import { DeliveryStateBadge, deliveryPath } from './webhooks.js';

/** One email's page: the API's facts, each recipient's timeline with the webhook posts it caused, the customer database. */
export const EmailTrailView: FC<{ trail: EmailTrail; mode: DeliveryMode }> = ({ trail, mode }) => {
  const { email } = trail;
  const key = (address: string) => address.toLowerCase();
  const recipients = email.to.map((address) => ({
    address,
    events: email.events.filter((e) => key(e.recipient) === key(address)),
    queued: trail.queued.find((q) => key(q.recipient) === key(address)) ?? null,
    deliveries: trail.deliveries.filter((d) => key(d.recipient) === key(address)),
    captured: trail.captured.has(key(address)),
  }));
  return (
    <>
      <p>
        <a href="/dashboard/emails">Back to the send log</a>
      </p>
      <section class="panel" aria-labelledby="facts-heading">
        <h2 id="facts-heading">The email</h2>
        <dl class="facts">
          <dt>Id</dt>
          <dd>
            <Copyable id="email-id" value={email.id} label="the email id" />
          </dd>
          <dt>Account</dt>
          <dd>
            <a href={`/dashboard/emails?account=${trail.account.id}`}>{trail.account.name}</a>
          </dd>
          <dt>From</dt>
          <dd>{email.from}</dd>
          <dt>To</dt>
          <dd>{email.to.join(', ')}</dd>
          <dt>Subject</dt>
          <dd>{email.subject}</dd>
          <dt>Sent through</dt>
          <dd>{email.source === 'smtp' ? 'SMTP submission' : 'the API'}</dd>
          <dt>Template</dt>
          <dd>
            {email.template === null ? (
              'none'
            ) : email.templateVersion === null ? (
              email.template
            ) : (
              // An own template: the version sent, linked to the template (its versions page shows that one).
              <a href={versionsPath(trail.account.id, email.template)}>
                {email.template}, version {email.templateVersion}
              </a>
            )}
          </dd>
          <dt>Status</dt>
          <dd>
            <EmailStatusBadges email={email} />
          </dd>
          {email.error !== null && (
            <>
              <dt>Error</dt>
              <dd>{email.error}</dd>
            </>
          )}
          <dt>Created</dt>
          <dd>
            <Time at={email.createdAt} />
          </dd>
          <dt>First delivered</dt>
          <dd>
            <Time at={email.deliveredAt} />
          </dd>
          <dt>First bounced</dt>
          <dd>
            <Time at={email.bouncedAt} />
          </dd>
          <dt>First complaint</dt>
          <dd>
            <Time at={email.complainedAt} />
          </dd>
          <dt>Sandbox</dt>
          <dd>{email.sandbox ? 'yes' : 'no'}</dd>
          {email.tags && (
            <>
              <dt>Tags</dt>
              <dd>
                {Object.entries(email.tags).map(([k, v]) => (
                  <span class="badge">
                    {k}: {v}
                  </span>
                ))}
              </dd>
            </>
          )}
        </dl>
      </section>

      <AttachmentsSection attachments={trail.attachments} />

      <h2>Recipients</h2>
      <p class="muted">
        Each recipient's attempts and outcomes in the order they happened, and the webhook posts those outcomes queued (each links to its attempts). Replays are
        listed on the Webhooks page.
      </p>
      {recipients.map((r, i) => (
        <section class="panel recipient" aria-labelledby={`recipient-${i}`} data-recipient={r.address}>
          <h3 id={`recipient-${i}`}>{r.address}</h3>
          <Timeline events={r.events} queued={r.queued} status={email.status} />
          {r.captured && mode === 'capture' && (
            <p>
              <a href={`/dashboard/captured/${email.id}?recipient=${encodeURIComponent(key(r.address))}`}>Open the captured message of {r.address}</a>
            </p>
          )}
          <WebhookPosts deliveries={r.deliveries} recipient={r.address} />
        </section>
      ))}

      <CustomerDbSection trail={trail} />
    </>
  );
};

/**
 * What the log keeps of each attachment: the bytes went with the message and are not kept, so the SHA-256 is how an
 * application matches one to its own file. Filenames are isolated (<bdi>) from the text around them.
 */
const AttachmentsSection: FC<{ attachments: AttachmentRecord[] }> = ({ attachments }) =>
  attachments.length === 0 ? null : (
    <section class="panel" aria-labelledby="attachments-heading">
      <h2 id="attachments-heading">Attachments</h2>
      <p class="muted">Kept in the log: each file's name, type, size and SHA-256. Its bytes went with the message and were kept only until it was delivered.</p>
      <DataTable
        region="Attachments of this email"
        id="email-attachments"
        caption="Attachments of this email"
        columns={['File', 'Type', { label: 'Size', class: 'num' }, 'SHA-256']}
        items={attachments}
        row={(a: AttachmentRecord, i: number) => (
          <tr data-sha256={a.sha256}>
            <td class="cell-wrap">
              <bdi>{a.filename}</bdi>
              {a.contentId !== null && (
                <>
                  {' '}
                  <Badge tone="info">inline</Badge> <code class="muted">cid:{a.contentId}</code>
                </>
              )}
            </td>
            <td class="cell-wrap">{a.contentType}</td>
            <td class="num">
              <span title={`${formatCount(a.size)} bytes`}>{formatBytes(a.size)}</span>
            </td>
            <td>
              <span class="row">
                <code title={a.sha256} aria-hidden="true">
                  {a.sha256.slice(0, 12)}…
                </code>
                <span id={`attachment-sha256-${i}`} class="visually-hidden">
                  {a.sha256}
                </span>
                <button type="button" class="secondary" data-copy={`attachment-sha256-${i}`} aria-label={`Copy the SHA-256 of ${a.filename}`}>
                  Copy
                </button>
              </span>
            </td>
          </tr>
        )}
      />
    </section>
  );

const Timeline: FC<{ events: EventView[]; queued: QueuedRecipient | null; status: string }> = ({ events, queued, status }) => (
  <>
    {events.length === 0 && !queued && <p class="muted">{status === 'sent' ? 'No attempt recorded.' : `Nothing was attempted: the send is ${status}.`}</p>}
    {events.length > 0 && (
      <ol class="timeline" aria-label="Attempts and events">
        {events.map((e) => (
          <li class={OUTCOME_TONE[e.status]}>
            <div class="row">
              <span class="when">
                <Time at={e.occurredAt} />
              </span>
              <Badge tone={OUTCOME_TONE[e.status] ?? 'neutral'}>{e.status}</Badge>
              {e.dsn && (
                <span>
                  DSN <code class="dsn">{e.dsn}</code>
                </span>
              )}
            </div>
            <code class="reply">{e.detail}</code>
          </li>
        ))}
      </ol>
    )}
    {queued && (
      <p class="queued">
        {queued.lockedUntil !== null ? (
          <>Being attempted now (attempt {String(queued.attempts + 1)}).</>
        ) : (
          <>
            Still queued: attempt {String(queued.attempts + 1)} is due <Time at={queued.nextAttemptAt} />.
          </>
        )}
      </p>
    )}
  </>
);

const WebhookPosts: FC<{ deliveries: CausedDelivery[]; recipient: string }> = ({ deliveries, recipient }) => (
  <>
    {deliveries.length === 0 ? (
      <p class="muted">No webhook post for this recipient's outcomes.</p>
    ) : (
      <TableRegion label={`Webhook posts for ${recipient}`}>
        <table class="webhook-posts">
          <caption>Webhook posts</caption>
          <thead>
            <tr>
              <th scope="col">Event</th>
              <th scope="col">Endpoint</th>
              <th scope="col" class="num">
                Attempts
              </th>
              <th scope="col">Last answer</th>
              <th scope="col">State</th>
            </tr>
          </thead>
          <tbody>
            {deliveries.map((d) => (
              <tr data-delivery-id={d.delivery.id}>
                <td>
                  <a href={deliveryPath(d.endpointId, d.delivery.id)}>{d.delivery.eventType}</a>
                </td>
                <td class="cell-wrap">{d.url}</td>
                <td class="num">{String(d.delivery.attempts)}</td>
                <td class="cell-wrap">
                  {d.delivery.lastError ?? (d.delivery.lastStatus === null ? <span class="muted">none yet</span> : `HTTP ${d.delivery.lastStatus}`)}
                </td>
                <td>
                  <DeliveryStateBadge state={d.state} />{' '}
                  {d.delivery.deliveredAt ? (
                    <Time at={d.delivery.deliveredAt} />
                  ) : d.delivery.nextAttemptAt ? (
                    <span class="muted">
                      next <Time at={d.delivery.nextAttemptAt} />
                    </span>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableRegion>
    )}
  </>
);

const WRITE_BADGE: Record<WriteState['state'], { tone: BadgeTone; text: string }> = {
  pending: { tone: 'warn', text: 'pending' },
  failed: { tone: 'bad', text: 'failed' },
  written: { tone: 'ok', text: 'written' },
  'written-or-dropped': { tone: 'neutral', text: 'not waiting' },
  'not-queued': { tone: 'neutral', text: 'not queued' },
};

function writeDetail(w: WriteState) {
  switch (w.state) {
    case 'pending':
      return (
        <>
          {w.attempts > 0 ? `Refused ${plural(w.attempts, 'time')} so far; next` : 'Waiting for the database; next'} try <Time at={w.nextAttemptAt} />
          {w.lastError && <>; last error: {w.lastError}</>}
        </>
      );
    case 'failed':
      return (
        <>
          Set aside after {plural(w.attempts, 'try', 'tries')}; last error: {w.lastError ?? 'none recorded'}
        </>
      );
    case 'written':
      return <>The database has it.</>;
    case 'written-or-dropped':
      return <>Written, or dropped unwritten after seven days.</>;
    case 'not-queued':
      return <>Not queued: {w.reason}.</>;
  }
}

const CustomerDbSection: FC<{ trail: EmailTrail }> = ({ trail }) => {
  const db = trail.customerDb;
  return (
    <section class="panel" aria-labelledby="customer-db-heading">
      <h2 id="customer-db-heading">Customer database</h2>
      {db.none !== null ? (
        <p class="muted">{db.none}</p>
      ) : (
        <>
          {db.database && (
            <p>
              <a href="/dashboard/database">
                {db.database.database} on {db.database.host}
              </a>{' '}
              <DatabaseStateBadge state={db.database.state} />
              {db.database.lastError && <span class="muted"> Last error: {db.database.lastError}</span>}
            </p>
          )}
          <DataTable
            region="Customer-database writes of this email"
            id="customer-db-writes"
            caption="Writes of this email to the customer database"
            columns={['Write', 'Recipient', 'Time', 'State', 'Detail']}
            items={db.items}
            row={(item: WriteItem) => (
              <tr data-write-state={item.write.state}>
                <td>{item.label}</td>
                <td class="cell-wrap">{item.recipient ?? 'all recipients'}</td>
                <td class="nowrap">
                  <Time at={item.at} />
                </td>
                <td>
                  <Badge tone={WRITE_BADGE[item.write.state].tone}>{WRITE_BADGE[item.write.state].text}</Badge>
                </td>
                <td class="cell-wrap">{writeDetail(item.write)}</td>
              </tr>
            )}
          />
        </>
      )}
    </section>
  );
};

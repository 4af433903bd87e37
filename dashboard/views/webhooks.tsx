import type { FC } from 'hono/jsx';
import { WEBHOOK_EVENT_TYPES, type WebhookDeliveryRow } from '../../db/schema/index.js';
import type { WebhookAttemptView } from '../../server/core/webhooks.js';
import { webhookPostBody } from '../../server/webhooks/dispatcher.js';
import { WEBHOOK_MAX_ATTEMPTS } from '../../server/core/webhook-schedule.js';
import type { AccountChoice } from '../queries/accounts.js';
import {
  DELIVERY_STATES,
  type DeliveryState,
  type DeliverySummary,
  ENDPOINT_HEALTH,
  type EndpointHealth,
  type EndpointSummary,
  healthOf,
  healthReason,
} from '../queries/webhooks.js';
import { AccountField, AccountFormPanel, AccountSelect, Badge, Copyable, Dash, DataTable, PostButton, Time } from '../ui.js';

/** The webhook pages' pieces: the endpoint list, an endpoint's facts and deliveries, a delivery's detail. */

export const endpointPath = (id: string) => `/dashboard/webhooks/${id}`;
export const deliveryPath = (endpointId: string, id: string) => `/dashboard/webhooks/${endpointId}/deliveries/${id}`;

export const HealthBadge: FC<{ endpoint: EndpointSummary }> = ({ endpoint }) => {
  const health = ENDPOINT_HEALTH[healthOf(endpoint.view)];
  return <Badge tone={health.tone}>{health.label}</Badge>;
};

/** Where a delivery stands (stateOf), as a badge. */
export const DeliveryStateBadge: FC<{ state: DeliveryState }> = ({ state }) => <Badge tone={DELIVERY_STATES[state].tone}>{DELIVERY_STATES[state].label}</Badge>;

export const EndpointFilters: FC<{ accounts: AccountChoice[]; accountId: string | undefined; health: EndpointHealth | undefined }> = ({
  accounts,
  accountId,
  health,
}) => (
  <form method="get" action="/dashboard/webhooks" class="panel form-grid" aria-label="Filter endpoints">
    <div class="field">
      <label for="filter-account">Account</label>
      <AccountSelect id="filter-account" choices={accounts} selected={accountId} blank="All accounts" autosubmit />
    </div>
    <div class="field">
      <label for="filter-status">Status</label>
      <select id="filter-status" name="status" data-autosubmit>
        <option value="">Any status</option>
        {Object.entries(ENDPOINT_HEALTH).map(([value, h]) => (
          <option value={value} selected={value === health}>
            {h.label}
          </option>
        ))}
      </select>
    </div>
    <div class="field">
      <button type="submit">Filter</button>
    </div>
  </form>
);

/**
 * POST /webhooks for an account: the URL and the event types as the API takes them (the form's `event.<type>`
 * checkboxes). The signing secret is shown once, on the page the form leads to, as a new key's is.
 */
export const CreateEndpointForm: FC<{ csrf: string; choices: AccountChoice[]; selected: string | undefined }> = ({ csrf, choices, selected }) => (
  <AccountFormPanel
    id="create"
    headingId="create-endpoint-heading"
    heading="Add an endpoint"
    thing="an endpoint"
    action="/dashboard/webhooks"
    csrf={csrf}
    choices={choices}
  >
    <div class="form-grid">
      <AccountField id="create-account" choices={choices} selected={selected} />
      <div class="field">
        <label for="create-url">URL</label>
        <input
          id="create-url"
          name="url"
          type="url"
          required
          maxlength={2000}
          autocomplete="off"
          placeholder="https://hooks.example.com/mailstead"
          aria-describedby="create-url-hint"
        />
        <span class="hint" id="create-url-hint">
          https only, no user name or password, a host that resolves to public addresses.
        </span>
      </div>
    </div>
    <fieldset class="scopes">
      <legend>Events</legend>
      {WEBHOOK_EVENT_TYPES.map((type) => (
        <span class="scope">
          <input type="checkbox" id={`event-${type.replace('.', '-')}`} name={`event.${type}`} value="on" checked={type !== 'ping'} />
          <label for={`event-${type.replace('.', '-')}`}>{type}</label>
        </span>
      ))}
    </fieldset>
    <p class="hint muted">The signing secret is shown once, right after the endpoint is made: copy it into your receiver then.</p>
    <button type="submit">Add endpoint</button>
  </AccountFormPanel>
);

export const EndpointTable: FC<{ endpoints: EndpointSummary[] }> = ({ endpoints }) => (
  <DataTable
    caption="Webhook endpoints, newest first"
    columns={['Endpoint', 'Account', 'Events', 'Status', 'Last delivered', 'Failing with']}
    items={endpoints}
    empty={<p class="panel muted">No webhook endpoint matches.</p>}
    row={(e) => (
      <tr>
        <td>
          <a href={endpointPath(e.view.id)}>{e.view.url}</a>
        </td>
        <td>{e.accountName}</td>
        <td>{e.view.events.join(', ')}</td>
        <td>
          <HealthBadge endpoint={e} />
          {e.view.failureCount > 0 && <div class="muted">{`${e.view.failureCount} failed in a row`}</div>}
          {e.view.disabledAt && (
            <div class="muted">
              off since <Time at={e.view.disabledAt} />
            </div>
          )}
        </td>
        <td>
          <Time at={e.lastDeliveredAt} />
        </td>
        <td>{e.lastError ?? <Dash />}</td>
      </tr>
    )}
  />
);

export const EndpointFacts: FC<{ endpoint: EndpointSummary & { pending: number }; csrf: string }> = ({ endpoint, csrf }) => {
  const v = endpoint.view;
  const reason = healthReason(v, endpoint.lastError);
  return (
    <section aria-labelledby="endpoint-facts">
      <h2 id="endpoint-facts">Endpoint</h2>
      <div class="panel">
        <dl class="facts">
          <dt>URL</dt>
          <dd>
            <code>{v.url}</code>
          </dd>
          <dt>Account</dt>
          <dd>
            <bdi>{endpoint.accountName}</bdi> <span class="muted">({endpoint.accountId})</span>
          </dd>
          <dt>Events</dt>
          <dd>{v.events.join(', ')}</dd>
          <dt>Status</dt>
          <dd>
            <HealthBadge endpoint={endpoint} />
            {reason && <p class="muted">{reason}</p>}
          </dd>
          <dt>Consecutive failures</dt>
          <dd>{v.failureCount}</dd>
          <dt>Switched off</dt>
          <dd>
            <Time at={v.disabledAt} />
          </dd>
          <dt>Last delivered</dt>
          <dd>
            <Time at={endpoint.lastDeliveredAt} />
          </dd>
          <dt>Deliveries still to go</dt>
          <dd>{endpoint.pending}</dd>
          <dt>Created</dt>
          <dd>
            <Time at={v.createdAt} />
          </dd>
          <dt>Id</dt>
          <dd>
            <Copyable id="endpoint-id" value={v.id} label="endpoint id" />
          </dd>
        </dl>
        <p class="muted">The signing secret is never shown again: it was given once, when the endpoint was created.</p>
        <div class="row">
          <PostButton action={`${endpointPath(v.id)}/test`} csrf={csrf} label="Send test ping" variant="primary" />
          <PostButton
            action={`${endpointPath(v.id)}/delete`}
            csrf={csrf}
            label="Delete endpoint"
            variant="danger"
            confirm={`Delete the endpoint ${v.url}? Nothing more is posted to it, and every delivery queued or kept for it is deleted.`}
          />
          {!v.active && (
            <PostButton
              action={`${endpointPath(v.id)}/enable`}
              csrf={csrf}
              label="Re-enable"
              confirm="Switch this endpoint back on without a test ping? Its waiting deliveries go out at once."
            />
          )}
        </div>
      </div>
    </section>
  );
};

/** A delivery's latest answer in words: the receiver's status, and the error as the API words it ("HTTP 503", "timeout"). */
function answerOf(v: DeliverySummary['view']): string {
  const status = v.lastStatus === null ? 'no HTTP answer' : `answered ${v.lastStatus}`;
  return v.lastError ? `${status} (${v.lastError})` : status;
}

export const DeliveryTable: FC<{ endpointId: string; deliveries: DeliverySummary[] }> = ({ endpointId, deliveries }) => (
  <DataTable
    caption="Deliveries to this endpoint, newest first"
    columns={[
      'Queued',
      'Event',
      'Email',
      'Recipient',
      { label: 'Attempts', class: 'num' },
      { label: 'Last status', class: 'num' },
      'Last error',
      'Next attempt',
      'State',
    ]}
    items={deliveries}
    empty={<p class="panel muted">No deliveries yet.</p>}
    row={(d) => (
      <tr>
        <td>
          <a href={deliveryPath(endpointId, d.view.id)}>
            <Time at={d.view.createdAt} />
            <span class="visually-hidden">{` delivery ${d.view.id}`}</span>
          </a>
        </td>
        <td>{d.view.eventType}</td>
        <td>{d.emailId ? <a href={`/dashboard/emails/${d.emailId}`}>{d.emailId}</a> : <Dash />}</td>
        <td>{d.recipient ?? <Dash />}</td>
        <td class="num">{d.view.attempts}</td>
        <td class="num">{d.view.lastStatus ?? <Dash />}</td>
        <td>{d.view.lastError ?? <Dash />}</td>
        <td>
          <Time at={d.view.nextAttemptAt} />
        </td>
        <td>
          <DeliveryStateBadge state={d.state} />
        </td>
      </tr>
    )}
  />
);

export const DeliveryFacts: FC<{ endpoint: EndpointSummary; d: DeliverySummary; csrf: string }> = ({ endpoint, d, csrf }) => (
  <section aria-labelledby="delivery-facts">
    <h2 id="delivery-facts">Delivery</h2>
    <div class="panel">
      <dl class="facts">
        <dt>Endpoint</dt>
        <dd>
          <a href={endpointPath(endpoint.view.id)}>{endpoint.view.url}</a>{' '}
          <span class="muted">
            (<bdi>{endpoint.accountName}</bdi>)
          </span>
        </dd>
        <dt>Event</dt>
        <dd>{d.view.eventType}</dd>
        <dt>Email</dt>
        <dd>{d.emailId ? <a href={`/dashboard/emails/${d.emailId}`}>{d.emailId}</a> : <Dash />}</dd>
        <dt>Recipient</dt>
        <dd>{d.recipient ?? <Dash />}</dd>
        <dt>State</dt>
        <dd>
          <DeliveryStateBadge state={d.state} />
        </dd>
        <dt>Id</dt>
        <dd>
          <Copyable id="delivery-id" value={d.view.id} label="delivery id" />
        </dd>
      </dl>
      {d.emailId && (
        <div class="row">
          <PostButton
            action={`${deliveryPath(endpoint.view.id, d.view.id)}/replay`}
            csrf={csrf}
            label="Replay"
            variant="primary"
            accessibleLabel="Replay this event as a new delivery"
          />
          <span class="muted">Posts this event again, as a new delivery built from the recorded outcome.</span>
        </div>
      )}
    </div>
  </section>
);

/**
 * Every attempt with its time and answer (webhook_attempts), then what comes next. A delivery attempted before the
 * history was kept shows its count and last answer only.
 */
export const AttemptTimeline: FC<{ d: DeliverySummary; attempts: WebhookAttemptView[] }> = ({ d, attempts }) => {
  const v = d.view;
  const final = v.deliveredAt === null && v.nextAttemptAt === null;
  const untracked = v.attempts - attempts.length;
  const of = v.eventType === 'ping' ? '' : ` of ${WEBHOOK_MAX_ATTEMPTS}`;
  return (
    <section aria-labelledby="attempts">
      <h2 id="attempts">Attempts</h2>
      <div class="panel">
        <ol class="timeline">
          <li>
            Queued <Time at={v.createdAt} />
          </li>
          {untracked > 0 && (
            <li class="bad">{`${untracked} earlier ${untracked === 1 ? 'attempt' : 'attempts'}, made before attempt history was kept; the last answer: ${answerOf(v)}`}</li>
          )}
          {attempts.map((a) => (
            <li class={a.delivered ? 'ok' : 'bad'}>
              {`Attempt ${a.attempt}${of}: ${a.delivered ? 'delivered' : 'failed'}, ${a.error ?? (a.status === null ? 'no answer' : `HTTP ${a.status}`)}`} at{' '}
              <Time at={a.attemptedAt} />
            </li>
          ))}
          {v.nextAttemptAt && (
            <li class="warn">
              Next attempt <Time at={v.nextAttemptAt} />
              {d.state === 'waiting' && ' (waits while the endpoint is switched off)'}
            </li>
          )}
          {final && <li class="bad">Final: no attempt is left{v.eventType === 'ping' ? ' (a ping is tried once)' : ''}.</li>}
        </ol>
      </div>
    </section>
  );
};

/** The JSON body exactly as the dispatcher posts (and signs) it, pretty-printed. */
export const Payload: FC<{ row: WebhookDeliveryRow }> = ({ row }) => (
  <section aria-labelledby="payload">
    <h2 id="payload">Payload</h2>
    <div class="panel">
      <p class="muted">{`The JSON body posted to the endpoint (headers X-Service-Delivery ${row.id} and X-Service-Event ${row.eventType}), signed with the endpoint's secret.`}</p>
      <pre tabindex={0} aria-label="Payload JSON">
        {JSON.stringify(JSON.parse(webhookPostBody(row)), null, 2)}
      </pre>
    </div>
  </section>
);

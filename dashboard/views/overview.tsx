import type { Child, FC } from 'hono/jsx';
import type { OutboundQueue } from '../../server/shared/metrics.js';
import { formatAge, plural } from '../format.js';
import { type AccountTrouble, type Capped, type DatabaseTrouble, NEAR_QUOTA_SHARE } from '../queries/attention.js';
import { type EndpointSummary, healthReason } from '../queries/webhooks.js';
import { Badge, Time } from '../ui.js';
import { TierBadge } from './accounts.js';
import { HealthBadge, endpointPath } from './webhooks.js';

/** The overview's panels: the outbound queue, and what needs the operator's eye (each list capped, with a count). */

export const QueuePanel: FC<{ queue: OutboundQueue; now: number }> = ({ queue, now }) => {
  const depth = queue.due + queue.sending + queue.deferred;
  return (
    <section class="panel" aria-labelledby="queue-heading" id="queue">
      <h2 id="queue-heading">Outbound queue</h2>
      <div class="cards">
        <div class="card">
          <div class="label">Recipients queued</div>
          <div class="value" id="queue-depth">
            {String(depth)}
          </div>
        </div>
        <div class="card">
          <div class="label">Recipients due now</div>
          <div class="value">{String(queue.due)}</div>
        </div>
        <div class="card">
          <div class="label">Recipients being sent</div>
          <div class="value">{String(queue.sending)}</div>
        </div>
        <div class="card">
          <div class="label">Recipients waiting for a retry</div>
          <div class="value">{String(queue.deferred)}</div>
        </div>
        <div class="card">
          <div class="label">Oldest queued</div>
          <div class="value" id="queue-oldest">
            {queue.oldestCreatedAt === null ? 'none' : formatAge(now - queue.oldestCreatedAt)}
          </div>
          {queue.oldestCreatedAt !== null && (
            <div class="label">
              sent <Time at={queue.oldestCreatedAt} />
            </div>
          )}
        </div>
      </div>
      {depth === 0 && <p class="all-clear">All clear: the delivery engine has nothing left to attempt.</p>}
    </section>
  );
};

/**
 * One list of what needs the operator's eye: the all-clear sentence when nothing does; else each item (`row`, a
 * badge line and why) and how many more there are.
 */
function AttentionPanel<T>(props: {
  id: string;
  heading: string;
  troubled: Capped<T>;
  allClear: string;
  /** Said instead of the all-clear when there is nothing to watch at all (no endpoint, no database). */
  nothing?: Child;
  row: (item: T) => Child;
  links: Child;
}) {
  const { troubled } = props;
  return (
    <section class="panel" aria-labelledby={`${props.id}-heading`} id={props.id}>
      <h2 id={`${props.id}-heading`}>{props.heading}</h2>
      {troubled.total === 0 && props.nothing !== undefined ? (
        <p class="nothing-yet">{props.nothing}</p>
      ) : troubled.total === 0 ? (
        <p class="all-clear">{props.allClear}</p>
      ) : (
        <>
          <ul class="attention">{troubled.items.map((item) => props.row(item))}</ul>
          {troubled.total > troubled.items.length && <p class="muted">and {String(troubled.total - troubled.items.length)} more.</p>}
        </>
      )}
      {props.links}
    </section>
  );
}

export const WebhooksPanel: FC<{ troubled: Capped<EndpointSummary> & { endpoints: number } }> = ({ troubled }) => (
  <AttentionPanel
    id="webhooks"
    heading="Webhook endpoints failing or switched off"
    troubled={troubled}
    allClear="All clear: every endpoint is on and its last post succeeded."
    nothing={
      troubled.endpoints === 0 ? (
        <>
          No webhook endpoint yet: no account has one, so no event is posted anywhere. An account sets one up with <code>POST /api/v1/webhooks</code>; endpoints
          are listed on the <a href="/dashboard/webhooks">Webhooks page</a>.
        </>
      ) : undefined
    }
    row={(endpoint) => (
      <li>
        <div class="row">
          <HealthBadge endpoint={endpoint} />
          <a href={endpointPath(endpoint.view.id)}>{endpoint.view.url}</a>
        </div>
        <div class="why">
          <bdi>{endpoint.accountName}</bdi>: {healthReason(endpoint.view, endpoint.lastError)}
        </div>
      </li>
    )}
    links={
      <p class="row">
        <a href="/dashboard/webhooks?status=disabled">Switched-off endpoints</a>
        <a href="/dashboard/webhooks?status=failing">Failing endpoints</a>
      </p>
    }
  />
);

export const DatabasesPanel: FC<{ troubled: Capped<DatabaseTrouble> & { databases: number } }> = ({ troubled }) => (
  <AttentionPanel
    id="databases"
    heading="Customer databases unreachable or behind"
    troubled={troubled}
    allClear="All clear: every customer database is reachable and has no writes waiting."
    nothing={troubled.databases === 0 ? 'No customer database yet: no account has connected one.' : undefined}
    row={({ accountName, status }) => (
      <li>
        <div class="row">
          {status.state === 'unreachable' ? <Badge tone="bad">unreachable</Badge> : <Badge tone="warn">writes waiting</Badge>}
          <a href={status.state === 'unreachable' ? '/dashboard/database?state=unreachable' : '/dashboard/database'}>
            <bdi>{accountName}</bdi>: {status.database} on {status.host}
          </a>
        </div>
        <div class="why">
          {plural(status.pending, 'write')} waiting; last reached <Time at={status.lastOkAt} />
          {status.lastError && <>; last error: {status.lastError}</>}
        </div>
      </li>
    )}
    links={
      <p>
        <a href="/dashboard/database">Customer databases</a>
      </p>
    }
  />
);

export const AccountsPanel: FC<{ troubled: Capped<AccountTrouble> }> = ({ troubled }) => (
  <AttentionPanel
    id="accounts"
    heading="Accounts near their quota or not healthy"
    troubled={troubled}
    allClear={`All clear: no account has used ${Math.round(NEAR_QUOTA_SHARE * 100)}% of today's quota, and every tier is healthy.`}
    row={({ view, nearQuota, badTier }) => (
      <li>
        <div class="row">
          {nearQuota && <Badge tone={view.sending.sentToday >= view.sending.effectiveQuota ? 'bad' : 'warn'}>near quota</Badge>}
          {badTier && <TierBadge tier={view.sending.tier} />}
          {view.sending.suspended && <Badge tone="bad">suspended</Badge>}
          <a href={`/dashboard/accounts/${view.id}`}>{view.name}</a>
        </div>
        <div class="why">
          {String(view.sending.sentToday)} of {String(view.sending.effectiveQuota)} recipients today
          {view.sending.effectiveQuota !== view.sending.dailyQuota && <> (throttled from {String(view.sending.dailyQuota)})</>};{' '}
          {String(view.sending.totalBounced)} bounced and {String(view.sending.totalComplained)} complained of {plural(view.sending.totalSent, 'recipient')}{' '}
          sent to
        </div>
      </li>
    )}
    links={
      <p>
        <a href="/dashboard/accounts">All accounts</a>
      </p>
    }
  />
);

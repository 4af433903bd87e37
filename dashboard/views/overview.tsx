import type { FC } from 'hono/jsx';
import type { readOutboundQueue } from '../../server/metrics.js';
import { formatAge, plural } from '../format.js';
import { type AccountTrouble, type Capped, type DatabaseTrouble, NEAR_QUOTA_SHARE } from '../queries/attention.js';
import { type EndpointSummary, healthReason } from '../queries/webhooks.js';
import { Badge, Time } from '../ui.js';
import { TierBadge } from './accounts.js';
import { HealthBadge, endpointPath } from './webhooks.js';

/** The overview's panels: the outbound queue, and what needs the operator's eye (each list capped, with a count). */

export const QueuePanel: FC<{ queue: ReturnType<typeof readOutboundQueue>; now: number }> = ({ queue, now }) => {
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
          <div class="label">Due now</div>
          <div class="value">{String(queue.due)}</div>
        </div>
        <div class="card">
          <div class="label">Being sent</div>
          <div class="value">{String(queue.sending)}</div>
        </div>
        <div class="card">
          <div class="label">Waiting for a retry</div>
          <div class="value">{String(queue.deferred)}</div>
        </div>
        <div class="card">
          <div class="label">Oldest queued</div>
          <div class="value" id="queue-oldest">
            {queue.oldestCreatedAt === null ? 'none' : formatAge(now - queue.oldestCreatedAt)}
          </div>
          {queue.oldestCreatedAt !== null && (
            <div class="label">
              sent <Time ms={queue.oldestCreatedAt} />
            </div>
          )}
        </div>
      </div>
      {depth === 0 && <p class="all-clear">All clear: the delivery engine has nothing left to attempt.</p>}
    </section>
  );
};

const More: FC<{ shown: number; total: number }> = ({ shown, total }) => (total > shown ? <p class="muted">and {String(total - shown)} more.</p> : null);

export const WebhooksPanel: FC<{ troubled: Capped<EndpointSummary> }> = ({ troubled }) => (
  <section class="panel" aria-labelledby="webhooks-heading" id="webhooks">
    <h2 id="webhooks-heading">Webhook endpoints failing or switched off</h2>
    {troubled.total === 0 ? (
      <p class="all-clear">All clear: every endpoint is on and its last post succeeded.</p>
    ) : (
      <>
        <ul class="attention">
          {troubled.items.map((endpoint) => (
            <li>
              <div class="row">
                <HealthBadge endpoint={endpoint} />
                <a href={endpointPath(endpoint.view.id)}>{endpoint.view.url}</a>
              </div>
              <div class="why">
                {endpoint.accountName}: {healthReason(endpoint.view, endpoint.lastError)}
              </div>
            </li>
          ))}
        </ul>
        <More shown={troubled.items.length} total={troubled.total} />
      </>
    )}
    <p class="row">
      <a href="/dashboard/webhooks?status=disabled">Switched-off endpoints</a>
      <a href="/dashboard/webhooks?status=failing">Failing endpoints</a>
    </p>
  </section>
);

export const DatabasesPanel: FC<{ troubled: Capped<DatabaseTrouble> }> = ({ troubled }) => (
  <section class="panel" aria-labelledby="databases-heading" id="databases">
    <h2 id="databases-heading">Customer databases unreachable or behind</h2>
    {troubled.total === 0 ? (
      <p class="all-clear">All clear: every customer database is reachable and has no writes waiting.</p>
    ) : (
      <>
        <ul class="attention">
          {troubled.items.map(({ accountName, status }) => (
            <li>
              <div class="row">
                {status.state === 'unreachable' ? <Badge tone="bad">unreachable</Badge> : <Badge tone="warn">writes waiting</Badge>}
                <a href={status.state === 'unreachable' ? '/dashboard/database?state=unreachable' : '/dashboard/database'}>
                  {accountName}: {status.database} on {status.host}
                </a>
              </div>
              <div class="why">
                {plural(status.pending, 'write')} waiting; last reached <Time ms={status.lastOkAt === null ? null : Date.parse(status.lastOkAt)} />
                {status.lastError && <>; last error: {status.lastError}</>}
              </div>
            </li>
          ))}
        </ul>
        <More shown={troubled.items.length} total={troubled.total} />
      </>
    )}
    <p>
      <a href="/dashboard/database">Customer databases</a>
    </p>
  </section>
);

export const AccountsPanel: FC<{ troubled: Capped<AccountTrouble> }> = ({ troubled }) => (
  <section class="panel" aria-labelledby="accounts-heading" id="accounts">
    <h2 id="accounts-heading">Accounts near their quota or not healthy</h2>
    {troubled.total === 0 ? (
      <p class="all-clear">All clear: no account has used {Math.round(NEAR_QUOTA_SHARE * 100)}% of today's quota, and every tier is healthy.</p>
    ) : (
      <>
        <ul class="attention">
          {troubled.items.map(({ view, nearQuota, badTier }) => (
            <li>
              <div class="row">
                {nearQuota && <Badge tone={view.sending.sentToday >= view.sending.effectiveQuota ? 'bad' : 'warn'}>near quota</Badge>}
                {badTier && <TierBadge tier={view.sending.tier} />}
                {view.sending.suspended && <Badge tone="bad">suspended</Badge>}
                <a href={`/dashboard/accounts/${view.id}`}>{view.name}</a>
              </div>
              <div class="why">
                {String(view.sending.sentToday)} of {String(view.sending.effectiveQuota)} recipients today
                {view.sending.effectiveQuota !== view.sending.dailyQuota && <> (throttled from {String(view.sending.dailyQuota)})</>}; {String(view.sending.totalBounced)} bounced and{' '}
                {String(view.sending.totalComplained)} complained of {String(view.sending.totalSent)} sent
              </div>
            </li>
          ))}
        </ul>
        <More shown={troubled.items.length} total={troubled.total} />
      </>
    )}
    <p>
      <a href="/dashboard/accounts">All accounts</a>
    </p>
  </section>
);

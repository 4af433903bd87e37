import { Hono } from 'hono';
import type { Deps } from '../../server/core/deps.js';
import type { DashEnv } from '../env.js';
import { troubledAccounts, troubledDatabases, troubledWebhooks } from '../queries/attention.js';
import { VOLUME_DAYS, dailyVolume } from '../queries/mail-volume.js';
import { render } from '../render.js';
import { AccountsPanel, DatabasesPanel, QueuePanel, WebhooksPanel } from '../views/overview.js';
import { VolumeChart, VolumeTable } from '../views/volume-chart.js';

/** GET /dashboard: mail flow over the last 30 days, the outbound queue, and what needs the operator's eye. */
export function overviewPages(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'metrics' | 'scans'>) {
  return new Hono<DashEnv>().get('/', async (c) => {
    // The queue's scan is the /metrics gauges' own; both reads run where deps.scans says (off the event loop).
    const { at: now, queue } = await deps.metrics.outboundQueue();
    const days = await dailyVolume(deps.scans, now);
    return render(
      deps,
      c,
      { title: 'Overview', current: '/dashboard' },
      <>
        <section class="panel" aria-labelledby="flow-heading">
          <h2 id="flow-heading">Mail flow, last {VOLUME_DAYS} days</h2>
          <VolumeChart days={days} />
          <VolumeTable days={days} />
        </section>
        <QueuePanel queue={queue} now={now} />
        <WebhooksPanel troubled={await troubledWebhooks(deps.db)} />
        <DatabasesPanel troubled={await troubledDatabases(deps.db)} />
        <AccountsPanel troubled={await troubledAccounts(deps)} />
      </>,
    );
  });
}

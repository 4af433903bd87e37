import { Hono } from 'hono';
import { deliveryAttempts } from '../../server/core/webhooks.js';
import type { Deps } from '../../server/core/deps.js';
import { ApiError } from '../../server/shared/errors.js';
import { reenableEndpoint, replayDelivery, sendTestPing } from '../actions/webhooks.js';
import type { DashEnv } from '../env.js';
import { accountFilter } from '../on-behalf.js';
import { accountChoices } from '../queries/accounts.js';
import { readForwardLink } from '../queries/id-pages.js';
import { isEndpointHealth, listEndpointDeliveries, listEndpoints, requireDelivery, requireEndpointSummary } from '../queries/webhooks.js';
import { formAction, render } from '../render.js';
import { Pager, pageHrefs, withQuery } from '../ui.js';
import {
  AttemptTimeline,
  DeliveryFacts,
  DeliveryTable,
  EndpointFacts,
  EndpointFilters,
  EndpointTable,
  Payload,
  deliveryPath,
  endpointPath,
} from '../views/webhooks.js';

const current = '/dashboard/webhooks' as const;

/**
 * Webhooks: every account's endpoints (filter by account and health), an endpoint's deliveries, a delivery's payload
 * and attempts; test ping, replay and operator re-enable, each the function the API or the CLI calls.
 */
export function webhookPages(deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>) {
  return new Hono<DashEnv>()
    .get('/webhooks', (c) => {
      const accountId = accountFilter(deps.db, c.req.query('account'))?.id;
      const status = c.req.query('status') || undefined;
      if (status !== undefined && !isEndpointHealth(status)) throw new ApiError('invalid_request', 'status: must be enabled, failing or disabled.');
      const page = listEndpoints(
        deps.db,
        { accountId, health: status },
        readForwardLink((n) => c.req.query(n)),
      );
      const pager = pageHrefs(page, (p) => withQuery(current, { account: accountId, status, ...p }), { forwardOnly: true });
      return render(
        deps,
        c,
        { title: 'Webhooks', current },
        <>
          <EndpointFilters accounts={accountChoices(deps.db, accountId)} accountId={accountId} health={status} />
          <EndpointTable endpoints={page.items} />
          <Pager label="Endpoint list pages" {...pager} newerLabel="First page" olderLabel="Next page" />
        </>,
      );
    })
    .get('/webhooks/:id', (c) => {
      const endpoint = requireEndpointSummary(deps.db, c.req.param('id'));
      const page = listEndpointDeliveries(
        deps.db,
        endpoint.view,
        readForwardLink((n) => c.req.query(n)),
        deps.clock.now(),
      );
      const pager = pageHrefs(page, (p) => withQuery(endpointPath(endpoint.view.id), p), { forwardOnly: true });
      return render(
        deps,
        c,
        { title: 'Webhook endpoint', current },
        <>
          <p>
            <a href={current}>All endpoints</a>
          </p>
          <EndpointFacts endpoint={endpoint} csrf={c.var.session.csrfToken} />
          <h2>Deliveries</h2>
          <DeliveryTable endpointId={endpoint.view.id} deliveries={page.items} />
          <Pager label="Delivery list pages" {...pager} newerLabel="First page" olderLabel="Next page" />
        </>,
      );
    })
    .get('/webhooks/:id/deliveries/:deliveryId', (c) => {
      const endpoint = requireEndpointSummary(deps.db, c.req.param('id'));
      const delivery = requireDelivery(deps.db, endpoint.view, c.req.param('deliveryId'), deps.clock.now());
      return render(
        deps,
        c,
        { title: 'Webhook delivery', current },
        <>
          <p>
            <a href={endpointPath(endpoint.view.id)}>Back to the endpoint</a>
          </p>
          <DeliveryFacts endpoint={endpoint} d={delivery} csrf={c.var.session.csrfToken} />
          <AttemptTimeline d={delivery} attempts={deliveryAttempts(deps.db, delivery.view.id)} />
          <Payload row={delivery.row} />
        </>,
      );
    })
    .post('/webhooks/:id/test', (c) => {
      const endpoint = requireEndpointSummary(deps.db, c.req.param('id'));
      return formAction(deps, c, endpointPath(endpoint.view.id), () => sendTestPing(deps, endpoint));
    })
    .post('/webhooks/:id/enable', (c) => {
      const endpoint = requireEndpointSummary(deps.db, c.req.param('id'));
      return formAction(deps, c, endpointPath(endpoint.view.id), () => reenableEndpoint(deps, endpoint));
    })
    .post('/webhooks/:id/deliveries/:deliveryId/replay', (c) => {
      const endpoint = requireEndpointSummary(deps.db, c.req.param('id'));
      const delivery = requireDelivery(deps.db, endpoint.view, c.req.param('deliveryId'), deps.clock.now());
      // A queued replay is a new delivery, listed first on the endpoint's page; a refusal stays on this delivery.
      return formAction(deps, c, deliveryPath(endpoint.view.id, delivery.view.id), async () => {
        const outcome = await replayDelivery(deps, endpoint, delivery.row);
        return outcome.kind === 'ok' ? { ...outcome, to: endpointPath(endpoint.view.id) } : outcome;
      });
    });
}

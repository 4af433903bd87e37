import { Hono } from 'hono';
import { deliveryAttempts } from '../../server/core/webhooks.js';
import type { Deps } from '../../server/core/deps.js';
import { ApiError } from '../../server/shared/errors.js';
import { createEndpoint, deleteEndpoint, reenableEndpoint, replayDelivery, sendTestPing } from '../actions/webhooks.js';
import type { DashEnv } from '../env.js';
import { accountById, accountFilter } from '../on-behalf.js';
import { accountChoices } from '../queries/accounts.js';
import { readForwardLink } from '../queries/id-pages.js';
import { isEndpointHealth, listEndpointDeliveries, listEndpoints, requireDelivery, requireEndpointSummary } from '../queries/webhooks.js';
import { field, formAction, refuse, render } from '../render.js';
import { Pager, pageHrefs, withQuery } from '../ui.js';
import {
  AttemptTimeline,
  DeliveryFacts,
  DeliveryTable,
  EndpointFacts,
  EndpointFilters,
  CreateEndpointForm,
  EndpointTable,
  Payload,
  deliveryPath,
  endpointPath,
} from '../views/webhooks.js';

const current = '/dashboard/webhooks' as const;

/**
 * Webhooks: every account's endpoints (filter by account and health), an endpoint's deliveries, a delivery's payload
 * and attempts; add and delete an endpoint, test ping, replay and operator re-enable, each the function the API or
 * the CLI calls.
 */
export function webhookPages(deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>) {
  return new Hono<DashEnv>()
    .get('/webhooks', async (c) => {
      const accountId = (await accountFilter(deps.db, c.req.query('account')))?.id;
      const status = c.req.query('status') || undefined;
      if (status !== undefined && !isEndpointHealth(status)) throw new ApiError('invalid_request', 'status: must be enabled, failing or disabled.');
      const page = await listEndpoints(
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
          <EndpointFilters accounts={await accountChoices(deps.db, accountId)} accountId={accountId} health={status} />
          <EndpointTable endpoints={page.items} />
          <Pager label="Endpoint list pages" {...pager} newerLabel="First page" olderLabel="Next page" />
          <CreateEndpointForm csrf={c.var.session.csrfToken} choices={await accountChoices(deps.db, accountId)} selected={accountId} />
        </>,
      );
    })
    .post('/webhooks', async (c) => {
      const account = await accountById(deps.db, field(c, 'accountId'));
      // A refusal goes back to the form, for the account it was for.
      const back = `${withQuery(current, { account: account?.id })}#create`;
      return formAction(deps, c, back, () => {
        if (!account) refuse('Choose the account the endpoint belongs to.');
        return createEndpoint(deps, account, c.var.form);
      });
    })
    .get('/webhooks/:id', async (c) => {
      const endpoint = await requireEndpointSummary(deps.db, c.req.param('id'));
      const page = await listEndpointDeliveries(
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
    .get('/webhooks/:id/deliveries/:deliveryId', async (c) => {
      const endpoint = await requireEndpointSummary(deps.db, c.req.param('id'));
      const delivery = await requireDelivery(deps.db, endpoint.view, c.req.param('deliveryId'), deps.clock.now());
      return render(
        deps,
        c,
        { title: 'Webhook delivery', current },
        <>
          <p>
            <a href={endpointPath(endpoint.view.id)}>Back to the endpoint</a>
          </p>
          <DeliveryFacts endpoint={endpoint} d={delivery} csrf={c.var.session.csrfToken} />
          <AttemptTimeline d={delivery} attempts={await deliveryAttempts(deps.db, delivery.view.id)} />
          <Payload row={delivery.row} />
        </>,
      );
    })
    .post('/webhooks/:id/test', async (c) => {
      const endpoint = await requireEndpointSummary(deps.db, c.req.param('id'));
      return formAction(deps, c, endpointPath(endpoint.view.id), () => sendTestPing(deps, endpoint));
    })
    .post('/webhooks/:id/delete', async (c) => {
      const endpoint = await requireEndpointSummary(deps.db, c.req.param('id'));
      return formAction(deps, c, endpointPath(endpoint.view.id), async () => ({
        ...(await deleteEndpoint(deps, endpoint)),
        to: withQuery(current, { account: endpoint.accountId }),
      }));
    })
    .post('/webhooks/:id/enable', async (c) => {
      const endpoint = await requireEndpointSummary(deps.db, c.req.param('id'));
      return formAction(deps, c, endpointPath(endpoint.view.id), async () => await reenableEndpoint(deps, endpoint));
    })
    .post('/webhooks/:id/deliveries/:deliveryId/replay', async (c) => {
      const endpoint = await requireEndpointSummary(deps.db, c.req.param('id'));
      const delivery = await requireDelivery(deps.db, endpoint.view, c.req.param('deliveryId'), deps.clock.now());
      // A queued replay is a new delivery, listed first on the endpoint's page; a refusal stays on this delivery.
      return formAction(deps, c, deliveryPath(endpoint.view.id, delivery.view.id), async () => {
        const outcome = await replayDelivery(deps, endpoint, delivery.row);
        return outcome.kind === 'ok' ? { ...outcome, to: endpointPath(endpoint.view.id) } : outcome;
      });
    });
}

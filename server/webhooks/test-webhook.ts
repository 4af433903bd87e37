import type { RequestContext } from '../core/context.js';
import type { Deps } from '../core/deps.js';
import { takePingSlot } from '../core/webhooks.js';
import { type PingResult, pingEndpoint } from './dispatcher.js';

/**
 * POST /webhooks/{id}/test: the ping slot taken (core/webhooks.ts takePingSlot: 429 ping_cooldown), then the ping is
 * posted and its answer awaited (at most the 10 s receiver timeout). A successful ping switches a disabled endpoint
 * back on.
 */
export async function testWebhook({
  deps,
  ctx,
  id,
}: {
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>;
  ctx: RequestContext;
  id: string;
}): Promise<PingResult> {
  return pingEndpoint(deps, await takePingSlot({ deps, ctx, id }));
}

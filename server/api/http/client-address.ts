import type { Context } from 'hono';
import { type TrustedProxies, forwardedClient } from '../../shared/trusted-proxies.js';
import type { AppEnv } from './env.js';

/**
 * The address an HTTP request came from, for every use of it (the dashboard's sign-in limit and its log lines): the
 * TCP peer, or, when that peer is one of TRUST_PROXY, the client its `X-Forwarded-For` names
 * (server/shared/trusted-proxies.ts forwardedClient). 'unknown' off a node socket (a request made in a test).
 */
export function clientAddress<E extends AppEnv>(c: Context<E>, trusted: TrustedProxies): string {
  const peer = (c.env as AppEnv['Bindings'] | undefined)?.incoming?.socket?.remoteAddress;
  if (peer === undefined) return 'unknown';
  return forwardedClient(peer, c.req.header('x-forwarded-for'), trusted);
}

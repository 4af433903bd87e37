import { isIP } from 'node:net';
import type { Config } from './config.js';
import type { DnsResolver } from './dns/resolver.js';
import { isReservedAddress } from './ip-ranges.js';

/**
 * The egress check: every outbound connection to a host a customer gave (webhook endpoints, customer databases) goes
 * only to public addresses, unless ALLOW_PRIVATE_TARGETS is set.
 */

/** What the check reads: the resolver (DNS_SERVERS) and the one setting. */
export interface EgressDeps {
  resolver: Pick<DnsResolver, 'a' | 'aaaa'>;
  config: Pick<Config, 'allowPrivateTargets'>;
}

export type TargetCheck = { kind: 'ok'; addresses: string[] } | { kind: 'blocked'; address: string } | { kind: 'dns_error'; reason: string };

/**
 * Names that mean loopback whatever DNS says (RFC 6761 section 6.3: `localhost` and every name under it): answered
 * here, never asked of a resolver that might not know the rule.
 */
const LOOPBACK_NAMES = /(^|\.)localhost$/;

/**
 * The same rules for a bare host (an address without brackets, or a lower-cased DNS name): every outbound connection
 * to a customer-given host (webhooks, customer databases) is checked here.
 */
export async function resolveHost(deps: EgressDeps, host: string): Promise<TargetCheck> {
  let addresses: string[];
  if (isIP(host) !== 0) addresses = [host];
  else if (LOOPBACK_NAMES.test(host)) addresses = ['127.0.0.1', '::1'];
  else {
    const [a, aaaa] = await Promise.all([deps.resolver.a(host), deps.resolver.aaaa(host)]);
    // IPv4 first: the order connections are tried in.
    addresses = [...(a.status === 'found' ? a.records : []), ...(aaaa.status === 'found' ? aaaa.records : [])];
    if (addresses.length === 0) {
      const why = [a, aaaa].find((l) => l.status === 'unknown');
      const reason = why?.status === 'unknown' ? why.reason : a.status === 'missing' && a.nxdomain ? 'nxdomain' : 'no_address';
      return { kind: 'dns_error', reason };
    }
  }
  if (!deps.config.allowPrivateTargets) {
    const reserved = addresses.find((ip) => isReservedAddress(ip));
    if (reserved !== undefined) return { kind: 'blocked', address: reserved };
  }
  return { kind: 'ok', addresses: [...new Set(addresses)] };
}

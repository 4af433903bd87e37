import type { Config } from '../server/config.js';
import { isReservedAddress } from '../server/core/ip-ranges.js';
import type { DnsResolver } from '../server/dns/resolver.js';
import type { Classified } from './dsn.js';

/** One host to try: the name (for TLS SNI and logs) and the addresses it resolved to, best first. */
export interface Target {
  host: string;
  addresses: string[];
  port: number;
  /** Implicit TLS (smtps relay). */
  secure: boolean;
  auth: { user: string; pass: string } | null;
}

export type Route = { kind: 'targets'; targets: Target[] } | { kind: 'fail'; outcome: Classified };

const bounce = (dsn: string, detail: string): Route => ({ kind: 'fail', outcome: { status: 'bounced', dsn, detail } });
const defer = (dsn: string, detail: string): Route => ({ kind: 'fail', outcome: { status: 'deferred', dsn, detail } });

/**
 * Where mail for `domain` goes (decisions.md section 3): the relay when SMTP_RELAY_URL is set; else its MX hosts by
 * preference, or the domain's own A/AAAA when it has no MX. A null MX or a name that does not exist bounces; a DNS
 * failure defers; addresses in reserved ranges are refused unless ALLOW_PRIVATE_TARGETS is set.
 */
export async function resolveRoute(domain: string, deps: { config: Config; resolver: DnsResolver }): Promise<Route> {
  const { config, resolver } = deps;
  if (config.smtpRelayUrl) {
    const u = config.smtpRelayUrl;
    const secure = u.protocol === 'smtps:';
    return {
      kind: 'targets',
      targets: [
        {
          host: u.hostname,
          addresses: [u.hostname.replace(/^\[|\]$/g, '')],
          port: u.port ? Number(u.port) : secure ? 465 : 587,
          secure,
          auth: u.username ? { user: decodeURIComponent(u.username), pass: decodeURIComponent(u.password) } : null,
        },
      ],
    };
  }

  const mx = await resolver.mx(domain);
  if (mx.status === 'unknown') return defer('4.4.3', `DNS lookup of the MX of ${domain} failed: ${mx.reason}`);
  let hosts: string[];
  if (mx.status === 'found') {
    const records = [...mx.records].sort((a, b) => a.priority - b.priority);
    const named = records.filter((r) => r.exchange.replace(/\.$/, '') !== '');
    if (named.length === 0) return bounce('5.1.10', `${domain} does not accept mail (null MX)`);
    hosts = named.map((r) => r.exchange.replace(/\.$/, '').toLowerCase());
  } else if (mx.nxdomain) {
    return bounce('5.1.2', `the domain ${domain} does not exist`);
  } else {
    hosts = [domain];
  }

  const targets: Target[] = [];
  let refused = 0;
  let dnsFailed = false;
  for (const host of hosts) {
    const [a, aaaa] = await Promise.all([resolver.a(host), resolver.aaaa(host)]);
    const all = [...(a.status === 'found' ? a.records : []), ...(aaaa.status === 'found' ? aaaa.records : [])];
    // A host is only known to have no address when both lookups answered: one that failed may hold it.
    if (all.length === 0 && (a.status === 'unknown' || aaaa.status === 'unknown')) dnsFailed = true;
    const allowed = config.allowPrivateTargets ? all : all.filter((ip) => !isReservedAddress(ip));
    refused += all.length - allowed.length;
    if (allowed.length > 0) targets.push({ host, addresses: allowed, port: config.smtpDeliveryPort, secure: false, auth: null });
  }
  if (targets.length > 0) return { kind: 'targets', targets };
  if (dnsFailed) return defer('4.4.3', `DNS lookup of the mail hosts of ${domain} failed`);
  if (refused > 0) return bounce('5.4.4', `the mail hosts of ${domain} resolve only to private or reserved addresses`);
  return bounce('5.1.2', `no mail host found for ${domain}`);
}

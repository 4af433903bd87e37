import type { Config } from '../server/shared/config.js';
import { isReservedAddress } from '../server/shared/ip-ranges.js';
import type { DnsResolver } from '../server/shared/dns/resolver.js';
import type { Classified } from '../server/core/dsn.js';
import { isSimulatorDomain } from '../server/core/simulator.js';

/** One host to try: the name (for TLS SNI and logs) and the addresses it resolved to, best first. */
export interface Target {
  host: string;
  addresses: string[];
  port: number;
  /** Implicit TLS (smtps relay). */
  secure: boolean;
  auth: { user: string; pass: string } | null;
  /** SMTP_RELAY_URL: the operator's own infrastructure, never named to tenants. */
  relay: boolean;
}

/**
 * Where a destination's mail goes: SMTP targets, an outcome without any attempt (a routing failure), or a transport
 * that never opens a connection: the capture store (DELIVERY_MODE=capture) or the mailbox simulator (server/core/simulator.ts).
 */
export type Route =
  | { kind: 'targets'; targets: Target[] /** Seconds the route may be reused (address TTLs). */; ttl?: number }
  | { kind: 'fail'; outcome: Classified }
  | { kind: 'capture' }
  | { kind: 'simulator' };

/** MX hosts tried at most, best preference first (Postfix's smtp_mx_address_limit is 5): their lookups run at once. */
export const MAX_MX_HOSTS = 10;

const bounce = (dsn: string, detail: string): Route => ({ kind: 'fail', outcome: { status: 'bounced', dsn, detail } });
const defer = (dsn: string, detail: string): Route => ({ kind: 'fail', outcome: { status: 'deferred', dsn, detail } });

/**
 * Where mail for `domain` goes (docs/api/decisions.md section 3): the mailbox simulator for its domain, in every mode; the
 * capture store for everything else in DELIVERY_MODE=capture (no DNS, no connection, the relay unused); else the relay
 * when SMTP_RELAY_URL is set, or the domain's MX hosts by preference, or its own A/AAAA when it has no MX. A null MX
 * or a name that does not exist bounces; a DNS failure defers; addresses in reserved ranges are refused unless
 * ALLOW_PRIVATE_TARGETS is set.
 */
export async function resolveRoute(domain: string, deps: { config: Config; resolver: DnsResolver }): Promise<Route> {
  const { config, resolver } = deps;
  if (isSimulatorDomain(domain)) return { kind: 'simulator' };
  if (config.deliveryMode === 'capture') return { kind: 'capture' };
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
          relay: true,
        },
      ],
    };
  }

  const mx = await resolver.mx(domain);
  if (mx.status === 'unknown') return defer('4.4.3', `DNS lookup of the MX of ${domain} failed: ${mx.reason}`);
  let hosts: string[];
  if (mx.status === 'found') {
    // Most preferred first; hosts of equal preference in a random order (RFC 5321 5.1), so the first attempts spread
    // over them.
    const records = mx.records
      .map((r) => ({ r, tiebreak: Math.random() }))
      .sort((a, b) => a.r.priority - b.r.priority || a.tiebreak - b.tiebreak)
      .map(({ r }) => r);
    const named = records.filter((r) => r.exchange.replace(/\.$/, '') !== '');
    if (named.length === 0) return bounce('5.1.10', `${domain} does not accept mail (null MX)`);
    hosts = named.map((r) => r.exchange.replace(/\.$/, '').toLowerCase());
  } else if (mx.nxdomain) {
    return bounce('5.1.2', `the domain ${domain} does not exist`);
  } else {
    hosts = [domain];
  }

  // Every host's addresses are looked up at once, so a route takes one lookup time, not one per host: a domain with
  // many MX names that never answer costs the same bounded wait as one.
  const lookups = await Promise.all(hosts.slice(0, MAX_MX_HOSTS).map((host) => Promise.all([resolver.a(host), resolver.aaaa(host)])));
  const targets: Target[] = [];
  const ttls: number[] = [];
  let refused = 0;
  let dnsFailed = false;
  lookups.forEach(([a, aaaa], i) => {
    const host = hosts[i]!;
    const all = [...(a.status === 'found' ? a.records : []), ...(aaaa.status === 'found' ? aaaa.records : [])];
    for (const l of [a, aaaa]) if (l.status === 'found' && l.ttl !== undefined) ttls.push(l.ttl);
    const allowed = config.allowPrivateTargets ? all : all.filter((ip) => !isReservedAddress(ip));
    // A host is only known to have no usable address when both lookups answered: one that failed may hold it (an A
    // record that is private says nothing of a AAAA lookup that timed out).
    if (allowed.length === 0 && (a.status === 'unknown' || aaaa.status === 'unknown')) dnsFailed = true;
    refused += all.length - allowed.length;
    if (allowed.length > 0) targets.push({ host, addresses: allowed, port: config.smtpDeliveryPort, secure: false, auth: null, relay: false });
  });
  if (targets.length > 0) return { kind: 'targets', targets, ...(ttls.length > 0 ? { ttl: Math.min(...ttls) } : {}) };
  if (dnsFailed) return defer('4.4.3', `DNS lookup of the mail hosts of ${domain} failed`);
  if (refused > 0) return bounce('5.4.4', `the mail hosts of ${domain} resolve only to private or reserved addresses`);
  return bounce('5.1.2', `no mail host found for ${domain}`);
}

/** How long a route is reused: what its DNS answers allow, within these bounds (policy as data). */
export const ROUTE_CACHE = {
  /** A route with addresses: the smallest address TTL, at most this (Node's resolver does not tell an MX's TTL). */
  maxMs: 5 * 60_000,
  /** ...and at least this, so a destination with TTL 0 is not resolved again for every recipient. */
  minMs: 5_000,
  /** A definite answer that no mail can go there (null MX, no such domain, only reserved addresses). */
  bouncedMs: 5 * 60_000,
  /** A DNS failure: its recipients are deferred, and the next ones within this time are too, without asking again. */
  deferredMs: 30_000,
} as const;

/**
 * Routes resolved once per destination and kept for their TTL (ROUTE_CACHE): concurrent requests for a destination
 * share one resolution, and the engine resolves before it asks for a connection slot, so a slow or silent DNS never
 * holds one. Times read the injected clock.
 */
export function createRouter(deps: { config: Config; resolver: DnsResolver; clock: { now(): number } }) {
  const cache = new Map<string, { route: Promise<Route>; expiresAt: number }>();

  function lifetimeMs(route: Route): number {
    if (route.kind === 'fail') return route.outcome.status === 'bounced' ? ROUTE_CACHE.bouncedMs : ROUTE_CACHE.deferredMs;
    const ttlMs = route.kind !== 'targets' || route.ttl === undefined ? ROUTE_CACHE.maxMs : route.ttl * 1000;
    return Math.min(ROUTE_CACHE.maxMs, Math.max(ROUTE_CACHE.minMs, ttlMs));
  }

  return {
    route(domain: string): Promise<Route> {
      const now = deps.clock.now();
      const hit = cache.get(domain);
      if (hit && hit.expiresAt > now) return hit.route;
      const route = resolveRoute(domain, deps).catch(
        (err: unknown): Route => ({ kind: 'fail', outcome: { status: 'deferred', dsn: '4.4.3', detail: `routing failed: ${(err as Error).message}` } }),
      );
      // Kept while it resolves (shared), then for its own lifetime from when it resolved.
      const entry = { route, expiresAt: Number.POSITIVE_INFINITY };
      cache.set(domain, entry);
      void route.then((r) => {
        entry.expiresAt = deps.clock.now() + lifetimeMs(r);
      });
      // Expired entries go when they are next asked for, and in a sweep once the cache grows.
      if (cache.size > 10_000) for (const [k, v] of cache) if (v.expiresAt <= now) cache.delete(k);
      return route;
    },
    /** Forgets every route (tests; a change of DNS_SERVERS). */
    clear(): void {
      cache.clear();
    },
  };
}

export type Router = ReturnType<typeof createRouter>;

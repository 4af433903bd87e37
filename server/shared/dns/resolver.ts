import { Resolver } from 'node:dns/promises';
import type { DnsServer } from '../config.js';

/**
 * What one lookup found: records; a definite absence (`nxdomain` when the name itself does not exist, else the name
 * has no records of that type); or no usable answer in time (`unknown`: a timeout or a server failure, never a hang).
 */
export type Lookup<T> =
  | { status: 'found'; records: T[] /** Seconds the answer may be kept (the smallest record TTL), where DNS says. */; ttl?: number }
  | { status: 'missing'; nxdomain: boolean }
  | { status: 'unknown'; reason: string };

export interface MxRecord {
  exchange: string;
  priority: number;
}

/** The one way the service reads DNS: domain checks and MX routing both go through it. */
export interface DnsResolver {
  /** TXT records, each the list of its character-strings as served (join them to read the record). */
  txt(name: string): Promise<Lookup<string[]>>;
  mx(name: string): Promise<Lookup<MxRecord>>;
  a(name: string): Promise<Lookup<string>>;
  aaaa(name: string): Promise<Lookup<string>>;
}

/** c-ares codes that prove absence: ENOTFOUND is NXDOMAIN, ENODATA an empty answer for the type. */
const ABSENT: Record<string, boolean> = { ENOTFOUND: true, ENODATA: false };

export interface ResolverOptions {
  /** Resolvers to ask (DNS_SERVERS); null means the system's. */
  servers: DnsServer[] | null;
  /** Upper bound for one lookup, retries included. */
  timeoutMs?: number;
}

function formatServer(s: DnsServer): string {
  return s.host.includes(':') ? `[${s.host}]:${s.port}` : `${s.host}:${s.port}`;
}

const minTtl = (records: { ttl: number }[]) => Math.min(...records.map((r) => r.ttl));

/** Address lookups answer the addresses, with the smallest TTL beside them. */
async function addresses(found: Promise<Lookup<{ address: string; ttl: number }>>): Promise<Lookup<string>> {
  const l = await found;
  return l.status === 'found' ? { status: 'found', records: l.records.map((r) => r.address), ...(l.ttl !== undefined ? { ttl: l.ttl } : {}) } : l;
}

export function createResolver(options: ResolverOptions): DnsResolver {
  const timeoutMs = options.timeoutMs ?? 3000;
  // Two tries inside the bound: c-ares doubles the per-try timeout on the retry.
  const resolver = new Resolver({ timeout: Math.max(50, Math.floor(timeoutMs / 3)), tries: 2 });
  if (options.servers) resolver.setServers(options.servers.map(formatServer));

  async function lookup<T>(run: () => Promise<T[]>, ttlOf?: (records: T[]) => number): Promise<Lookup<T>> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<Lookup<T>>((resolve) => {
      timer = setTimeout(() => resolve({ status: 'unknown', reason: 'timeout' }), timeoutMs);
    });
    const answer = run().then(
      (records): Lookup<T> =>
        records.length > 0 ? { status: 'found', records, ...(ttlOf ? { ttl: ttlOf(records) } : {}) } : { status: 'missing', nxdomain: false },
      (err: NodeJS.ErrnoException): Lookup<T> => {
        const nxdomain = ABSENT[err.code ?? ''];
        return nxdomain === undefined ? { status: 'unknown', reason: (err.code ?? 'error').toLowerCase() } : { status: 'missing', nxdomain };
      },
    );
    try {
      return await Promise.race([answer, deadline]);
    } finally {
      clearTimeout(timer);
    }
  }

  return {
    txt: (name) => lookup(() => resolver.resolveTxt(name)),
    // Node 24 adds `type: 'MX'` to each record: the answer keeps what the interface names, on every Node.
    mx: (name) => lookup(async () => (await resolver.resolveMx(name)).map(({ exchange, priority }) => ({ exchange, priority }))),
    a: (name) => addresses(lookup(() => resolver.resolve4(name, { ttl: true }), minTtl)),
    aaaa: (name) => addresses(lookup(() => resolver.resolve6(name, { ttl: true }), minTtl)),
  };
}

/**
 * The resolver in the shape mailauth asks for (`dns.promises.resolve(name, type)`): records, or an error whose code
 * says absent (ENOTFOUND, ENODATA) or failed (ESERVFAIL, ETIMEOUT), so SPF, DKIM and DMARC checks read DNS through
 * DNS_SERVERS like everything else.
 */
export function mailauthResolver(resolver: DnsResolver): (name: string, type: string) => Promise<unknown[]> {
  const failure = (l: { status: 'missing'; nxdomain: boolean } | { status: 'unknown'; reason: string }) =>
    Object.assign(new Error(`DNS ${l.status === 'missing' ? (l.nxdomain ? 'nxdomain' : 'no data') : l.reason}`), {
      code: l.status === 'missing' ? (l.nxdomain ? 'ENOTFOUND' : 'ENODATA') : l.reason === 'timeout' ? 'ETIMEOUT' : 'ESERVFAIL',
    });
  const answer = async <T>(found: Promise<Lookup<T>>): Promise<T[]> => {
    const l = await found;
    if (l.status === 'found') return l.records;
    throw failure(l);
  };
  return (name, type) => {
    switch (type.toUpperCase()) {
      case 'TXT':
        return answer(resolver.txt(name));
      case 'MX':
        return answer(resolver.mx(name));
      case 'A':
        return answer(resolver.a(name));
      case 'AAAA':
        return answer(resolver.aaaa(name));
      default:
        return Promise.reject(Object.assign(new Error(`DNS type ${type} is not looked up`), { code: 'ENOTIMP' }));
    }
  };
}

import { BlockList, isIP } from 'node:net';
import { mappedIpv4 } from './ip-ranges.js';

/**
 * TRUST_PROXY: the addresses and networks whose `X-Forwarded-For` the HTTP server believes, and the rule that reads the
 * client's address from it. An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is the IPv4 address it carries, on both sides.
 */

export interface TrustedProxies {
  /** The entries as given, each an address or a CIDR (for the start line and the tests). */
  readonly entries: readonly string[];
  /** True for an address in one of the entries. */
  has(address: string): boolean;
}

/** One entry: `ip` or `ip/prefix`, IPv4 or IPv6; null when it is neither. */
function parseEntry(text: string): { network: string; prefix: number; family: 'ipv4' | 'ipv6' } | null {
  const [address = '', prefixText, extra] = text.split('/');
  if (extra !== undefined || address.includes('%')) return null;
  let family = isIP(address);
  if (family === 0) return null;
  let network = address;
  let max = family === 4 ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return null;
  let prefix = prefixText === undefined ? max : Number(prefixText);
  if (prefix > max) return null;
  const mapped = family === 6 ? mappedIpv4(address) : null;
  if (mapped) {
    if (prefix < 96) return null;
    [network, family, max, prefix] = [mapped, 4, 32, prefix - 96];
  }
  return { network, prefix, family: family === 4 ? 'ipv4' : 'ipv6' };
}

/**
 * The comma list TRUST_PROXY holds (blanks ignored; empty: nobody is trusted), or the first entry that is not an IP
 * address or CIDR.
 */
export function parseTrustedProxies(text: string): { ok: true; proxies: TrustedProxies } | { ok: false; bad: string } {
  const entries = text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  // One list per family: a BlockList also matches an IPv4 address against its IPv6 rules, so `::/0` would trust
  // every IPv4 peer as well.
  const lists = { ipv4: new BlockList(), ipv6: new BlockList() };
  for (const entry of entries) {
    const parsed = parseEntry(entry);
    if (!parsed) return { ok: false, bad: entry };
    lists[parsed.family].addSubnet(parsed.network, parsed.prefix, parsed.family);
  }
  const has = (address: string): boolean => {
    const ip = mappedIpv4(address) ?? address;
    const family = isIP(ip);
    if (family === 4) return lists.ipv4.check(ip, 'ipv4');
    if (family === 6 && !ip.includes('%')) return lists.ipv6.check(ip, 'ipv6');
    return false;
  };
  return { ok: true, proxies: { entries, has } };
}

/** Nobody trusted: the HTTP client is the TCP peer. */
export const NO_TRUSTED_PROXIES: TrustedProxies = { entries: [], has: () => false };

/** An entry of X-Forwarded-For as an address: bare, `[v6]` or `[v6]:port`, or `v4:port` (some proxies add the port). */
function forwardedAddress(entry: string): string | null {
  if (isIP(entry)) return entry;
  const bracketed = /^\[([^\]]+)\](?::\d{1,5})?$/.exec(entry);
  if (bracketed && isIP(bracketed[1]!) === 6) return bracketed[1]!;
  const withPort = /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/.exec(entry);
  if (withPort && isIP(withPort[1]!) === 4) return withPort[1]!;
  return null;
}

/**
 * The HTTP client's address: the TCP `peer`, unless the peer is a trusted proxy; then, walking `X-Forwarded-For` from
 * its right end (each proxy appends the address it was reached from), the first address that is not itself trusted,
 * or the leftmost when every one is. Whatever a client writes into the header sits left of what the trusted proxy
 * appended, so it cannot stand in for the client's own address. An entry that is not an address ends the walk at the
 * trusted hop right of it.
 */
export function forwardedClient(peer: string, forwardedFor: string | undefined, trusted: TrustedProxies): string {
  if (!trusted.has(peer) || forwardedFor === undefined) return peer;
  const entries = forwardedFor.split(',').map((s) => s.trim());
  let client = peer;
  for (let i = entries.length - 1; i >= 0; i--) {
    const address = forwardedAddress(entries[i]!);
    if (address === null) return client;
    client = address;
    if (!trusted.has(address)) return address;
  }
  return client;
}

import { BlockList, isIP } from 'node:net';

/**
 * Every address that is not a public unicast host, as a table: the IANA IPv4 and IPv6 Special-Purpose Address
 * Registries (every entry, even the few marked globally reachable, such as AS112 and AMT: no mail server or webhook
 * receiver lives there), multicast and limited broadcast, and on IPv6 everything outside 2000::/3, the only space
 * IANA allocates for global unicast. No MX, webhook or customer-database connection goes to them unless
 * ALLOW_PRIVATE_TARGETS is set. IPv4-mapped IPv6 addresses (::ffff:0:0/96) are not a row: they are judged as the IPv4
 * address they carry (see isReservedAddress).
 */
export const RESERVED_RANGES: readonly { cidr: string; why: string }[] = [
  // IPv4 Special-Purpose Address Registry (RFC 6890 and updates), multicast, reserved and broadcast.
  { cidr: '0.0.0.0/8', why: 'this network (RFC 791)' },
  { cidr: '10.0.0.0/8', why: 'private (RFC 1918)' },
  { cidr: '100.64.0.0/10', why: 'shared address space, CGNAT (RFC 6598)' },
  { cidr: '127.0.0.0/8', why: 'loopback (RFC 1122)' },
  { cidr: '169.254.0.0/16', why: 'link-local, cloud metadata (RFC 3927)' },
  { cidr: '172.16.0.0/12', why: 'private (RFC 1918)' },
  { cidr: '192.0.0.0/24', why: 'IETF protocol assignments (RFC 6890)' },
  { cidr: '192.0.2.0/24', why: 'documentation, TEST-NET-1 (RFC 5737)' },
  { cidr: '192.31.196.0/24', why: 'AS112-v4 (RFC 7535)' },
  { cidr: '192.52.193.0/24', why: 'AMT (RFC 7450)' },
  { cidr: '192.88.99.0/24', why: 'deprecated 6to4 relay anycast (RFC 7526)' },
  { cidr: '192.168.0.0/16', why: 'private (RFC 1918)' },
  { cidr: '192.175.48.0/24', why: 'direct delegation AS112 service (RFC 7534)' },
  { cidr: '198.18.0.0/15', why: 'benchmarking (RFC 2544)' },
  { cidr: '198.51.100.0/24', why: 'documentation, TEST-NET-2 (RFC 5737)' },
  { cidr: '203.0.113.0/24', why: 'documentation, TEST-NET-3 (RFC 5737)' },
  { cidr: '224.0.0.0/4', why: 'multicast (RFC 5771)' },
  { cidr: '240.0.0.0/4', why: 'reserved, and limited broadcast 255.255.255.255 (RFC 1112, RFC 919)' },
  // IPv6 Special-Purpose Address Registry (RFC 6890 and updates).
  { cidr: '::/128', why: 'unspecified (RFC 4291)' },
  { cidr: '::1/128', why: 'loopback (RFC 4291)' },
  { cidr: '::/96', why: 'IPv4-compatible, deprecated (RFC 4291)' },
  { cidr: '::ffff:0:0:0/96', why: 'IPv4-translated (RFC 2765)' },
  { cidr: '64:ff9b::/96', why: 'IPv4/IPv6 translation, NAT64 (RFC 6052)' },
  { cidr: '64:ff9b:1::/48', why: 'local-use IPv4/IPv6 translation (RFC 8215)' },
  { cidr: '100::/64', why: 'discard-only (RFC 6666)' },
  { cidr: '100:0:0:1::/64', why: 'dummy IPv6 prefix (RFC 9780)' },
  { cidr: '2001::/23', why: 'IETF protocol assignments: Teredo, benchmarking, ORCHID (RFC 2928)' },
  { cidr: '2001:db8::/32', why: 'documentation (RFC 3849)' },
  { cidr: '2002::/16', why: '6to4 (RFC 3056)' },
  { cidr: '2620:4f:8000::/48', why: 'direct delegation AS112 service (RFC 7534)' },
  { cidr: '3fff::/20', why: 'documentation (RFC 9637)' },
  { cidr: '5f00::/16', why: 'segment routing SIDs (RFC 9602)' },
  { cidr: 'fc00::/7', why: 'unique local (RFC 4193)' },
  { cidr: 'fe80::/10', why: 'link-local (RFC 4291)' },
  { cidr: 'fec0::/10', why: 'site-local, deprecated (RFC 3879)' },
  { cidr: 'ff00::/8', why: 'multicast (RFC 4291)' },
  // IPv6 Address Space registry: outside 2000::/3 nothing is allocated for global unicast.
  { cidr: '::/3', why: 'not global unicast: reserved by the IETF (IPv6 address space registry)' },
  { cidr: '4000::/2', why: 'not global unicast: reserved by the IETF (IPv6 address space registry)' },
  { cidr: '8000::/1', why: 'not global unicast: reserved by the IETF, ULA, link-local, multicast (IPv6 address space registry)' },
];

// One list per family: a BlockList also matches an IPv4 address against its IPv6 rules (as ::ffff:a.b.c.d), which
// the IPv6 rows that cover ::ffff:0:0/96 (::/3) would turn into "every IPv4 address is reserved".
const blocked = { ipv4: new BlockList(), ipv6: new BlockList() };
for (const { cidr } of RESERVED_RANGES) {
  const [net, bits] = cidr.split('/');
  const family = isIP(net!) === 6 ? 'ipv6' : 'ipv4';
  blocked[family].addSubnet(net!, Number(bits), family);
}

/** The 16 bytes of an IPv6 address (dotted IPv4 tail allowed), or null. */
function ipv6Bytes(ip: string): Uint8Array | null {
  let text = ip;
  const bytes = new Uint8Array(16);
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  let tail: number[] = [];
  if (dotted) {
    tail = dotted[2]!.split('.').map(Number);
    text = `${dotted[1]}0:0`;
  }
  const [head, rest] = text.includes('::') ? text.split('::') : [text, undefined];
  const left = head ? head.split(':') : [];
  const right = rest ? rest.split(':') : [];
  const groups = rest === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  if (groups.length !== 8) return null;
  groups.forEach((g, i) => {
    const n = parseInt(g || '0', 16);
    bytes[i * 2] = n >> 8;
    bytes[i * 2 + 1] = n & 255;
  });
  if (dotted) bytes.set(tail, 12);
  return bytes;
}

/** The IPv4 address an IPv4-mapped IPv6 address (::ffff:a.b.c.d, in any spelling) carries, or null. */
export function mappedIpv4(ip: string): string | null {
  const b = ipv6Bytes(ip);
  if (!b) return null;
  for (let i = 0; i < 10; i++) if (b[i] !== 0) return null;
  if (b[10] !== 0xff || b[11] !== 0xff) return null;
  return `${b[12]}.${b[13]}.${b[14]}.${b[15]}`;
}

/**
 * True for an address in a reserved range, and for anything that is not an IP address at all (a zone index such as
 * `fe80::1%eth0` included). An IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
 */
export function isReservedAddress(ip: string): boolean {
  const family = isIP(ip);
  if (family === 0 || ip.includes('%')) return true;
  if (family === 4) return blocked.ipv4.check(ip, 'ipv4');
  const mapped = mappedIpv4(ip);
  if (mapped) return blocked.ipv4.check(mapped, 'ipv4');
  return blocked.ipv6.check(ip, 'ipv6');
}

/**
 * What per-client limits count by: an IPv4 address (an IPv4-mapped IPv6 one as the IPv4 it carries) as it is, an
 * IPv6 address by its /64, which one host or subscriber is usually given whole: counted per address, a /64 would
 * hand one client 2^64 budgets. Anything else (not an IP address) as it is.
 */
export function clientKey(address: string): string {
  const family = isIP(address);
  if (family !== 6) return address;
  const mapped = mappedIpv4(address);
  if (mapped) return mapped;
  const b = ipv6Bytes(address.split('%')[0]!);
  if (!b) return address;
  const groups = Array.from({ length: 4 }, (_, i) => ((b[i * 2]! << 8) | b[i * 2 + 1]!).toString(16));
  return `${groups.join(':')}::/64`;
}

import { BlockList, isIP } from 'node:net';

/**
 * Loopback, private, link-local, shared, documentation, multicast and other reserved ranges (IANA special-purpose
 * registries). No webhook, customer database or MX connection goes to them unless ALLOW_PRIVATE_TARGETS is set.
 */
export const RESERVED_RANGES: readonly { cidr: string; why: string }[] = [
  { cidr: '0.0.0.0/8', why: 'this network' },
  { cidr: '10.0.0.0/8', why: 'private' },
  { cidr: '100.64.0.0/10', why: 'shared address space (CGNAT)' },
  { cidr: '127.0.0.0/8', why: 'loopback' },
  { cidr: '169.254.0.0/16', why: 'link-local' },
  { cidr: '172.16.0.0/12', why: 'private' },
  { cidr: '192.0.0.0/24', why: 'IETF protocol assignments' },
  { cidr: '192.0.2.0/24', why: 'documentation' },
  { cidr: '192.88.99.0/24', why: '6to4 relay anycast' },
  { cidr: '192.168.0.0/16', why: 'private' },
  { cidr: '198.18.0.0/15', why: 'benchmarking' },
  { cidr: '198.51.100.0/24', why: 'documentation' },
  { cidr: '203.0.113.0/24', why: 'documentation' },
  { cidr: '224.0.0.0/4', why: 'multicast' },
  { cidr: '240.0.0.0/4', why: 'reserved' },
  { cidr: '::/128', why: 'unspecified' },
  { cidr: '::1/128', why: 'loopback' },
  { cidr: '64:ff9b::/96', why: 'IPv4/IPv6 translation' },
  { cidr: '64:ff9b:1::/48', why: 'IPv4/IPv6 translation' },
  { cidr: '100::/64', why: 'discard' },
  { cidr: '2001::/23', why: 'IETF protocol assignments' },
  { cidr: '2001:db8::/32', why: 'documentation' },
  { cidr: '2002::/16', why: '6to4' },
  { cidr: 'fc00::/7', why: 'unique local' },
  { cidr: 'fe80::/10', why: 'link-local' },
  { cidr: 'ff00::/8', why: 'multicast' },
];

const blocked = new BlockList();
for (const { cidr } of RESERVED_RANGES) {
  const [net, bits] = cidr.split('/');
  blocked.addSubnet(net!, Number(bits), isIP(net!) === 6 ? 'ipv6' : 'ipv4');
}

/** True for an address in a reserved range, including IPv4 written as an IPv4-mapped IPv6 address. */
export function isReservedAddress(ip: string): boolean {
  const family = isIP(ip);
  if (family === 0) return true;
  if (family === 6) {
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
    if (mapped) return blocked.check(mapped[1]!, 'ipv4');
    return blocked.check(ip, 'ipv6');
  }
  return blocked.check(ip, 'ipv4');
}

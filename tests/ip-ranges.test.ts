import { isIP } from 'node:net';
import { describe, expect, it } from 'vitest';
import { RESERVED_RANGES, clientKey, isReservedAddress } from '../server/shared/ip-ranges.js';

/**
 * The reserved address table (loopback, private, link-local, shared, documentation, multicast and other special
 * ranges) tested row by row: the first, a middle and the last address of every range are reserved; the addresses
 * just outside an IPv4 range are not, unless another row holds them; public addresses pass; an IPv4 address written
 * as an IPv4-mapped IPv6 address is judged as the IPv4 address it is.
 */

function v4ToBig(ip: string): bigint {
  return ip.split('.').reduce((n, part) => (n << 8n) | BigInt(Number(part)), 0n);
}

function v4FromBig(n: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 255n)).join('.');
}

function v6ToBig(ip: string): bigint {
  const [head, tail] = ip.includes('::') ? ip.split('::') : [ip, undefined];
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  return groups.reduce((n, g) => (n << 16n) | BigInt(parseInt(g || '0', 16)), 0n);
}

function v6FromBig(n: bigint): string {
  return Array.from({ length: 8 }, (_, i) => ((n >> BigInt((7 - i) * 16)) & 0xffffn).toString(16)).join(':');
}

interface Range {
  cidr: string;
  family: 4 | 6;
  first: bigint;
  last: bigint;
}

const ranges: Range[] = RESERVED_RANGES.map(({ cidr }) => {
  const [net, bitsText] = cidr.split('/') as [string, string];
  const family = isIP(net) === 6 ? 6 : 4;
  const width = family === 6 ? 128n : 32n;
  const bits = BigInt(Number(bitsText));
  const base = family === 6 ? v6ToBig(net) : v4ToBig(net);
  const size = 1n << (width - bits);
  const first = (base / size) * size;
  return { cidr, family, first, last: first + size - 1n };
});

const text = (family: 4 | 6, n: bigint) => (family === 6 ? v6FromBig(n) : v4FromBig(n));
const inAnyRow = (family: 4 | 6, n: bigint) => ranges.some((r) => r.family === family && r.first <= n && n <= r.last);

describe('reserved address ranges', () => {
  it('is a table of CIDR ranges, each with its reason', () => {
    expect(RESERVED_RANGES.length).toBeGreaterThan(20);
    for (const row of RESERVED_RANGES) {
      expect(row.cidr).toMatch(/^[0-9a-f.:]+\/\d{1,3}$/);
      expect(row.why.length).toBeGreaterThan(0);
    }
    // The ranges the spec names must be there.
    const cidrs = RESERVED_RANGES.map((r) => r.cidr);
    for (const must of [
      '10.0.0.0/8',
      '127.0.0.0/8',
      '169.254.0.0/16',
      '172.16.0.0/12',
      '192.168.0.0/16',
      '100.64.0.0/10',
      '0.0.0.0/8',
      '224.0.0.0/4',
      '::1/128',
      'fc00::/7',
      'fe80::/10',
    ]) {
      expect(cidrs).toContain(must);
    }
  });

  // Every entry of the IANA IPv4 and IPv6 Special-Purpose Address Registries, and the deprecated IPv6 forms that
  // carry an IPv4 address or a site scope: each lies inside some row (a row may be wider than the entry).
  const IANA_SPECIAL_PURPOSE = [
    '0.0.0.0/8',
    '0.0.0.0/32',
    '10.0.0.0/8',
    '100.64.0.0/10',
    '127.0.0.0/8',
    '169.254.0.0/16',
    '172.16.0.0/12',
    '192.0.0.0/24',
    '192.0.0.0/29',
    '192.0.0.8/32',
    '192.0.0.9/32',
    '192.0.0.10/32',
    '192.0.0.170/32',
    '192.0.0.171/32',
    '192.0.2.0/24',
    '192.31.196.0/24',
    '192.52.193.0/24',
    '192.88.99.0/24',
    '192.168.0.0/16',
    '192.175.48.0/24',
    '198.18.0.0/15',
    '198.51.100.0/24',
    '203.0.113.0/24',
    '240.0.0.0/4',
    '255.255.255.255/32',
    '::1/128',
    '::/128',
    '::ffff:0:0:0/96',
    '64:ff9b::/96',
    '64:ff9b:1::/48',
    '100::/64',
    '100:0:0:1::/64',
    '2001::/23',
    '2001::/32',
    '2001:1::1/128',
    '2001:1::2/128',
    '2001:1::3/128',
    '2001:2::/48',
    '2001:3::/32',
    '2001:4:112::/48',
    '2001:10::/28',
    '2001:20::/28',
    '2001:30::/28',
    '2001:db8::/32',
    '2002::/16',
    '2620:4f:8000::/48',
    '3fff::/20',
    '5f00::/16',
    'fc00::/7',
    'fe80::/10',
    // Deprecated: IPv4-compatible (RFC 4291), site-local (RFC 3879).
    '::/96',
    'fec0::/10',
  ];
  it.each(IANA_SPECIAL_PURPOSE)('the registry entry %s lies inside the table', (cidr) => {
    const [net, bitsText] = cidr.split('/') as [string, string];
    const family = isIP(net) === 6 ? 6 : 4;
    const width = family === 6 ? 128n : 32n;
    const size = 1n << (width - BigInt(Number(bitsText)));
    const first = ((family === 6 ? v6ToBig(net) : v4ToBig(net)) / size) * size;
    const last = first + size - 1n;
    expect(
      ranges.some((r) => r.family === family && r.first <= first && last <= r.last),
      cidr,
    ).toBe(true);
  });

  it.each([
    '::127.0.0.1',
    '::7f00:1',
    '::10.0.0.1',
    '::8.8.8.8',
    '::ffff:0:127.0.0.1',
    '::ffff:0:8.8.8.8',
    'fec0::1',
    'feff::1',
    '4000::1',
    'fe80::1%eth0',
    '3fff:1::1',
    '5f00::1',
    '2620:4f:8000::53',
  ])('the IPv6 address %s (compatible, translated, site-local, unallocated or zoned) is reserved', (ip) => {
    expect(isReservedAddress(ip)).toBe(true);
  });

  it.each(ranges.filter((r) => r.family === 6).map((r) => [r.cidr, r] as const))('%s: the IPv6 addresses just outside are not reserved by it', (_, r) => {
    for (const n of [r.first - 1n, r.last + 1n]) {
      if (n < 0n || n >= 1n << 128n || inAnyRow(6, n)) continue;
      // An address in ::ffff:0:0/96 is judged as its IPv4 address, not by the IPv6 rows.
      if (n >> 32n === 0xffffn) continue;
      expect(isReservedAddress(text(6, n)), text(6, n)).toBe(false);
    }
  });

  it.each(ranges.map((r) => [r.cidr, r] as const))('%s: first, middle and last address are reserved', (_, r) => {
    for (const n of [r.first, r.first + (r.last - r.first) / 2n, r.last]) {
      expect(isReservedAddress(text(r.family, n)), text(r.family, n)).toBe(true);
    }
  });

  it.each(ranges.filter((r) => r.family === 4).map((r) => [r.cidr, r] as const))('%s: the addresses just outside are not reserved by it', (_, r) => {
    for (const n of [r.first - 1n, r.last + 1n]) {
      if (n < 0n || n > 0xffffffffn || inAnyRow(4, n)) continue;
      expect(isReservedAddress(text(4, n)), text(4, n)).toBe(false);
    }
  });

  it.each([
    '8.8.8.8',
    '1.1.1.1',
    '9.9.9.9',
    '93.184.216.34',
    '142.250.185.78',
    '2606:4700::1111',
    '2001:4860:4860::8888',
    '2a00:1450:4001:80b::200e',
    '::ffff:8.8.8.8',
    '::ffff:808:808',
    '3000::1',
    '2001:200::1',
    '2620:4f:8001::1',
  ])('public %s is not reserved', (ip) => {
    expect(isReservedAddress(ip)).toBe(false);
  });

  it.each([
    '127.0.0.1',
    '10.0.0.5',
    '192.168.1.1',
    '172.31.255.255',
    '169.254.169.254',
    '100.100.100.200',
    '0.0.0.0',
    '255.255.255.255',
    '::1',
    '::',
    'fd12:3456::1',
    'fe80::1',
  ])('%s is reserved', (ip) => {
    expect(isReservedAddress(ip)).toBe(true);
  });

  it.each([
    '::ffff:127.0.0.1',
    '::FFFF:127.0.0.1',
    '::ffff:10.0.0.5',
    '::ffff:192.168.0.1',
    '::ffff:169.254.169.254',
    '::ffff:7f00:1',
    '0:0:0:0:0:ffff:7f00:1',
  ])('the IPv4-mapped address %s is judged as the IPv4 address it holds: reserved', (ip) => {
    expect(isReservedAddress(ip)).toBe(true);
  });

  it.each(['', 'localhost', 'example.com', '300.1.1.1', '1.2.3'])('refuses %j, which is not an address at all', (ip) => {
    expect(isReservedAddress(ip)).toBe(true);
  });
});

describe('clientKey: what per-client limits count by', () => {
  it.each([
    ['192.0.2.7', '192.0.2.7'],
    ['::ffff:192.0.2.7', '192.0.2.7'],
    ['::ffff:c000:207', '192.0.2.7'],
    ['2001:db8:1:2:aaaa:bbbb:cccc:dddd', '2001:db8:1:2::/64'],
    ['2001:db8:1:2::1', '2001:db8:1:2::/64'],
    ['2001:0DB8:0001:0002:0:0:0:ffff', '2001:db8:1:2::/64'],
    ['2001:db8::', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['unknown', 'unknown'],
  ])('%s counts as %s', (address, key) => {
    expect(clientKey(address)).toBe(key);
  });

  it('two addresses of one /64 are one client; of two /64s, two', () => {
    expect(clientKey('2001:db8:1:2::a')).toBe(clientKey('2001:db8:1:2:ffff::b'));
    expect(clientKey('2001:db8:1:2::a')).not.toBe(clientKey('2001:db8:1:3::a'));
  });
});

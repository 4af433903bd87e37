import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../server/shared/config.js';
import { RESERVED_RANGES } from '../server/shared/ip-ranges.js';
import { createResolver } from '../server/shared/dns/resolver.js';
import { ApiError } from '../server/shared/errors.js';
import { MAX_WEBHOOK_URL_LENGTH, checkWebhookUrl, isAbsoluteUri, parseWebhookUrl, resolveTarget } from '../server/core/webhook-url.js';
import { TestDnsServer } from './helpers/dns-server.js';

/**
 * The webhook URL rules of docs/api/contract.md (POST /webhooks) and docs/api/decisions.md section 7 as a table: what parseWebhookUrl refuses,
 * what resolveTarget refuses (any reserved address, through the test DNS server for names), each a 422 invalid_url
 * through checkWebhookUrl, and what both accept. ALLOW_PRIVATE_TARGETS lifts the address rule only.
 */

let dns: TestDnsServer;
beforeAll(async () => {
  dns = await TestDnsServer.start();
  dns.add('public.webhooks.test', { type: 'A', address: '1.1.1.1' });
  dns.add('public.webhooks.test', { type: 'AAAA', address: '2606:4700:4700::1111' });
  dns.add('v4only.webhooks.test', { type: 'A', address: '8.8.8.8' });
  // Public A, private AAAA: one private answer is enough to refuse.
  dns.add('mixed.webhooks.test', { type: 'A', address: '8.8.8.8' });
  dns.add('mixed.webhooks.test', { type: 'AAAA', address: 'fd00::1' });
  dns.add('mixed4.webhooks.test', { type: 'A', address: '8.8.8.8' });
  dns.add('mixed4.webhooks.test', { type: 'A', address: '10.1.2.3' });
  dns.add('loopback.webhooks.test', { type: 'A', address: '127.0.0.1' });
  dns.add('metadata.webhooks.test', { type: 'A', address: '169.254.169.254' });
  dns.add('cgnat.webhooks.test', { type: 'A', address: '100.64.0.1' });
  dns.add('nat64.webhooks.test', { type: 'AAAA', address: '64:ff9b::808:808' });
  dns.add('mapped.webhooks.test', { type: 'AAAA', address: '::ffff:127.0.0.1' });
  dns.add('empty.webhooks.test', { type: 'TXT', data: 'no addresses here' });
  dns.fail('servfail.webhooks.test');
});
afterAll(async () => {
  await dns.stop();
});

function depsFor(allowPrivateTargets: boolean) {
  const config = loadConfig({ DATA_DIR: '/nonexistent', DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: String(allowPrivateTargets) });
  return { config, resolver: createResolver({ servers: config.dnsServers, timeoutMs: 1000 }) };
}

/** What checkWebhookUrl makes of a URL: 'ok', or the status and code it throws. */
async function judge(raw: string, allowPrivateTargets = false): Promise<'ok' | { status: number; code: string }> {
  try {
    await checkWebhookUrl(depsFor(allowPrivateTargets), raw);
    return 'ok';
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    return { status: err.status, code: err.code };
  }
}

const REFUSED = { status: 422, code: 'invalid_url' };

/** The URL of an address: IPv6 in brackets. */
const urlOf = (ip: string) => (ip.includes(':') ? `https://[${ip}]/hook` : `https://${ip}/hook`);

describe('isAbsoluteUri: RFC 3986, as `format uri`', () => {
  it.each([
    'https://hooks.webhooks.test',
    'https://hooks.webhooks.test:8443/',
    'https://hooks.webhooks.test/a%20b/c;d=e/~f_g.h-i?x=1&y=2/3?z#frag/?@:',
    "https://hooks.webhooks.test/!$&'()*+,=",
    'https://[2606:4700::1111]:443/hook',
    'https://user@hooks.webhooks.test/',
  ])('accepts %s', (url) => {
    expect(isAbsoluteUri(url)).toBe(true);
  });

  it.each([
    'https://hooks.webhooks.test/%zz',
    'https://hooks.webhooks.test/%4',
    'https://hooks.webhooks.test/a[b]',
    'https://hooks.webhooks.test/?q=[1]',
    'https://hooks.webhooks.test/x#a#b',
    'https://hooks.webhooks.test/a b',
    'https://ho^st.test/',
    '//hooks.webhooks.test/',
  ])('refuses %s', (url) => {
    expect(isAbsoluteUri(url)).toBe(false);
  });
});

describe('parseWebhookUrl refuses', () => {
  const long = `https://example.com/${'a'.repeat(MAX_WEBHOOK_URL_LENGTH - 'https://example.com/'.length + 1)}`;
  const cases: [string, string][] = [
    ['plain http', 'http://example.com/hook'],
    ['another scheme', 'ftp://example.com/hook'],
    ['a user and password', 'https://user:secret@example.com/hook'],
    ['a user only', 'https://user@example.com/hook'],
    ['a password only', 'https://:secret@example.com/hook'],
    ['2001 characters', long],
    ['no host', 'https://'],
    ['no host but a port', 'https://:443/hook'],
    ['the empty string', ''],
    ['not a URL', 'example.com/hook'],
    ['a relative path', '/hook'],
    ['a zone index', 'https://[fe80::1%25eth0]/'],
    ['port 0, where nothing can listen', 'https://example.com:0/hook'],
    ['port 0 written long', 'https://example.com:00000/hook'],
  ];
  it.each(cases)('%s', async (_why, raw) => {
    expect(() => parseWebhookUrl(raw)).toThrow(ApiError);
    expect(await judge(raw)).toEqual(REFUSED);
    // The rule is the URL's, not the address's: ALLOW_PRIVATE_TARGETS does not lift it.
    expect(await judge(raw, true)).toEqual(REFUSED);
  });

  it('accepts exactly 2000 characters', () => {
    const url = `https://example.com/${'a'.repeat(MAX_WEBHOOK_URL_LENGTH - 'https://example.com/'.length)}`;
    expect(url.length).toBe(2000);
    expect(parseWebhookUrl(url).hostname).toBe('example.com');
    expect(long.length).toBe(2001);
  });
});

describe('resolveTarget refuses a host with any reserved address', () => {
  // Odd spellings: the WHATWG parser turns each into the address it is, which is then judged.
  const spellings: [string, string][] = [
    ['localhost with the root dot', 'https://localhost./hook'],
    ['localhost', 'https://localhost/hook'],
    ['a name under localhost', 'https://api.localhost/hook'],
    ['hex IPv4', 'https://0x7f000001/hook'],
    ['decimal IPv4', 'https://2130706433/hook'],
    ['octal IPv4', 'https://0177.0.0.1/hook'],
    ['short IPv4', 'https://127.1/hook'],
    ['IPv4-mapped IPv6 in hex', 'https://[::ffff:7f00:1]/hook'],
    ['IPv4-mapped IPv6 dotted', 'https://[::ffff:127.0.0.1]/hook'],
    ['IPv4-compatible IPv6', 'https://[::127.0.0.1]/hook'],
    ['IPv6 loopback', 'https://[::1]/hook'],
    ['IPv6 loopback written in full', 'https://[0:0:0:0:0:0:0:1]/hook'],
    ['the unspecified IPv4 address', 'https://0.0.0.0/hook'],
    ['cloud metadata', 'https://169.254.169.254/latest/meta-data'],
    ['CGNAT', 'https://100.64.0.1/hook'],
    ['NAT64 of a public address', 'https://[64:ff9b::808:808]/hook'],
    ['6to4 of a public address', 'https://[2002:808:808::1]/hook'],
    ['Teredo', 'https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook'],
    ['a name whose A is public and AAAA private', 'https://mixed.webhooks.test/hook'],
    ['a name with a public and a private A', 'https://mixed4.webhooks.test/hook'],
    ['a name resolving to loopback', 'https://loopback.webhooks.test/hook'],
    ['a name resolving to the metadata address', 'https://metadata.webhooks.test/hook'],
    ['a name resolving to CGNAT', 'https://cgnat.webhooks.test/hook'],
    ['a name resolving to NAT64', 'https://nat64.webhooks.test/hook'],
    ['a name resolving to an IPv4-mapped loopback', 'https://mapped.webhooks.test/hook'],
    ['a name in capitals with the root dot', 'https://LOOPBACK.Webhooks.Test./hook'],
  ];
  it.each(spellings)('%s', async (_why, raw) => {
    const check = await resolveTarget(depsFor(false), parseWebhookUrl(raw));
    expect(check.kind).toBe('blocked');
    expect(await judge(raw)).toEqual(REFUSED);
  });

  // The first address of every row of the reserved table, generated from the table itself.
  const rows = RESERVED_RANGES.map(({ cidr, why }) => [`${cidr} (${why})`, cidr.split('/')[0]!] as const);
  it.each(rows)('%s', async (_row, first) => {
    const check = await resolveTarget(depsFor(false), parseWebhookUrl(urlOf(first)));
    expect(check.kind).toBe('blocked');
    expect(await judge(urlOf(first))).toEqual(REFUSED);
  });

  it('names the reserved address it found', async () => {
    expect(await resolveTarget(depsFor(false), parseWebhookUrl('https://mixed.webhooks.test/'))).toEqual({ kind: 'blocked', address: 'fd00::1' });
    expect(await resolveTarget(depsFor(false), parseWebhookUrl('https://0x7f000001/'))).toEqual({ kind: 'blocked', address: '127.0.0.1' });
  });
});

describe('resolveTarget refuses a name that does not resolve', () => {
  const cases: [string, string, string][] = [
    ['an unknown name (NXDOMAIN)', 'https://missing.webhooks.test/hook', 'nxdomain'],
    ['a name without A or AAAA', 'https://empty.webhooks.test/hook', 'no_address'],
    ['a name whose server fails', 'https://servfail.webhooks.test/hook', 'eservfail'],
  ];
  it.each(cases)('%s', async (_why, raw, reason) => {
    expect(await resolveTarget(depsFor(false), parseWebhookUrl(raw))).toEqual({ kind: 'dns_error', reason });
    expect(await judge(raw)).toEqual(REFUSED);
    expect(await judge(raw, true)).toEqual(REFUSED);
  });
});

describe('accepted targets', () => {
  it('a public IPv4 and IPv6 literal, as is, without DNS', async () => {
    const before = dns.queries.length;
    expect(await resolveTarget(depsFor(false), parseWebhookUrl('https://8.8.8.8/hook'))).toEqual({ kind: 'ok', addresses: ['8.8.8.8'] });
    expect(await resolveTarget(depsFor(false), parseWebhookUrl('https://[2606:4700:4700::1111]:8443/hook'))).toEqual({
      kind: 'ok',
      addresses: ['2606:4700:4700::1111'],
    });
    expect(dns.queries.length).toBe(before);
    expect(await judge('https://8.8.8.8/hook')).toBe('ok');
  });

  it('a name resolving only to public addresses, through the test DNS server, IPv4 first', async () => {
    expect(await resolveTarget(depsFor(false), parseWebhookUrl('https://public.webhooks.test/hook?x=1'))).toEqual({
      kind: 'ok',
      addresses: ['1.1.1.1', '2606:4700:4700::1111'],
    });
    expect(await resolveTarget(depsFor(false), parseWebhookUrl('https://v4only.webhooks.test/hook'))).toEqual({ kind: 'ok', addresses: ['8.8.8.8'] });
    expect(dns.queries).toContainEqual({ name: 'public.webhooks.test', type: 'AAAA' });
    expect(await judge('https://public.webhooks.test/hook')).toBe('ok');
  });

  it('with ALLOW_PRIVATE_TARGETS: loopback, private and reserved addresses are accepted', async () => {
    expect(await resolveTarget(depsFor(true), parseWebhookUrl('https://127.0.0.1:8443/hook'))).toEqual({ kind: 'ok', addresses: ['127.0.0.1'] });
    expect(await resolveTarget(depsFor(true), parseWebhookUrl('https://loopback.webhooks.test/hook'))).toEqual({ kind: 'ok', addresses: ['127.0.0.1'] });
    expect(await resolveTarget(depsFor(true), parseWebhookUrl('https://localhost/hook'))).toEqual({ kind: 'ok', addresses: ['127.0.0.1', '::1'] });
    expect(await resolveTarget(depsFor(true), parseWebhookUrl('https://mixed.webhooks.test/hook'))).toEqual({ kind: 'ok', addresses: ['8.8.8.8', 'fd00::1'] });
    for (const raw of ['https://[::1]/', 'https://0x7f000001/', 'https://10.0.0.1/', 'https://localhost./']) expect(await judge(raw, true)).toBe('ok');
  });
});

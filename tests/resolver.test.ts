import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createResolver, type DnsResolver } from '../server/shared/dns/resolver.js';
import { TestDnsServer } from './helpers/dns-server.js';

let dns: TestDnsServer;
let resolver: DnsResolver;
beforeAll(async () => {
  dns = await TestDnsServer.start();
  resolver = createResolver({ servers: [{ host: '127.0.0.1', port: dns.port }], timeoutMs: 1500 });
});
afterAll(() => dns.stop());
beforeEach(() => dns.clear());

describe('the resolver module against a DNS server the test controls', () => {
  it('reads TXT records as their character-strings, including long split DKIM records', async () => {
    const long = [`v=DKIM1; k=rsa; p=${'A'.repeat(230)}`, 'B'.repeat(250), 'C'.repeat(100)];
    dns.add('sel._domainkey.example.com', { type: 'TXT', data: long });
    dns.add('example.com', { type: 'TXT', data: 'v=spf1 -all' });
    expect(await resolver.txt('sel._domainkey.example.com')).toEqual({ status: 'found', records: [long] });
    expect(await resolver.txt('EXAMPLE.com')).toEqual({ status: 'found', records: [['v=spf1 -all']] });
  });

  it('reads MX, A and AAAA records', async () => {
    dns.add('example.com', { type: 'MX', priority: 10, exchange: 'mx1.example.com' });
    dns.add('example.com', { type: 'MX', priority: 20, exchange: 'mx2.example.com' });
    dns.add('example.com', { type: 'A', address: '192.0.2.1' });
    dns.add('example.com', { type: 'AAAA', address: '2001:db8::1' });
    const mx = await resolver.mx('example.com');
    expect(mx.status).toBe('found');
    expect(mx.status === 'found' && mx.records.sort((a, b) => a.priority - b.priority)).toEqual([
      { exchange: 'mx1.example.com', priority: 10 },
      { exchange: 'mx2.example.com', priority: 20 },
    ]);
    expect(await resolver.a('example.com')).toEqual({ status: 'found', records: ['192.0.2.1'], ttl: 60 });
    expect(await resolver.aaaa('example.com')).toEqual({ status: 'found', records: ['2001:db8::1'], ttl: 60 });
  });

  it('tells NXDOMAIN from a name without records of the type', async () => {
    dns.add('example.com', { type: 'A', address: '192.0.2.1' });
    expect(await resolver.mx('nowhere.example.com')).toEqual({ status: 'missing', nxdomain: true });
    expect(await resolver.mx('example.com')).toEqual({ status: 'missing', nxdomain: false });
  });

  it('answers unknown, not missing, on SERVFAIL', async () => {
    dns.fail('broken.example.com');
    expect((await resolver.txt('broken.example.com')).status).toBe('unknown');
  });

  it('answers unknown within its bound when the server never answers', async () => {
    dns.silent = true;
    const started = performance.now();
    const result = await resolver.txt('example.com');
    const elapsed = performance.now() - started;
    expect(result).toEqual({ status: 'unknown', reason: expect.any(String) });
    expect(elapsed).toBeLessThan(2500);
  });
});

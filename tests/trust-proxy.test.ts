import { type Socket, connect } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SIGN_IN_LIMIT } from '../dashboard/security.js';
import { loadConfig } from '../server/shared/config.js';
import { NO_TRUSTED_PROXIES, forwardedClient, parseTrustedProxies } from '../server/shared/trusted-proxies.js';
import { adminTokenFor, postSignIn } from './helpers/dashboard.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * TRUST_PROXY (docs/api/decisions.md section 12, docs/operating/behind-a-load-balancer.md): the HTTP client is the TCP
 * peer, unless that peer is a listed proxy; then it is the rightmost address of X-Forwarded-For that is not itself a
 * listed proxy (the leftmost when all are). The dashboard's sign-in limit counts that address; a proxy's own
 * connections are not held to the per-address connection cap.
 */

const trusted = (text: string) => {
  const parsed = parseTrustedProxies(text);
  if (!parsed.ok) throw new Error(`refused ${parsed.bad}`);
  return parsed.proxies;
};

describe('parseTrustedProxies', () => {
  it.each([
    ['10.0.0.5', ['10.0.0.5'], ['10.0.0.6']],
    ['10.0.0.0/8', ['10.0.0.1', '10.255.255.255', '::ffff:10.1.2.3'], ['11.0.0.1', '::1']],
    ['192.0.2.77/24', ['192.0.2.1'], ['192.0.3.1']],
    ['2001:db8::/32', ['2001:db8::1', '2001:db8:ffff::9'], ['2001:db9::1', '10.0.0.1']],
    ['::1', ['::1'], ['127.0.0.1']],
    ['::ffff:10.0.0.0/104', ['10.0.0.9', '::ffff:10.0.0.9'], ['11.0.0.1']],
    // An IPv6 rule does not reach IPv4 peers (a BlockList would match them as ::ffff:a.b.c.d).
    ['::/0', ['2001:db8::1', '::1'], ['10.0.0.1', '127.0.0.1']],
    [' 127.0.0.1 , ,fd00::/8 ', ['127.0.0.1', 'fd12::1'], ['127.0.0.2', 'not an address', '']],
    ['', [], ['127.0.0.1', '::1']],
  ])('%j trusts %j, not %j', (text, yes, no) => {
    const proxies = trusted(text);
    for (const address of yes) expect(proxies.has(address), address).toBe(true);
    for (const address of no) expect(proxies.has(address), address).toBe(false);
  });

  it.each(['proxy.example', '10.0.0.0/33', '2001:db8::/129', '10.0.0.0/8/8', '10.0.0.0/', '10.0.0.0/x', '10.0.0.256', 'fe80::1%eth0', '::ffff:10.0.0.0/95'])(
    '%j is refused, named',
    (bad) => {
      expect(parseTrustedProxies(`127.0.0.1, ${bad}`)).toEqual({ ok: false, bad: bad.trim() });
    },
  );

  it('TRUST_PROXY in the config: the entries as given', () => {
    expect(loadConfig({ TRUST_PROXY: '10.0.0.5, 10.1.0.0/16,fd00::/8' }).trustProxy.entries).toEqual(['10.0.0.5', '10.1.0.0/16', 'fd00::/8']);
    expect(loadConfig({ SMTP_PROXY_PROTOCOL: 'true' }).smtpProxyProtocol).toBe(true);
  });
});

describe('forwardedClient', () => {
  const proxies = trusted('127.0.0.1, 10.0.0.0/8, 2001:db8:aaaa::/48');
  it.each([
    ['a peer not trusted: the header is ignored', '198.51.100.9', '203.0.113.7', '198.51.100.9'],
    ['a trusted peer, no header: the peer', '127.0.0.1', undefined, '127.0.0.1'],
    ['a trusted peer, an empty header: the peer', '127.0.0.1', '', '127.0.0.1'],
    ['a trusted peer: the address it names', '127.0.0.1', '203.0.113.7', '203.0.113.7'],
    ['an IPv4-mapped trusted peer', '::ffff:127.0.0.1', '203.0.113.7', '203.0.113.7'],
    ['what the client wrote sits left of what the proxy appended', '127.0.0.1', '192.0.2.66, 203.0.113.7', '203.0.113.7'],
    ['trusted hops on the right are skipped', '127.0.0.1', '192.0.2.66, 203.0.113.7, 10.1.1.1, 10.2.2.2', '203.0.113.7'],
    ['every entry trusted: the leftmost', '127.0.0.1', '10.9.9.9, 10.1.1.1', '10.9.9.9'],
    ['IPv6 entries', '2001:db8:aaaa::1', '2001:db8:bbbb::7, 2001:db8:aaaa::2', '2001:db8:bbbb::7'],
    ['an entry with a port', '127.0.0.1', '203.0.113.7:51000', '203.0.113.7'],
    ['a bracketed IPv6 entry with a port', '127.0.0.1', '[2001:db8:bbbb::7]:443', '2001:db8:bbbb::7'],
    ['garbage at the right end: the peer', '127.0.0.1', '203.0.113.7, unknown', '127.0.0.1'],
    ['garbage behind trusted hops: the nearest of them', '127.0.0.1', 'junk, 10.1.1.1', '10.1.1.1'],
    ['garbage left of the client: the client', '127.0.0.1', 'junk, 203.0.113.7', '203.0.113.7'],
  ])('%s', (_name, peer, header, client) => {
    expect(forwardedClient(peer, header, proxies)).toBe(client);
  });

  it('with nothing trusted, the peer whatever the header says', () => {
    expect(forwardedClient('127.0.0.1', '203.0.113.7', NO_TRUSTED_PROXIES)).toBe('127.0.0.1');
  });
});

describe('the dashboard’s sign-in limit', () => {
  let behind: TestService;
  let direct: TestService;
  beforeAll(async () => {
    [behind, direct] = await Promise.all([startService({ TRUST_PROXY: '127.0.0.1' }), startService()]);
  });
  afterAll(async () => {
    await behind?.close();
    await direct?.close();
  });

  const wrongFrom = (service: TestService, forwardedFor: string) => postSignIn(service.url, 'wrong', { 'x-forwarded-for': forwardedFor });

  it('behind a trusted proxy: counted against the forwarded client; two clients do not share a limit', async () => {
    for (let i = 0; i < SIGN_IN_LIMIT.attempts; i++) expect((await wrongFrom(behind, '203.0.113.7')).status).toBe(401);
    expect((await wrongFrom(behind, '203.0.113.7')).status).toBe(429);
    // What a client writes left of what the proxy appended does not move it out of its own limit.
    expect((await wrongFrom(behind, '192.0.2.1, 203.0.113.7')).status).toBe(429);
    // Another client through the same proxy has a limit of its own.
    expect((await wrongFrom(behind, '203.0.113.8')).status).toBe(401);
    const limited = behind.logger.entries.filter((e) => e.event === 'dashboard.sign_in_limited').map((e) => e.remoteAddress);
    expect(limited).toEqual(['203.0.113.7', '203.0.113.7']);
    expect(behind.logger.entries.filter((e) => e.event === 'dashboard.sign_in_failed').at(-1)).toMatchObject({ remoteAddress: '203.0.113.8' });
    // And the right token still signs in from the limited client.
    const right = await adminTokenFor(behind);
    expect((await postSignIn(behind.url, right, { 'x-forwarded-for': '203.0.113.7' })).status).toBe(303);
  });

  it('without TRUST_PROXY the header is ignored: a forged one does not dodge the limit', async () => {
    for (let i = 0; i < SIGN_IN_LIMIT.attempts; i++) expect((await wrongFrom(direct, `203.0.113.${i + 1}`)).status).toBe(401);
    expect((await wrongFrom(direct, '198.51.100.200')).status).toBe(429);
    const failed = direct.logger.entries.filter((e) => e.event === 'dashboard.sign_in_failed').map((e) => e.remoteAddress);
    expect(new Set(failed)).toEqual(new Set(['127.0.0.1']));
  });
});

describe('the per-address connection cap', () => {
  let capped: TestService;
  const sockets: Socket[] = [];
  beforeAll(async () => {
    capped = await startService({ TRUST_PROXY: '127.0.0.1' }, { http: { maxConnectionsPerAddress: 1 } });
  });
  afterAll(async () => {
    await capped?.close();
  });
  afterEach(() => {
    for (const s of sockets.splice(0)) s.destroy();
  });

  /** A keep-alive connection from `localAddress`: whether GET /healthz is answered on it. */
  async function answered(localAddress: string): Promise<boolean> {
    const socket = connect({ port: Number(new URL(capped.url).port), host: '127.0.0.1', localAddress });
    sockets.push(socket);
    socket.on('error', () => undefined);
    return new Promise((resolve) => {
      let received = '';
      socket.on('data', (c: Buffer) => {
        received += c.toString('latin1');
        if (received.startsWith('HTTP/1.1 200')) resolve(true);
      });
      socket.on('close', () => resolve(false));
      socket.on('connect', () => socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'));
    });
  }

  it('does not count a trusted proxy’s connections (it carries many clients); any other peer is held to it', async () => {
    expect(await answered('127.0.0.1')).toBe(true);
    expect(await answered('127.0.0.1')).toBe(true);
    expect(await answered('127.0.0.1')).toBe(true);
    expect(await answered('127.0.0.2')).toBe(true);
    expect(await answered('127.0.0.2')).toBe(false);
  });
});

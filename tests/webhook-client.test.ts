import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { get } from 'node:https';
import { createServer, type Server } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../server/shared/config.js';
import { createResolver } from '../server/shared/dns/resolver.js';
import { createMemoryLogger } from '../server/shared/logger.js';
import { ERROR_CODE_TABLE, WEBHOOK_TIMEOUT_MS, classifyPostError, postWebhook } from '../server/webhooks/http-client.js';
import { parseWebhookUrl, resolveTarget } from '../server/core/webhook-url.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { HttpsReceiver, TEST_CA_FILE } from './helpers/https-receiver.js';

/**
 * The SSRF-safe webhook client against a real HTTPS receiver on loopback, whose certificate
 * the worker trusts only through NODE_EXTRA_CA_CERTS, and names served by the test DNS server: what counts as
 * delivered, every failure as `lastError` reads it, the connection pinned to the checked address with the name in
 * SNI, the certificate check and Host, the response body never read, and a rebinding refused without connecting.
 */

let dns: TestDnsServer;
let receiver: HttpsReceiver;
let untrusted: HttpsReceiver;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  receiver = await HttpsReceiver.start();
  untrusted = await HttpsReceiver.start({ certificate: 'self-signed' });
});
afterAll(async () => {
  await Promise.all([dns.stop(), receiver.close(), untrusted.close()]);
});
afterEach(() => {
  dns.clear();
  receiver.reset();
  untrusted.reset();
});

function depsFor(allowPrivateTargets: boolean) {
  const config = loadConfig({ DATA_DIR: '/nonexistent', DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: String(allowPrivateTargets) });
  return { config, resolver: createResolver({ servers: config.dnsServers, timeoutMs: 1000 }), logger: createMemoryLogger() };
}

const HEADERS = { 'content-type': 'application/json', 'x-service-event': 'email.delivered', 'x-service-delivery': 'd-1' };
const BODY = JSON.stringify({ id: 'd-1', type: 'email.delivered', data: { detail: 'déjà reçu ✓' } });

/** hooks.webhooks.test -> 127.0.0.1, the receiver. */
function hooksName(name = 'hooks.webhooks.test'): string {
  dns.add(name, { type: 'A', address: '127.0.0.1' });
  return name;
}

async function timed<T>(run: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const start = performance.now();
  const value = await run();
  return { value, ms: performance.now() - start };
}

describe('the test CA reaches the workers through NODE_EXTRA_CA_CERTS', () => {
  it('names a file holding the fixture CA in this worker', () => {
    // A bundle global-setup wrote: the test CAs and any file the environment already named.
    const file = process.env.NODE_EXTRA_CA_CERTS ?? '';
    expect(file).toMatch(/mailstead-test-ca-[0-9a-f]{16}\.pem$/);
    expect(readFileSync(file, 'utf8')).toContain(readFileSync(TEST_CA_FILE, 'utf8').trim());
  });

  it('a plain https.get to the receiver succeeds without passing `ca`', async () => {
    const status = await new Promise<number>((resolve, reject) => {
      get(receiver.url('/plain'), (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      }).on('error', reject);
    });
    expect(status).toBe(200);
    expect(receiver.requests.map((r) => r.path)).toEqual(['/plain']);
  });

  /** A fresh node process doing the same GET, with or without the variable: it is what makes the CA trusted. */
  function childGet(env: Record<string, string>): Promise<string> {
    const script = `require('https').get(${JSON.stringify(receiver.url('/child'))}, (r) => { console.log(r.statusCode); r.resume(); }).on('error', (e) => console.log(e.code))`;
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ['-e', script], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.on('error', reject);
      child.on('close', () => resolve(out.trim()));
    });
  }

  it('a spawned process trusts the receiver only when its env carries NODE_EXTRA_CA_CERTS', async () => {
    expect(['UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'SELF_SIGNED_CERT_IN_CHAIN']).toContain(await childGet({}));
    expect(await childGet({ NODE_EXTRA_CA_CERTS: TEST_CA_FILE })).toBe('200');
  });
});

describe('postWebhook outcomes', () => {
  it('200: delivered, the body and headers as given, the name in SNI and Host, the connection to the checked IP', async () => {
    const name = hooksName();
    const deps = depsFor(true);
    const result = await postWebhook(deps, `https://${name}:${receiver.port}/hooks/in?src=mailstead`, HEADERS, BODY);
    expect(result).toEqual({ delivered: true, status: 200, error: null });
    expect(receiver.requests).toHaveLength(1);
    const req = receiver.requests[0]!;
    expect(req.method).toBe('POST');
    expect(req.path).toBe('/hooks/in?src=mailstead');
    expect(req.body.equals(Buffer.from(BODY, 'utf8'))).toBe(true);
    expect(req.headers['content-length']).toBe(String(Buffer.byteLength(BODY)));
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['x-service-event']).toBe('email.delivered');
    expect(req.headers['x-service-delivery']).toBe('d-1');
    expect(req.headers.host).toBe(`${name}:${receiver.port}`);
    expect(req.servername).toBe(name);
    // The name was resolved through the test DNS server, A and AAAA, and the connection went to its address.
    expect(dns.queries).toEqual(
      expect.arrayContaining([
        { name, type: 'A' },
        { name, type: 'AAAA' },
      ]),
    );
    expect(receiver.connections).toBe(1);
    expect(deps.logger.entries).toContainEqual(expect.objectContaining({ event: 'webhook.posted', host: name, address: '127.0.0.1', status: 200 }));
  });

  it('every 2xx is delivered', async () => {
    const name = hooksName();
    for (const status of [201, 202, 204, 299]) {
      receiver.enqueue({ status });
      expect(await postWebhook(depsFor(true), `https://${name}:${receiver.port}/`, HEADERS, BODY)).toEqual({ delivered: true, status, error: null });
    }
  });

  it('an IP-literal URL: no SNI, Host is the literal, the certificate checked against the IP', async () => {
    const result = await postWebhook(depsFor(true), `https://127.0.0.1:${receiver.port}/ip`, HEADERS, BODY);
    expect(result).toEqual({ delivered: true, status: 200, error: null });
    expect(receiver.requests[0]!.servername).toBeNull();
    expect(receiver.requests[0]!.headers.host).toBe(`127.0.0.1:${receiver.port}`);
    expect(dns.queries).toEqual([]);
  });

  it('an IPv6 literal: connected to as is, Host in brackets, no SNI, the certificate checked against the IP', async () => {
    const v6 = await HttpsReceiver.start({ host: '::1' });
    try {
      expect(await postWebhook(depsFor(true), v6.url('/six'), HEADERS, BODY)).toEqual({ delivered: true, status: 200, error: null });
      expect(v6.requests[0]!.headers.host).toBe(`[::1]:${v6.port}`);
      expect(v6.requests[0]!.servername).toBeNull();
    } finally {
      await v6.close();
    }
  });

  it.each([
    [500, 'HTTP 500'],
    [503, 'HTTP 503'],
    [410, 'HTTP 410'],
    [404, 'HTTP 404'],
    [400, 'HTTP 400'],
    [300, 'HTTP 300'],
  ])('%i is a failure: %s, with the status', async (status, error) => {
    receiver.enqueue({ status, body: 'nope' });
    expect(await postWebhook(depsFor(true), `https://${hooksName()}:${receiver.port}/`, HEADERS, BODY)).toEqual({ delivered: false, status, error });
  });

  it('a 302 is a failure and is never followed', async () => {
    const name = hooksName();
    receiver.enqueue({ redirect: `https://${name}:${receiver.port}/elsewhere` });
    expect(await postWebhook(depsFor(true), `https://${name}:${receiver.port}/hook`, HEADERS, BODY)).toEqual({
      delivered: false,
      status: 302,
      error: 'HTTP 302',
    });
    // Give a follow-up request time to arrive, were one made.
    await new Promise((r) => setTimeout(r, 200));
    expect(receiver.requests.map((r) => r.path)).toEqual(['/hook']);
  });

  it('a stall longer than the timeout: `timeout`, within the bound', async () => {
    receiver.enqueue({ stallMs: 5_000 });
    const { value, ms } = await timed(() => postWebhook(depsFor(true), `https://${hooksName()}:${receiver.port}/`, HEADERS, BODY, { timeoutMs: 300 }));
    expect(value).toEqual({ delivered: false, status: null, error: 'timeout' });
    expect(ms).toBeGreaterThanOrEqual(290);
    expect(ms).toBeLessThan(1_500);
    expect(receiver.requests).toHaveLength(1);
  });

  it('a 12 s stall against the 10 s default: `timeout` at 10 s', { timeout: 20_000 }, async () => {
    expect(WEBHOOK_TIMEOUT_MS).toBe(10_000);
    receiver.enqueue({ stallMs: 12_000 });
    const { value, ms } = await timed(() => postWebhook(depsFor(true), `https://${hooksName()}:${receiver.port}/`, HEADERS, BODY));
    expect(value).toEqual({ delivered: false, status: null, error: 'timeout' });
    expect(ms).toBeGreaterThanOrEqual(9_900);
    expect(ms).toBeLessThan(11_000);
  });

  it('a stall shorter than the timeout is delivered', async () => {
    receiver.enqueue({ stallMs: 200 });
    expect(await postWebhook(depsFor(true), `https://${hooksName()}:${receiver.port}/`, HEADERS, BODY, { timeoutMs: 2_000 })).toEqual({
      delivered: true,
      status: 200,
      error: null,
    });
  });

  it('a closed port: connection_refused', async () => {
    const port = await closedPort();
    expect(await postWebhook(depsFor(true), `https://${hooksName()}:${port}/`, HEADERS, BODY)).toEqual({
      delivered: false,
      status: null,
      error: 'connection_refused',
    });
  });

  it('the connection closed without an answer: connection_error', async () => {
    receiver.enqueue({ close: true });
    expect(await postWebhook(depsFor(true), `https://${hooksName()}:${receiver.port}/`, HEADERS, BODY)).toEqual({
      delivered: false,
      status: null,
      error: 'connection_error',
    });
    expect(receiver.requests).toHaveLength(1);
  });

  it('a certificate no trusted CA signed: tls_error, no request sent', async () => {
    expect(await postWebhook(depsFor(true), `https://${hooksName()}:${untrusted.port}/`, HEADERS, BODY)).toEqual({
      delivered: false,
      status: null,
      error: 'tls_error',
    });
    expect(untrusted.connections).toBe(1);
    expect(untrusted.requests).toHaveLength(0);
  });

  it('a trusted certificate for another name: tls_error (checked against the URL name, not the IP connected to)', async () => {
    // The certificate covers 127.0.0.1 and *.webhooks.test, not hooks.elsewhere.test.
    const name = hooksName('hooks.elsewhere.test');
    expect(await postWebhook(depsFor(true), `https://${name}:${receiver.port}/`, HEADERS, BODY)).toEqual({
      delivered: false,
      status: null,
      error: 'tls_error',
    });
    expect(receiver.requests).toHaveLength(0);
  });

  it('a peer that does not speak TLS: tls_error', async () => {
    const plain = createServer((socket) => socket.end('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n'));
    const port = await listen(plain);
    try {
      expect(await postWebhook(depsFor(true), `https://${hooksName()}:${port}/`, HEADERS, BODY)).toEqual({
        delivered: false,
        status: null,
        error: 'tls_error',
      });
    } finally {
      plain.close();
    }
  });

  it('a name that does not resolve: dns_error, nothing connected', async () => {
    expect(await postWebhook(depsFor(true), `https://missing.webhooks.test:${receiver.port}/`, HEADERS, BODY)).toEqual({
      delivered: false,
      status: null,
      error: 'dns_error',
    });
    expect(receiver.connections).toBe(0);
  });

  it('a 50 MB response body is never read: the connection is dropped once the status is in', async () => {
    const size = 50 * 1024 * 1024;
    receiver.enqueue({ bigBody: size });
    const heapBefore = process.memoryUsage().heapUsed;
    const { value, ms } = await timed(() => postWebhook(depsFor(true), `https://${hooksName()}:${receiver.port}/`, HEADERS, BODY));
    expect(value).toEqual({ delivered: true, status: 200, error: null });
    const big = receiver.bigBodies[0]!;
    await big.done;
    // The receiver saw the socket close long before it could write everything: the client took only what the socket
    // buffers held when it hung up.
    expect(big.closedEarly).toBe(true);
    expect(big.written).toBeLessThan(size / 5);
    expect(ms).toBeLessThan(2_000);
    expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(size / 2);
  });
});

describe('SSRF: the address is checked at every attempt and connected to as checked', () => {
  it('rebinding: public at creation, loopback at delivery -> blocked_host, no connection made', async () => {
    const deps = depsFor(false);
    const url = `https://rebind.webhooks.test:${receiver.port}/hook`;
    dns.add('rebind.webhooks.test', { type: 'A', address: '93.184.215.14' });
    expect(await resolveTarget(deps, parseWebhookUrl(url))).toEqual({ kind: 'ok', addresses: ['93.184.215.14'] });
    dns.drop('rebind.webhooks.test');
    dns.add('rebind.webhooks.test', { type: 'A', address: '127.0.0.1' });
    expect(await postWebhook(deps, url, HEADERS, BODY)).toEqual({ delivered: false, status: null, error: 'blocked_host' });
    expect(receiver.connections).toBe(0);
    expect(receiver.requests).toHaveLength(0);
    expect(deps.logger.entries).toContainEqual(
      expect.objectContaining({ level: 'warn', event: 'webhook.blocked_host', host: 'rebind.webhooks.test', address: '127.0.0.1' }),
    );
  });

  it('rebinding through AAAA only: a private IPv6 answer beside the public A is blocked too', async () => {
    dns.add('rebind6.webhooks.test', { type: 'A', address: '127.0.0.1' });
    dns.add('rebind6.webhooks.test', { type: 'AAAA', address: '::1' });
    expect(await postWebhook(depsFor(false), `https://rebind6.webhooks.test:${receiver.port}/`, HEADERS, BODY)).toEqual({
      delivered: false,
      status: null,
      error: 'blocked_host',
    });
    expect(receiver.connections).toBe(0);
  });

  it.each(['127.0.0.1', '0x7f000001', '[::ffff:7f00:1]', 'localhost'])(
    'the literal %s without ALLOW_PRIVATE_TARGETS: blocked_host, no connection',
    async (host) => {
      expect(await postWebhook(depsFor(false), `https://${host}:${receiver.port}/`, HEADERS, BODY)).toEqual({
        delivered: false,
        status: null,
        error: 'blocked_host',
      });
      expect(receiver.connections).toBe(0);
    },
  );

  it('an invalid URL is refused without connecting', async () => {
    expect(await postWebhook(depsFor(true), `http://127.0.0.1:${receiver.port}/`, HEADERS, BODY)).toEqual({
      delivered: false,
      status: null,
      error: 'invalid_url',
    });
    expect(receiver.connections).toBe(0);
  });

  it('the next checked address is tried after a refused connection', async () => {
    // 127.0.0.2 is loopback too, with nothing listening on the receiver's port there.
    dns.add('two.webhooks.test', { type: 'A', address: '127.0.0.2' });
    dns.add('two.webhooks.test', { type: 'A', address: '127.0.0.1' });
    expect(await postWebhook(depsFor(true), `https://two.webhooks.test:${receiver.port}/`, HEADERS, BODY)).toEqual({
      delivered: true,
      status: 200,
      error: null,
    });
    expect(receiver.requests).toHaveLength(1);
  });

  it('never after a TLS failure', async () => {
    let second = 0;
    const spy = createServer((socket) => {
      second++;
      socket.destroy();
    });
    await listen(spy, '127.0.0.2', untrusted.port);
    try {
      dns.add('two.webhooks.test', { type: 'A', address: '127.0.0.1' });
      dns.add('two.webhooks.test', { type: 'A', address: '127.0.0.2' });
      expect(await postWebhook(depsFor(true), `https://two.webhooks.test:${untrusted.port}/`, HEADERS, BODY)).toEqual({
        delivered: false,
        status: null,
        error: 'tls_error',
      });
      expect(untrusted.connections).toBe(1);
      expect(second).toBe(0);
    } finally {
      spy.close();
    }
  });

  it('but never after an answer, a timeout or a closed connection', async () => {
    // A second listener on 127.0.0.2 at the receiver's port counts any connection that reaches the next address.
    let second = 0;
    const spy = createServer((socket) => {
      second++;
      socket.destroy();
    });
    await listen(spy, '127.0.0.2', receiver.port);
    try {
      dns.add('two.webhooks.test', { type: 'A', address: '127.0.0.1' });
      dns.add('two.webhooks.test', { type: 'A', address: '127.0.0.2' });
      const url = `https://two.webhooks.test:${receiver.port}/`;
      receiver.enqueue({ status: 500 }, { stallMs: 2_000 }, { close: true });
      expect(await postWebhook(depsFor(true), url, HEADERS, BODY)).toEqual({ delivered: false, status: 500, error: 'HTTP 500' });
      expect(await postWebhook(depsFor(true), url, HEADERS, BODY, { timeoutMs: 200 })).toEqual({ delivered: false, status: null, error: 'timeout' });
      expect(await postWebhook(depsFor(true), url, HEADERS, BODY)).toEqual({ delivered: false, status: null, error: 'connection_error' });
      expect(second).toBe(0);
    } finally {
      spy.close();
    }
  });
});

describe('error codes as lastError reads them', () => {
  it.each([
    ['ECONNREFUSED', 'connection_refused'],
    ['ETIMEDOUT', 'timeout'],
    ['EPROTO', 'tls_error'],
    ['ERR_TLS_CERT_ALTNAME_INVALID', 'tls_error'],
    ['ERR_SSL_WRONG_VERSION_NUMBER', 'tls_error'],
    ['CERT_HAS_EXPIRED', 'tls_error'],
    ['CERT_NOT_YET_VALID', 'tls_error'],
    ['DEPTH_ZERO_SELF_SIGNED_CERT', 'tls_error'],
    ['SELF_SIGNED_CERT_IN_CHAIN', 'tls_error'],
    ['UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'tls_error'],
    ['UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'tls_error'],
    ['ECONNRESET', 'connection_error'],
    ['EHOSTUNREACH', 'connection_error'],
    ['ENETUNREACH', 'connection_error'],
    ['EPIPE', 'connection_error'],
    [undefined, 'connection_error'],
  ])('%s -> %s', (code, error) => {
    expect(classifyPostError(code)).toBe(error);
  });

  it('every row of the table reads as its error', () => {
    for (const row of ERROR_CODE_TABLE) expect(classifyPostError(row.prefix ? `${row.code}SOMETHING` : row.code)).toBe(row.error);
  });
});

function listen(server: Server, host = '127.0.0.1', port = 0): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const address = server.address();
      resolve(typeof address === 'object' && address ? address.port : 0);
    });
  });
}

/** A port nothing listens on: one just opened and closed. */
async function closedPort(): Promise<number> {
  const server = createServer();
  const port = await listen(server);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

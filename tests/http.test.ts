import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService } from './helpers/service.js';

/**
 * The HTTP surface against docs/api/contract.md (Errors, Limits): one envelope for every error, including
 * the ones raised before any route runs (unknown path, a method the path does not serve, a request line Node cannot
 * parse) and an unexpected failure, whose internal message never reaches the caller. The edge (auth before the
 * body, connection caps and timeouts, nesting depth) is in http-edge.test.ts and http-depth.test.ts.
 */

const MIB = 1024 * 1024;
const CHUNK = 64 * 1024;

let service: TestService;
let key: string;

beforeAll(async () => {
  service = await startService();
  key = (await service.newAccount({ name: 'HTTP surface' })).key;
});
afterAll(async () => {
  await service?.close();
});

/** Asserts the error envelope of docs/api/contract.md: exactly `{ error: { code, message } }`, served as JSON. */
function expectEnvelope(res: { status: number; headers: Headers | Record<string, unknown>; body: unknown }, status: number | number[], code?: string): void {
  const statuses = Array.isArray(status) ? status : [status];
  expect(statuses, JSON.stringify(res.body)).toContain(res.status);
  expect(res.body).toEqual({ error: { code: code ?? expect.any(String), message: expect.any(String) } });
  expect((res.body as { error: { message: string } }).error.message.length).toBeGreaterThan(0);
  const type = res.headers instanceof Headers ? res.headers.get('content-type') : res.headers['content-type'];
  expect(String(type)).toMatch(/^application\/json/);
}

interface RawResponse {
  status: number;
  headers: Record<string, unknown>;
  body: unknown;
}

/** Parses a response body as JSON when it is JSON, else keeps the text. */
function parse(text: string): unknown {
  try {
    return text === '' ? null : JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * A POST over node:http that streams `total` bytes in CHUNK-sized writes, honouring backpressure, and stops writing
 * as soon as the response head arrives. Resolves with the response and how many bytes were written by then, so a
 * test can tell that the server answered before the body was finished.
 */
function streamPost(
  path: string,
  opts: { headers: Record<string, string>; total: number; prefix?: string; suffix?: string; hold?: boolean },
): Promise<RawResponse & { written: number; finished: boolean }> {
  const url = new URL(`${service.base}${path}`);
  return new Promise((resolve, reject) => {
    let written = 0;
    let answered = false;
    let finished = false;
    const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: opts.headers });
    req.on('response', (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: parse(Buffer.concat(chunks).toString('utf8')), written, finished });
        req.destroy();
      });
      res.on('error', reject);
    });
    // Once the answer is in, the server may drop the connection while bytes are still on the way: not a failure.
    req.on('error', (err) => {
      if (!answered) reject(err);
    });
    const prefix = Buffer.from(opts.prefix ?? '');
    const suffix = Buffer.from(opts.suffix ?? '');
    const pump = () => {
      while (!answered && written < opts.total) {
        const size = Math.min(CHUNK, opts.total - written);
        const chunk = Buffer.alloc(size, 'a');
        // The JSON frame around the filler, so an under-limit body can be a real request.
        if (written === 0) prefix.copy(chunk, 0);
        if (written + size === opts.total) suffix.copy(chunk, size - suffix.length);
        written += size;
        if (!req.write(chunk)) {
          req.once('drain', () => setImmediate(pump));
          return;
        }
      }
      // `hold` keeps the request open after `total` bytes, as a client still sending would.
      if (!answered && written >= opts.total && !opts.hold) {
        finished = true;
        req.end();
      }
    };
    req.flushHeaders();
    setImmediate(pump);
  });
}

/** Sends bytes over a raw socket and reads until the server closes; returns the parsed status line and JSON body. */
function rawExchange(payload: string): Promise<RawResponse & { raw: string }> {
  const url = new URL(service.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const [head = '', body = ''] = raw.split('\r\n\r\n', 2);
      const [statusLine = '', ...headerLines] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of headerLines) {
        const i = line.indexOf(':');
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      resolve({ raw, status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0), headers, body: parse(body) });
    });
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer within 10 s')));
    socket.write(payload);
  });
}

/** A JSON body for POST /keys of exactly `size` bytes, its name padded out. */
function keyBodyOfSize(size: number): string {
  const frame = '{"name":""}';
  return `{"name":"${'a'.repeat(size - frame.length)}"}`;
}

describe('unknown paths and methods', () => {
  it.each([
    ['GET', '/api/v1/nope'],
    ['POST', '/api/v1/nope'],
    // GET /api/v1 is the index (tests/openapi.test.ts); a document it does not serve is unknown.
    ['GET', '/api/v1/openapi.yaml'],
    ['GET', '/api/v2/account'],
    ['GET', '/nope'],
    ['GET', '/'],
  ])('%s %s is 404 not_found in the envelope', async (method, path) => {
    const res = await fetch(`${service.url}${path}`, { method, headers: { authorization: `Bearer ${key}` } });
    expectEnvelope({ status: res.status, headers: res.headers, body: parse(await res.text()) }, 404, 'not_found');
  });

  it('an unknown path answers the same with or without a key', async () => {
    const withKey = await service.api('GET', '/nope', { key });
    const without = await service.api('GET', '/nope');
    expectEnvelope(withKey, 404, 'not_found');
    expectEnvelope(without, 404, 'not_found');
  });

  it.each([
    ['PUT', '/keys', 'GET, HEAD, POST'],
    ['PATCH', '/account', 'GET, HEAD'],
    ['DELETE', '/account', 'GET, HEAD'],
    ['PUT', '/accounts', 'GET, HEAD, POST'],
    ['POST', '/account', 'GET, HEAD'],
  ])('%s %s (a method the path does not have) is 405 method_not_allowed with Allow: %s', async (method, path, allow) => {
    const res = await service.api(method, path, { key, body: {} });
    expectEnvelope(res, 405, 'method_not_allowed');
    expect(res.headers.get('allow')).toBe(allow);
  });

  it('a method /healthz does not have is 405 method_not_allowed with Allow: GET, HEAD', async () => {
    const res = await fetch(`${service.url}/healthz`, { method: 'POST' });
    expectEnvelope({ status: res.status, headers: res.headers, body: parse(await res.text()) }, 405, 'method_not_allowed');
    expect(res.headers.get('allow')).toBe('GET, HEAD');
  });
});

describe('GET /healthz', () => {
  it('answers 200 without any key', async () => {
    const res = await fetch(`${service.url}/healthz`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await res.json()).toEqual({ status: 'ok', deliveryMode: 'direct', state: service.deps.store.engine });
  });

  it('ignores a bad key instead of refusing it', async () => {
    const res = await fetch(`${service.url}/healthz`, { headers: { authorization: 'Bearer ms_nonsense' } });
    expect(res.status).toBe(200);
  });
});

describe('400 invalid_json', () => {
  it.each([
    ['a truncated object', '{"name":'],
    ['a bare word', 'name=ci'],
    ['a trailing comma', '{"name":"ci",}'],
    ['single quotes', "{'name':'ci'}"],
  ])('%s on POST /keys', async (_label, rawBody) => {
    const res = await service.api('POST', '/keys', { key, rawBody, headers: { 'content-type': 'application/json' } });
    expectEnvelope(res, 400, 'invalid_json');
  });

  it('an empty body on POST /keys', async () => {
    const res = await service.api('POST', '/keys', { key, rawBody: '', headers: { 'content-type': 'application/json' } });
    expectEnvelope(res, 400, 'invalid_json');
  });

  it('no body at all on POST /keys', async () => {
    const res = await service.api('POST', '/keys', { key });
    expectEnvelope(res, 400, 'invalid_json');
  });

  it('whitespace only on POST /keys', async () => {
    const res = await service.api('POST', '/keys', { key, rawBody: '  \n\t ', headers: { 'content-type': 'application/json' } });
    expectEnvelope(res, 400, 'invalid_json');
  });
});

describe('413 body_too_large (the body must be under 1 MiB)', () => {
  it('a body of exactly 1 MiB sent with Content-Length', async () => {
    const body = keyBodyOfSize(MIB);
    expect(Buffer.byteLength(body)).toBe(MIB);
    const res = await service.api('POST', '/keys', { key, rawBody: body, headers: { 'content-type': 'application/json' } });
    expectEnvelope(res, 413, 'body_too_large');
  });

  it('a body over 1 MiB sent with Content-Length', async () => {
    const res = await service.api('POST', '/keys', { key, rawBody: keyBodyOfSize(MIB + 100_000), headers: { 'content-type': 'application/json' } });
    expectEnvelope(res, 413, 'body_too_large');
  });

  it('authentication comes before the body: an oversized body without a key is 401 invalid_key', async () => {
    const res = await service.api('POST', '/keys', { rawBody: keyBodyOfSize(MIB), headers: { 'content-type': 'application/json' } });
    expectEnvelope(res, 401, 'invalid_key');
  });

  it('a chunked body is refused once 1 MiB has arrived, before the client has sent it all', async () => {
    const total = 64 * MIB;
    const res = await streamPost('/keys', {
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      total,
    });
    expectEnvelope(res, 413, 'body_too_large');
    expect(res.finished).toBe(false);
    expect(res.written).toBeLessThan(total);
    expect(res.written).toBeGreaterThanOrEqual(MIB);
  });

  it('a Content-Length claiming more than 1 MiB is refused without waiting for the body', async () => {
    const res = await streamPost('/keys', {
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': String(2 * MIB) },
      // One byte goes out and the request stays open, far from the 2 MiB claimed.
      total: 1,
      hold: true,
    });
    expectEnvelope(res, 413, 'body_too_large');
    expect(res.finished).toBe(false);
  });

  it('a Content-Length of exactly 1 MiB with only part of the body sent is refused at once', async () => {
    const res = await streamPost('/keys', {
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': String(MIB) },
      total: 1,
      hold: true,
    });
    expectEnvelope(res, 413, 'body_too_large');
  });

  it('a body one byte under 1 MiB is read and validated (422, not 413)', async () => {
    const body = keyBodyOfSize(MIB - 1);
    expect(Buffer.byteLength(body)).toBe(MIB - 1);
    const res = await service.api('POST', '/keys', { key, rawBody: body, headers: { 'content-type': 'application/json' } });
    expectEnvelope(res, 422, 'invalid_request');
    expect(res.body.error.message).toContain('name');
  });

  it('a chunked body one byte under 1 MiB is read and validated (422, not 413)', async () => {
    const res = await streamPost('/keys', {
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      total: MIB - 1,
      prefix: '{"name":"',
      suffix: '"}',
    });
    expect(res.finished).toBe(true);
    expectEnvelope(res, 422, 'invalid_request');
    expect((res.body as { error: { message: string } }).error.message).toContain('name');
  });
});

describe('after a 413 the connection is closed or still usable', () => {
  /**
   * HTTP/1.1 on a raw socket: the oversized request, then (once the 413 is in) the rest of its body and a second
   * request on the same connection. A server that leaves the body unread must say `Connection: close` and close;
   * one that keeps the connection must answer the second request.
   */
  async function afterRefusal(
    head: string,
    bodyChunks: (send: (b: string | Buffer) => void) => void,
    rest: string | Buffer,
  ): Promise<{ first: string; second: string; closed: boolean }> {
    const url = new URL(service.url);
    const socket = connect(Number(url.port), url.hostname);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    let received = '';
    let closed = false;
    socket.on('data', (c: Buffer) => (received += c.toString('latin1')));
    socket.on('error', () => undefined);
    socket.on('close', () => (closed = true));
    const until = async (done: () => boolean, ms: number) => {
      const end = Date.now() + ms;
      while (!done() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
    };
    socket.write(head);
    // Body until the answer arrives (or 8 MiB, far past the limit).
    let sent = 0;
    while (!received.includes('\r\n\r\n') && !closed && sent < 8 * MIB) {
      bodyChunks((b) => {
        sent += b.length;
        socket.write(b);
      });
      await new Promise((r) => setImmediate(r));
    }
    await until(() => /\r\n\r\n\{.*\}\}/s.test(received) || closed, 5000);
    const first = received;
    received = '';
    if (!closed) socket.write(rest);
    await until(() => closed || /\r\n\r\n\{.*\}/s.test(received), 3000);
    const second = received;
    socket.destroy();
    return { first, second, closed };
  }

  const expectClosedOrServed = (r: { first: string; second: string; closed: boolean }) => {
    expect(r.first).toMatch(/^HTTP\/1\.1 413 /);
    if (/\r\nconnection: close\r\n/i.test(r.first)) {
      expect(r.closed, 'the 413 said Connection: close but the server kept the connection').toBe(true);
      return;
    }
    // Kept alive: the next request on the connection is answered.
    expect(r.second, `413 kept the connection alive but the next request got: ${JSON.stringify(r.second.slice(0, 200))}`).toMatch(/^HTTP\/1\.1 200 /);
  };

  it('a chunked body refused at 1 MiB', async () => {
    const chunk = Buffer.alloc(CHUNK, 'a');
    const r = await afterRefusal(
      `POST /api/v1/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
      (send) => {
        send(`${CHUNK.toString(16)}\r\n`);
        send(chunk);
        send('\r\n');
      },
      '0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n',
    );
    expectClosedOrServed(r);
  });

  it('a Content-Length over 1 MiB refused unread', async () => {
    const total = 2 * MIB;
    const r = await afterRefusal(
      `POST /api/v1/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${total}\r\n\r\n`,
      // Nothing of the body goes out before the answer...
      () => undefined,
      // ...then all of it, and the next request.
      Buffer.concat([Buffer.alloc(total, 'a'), Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')]),
    );
    expectClosedOrServed(r);
  });
});

describe('422 invalid_request names the first failing field', () => {
  it.each([
    ['name of the wrong type', { name: 5 }, 'name'],
    ['name missing', { scopes: ['keys:read'] }, 'name'],
    ['name empty', { name: '' }, 'name'],
    ['name over 60 characters', { name: 'x'.repeat(61) }, 'name'],
    ['scopes empty', { name: 'ci', scopes: [] }, 'scopes'],
    ['scopes not an array', { name: 'ci', scopes: 'keys:read' }, 'scopes'],
    ['an unknown scope', { name: 'ci', scopes: ['keys:read', 'mail:everything'] }, 'scopes'],
    ['an unknown field', { name: 'ci', colour: 'blue' }, 'colour'],
  ])('%s', async (_label, body, field) => {
    const res = await service.api('POST', '/keys', { key, body });
    expectEnvelope(res, 422, 'invalid_request');
    expect(res.body.error.message).toContain(field);
  });

  it.each([
    ['an array', []],
    ['a string', 'ci'],
    ['a number', 5],
    ['null', null],
  ])('a body that is %s, not an object', async (_label, body) => {
    const res = await service.api('POST', '/keys', { key, rawBody: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
    expectEnvelope(res, 422, 'invalid_request');
  });

  it('a bad query parameter names it', async () => {
    const res = await service.api('GET', '/keys?limit=0', { key });
    expectEnvelope(res, 422, 'invalid_request');
    expect(res.body.error.message).toContain('limit');
  });
});

describe('an unexpected error', () => {
  let broken: TestService;
  let brokenKey: string;

  beforeAll(async () => {
    broken = await startService();
    brokenKey = (await broken.newAccount({ name: 'Broken' })).key;
    // The database handle goes away under the running service: every query now throws inside a route.
    broken.deps.store.close();
  });
  afterAll(async () => {
    await broken?.close();
  });

  it('answers 500 internal_error with a generic message that does not leak the cause', async () => {
    const res = await broken.api('GET', '/account', { key: brokenKey });
    expectEnvelope(res, 500, 'internal_error');
    const message: string = res.body.error.message;
    expect(message).not.toMatch(/sqlite|database|connection|not open|TypeError|Error:|at \w+ \(/i);
    expect(JSON.stringify(res.body)).not.toMatch(/sqlite|not open/i);
  });

  it('logs the cause under a request id that the answer carries', async () => {
    const res = await broken.api('GET', '/account', { key: brokenKey });
    expect(res.status).toBe(500);
    const entries = broken.logger.entries.filter((e) => e.event === 'http.unhandled_error');
    expect(entries.length).toBeGreaterThan(0);
    const last = entries[entries.length - 1]!;
    expect(typeof last.requestId).toBe('string');
    expect(res.body.error.message).toContain(String(last.requestId));
    expect(last.err).toBeInstanceOf(Error);
    // SQLite: "The database connection is not open"; Postgres: drizzle's "Failed query", caused by the ended pool.
    const err = last.err as Error & { cause?: Error };
    expect(`${err.message} ${err.cause?.message ?? ''}`).toMatch(/not open|database|after calling end on the pool/i);
  });
});

describe('a request Node cannot parse', () => {
  it('a malformed request line gets an HTTP 400 whose body is the envelope', async () => {
    const res = await rawExchange('THIS IS NOT HTTP\r\n\r\n');
    expect(res.status, res.raw).toBe(400);
    expectEnvelope(res, 400);
  });

  it('a malformed header gets an HTTP 400 whose body is the envelope', async () => {
    const res = await rawExchange('GET /api/v1/account HTTP/1.1\r\nHost: x\r\nBad Header Without Colon\r\n\r\n');
    expect(res.status, res.raw).toBe(400);
    expectEnvelope(res, 400);
  });

  it('the server keeps serving after a malformed request', async () => {
    await rawExchange('\x00\x01\x02 garbage\r\n\r\n');
    const res = await fetch(`${service.url}/healthz`);
    expect(res.status).toBe(200);
  });
});

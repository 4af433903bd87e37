import { createServer, type Server } from 'node:http';
import { type AddressInfo, createServer as createTcpServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { chunkedEnd, createHttpPoster, parseResponseHead } from '../scripts/lib/http-poster.js';

/** The benchmarks' lean HTTP client (scripts/lib/http-poster.ts) against node:http and scripted raw peers. */
const servers: { close(): void }[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

function listen(server: Server | ReturnType<typeof createTcpServer>): Promise<number> {
  servers.push(server);
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

describe('the benchmarks’ HTTP poster', () => {
  it('posts bodies over keep-alive connections, at most `concurrency` of them, and reads each status', async () => {
    const sockets = new Set<unknown>();
    const bodies: string[] = [];
    const server = createServer((req, res) => {
      sockets.add(req.socket);
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (d: string) => (body += d));
      req.on('end', () => {
        bodies.push(body);
        if (req.headers.authorization !== 'Bearer k') res.writeHead(401).end('{}');
        else if (body.includes('"chunked"'))
          res.end(); // node writes Content-Length: 0
        else if (body.includes('"stream"')) {
          res.writeHead(202);
          res.write('{"a":');
          setTimeout(() => res.end('1}'), 5); // chunked: no length was set
        } else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ echo: body.length }));
      });
    });
    const port = await listen(server);
    const poster = createHttpPoster(`http://127.0.0.1:${port}/api/v1/emails`, { authorization: 'Bearer k', 'content-type': 'application/json' }, 4);
    const payloads = Array.from({ length: 40 }, (_, i) => JSON.stringify({ i, text: 'é'.repeat(i * 50) }));
    const statuses = await Promise.all(payloads.map((p) => poster.post(p)));
    expect(statuses).toEqual(payloads.map(() => 200));
    expect(bodies.sort()).toEqual([...payloads].sort());
    expect(sockets.size).toBeLessThanOrEqual(4);
    expect(await poster.post('{"kind":"stream"}')).toBe(202);
    expect(await poster.post('{"kind":"chunked"}')).toBe(200);
    poster.close();
    const other = createHttpPoster(`http://127.0.0.1:${port}/`, {}, 1);
    expect(await other.post('{}')).toBe(401);
    other.close();
  });

  it('reconnects when the server closes the connection, and rejects a request whose connection dies unanswered', async () => {
    // The first connection answers with Connection: close and lingers open: the poster must not send on it again.
    let n = 0;
    const onConnection: number[] = [];
    let connections = 0;
    const raw = createTcpServer((socket) => {
      const c = connections++;
      socket.on('data', () => {
        n++;
        onConnection.push(c);
        if (n === 1) {
          socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}');
          setTimeout(() => socket.end(), 200);
        } else if (n === 2) socket.destroy();
        else socket.write('HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n');
      });
    });
    const port = await listen(raw);
    const poster = createHttpPoster(`http://127.0.0.1:${port}/x`, {}, 1);
    expect(await poster.post('{}')).toBe(200);
    await expect(poster.post('{}')).rejects.toThrow(/closed before the response/);
    expect(await poster.post('{}')).toBe(201);
    expect(onConnection).toEqual([0, 1, 2]);
    poster.close();
  });

  it('close() rejects the request in flight and the queued ones; an answer nobody asked for drops its connection', async () => {
    const silent = createTcpServer(() => undefined); // takes requests, never answers
    const port = await listen(silent);
    const poster = createHttpPoster(`http://127.0.0.1:${port}/x`, {}, 1);
    const inFlight = poster.post('{}');
    const queued = poster.post('{}');
    await new Promise((r) => setTimeout(r, 20));
    poster.close();
    await expect(inFlight).rejects.toThrow(/closed/);
    await expect(queued).rejects.toThrow(/closed/);

    // The server answers each request, then sends a second, unasked answer on the same connection after a moment.
    let connections = 0;
    const chatty = createTcpServer((socket) => {
      connections++;
      socket.on('data', () => {
        socket.write('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n');
        setTimeout(() => socket.writable && socket.write('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n'), 10);
      });
    });
    const chattyPort = await listen(chatty);
    const other = createHttpPoster(`http://127.0.0.1:${chattyPort}/x`, {}, 1);
    expect(await other.post('{}')).toBe(200);
    await new Promise((r) => setTimeout(r, 40));
    expect(await other.post('{}')).toBe(200);
    expect(connections).toBe(2);
    other.close();
  });

  it('parses response heads and chunked bodies split anywhere', () => {
    expect(parseResponseHead('HTTP/1.1 429 Too Many Requests\r\nContent-Length: 12\r\nConnection: keep-alive')).toEqual({
      status: 429,
      length: 12,
      close: false,
    });
    expect(parseResponseHead('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close')).toEqual({ status: 200, length: 'chunked', close: true });
    expect(parseResponseHead('HTTP/1.1 204 No Content\r\nDate: x')).toEqual({ status: 204, length: 0, close: false });
    expect(() => parseResponseHead('HTTP/1.1 200 OK\r\nDate: x')).toThrow(/without Content-Length/);
    expect(() => parseResponseHead('SSH-2.0-OpenSSH')).toThrow(/not an HTTP/);
    expect(parseResponseHead('HTTP/1.0 200 OK\r\nContent-Length: 0')).toEqual({ status: 200, length: 0, close: true });
    expect(parseResponseHead('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0')).toEqual({ status: 200, length: 0, close: false });
    expect(() => parseResponseHead('HTTP/1.1 100 Continue')).toThrow(/interim/);
    expect(() => createHttpPoster('https://127.0.0.1:1/x', {}, 1)).toThrow(/plain HTTP/);
    const body = Buffer.from('5\r\nhello\r\n0\r\n\r\n');
    for (let cut = 0; cut < body.length; cut++) expect(chunkedEnd(body.subarray(0, cut), 0)).toBe(-1);
    expect(chunkedEnd(body, 0)).toBe(body.length);
    expect(() => chunkedEnd(Buffer.from('0\r\nX-Trailer: 1\r\n\r\n'), 0)).toThrow(/trailers/);
  });
});

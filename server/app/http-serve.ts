import type { AddressInfo, Socket } from 'node:net';
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import { RequestError, getRequestListener } from '@hono/node-server';
import type { App } from './http-app.js';
import type { Logger } from '../shared/logger.js';
import { clientKey } from '../shared/ip-ranges.js';
import type { TrustedProxies } from '../shared/trusted-proxies.js';

/** Open connections the server accepts in all; one more is closed at once. */
export const MAX_CONNECTIONS = 1024;
/** Open connections the server accepts from one remote address; one more is closed at once. */
export const MAX_CONNECTIONS_PER_ADDRESS = 128;
/** Time for a request's headers to arrive (counted from the connection, or from the previous request's end). */
export const HEADERS_TIMEOUT_MS = 10_000;
/** Time for a whole request, headers and body, to arrive; a body is under 1 MB. */
export const REQUEST_TIMEOUT_MS = 30_000;
/** How long an idle keep-alive connection is kept for its next request. */
export const KEEP_ALIVE_TIMEOUT_MS = 5_000;
/** close(): answers in flight get this long (the engine's stop waits as long for its replies). */
export const CLOSE_GRACE_MS = 10_000;
/** The slowest reader a large answer waits for beyond the request timeout before its connection counts as stalled. */
const MIN_DRAIN_BYTES_PER_SECOND = 64 * 1024;
/** How often node looks for requests past those timeouts (its own default, 30 s, would stretch a 10 s limit to 40). */
const TIMEOUT_CHECK_INTERVAL_MS = 1_000;

export interface HttpServerOptions {
  maxConnections?: number;
  maxConnectionsPerAddress?: number;
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  keepAliveTimeoutMs?: number;
  timeoutCheckIntervalMs?: number;
  /** How long close() lets connections busy with a request finish before closing them whatever they do. */
  closeGraceMs?: number;
  /** TRUST_PROXY: a proxy carries many clients' connections, so the per-address cap does not count its own. */
  trustedProxies?: TrustedProxies;
  /** Where refused connections are noted (debug level); none when omitted. */
  logger?: Logger;
}

/** The error envelope, written straight to a socket for what node refuses before any route runs. */
function rawAnswer(status: string, code: string, message: string): string {
  const body = JSON.stringify({ error: { code, message } });
  return `HTTP/1.1 ${status}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}

/** Node's refusals of a request it cannot take, by the code of its error; anything else is a malformed request. */
const CLIENT_ERRORS: Record<string, [status: string, code: string, message: string]> = {
  HPE_HEADER_OVERFLOW: ['431 Request Header Fields Too Large', 'invalid_request', 'The request headers are too large.'],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: ['413 Payload Too Large', 'body_too_large', 'The chunk extensions of the request body are too large.'],
  ERR_HTTP_REQUEST_TIMEOUT: ['408 Request Timeout', 'invalid_request', 'The request took too long to arrive.'],
};
const MALFORMED: [string, string, string] = ['400 Bad Request', 'invalid_request', 'Malformed HTTP request.'];

/** Starts the HTTP server; resolves with its address once listening. */
export async function listenHttp(
  app: App,
  host: string,
  port: number,
  options: HttpServerOptions = {},
): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const json = { 'Content-Type': 'application/json' };
  const listener = getRequestListener(app.fetch, {
    // What the adaptor refuses before the app sees the request (no Host header, a Host that is not a host name): in
    // the envelope too, where it would answer a bare 400.
    errorHandler: (err) => {
      if (err instanceof RequestError) {
        const message = err.message === 'Missing host header' ? 'The request has no Host header.' : `Bad request: ${err.message}.`;
        return new Response(JSON.stringify({ error: { code: 'invalid_request', message } }), { status: 400, headers: json });
      }
      options.logger?.error('http.unhandled_error', { err });
      return new Response(JSON.stringify({ error: { code: 'internal_error', message: 'Internal error.' } }), { status: 500, headers: json });
    },
  });
  const server = createServer(
    {
      headersTimeout: options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS,
      requestTimeout: options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
      keepAliveTimeout: options.keepAliveTimeoutMs ?? KEEP_ALIVE_TIMEOUT_MS,
      connectionsCheckingInterval: options.timeoutCheckIntervalMs ?? TIMEOUT_CHECK_INTERVAL_MS,
      // Node would answer a missing Host with a bare 400; the adaptor's refusal above carries the envelope.
      requireHostHeader: false,
    },
    listener,
  );

  // A client that stops reading its answers (a slow read: pipelined requests, all sent in time) would hold its
  // connection, and its place under the caps, forever: node's timeouts cover what arrives and idle keep-alives, not
  // what is written. So a connection with output waiting that has not moved for the request timeout is closed; one
  // whose handler is still working has no output waiting and is left to the handler's own bounds. Progress is what
  // is left to hand to the kernel shrinking (libuv's write queue: one large write drains through it) or new output;
  // the kernel takes it in bursts, so a large answer waiting is given time in proportion to its size as well.
  const stallMs = options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
  const pendingOf = (socket: Socket) =>
    socket.writableLength + ((socket as Socket & { _handle?: { writeQueueSize?: number } | null })._handle?.writeQueueSize ?? 0);
  const writing = new Map<Socket, { written: number; pending: number; since: number }>();
  const stallCheck = setInterval(
    () => {
      const now = Date.now();
      for (const [socket, last] of writing) {
        const pending = pendingOf(socket);
        if (socket.writableLength === 0 || socket.bytesWritten !== last.written || pending < last.pending) {
          last.written = socket.bytesWritten;
          last.pending = pending;
          last.since = now;
        } else if (now - last.since >= stallMs + (last.pending * 1000) / MIN_DRAIN_BYTES_PER_SECOND) {
          options.logger?.debug('http.connection_stalled', { remoteAddress: socket.remoteAddress });
          socket.destroy();
        }
      }
    },
    Math.min(options.timeoutCheckIntervalMs ?? TIMEOUT_CHECK_INTERVAL_MS, stallMs),
  );
  stallCheck.unref();
  server.on('connection', (socket: Socket) => {
    writing.set(socket, { written: 0, pending: 0, since: Date.now() });
    socket.once('close', () => writing.delete(socket));
  });
  server.once('close', () => clearInterval(stallCheck));

  // The caps: node closes a connection past maxConnections before it is handed over; the per-address count is ours.
  server.maxConnections = options.maxConnections ?? MAX_CONNECTIONS;
  server.on('drop', (data?: { remoteAddress?: string }) =>
    options.logger?.debug('http.connection_refused', { reason: 'max_connections', remoteAddress: data?.remoteAddress }),
  );
  const perAddressCap = options.maxConnectionsPerAddress ?? MAX_CONNECTIONS_PER_ADDRESS;
  const perAddress = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    if (options.trustedProxies?.has(socket.remoteAddress ?? '')) return;
    // An IPv6 client by its /64 (server/shared/ip-ranges.ts clientKey).
    const address = clientKey(socket.remoteAddress ?? '');
    const open = perAddress.get(address) ?? 0;
    if (open >= perAddressCap) {
      options.logger?.debug('http.connection_refused', { reason: 'max_connections_per_address', remoteAddress: address });
      socket.destroy();
      return;
    }
    perAddress.set(address, open + 1);
    socket.once('close', () => {
      const left = (perAddress.get(address) ?? 1) - 1;
      if (left > 0) perAddress.set(address, left);
      else perAddress.delete(address);
    });
  });

  // Node answers a request it cannot parse (or one that took too long) with a bare status line; keep the API's
  // envelope even there, unless an answer has already begun on the connection.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket & { _httpMessage?: ServerResponse | null }) => {
    const answering = socket._httpMessage?.headersSent === true;
    if (!socket.writable || answering || err.code === 'ECONNRESET') return socket.destroy();
    const [status, code, message] = CLIENT_ERRORS[err.code ?? ''] ?? MALFORMED;
    socket.end(rawAnswer(status, code, message));
  });
  // `Expect` other than 100-continue: node's own answer is a bare 417.
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const body = JSON.stringify({ error: { code: 'invalid_request', message: `Expect: ${req.headers.expect} is not supported.` } });
    res.writeHead(417, { ...json, 'Content-Length': Buffer.byteLength(body), Connection: 'close' }).end(body);
  });
  // CONNECT (a proxy tunnel) is nothing this server does; without this node drops the connection without a word.
  server.on('connect', (_req: IncomingMessage, socket: Socket) => {
    socket.on('error', () => undefined);
    socket.end(rawAnswer('400 Bad Request', 'invalid_request', 'CONNECT is not supported: this is not a proxy.'));
  });

  // Once stopping, every answer closes its connection: a client that sends again at once on a kept-alive connection
  // keeps it busy, never idle, and the stop would wait for it for ever.
  let closing = false;
  const answering = new Set<ServerResponse>();
  server.on('request', (_req: IncomingMessage, res: ServerResponse) => {
    if (closing) res.shouldKeepAlive = false;
    answering.add(res);
    res.once('close', () => answering.delete(res));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        closing = true;
        for (const res of answering) res.shouldKeepAlive = false;
        // Node stops enforcing the header and request timeouts once closing: a client that sent half a request would
        // hold the stop for ever.
        const force = setTimeout(() => server.closeAllConnections(), options.closeGraceMs ?? CLOSE_GRACE_MS);
        force.unref();
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      }),
  };
}

import { readFileSync } from 'node:fs';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { TLSSocket } from 'node:tls';

const FIXTURES = fileURLToPath(new URL('../fixtures/webhook-tls/', import.meta.url));

/**
 * The test CA (tests/fixtures/webhook-tls/ca.pem). global-setup puts it in NODE_EXTRA_CA_CERTS before vitest forks its
 * workers; a test that spawns the real server with its own environment passes `NODE_EXTRA_CA_CERTS: TEST_CA_FILE`.
 */
export const TEST_CA_FILE = `${FIXTURES}ca.pem`;

/** What the receiver answers to one request. */
export type ReceiverAnswer =
  /** A status (200 by default), with optional headers and a short body. */
  | { status?: number; headers?: Record<string, string>; body?: string }
  /** A redirect (302 by default) to `location`. */
  | { redirect: string; status?: number }
  /** Waits `stallMs` (after the request body is in), then answers `then` (200 by default). */
  | { stallMs: number; then?: ReceiverAnswer }
  /** A `status` (200 by default) with a body of `bytes` bytes, written as fast as the client takes it. */
  | { bigBody: number; status?: number }
  /** Closes the connection without answering. */
  | { close: true };

export interface ReceivedRequest {
  method: string;
  /** Path and query, as sent. */
  path: string;
  headers: IncomingHttpHeaders;
  /** Names and values as they came on the wire, alternating: node:http's rawHeaders keeps the sender's spelling. */
  rawHeaders: string[];
  /** The raw body, byte for byte (signatures are checked over it). */
  body: Buffer;
  /** Wall-clock arrival time of the complete request (Date.now()). */
  at: number;
  /** The SNI name the client sent, or null. */
  servername: string | null;
  /** Which TCP connection (0, 1, ... in accept order) carried it. */
  connection: number;
}

/** One big body's fate: how many bytes the socket took before it closed, and whether it closed before the end. */
export interface BigBodyRecord {
  planned: number;
  written: number;
  closedEarly: boolean;
  done: Promise<void>;
}

export type ReceiverCertificate = 'trusted' | 'self-signed';

/**
 * A real HTTPS server on loopback for the webhook tests. Its certificate (for `*.webhooks.test`, `webhooks.test`,
 * `localhost`, `127.0.0.1` and `::1`) is signed by the test CA the workers trust through NODE_EXTRA_CA_CERTS, or is
 * self-signed and trusted by no one (`certificate: 'self-signed'`, for tls_error). It records every request and
 * every TCP connection, and answers each request what the test asked: queued answers first (`enqueue`), then the
 * default (`respond`), which may be a function of the request.
 */
export class HttpsReceiver {
  readonly requests: ReceivedRequest[] = [];
  /** TCP connections accepted, TLS or not (a connection the client dropped during the handshake counts). */
  connections = 0;
  readonly bigBodies: BigBodyRecord[] = [];
  port = 0;
  private queue: ReceiverAnswer[] = [];
  private fallback: ReceiverAnswer | ((req: ReceivedRequest) => ReceiverAnswer) = { status: 200 };
  private readonly sockets = new Set<Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private waiters: { count: number; resolve: () => void }[] = [];

  private constructor(
    private readonly server: Server,
    readonly host: string,
  ) {}

  static async start(opts: { certificate?: ReceiverCertificate; host?: '127.0.0.1' | '::1' } = {}): Promise<HttpsReceiver> {
    const name = opts.certificate === 'self-signed' ? 'self-signed' : 'server';
    const server = createServer({ cert: readFileSync(`${FIXTURES}${name}.pem`), key: readFileSync(`${FIXTURES}${name}.key`) });
    const receiver = new HttpsReceiver(server, opts.host ?? '127.0.0.1');
    server.on('connection', (socket: Socket) => receiver.onConnection(socket));
    server.on('request', (req: IncomingMessage, res: ServerResponse) => receiver.onRequest(req, res));
    // A client that gives up mid-handshake (an untrusted certificate) is expected here: not an error of the test.
    server.on('tlsClientError', () => undefined);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, receiver.host, () => resolve());
    });
    const address = server.address();
    receiver.port = typeof address === 'object' && address ? address.port : 0;
    return receiver;
  }

  /** `https://<hostname>:<port><path>`; the hostname defaults to the address the receiver listens on. */
  url(path = '/hook', hostname = this.host === '::1' ? '[::1]' : this.host): string {
    return `https://${hostname}:${this.port}${path}`;
  }

  /** The answer to every request from now on (after the queued ones). */
  respond(answer: ReceiverAnswer | ((req: ReceivedRequest) => ReceiverAnswer)): void {
    this.fallback = answer;
  }

  /** Answers for the next requests, in order, before the default. */
  enqueue(...answers: ReceiverAnswer[]): void {
    this.queue.push(...answers);
  }

  /** Resolves once `count` requests in all have arrived (rejects after `timeoutMs`). */
  waitForRequests(count: number, timeoutMs = 10_000): Promise<ReceivedRequest[]> {
    if (this.requests.length >= count) return Promise.resolve(this.requests.slice(0, count));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`receiver: ${this.requests.length} of ${count} requests after ${timeoutMs} ms`)), timeoutMs);
      this.waiters.push({
        count,
        resolve: () => {
          clearTimeout(timer);
          resolve(this.requests.slice(0, count));
        },
      });
    });
  }

  /** Forgets what was received and queued (the default answer goes back to 200). */
  reset(): void {
    this.requests.length = 0;
    this.bigBodies.length = 0;
    this.connections = 0;
    this.queue = [];
    this.fallback = { status: 200 };
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private onConnection(socket: Socket): void {
    this.connections++;
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const tls = req.socket as TLSSocket;
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('error', () => undefined);
    res.on('error', () => undefined);
    req.on('end', () => {
      const servername = (tls as TLSSocket & { servername?: string | false }).servername;
      const received: ReceivedRequest = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body: Buffer.concat(chunks),
        at: Date.now(),
        servername: typeof servername === 'string' && servername !== '' ? servername : null,
        connection: this.connectionIndex(req.socket),
      };
      this.requests.push(received);
      const answer = this.queue.shift() ?? (typeof this.fallback === 'function' ? this.fallback(received) : this.fallback);
      this.answer(answer, req, res);
      this.waiters = this.waiters.filter((w) => {
        if (this.requests.length < w.count) return true;
        w.resolve();
        return false;
      });
    });
  }

  private readonly connectionIds = new WeakMap<Socket, number>();
  private nextConnectionId = 0;
  private connectionIndex(socket: Socket): number {
    let id = this.connectionIds.get(socket);
    if (id === undefined) {
      id = this.nextConnectionId++;
      this.connectionIds.set(socket, id);
    }
    return id;
  }

  private answer(answer: ReceiverAnswer, req: IncomingMessage, res: ServerResponse): void {
    if ('close' in answer) {
      req.socket.destroy();
      return;
    }
    if ('stallMs' in answer) {
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        if (!res.destroyed) this.answer(answer.then ?? { status: 200 }, req, res);
      }, answer.stallMs);
      this.timers.add(timer);
      return;
    }
    if ('redirect' in answer) {
      res.writeHead(answer.status ?? 302, { location: answer.redirect, 'content-length': '0' });
      res.end();
      return;
    }
    if ('bigBody' in answer) {
      this.writeBigBody(answer.bigBody, answer.status ?? 200, res);
      return;
    }
    const body = answer.body ?? '';
    res.writeHead(answer.status ?? 200, { 'content-length': String(Buffer.byteLength(body)), ...answer.headers });
    res.end(body);
  }

  /** Writes `bytes` bytes in 64 KiB chunks, waiting for the socket to drain, and records how far it got. */
  private writeBigBody(bytes: number, status: number, res: ServerResponse): void {
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    let finish: () => void = () => undefined;
    const record: BigBodyRecord = { planned: bytes, written: 0, closedEarly: false, done: new Promise((r) => (finish = r)) };
    this.bigBodies.push(record);
    res.writeHead(status, { 'content-type': 'application/octet-stream', 'content-length': String(bytes) });
    res.flushHeaders();
    const pump = () => {
      while (record.written < bytes && !res.destroyed) {
        const n = Math.min(chunk.length, bytes - record.written);
        record.written += n;
        if (!res.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
          res.once('drain', pump);
          return;
        }
      }
      if (!res.destroyed && record.written >= bytes) res.end();
    };
    res.on('close', () => {
      record.closedEarly = !res.writableFinished;
      finish();
    });
    pump();
  }
}

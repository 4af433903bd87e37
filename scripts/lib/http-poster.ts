import { type Socket, connect } from 'node:net';

/**
 * A lean HTTP/1.1 keep-alive client for benchmarks: POSTs a JSON payload over one of `concurrency` plain sockets and
 * resolves with the status code once the whole response has arrived. It writes each request as one string and reads
 * only the status line, Content-Length or chunked framing and Connection: close; no request or response objects, no
 * header maps, no streams. It costs the benchmark's process about half of what node:http's client did per request
 * (scripts/bench/README.md, "Session 11"), as Postfix's `smtp-source` is lean on the other side of `bench:vs-postfix`.
 */
export interface HttpPoster {
  post(payload: string): Promise<number>;
  close(): void;
}

interface Waiter {
  resolve: (status: number) => void;
  reject: (err: Error) => void;
}

const HEADER_END = Buffer.from('\r\n\r\n');

/** The framing of one response, read from its head. */
export function parseResponseHead(head: string): { status: number; length: number | 'chunked'; close: boolean } {
  const line = /^HTTP\/1\.([01]) (\d{3})/.exec(head);
  if (!line) throw new Error(`not an HTTP/1.x response: ${JSON.stringify(head.slice(0, 40))}`);
  const status = Number(line[2]);
  // Nothing here asks for an interim answer (no Expect: 100-continue), so one is a server's error.
  if (status < 200) throw new Error(`an interim response (${status}) was not asked for`);
  const lower = head.toLowerCase();
  // HTTP/1.1 keeps the connection unless told otherwise; HTTP/1.0 closes it unless told otherwise.
  const close = line[1] === '1' ? /\r\nconnection: *close/.test(lower) : !/\r\nconnection: *keep-alive/.test(lower);
  if (/\r\ntransfer-encoding: *chunked/.test(lower)) return { status, length: 'chunked', close };
  const length = /\r\ncontent-length: *(\d+)/.exec(lower)?.[1];
  // 204 and 304 carry no body; any other response without a length would end with the connection.
  if (length === undefined && !(status === 204 || status === 304)) throw new Error(`response ${status} without Content-Length or chunked framing`);
  return { status, length: Number(length ?? 0), close };
}

/**
 * Where the chunked body that starts at `from` ends (just past its last CRLF), or -1 while more bytes are needed.
 * Trailers are not expected (none of the service's responses send them) and are refused.
 */
export function chunkedEnd(buf: Buffer, from: number): number {
  let at = from;
  for (;;) {
    const lineEnd = buf.indexOf('\r\n', at);
    if (lineEnd < 0) return -1;
    const size = Number.parseInt(buf.toString('latin1', at, lineEnd), 16);
    if (!Number.isInteger(size) || size < 0) throw new Error('bad chunk size');
    if (size === 0) {
      if (buf.length < lineEnd + 4) return -1;
      if (buf[lineEnd + 2] !== 13 || buf[lineEnd + 3] !== 10) throw new Error('chunked trailers are not supported');
      return lineEnd + 4;
    }
    const next = lineEnd + 2 + size + 2;
    if (buf.length < next) return -1;
    at = next;
  }
}

/** One keep-alive connection: the request in flight on it, if any, and the bytes of its answer so far. */
interface Connection {
  socket: Socket;
  current: Waiter | null;
  pending: Buffer;
}

export function createHttpPoster(url: string, headers: Record<string, string>, concurrency: number): HttpPoster {
  const target = new URL(url);
  if (target.protocol !== 'http:') throw new Error(`the benchmarks' poster speaks plain HTTP only, not ${target.protocol}`);
  const port = Number(target.port || 80);
  const fixedHead =
    `POST ${target.pathname}${target.search} HTTP/1.1\r\nHost: ${target.host}\r\n` +
    Object.entries(headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
  const idle: Connection[] = [];
  const queue: { payload: string; waiter: Waiter }[] = [];
  const open = new Set<Connection>();
  let closed = false;

  const drop = (conn: Connection) => {
    open.delete(conn);
    conn.socket.destroy();
  };

  const fail = (conn: Connection, err: Error) => {
    if (!open.has(conn)) return;
    const w = conn.current;
    conn.current = null;
    drop(conn);
    w?.reject(err);
    pump(); // the queue's next request gets a fresh connection
  };

  const onData = (conn: Connection, chunk: Buffer) => {
    if (conn.current === null) throw new Error('the server answered a request that was not sent');
    conn.pending = conn.pending.length === 0 ? chunk : Buffer.concat([conn.pending, chunk]);
    const buf = conn.pending;
    const headEnd = buf.indexOf(HEADER_END);
    if (headEnd < 0) return;
    const head = parseResponseHead(buf.toString('latin1', 0, headEnd));
    const bodyStart = headEnd + 4;
    const end = head.length === 'chunked' ? chunkedEnd(buf, bodyStart) : bodyStart + head.length <= buf.length ? bodyStart + head.length : -1;
    if (end < 0) return;
    if (end !== buf.length) throw new Error('bytes after the response, which nothing asked for');
    conn.pending = Buffer.alloc(0);
    const w = conn.current;
    conn.current = null;
    if (head.close) {
      open.delete(conn);
      conn.socket.end();
    } else idle.push(conn);
    w?.resolve(head.status);
    pump();
  };

  const connectOne = (): Connection => {
    const conn: Connection = { socket: connect({ host: target.hostname, port, noDelay: true }), current: null, pending: Buffer.alloc(0) };
    open.add(conn);
    conn.socket.on('data', (chunk: Buffer) => {
      try {
        onData(conn, chunk);
      } catch (err) {
        fail(conn, err as Error);
      }
    });
    conn.socket.on('error', (err) => fail(conn, err));
    conn.socket.on('close', () => fail(conn, new Error('connection closed before the response')));
    return conn;
  };

  /** An idle connection the server has not closed meanwhile, or a new one while under `concurrency`. */
  const nextConnection = (): Connection | undefined => {
    for (let conn = idle.pop(); conn !== undefined; conn = idle.pop()) if (open.has(conn)) return conn;
    return open.size < concurrency ? connectOne() : undefined;
  };

  const pump = () => {
    while (queue.length > 0 && !closed) {
      const conn = nextConnection();
      if (!conn) return;
      const { payload, waiter } = queue.shift()!;
      conn.current = waiter;
      conn.socket.write(`${fixedHead}Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
    }
  };

  return {
    post: (payload) =>
      new Promise<number>((resolve, reject) => {
        if (closed) return reject(new Error('poster closed'));
        queue.push({ payload, waiter: { resolve, reject } });
        pump();
      }),
    close: () => {
      closed = true;
      const gone = new Error('poster closed');
      for (const conn of [...open]) {
        const w = conn.current;
        conn.current = null;
        drop(conn);
        w?.reject(gone);
      }
      idle.length = 0;
      for (const { waiter } of queue.splice(0)) waiter.reject(gone);
    },
  };
}

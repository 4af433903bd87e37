import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import type { SMTPServer } from 'smtp-server';
import type { Logger } from '../server/shared/logger.js';
import { parseProxyHeader } from './proxy-header.js';

/**
 * SMTP_PROXY_PROTOCOL on a smtp-server: each connection must open with a PROXY header (v1 or v2, ./proxy-header.ts),
 * read before the banner and, on the implicit-TLS port, before the TLS handshake; the client it names is the session's
 * `remoteAddress` and `remotePort`, so every check, limit and log line of the SMTP code sees the client, not the
 * balancer. A connection whose header is missing, malformed or late is closed without a word and logged once.
 *
 * smtp-server's own `useProxy` reads version 1 only and answers a bad header with a line of its own; its accept path
 * (the guard of sockets not yet in a session, the maxClients bound on them, the TLS upgrade after the header, close()
 * destroying them) is kept, and only its header reader (`_handleProxy`) is replaced.
 */

/** How long a connection has to send its whole PROXY header. */
export const PROXY_HEADER_TIMEOUT_MS = 5_000;

/** The PROXY header bytes read from each socket handed to a session: they are not the client's talking early. */
const headerBytes = new WeakMap<object, number>();

/** The bytes of PROXY header read from `socket` before its session began (0 without one). */
export function proxyHeaderBytes(socket: object): number {
  return headerBytes.get(socket) ?? 0;
}

/** smtp-server's session id, as it makes one itself. */
const sessionId = () =>
  BigInt(`0x${randomBytes(10).toString('hex')}`)
    .toString(32)
    .padStart(16, '0');

/**
 * Makes `server`, which must be built with `useProxy: true`, read the PROXY header of each connection with
 * parseProxyHeader. A refused connection is logged as `event` (warn) with the reason and the balancer's address.
 */
export function requireProxyHeader(server: SMTPServer, logger: Logger, event: string, timeoutMs = PROXY_HEADER_TIMEOUT_MS): void {
  if (server.options.useProxy !== true) throw new Error('requireProxyHeader needs a server built with useProxy: true');
  server._handleProxy = (socket: Socket, callback) => {
    let received: Buffer = Buffer.alloc(0);
    let finished = false;
    const timer = setTimeout(() => refuse(`no complete PROXY header within ${timeoutMs} ms`), timeoutMs);
    const onReadable = () => {
      let chunk: Buffer | null;
      while (!finished && (chunk = socket.read() as Buffer | null) !== null) {
        received = received.length === 0 ? chunk : Buffer.concat([received, chunk]);
        const parsed = parseProxyHeader(received);
        if (parsed.kind === 'needMore') continue;
        if (parsed.kind === 'error') return refuse(parsed.reason);
        // What follows the header is the client's (SMTP, or its TLS handshake): back to the socket for the session.
        const rest = received.subarray(parsed.length);
        stop();
        if (rest.length > 0) socket.unshift(rest);
        headerBytes.set(socket, parsed.length);
        const id = sessionId();
        if (parsed.header.kind === 'local') return callback(null, { id });
        return callback(null, { id, remoteAddress: parsed.header.source.address, remotePort: parsed.header.source.port });
      }
    };
    const onClose = () => refuse('connection closed before its PROXY header');
    const onError = (err: NodeJS.ErrnoException) => refuse(`connection failed before its PROXY header (${err.code ?? err.message})`);
    const stop = () => {
      finished = true;
      clearTimeout(timer);
      socket.off('readable', onReadable);
      socket.off('end', onClose);
      socket.off('close', onClose);
      socket.off('error', onError);
    };
    const refuse = (reason: string) => {
      if (finished) return;
      stop();
      logger.warn(event, { reason, peer: socket.remoteAddress ?? null, port: socket.localPort ?? null });
      // No banner and no diagnostic: whatever sent this is not the balancer, or the balancer is misconfigured.
      socket.on('error', () => undefined);
      socket.destroy();
      callback(new Error(reason));
    };
    socket.on('readable', onReadable);
    socket.on('end', onClose);
    socket.on('close', onClose);
    socket.on('error', onError);
  };
}

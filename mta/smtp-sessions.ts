import type { AddressInfo } from 'node:net';
import type { SMTPServer, SMTPServerSession } from 'smtp-server';
import { clientKey } from '../server/shared/ip-ranges.js';
import type { Logger } from '../server/shared/logger.js';
import { SmtpReply } from './inbound/receive.js';
import { proxyHeaderBytes } from './proxy-accept.js';

/**
 * What the service's two SMTP servers (inbound on SMTP_PORT, submission on the submission ports) share around
 * smtp-server: the bounds on each client (connections at once from one address, an IPv6 client by its /64; no byte
 * before the banner; the longest a session may last), and listening and closing.
 */

/** smtp-server's connection of a session (its own objects: only the fields read here). */
export interface SmtpConnection {
  id: string;
  secure: boolean;
  close(): void;
  send(code: number, data?: string | string[], context?: unknown): void;
  _socket: { bytesRead: number };
}

export function connectionOf(server: SMTPServer, id: string): SmtpConnection | undefined {
  for (const c of (server as unknown as { connections: Set<SmtpConnection> }).connections) if (c.id === id) return c;
  return undefined;
}

/**
 * The per-client bounds of one server: `admit` at onConnect answers the refusal to send (421) or null and starts the
 * session's clock; `release` at onClose. `server` is read when a client connects (it is built after the bounds).
 */
export function createClientBounds(server: () => SMTPServer, opts: { maxPerAddress: number; maxSessionMs: number }) {
  const perAddress = new Map<string, number>();
  const sessionTimers = new Map<string, NodeJS.Timeout>();
  return {
    admit(session: SMTPServerSession): SmtpReply | null {
      const client = clientKey(session.remoteAddress);
      const n = (perAddress.get(client) ?? 0) + 1;
      perAddress.set(client, n);
      if (n > opts.maxPerAddress) return new SmtpReply(421, '4.7.0 Too many connections from your address; try again later');
      // Called before the banner: any byte already here was sent before it. smtp-server refuses a whole command line
      // sent early, but not the start of one whose line end is held back until after the banner.
      // A PROXY header (SMTP_PROXY_PROTOCOL) is the balancer's, not the client's.
      const socket = connectionOf(server(), session.id)?._socket;
      if (socket && socket.bytesRead - proxyHeaderBytes(socket) > 0) return new SmtpReply(421, '4.7.0 You talked before the greeting; closing');
      // A session that outlives its bound is closed, whatever it is doing.
      sessionTimers.set(session.id, setTimeout(() => connectionOf(server(), session.id)?.close(), opts.maxSessionMs).unref());
      return null;
    },
    release(session: SMTPServerSession): void {
      const client = clientKey(session.remoteAddress);
      const n = (perAddress.get(client) ?? 1) - 1;
      if (n <= 0) perAddress.delete(client);
      else perAddress.set(client, n);
      clearTimeout(sessionTimers.get(session.id));
      sessionTimers.delete(session.id);
    },
  };
}

/**
 * Listening and closing for a server: errors once it listens are logged as `<event>` (a client resetting its
 * connection at debug: routine; anything else a warning); a failure to listen is the caller's to report, once.
 */
export function listenable(server: SMTPServer, logger: Logger, event: string) {
  let listening = false;
  server.on('error', (err: NodeJS.ErrnoException) => {
    if (!listening) return;
    (err.code === 'ECONNRESET' || err.code === 'EPIPE' ? logger.debug : logger.warn)(event, { code: err.code, message: err.message });
  });
  return {
    /** Listens; resolves with the port (0 picks one, as tests do). */
    listen(host: string, port: number): Promise<number> {
      return new Promise((resolve, reject) => {
        server.server.once('error', reject);
        server.listen(port, host, () => {
          listening = true;
          server.server.off('error', reject);
          resolve((server.server.address() as AddressInfo).port);
        });
      });
    },
    async close(): Promise<void> {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import type { App } from '../app.js';

const MALFORMED = JSON.stringify({ error: { code: 'invalid_request', message: 'Malformed HTTP request.' } });

/** Starts the HTTP server; resolves with its address once listening. */
export async function listenHttp(app: App, host: string, port: number): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const server = createAdaptorServer({ fetch: app.fetch }) as Server;
  server.headersTimeout = 30_000;
  server.requestTimeout = 60_000;
  // Node answers a request it cannot parse with a bare 400; keep the API's envelope even there.
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    if (!socket.writable || err.code === 'ECONNRESET') return socket.destroy();
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
    socket.end(`HTTP/1.1 ${status}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(MALFORMED)}\r\nConnection: close\r\n\r\n${MALFORMED}`);
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
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
  };
}

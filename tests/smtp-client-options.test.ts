import { generateKeyPairSync } from 'node:crypto';
import { type AddressInfo, type Socket, createServer } from 'node:net';
import { SMTPServer } from 'smtp-server';
import { describe, expect, it } from 'vitest';
import type { Target } from '../mta/routing.js';
import { selfSignedCertificate } from '../mta/inbound/tls.js';
import { SessionFailure, connectionOptions, openSession } from '../mta/smtp-client.js';

/**
 * How the SMTP client is told to connect. SNI carries a host name only (RFC 6066 section 3): given an IP address,
 * Node warns (DEP0123) and a relay configured by address would print that warning to every operator.
 */

const opts = { name: 'mx.mailstead.test', connectTimeoutMs: 1000, greetingTimeoutMs: 1000, socketTimeoutMs: 1000 };
const target = (host: string, extra: Partial<Target> = {}): Target => ({
  host,
  addresses: ['192.0.2.10'],
  port: 25,
  secure: false,
  auth: null,
  relay: false,
  ...extra,
});

describe('SMTP connection options', () => {
  it.each(['127.0.0.1', '192.0.2.7', '::1', '[2001:db8::1]'])('sends no SNI servername to the IP address %s', (host) => {
    expect(connectionOptions('192.0.2.10', target(host), opts).tls).not.toHaveProperty('servername');
    expect(connectionOptions('192.0.2.10', target(host, { relay: true, auth: { user: 'u', pass: 'p' } }), opts).tls).not.toHaveProperty('servername');
  });

  it('names the host for SNI and certificate checks when it is a name', () => {
    expect(connectionOptions('192.0.2.10', target('mx.example.net'), opts).tls).toMatchObject({ servername: 'mx.example.net', rejectUnauthorized: false });
    expect(connectionOptions('192.0.2.10', target('smtp.relay.example', { relay: true, auth: { user: 'u', pass: 'p' } }), opts).tls).toMatchObject({
      servername: 'smtp.relay.example',
      rejectUnauthorized: true,
    });
  });
});

/** A server that accepts at once and greets after `delayMs` (a greylisting or overloaded MX), or never (`null`). */
async function slowGreeter(delayMs: number | null): Promise<{ port: number; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    const timer = delayMs === null ? null : setTimeout(() => socket.write('220 slow.test ESMTP\r\n'), delayMs);
    socket.on('close', () => timer && clearTimeout(timer));
    socket.on('data', (c: Buffer) => {
      if (/^EHLO/i.test(c.toString())) socket.write('250 slow.test\r\n');
      else if (/^QUIT/i.test(c.toString())) socket.end('221 bye\r\n');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('timeouts: the connect timeout bounds the TCP connect only, the greeting has its own', () => {
  const scaled = { name: 'mx.mailstead.test', connectTimeoutMs: 300, greetingTimeoutMs: 1500, socketTimeoutMs: 1500 };
  const local = (port: number): Target => ({ host: 'slow.test', addresses: ['127.0.0.1'], port, secure: false, auth: null, relay: false });

  it('a greeting that comes after the connect timeout, within the greeting timeout, opens the session', async () => {
    const server = await slowGreeter(700);
    try {
      const session = await openSession([local(server.port)], scaled);
      await session.close();
    } finally {
      await server.close();
    }
  });

  it('an implicit-TLS relay (smtps) that never completes its handshake is given up at the connect timeout, once, 4.4.1', async () => {
    // Accepts the connection and says nothing: the client's TLS ClientHello goes unanswered.
    const server = await slowGreeter(null);
    try {
      const started = Date.now();
      const failure = await openSession([{ ...local(server.port), secure: true, relay: true }], scaled).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(SessionFailure);
      expect((failure as SessionFailure).outcome).toMatchObject({ status: 'deferred', dsn: '4.4.1' });
      expect((failure as SessionFailure).attempts).toHaveLength(1);
      expect(Date.now() - started).toBeLessThan(1000);
    } finally {
      await server.close();
    }
  });

  it('an implicit-TLS relay (smtps) that answers: TLS from the first byte, the message delivered over it', async () => {
    const keys = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const received: string[] = [];
    const server = new SMTPServer({
      secure: true,
      key: keys.privateKey.export({ type: 'pkcs8', format: 'pem' }),
      cert: selfSignedCertificate('relay.test', keys),
      authOptional: true,
      logger: false,
      onData(stream, session, done) {
        stream.resume();
        stream.on('end', () => {
          received.push(`${session.secure} ${session.envelope.rcptTo.map((r) => r.address).join(',')}`);
          done();
        });
      },
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    try {
      const port = (server.server.address() as AddressInfo).port;
      const session = await openSession([{ ...local(port), host: 'relay.test', secure: true, relay: true }], scaled);
      const sent = await session.send('bounce@mx.mailstead.test', 'ann@example.net', Buffer.from('Subject: hi\r\n\r\nhello\r\n'));
      expect(sent.outcome).toMatchObject({ status: 'delivered' });
      await session.close();
      expect(received).toEqual(['true ann@example.net']);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('a greeting that never comes defers 4.4.1 once the greeting timeout has passed, not before', async () => {
    const server = await slowGreeter(null);
    try {
      const started = Date.now();
      const failure = await openSession([local(server.port)], scaled).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(SessionFailure);
      expect((failure as SessionFailure).outcome).toMatchObject({ status: 'deferred', dsn: '4.4.1' });
      expect(Date.now() - started).toBeGreaterThanOrEqual(1400);
    } finally {
      await server.close();
    }
  });
});

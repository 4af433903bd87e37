import { describe, expect, it } from 'vitest';
import type { Target } from '../mta/routing.js';
import { connectionOptions } from '../mta/smtp-client.js';

/**
 * How the SMTP client is told to connect. SNI carries a host name only (RFC 6066 section 3): given an IP address,
 * Node warns (DEP0123) and a relay configured by address would print that warning to every operator.
 */

const opts = { name: 'mx.mailstead.test', connectTimeoutMs: 1000, greetingTimeoutMs: 1000, socketTimeoutMs: 1000 };
const target = (host: string, extra: Partial<Target> = {}): Target => ({ host, addresses: ['192.0.2.10'], port: 25, secure: false, auth: null, relay: false, ...extra });

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

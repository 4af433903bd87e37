import { desc } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { operatorMessages } from '../db/schema/index.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { AUTH_LOCKOUT } from '../server/core/submission-auth.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { proxyV1, proxyV2 } from './helpers/proxy-protocol.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { type Sender, newSender, queued } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { type SubmissionRig, startSubmission } from './helpers/submission.js';

/**
 * SMTP_PROXY_PROTOCOL=true (docs/api/decisions.md section 12, docs/operating/behind-a-load-balancer.md): behind a load
 * balancer every connection to the inbound and submission ports opens with a PROXY header, and the client it names is
 * the one the service records, limits and logs. Every connection here comes from 127.0.0.1; the header says who the
 * client is. A connection without a header, with a malformed one or a late one is closed without a banner, logged once.
 * With the option off (every other SMTP test) the socket's peer stands.
 */

const HOST = 'mx.mailstead.test';
const HEADER_TIMEOUT_MS = 500;

let service: TestService;
let inbound: InboundServer;
let inboundPort: number;
let submission: SubmissionRig;
let sender: Sender;
const open: RawSmtp[] = [];

beforeAll(async () => {
  service = await startService({ SMTP_PROXY_PROTOCOL: 'true', MAIL_HOSTNAME: HOST, RATE_LIMIT_PER_KEY: '1000' });
  const tls = loadOrCreateSmtpTls(service.deps.config);
  inbound = inboundServerFor(service.deps, tls, { maxPerAddress: 1, proxyHeaderTimeoutMs: HEADER_TIMEOUT_MS });
  inboundPort = await inbound.listen('127.0.0.1', 0);
  submission = await startSubmission(service, { proxyHeaderTimeoutMs: HEADER_TIMEOUT_MS });
  sender = await newSender(service);
});

afterAll(async () => {
  await inbound?.close();
  await submission?.close();
  await service?.close();
});

beforeEach(async () => {
  await service.deps.db.delete(operatorMessages);
  service.logger.entries.length = 0;
});

afterEach(() => {
  for (const c of open.splice(0)) c.close();
});

async function connect(port: number, proxy: string | Buffer | undefined, opts: { greet?: boolean } = {}) {
  const connected = await RawSmtp.connect(port, { proxy, greet: opts.greet });
  open.push(connected.client);
  return connected;
}

/** A message to postmaster@ over `client` (greeted): every reply, the last the one to the message. */
async function toPostmaster(client: RawSmtp): Promise<string[]> {
  const replies = await client.envelope('reporter@remote.example', [`postmaster@${HOST}`], 'relay.remote.example');
  replies.push(await client.command('DATA'));
  replies.push(await client.command('From: reporter@remote.example\r\nSubject: hello\r\n\r\nA report.\r\n.'));
  return replies;
}

async function keptAddresses(): Promise<string[]> {
  const rows = await service.deps.db.select().from(operatorMessages).orderBy(desc(operatorMessages.receivedAt));
  return rows.map((r) => r.remoteAddress);
}

const entries = (event: string) => service.logger.entries.filter((e) => e.event === event);

describe('inbound SMTP', () => {
  it.each([
    ['v1 TCP4', () => proxyV1('203.0.113.7', 51000, '192.0.2.25', 25), '203.0.113.7'],
    ['v1 TCP6', () => proxyV1('2001:db8::7'), '2001:db8::7'],
    ['v2 IPv4', () => proxyV2({ source: '198.51.100.7', destination: '192.0.2.25' }), '198.51.100.7'],
    [
      'v2 IPv6 with TLVs',
      () => proxyV2({ source: '2001:db8:0::99', destination: '2001:db8::25', tlvs: Buffer.from([0x05, 0x00, 0x02, 0x61, 0x62]) }),
      '2001:db8::99',
    ],
    ['v2 LOCAL (a health check): the socket’s own peer', () => proxyV2({ command: 'local' }), '127.0.0.1'],
    [
      'v2 LOCAL with an address block: the socket’s own peer still',
      () => proxyV2({ command: 'local', source: '203.0.113.99', destination: '192.0.2.25' }),
      '127.0.0.1',
    ],
    ['v1 UNKNOWN: the socket’s own peer', () => 'PROXY UNKNOWN\r\n', '127.0.0.1'],
  ])('%s: the session works, and the client the header names is the one recorded and logged', async (_name, header, client) => {
    const { client: smtp, banner } = await connect(inboundPort, header());
    expect(banner).toMatch(/^220 mx\.mailstead\.test ESMTP/);
    const replies = await toPostmaster(smtp);
    expect(replies.at(-1)).toMatch(/^250 2\.0\.0 Ok: queued as /);
    expect(await keptAddresses()).toEqual([client]);
    expect(entries('inbound.received').map((e) => e.remoteAddress)).toEqual([client]);
    expect(entries('inbound.proxy_refused')).toEqual([]);
  });

  it('the bound on connections per address counts the client the header names, not the balancer', async () => {
    // maxPerAddress is 1 here: a second connection of one client is refused, another client's is not.
    const first = await connect(inboundPort, proxyV1('198.51.100.20'));
    expect(first.banner).toMatch(/^220 /);
    const again = await connect(inboundPort, proxyV2({ source: '198.51.100.20', destination: '192.0.2.25' }));
    expect(again.banner).toMatch(/^421 4\.7\.0 Too many connections from your address/);
    const other = await connect(inboundPort, proxyV1('198.51.100.21'));
    expect(other.banner).toMatch(/^220 /);
  });

  it('the header is the balancer’s, not an early talker; bytes after it before the banner are', async () => {
    const early = await connect(inboundPort, `${proxyV1('198.51.100.30')}EHLO`, { greet: false });
    expect(await early.client.reply()).toMatch(/^421 4\.7\.0 You talked before the greeting/);
  });

  it.each([
    ['no header (a client speaking SMTP)', 'EHLO client.example\r\n', 'no PROXY protocol header'],
    ['a malformed v1 line', 'PROXY TCP4 evil.example 192.0.2.25 1 25\r\n', 'PROXY v1 addresses are not TCP4 addresses'],
    ['a v1 line past 107 bytes', `PROXY UNKNOWN ${'x'.repeat(120)}\r\n`, 'PROXY v1 line longer than 107 bytes'],
    ['a wrong v2 signature', Buffer.from('\r\n\r\n\0\r\nQUIT\r\x21\x11\x00\x0c'), 'no PROXY protocol header (bad v2 signature)'],
    ['a v2 header claiming more than the bound', Buffer.concat([proxyV2({}).subarray(0, 14), Buffer.from([0xff, 0xff])]), 'more than 2048'],
    ['nothing within the timeout', '', `no complete PROXY header within ${HEADER_TIMEOUT_MS} ms`],
    ['half a header within the timeout', 'PROXY TCP4 203.0.113.7', `no complete PROXY header within ${HEADER_TIMEOUT_MS} ms`],
  ])('%s: closed without a banner, logged once with the reason', async (_name, bytes, reason) => {
    const { client } = await connect(inboundPort, bytes, { greet: false });
    expect(await client.closedByServer(HEADER_TIMEOUT_MS + 5_000)).toBe(true);
    expect(await client.reply()).toBe('');
    const logged = entries('inbound.proxy_refused');
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 'warn', peer: '127.0.0.1', port: inboundPort });
    expect(String(logged[0]!.reason)).toContain(reason);
    expect(await keptAddresses()).toEqual([]);
  });
});

describe('SMTP submission', () => {
  const plain = (key: string) => Buffer.from(`\0app\0${key}`).toString('base64');

  /** MAIL FROM, RCPT TO and a message over an authenticated client: the reply to the message. */
  async function send(client: RawSmtp): Promise<string> {
    expect(await client.command(`MAIL FROM:<${sender.from}>`)).toMatch(/^250 /);
    expect(await client.command('RCPT TO:<reader@example.net>')).toMatch(/^250 /);
    expect(await client.command('DATA')).toMatch(/^354 /);
    return client.command(`From: ${sender.from}\r\nTo: reader@example.net\r\nSubject: Your receipt\r\n\r\nThanks.\r\n.`);
  }

  const queuedId = (reply: string) => /^250 2\.0\.0 Ok: queued as (\S+)$/.exec(reply)?.[1] ?? '';

  it('STARTTLS port, v2 header: AUTH and send work, and the header’s client is the one logged', async () => {
    const { client, banner } = await connect(submission.port, proxyV2({ source: '203.0.113.50', destination: '192.0.2.25', destinationPort: 587 }));
    expect(banner).toMatch(/^220 /);
    await client.command('EHLO app.example');
    const secure = await client.startTls();
    open.push(secure);
    await secure.command('EHLO app.example');
    expect(await secure.command(`AUTH PLAIN ${plain(sender.key)}`)).toMatch(/^235 /);
    const id = queuedId(await send(secure));
    expect((await queued(service, id)).message).toBeDefined();
    expect(entries('submission.authenticated').map((e) => e.remoteAddress)).toEqual(['203.0.113.50']);
    expect(entries('submission.accepted').map((e) => [e.id, e.remoteAddress])).toEqual([[id, '203.0.113.50']]);
  });

  it('implicit-TLS port: the header comes before the TLS handshake (the handshake’s bytes stay the client’s)', async () => {
    const { client, banner } = await RawSmtp.connectSecure(submission.securePort, { proxy: proxyV1('2001:db8::50', 40001, '2001:db8::25', 465) });
    open.push(client);
    expect(banner).toMatch(/^220 /);
    await client.command('EHLO app.example');
    expect(await client.command(`AUTH PLAIN ${plain(sender.key)}`)).toMatch(/^235 /);
    const id = queuedId(await send(client));
    expect(entries('submission.accepted').map((e) => [e.id, e.remoteAddress])).toEqual([[id, '2001:db8::50']]);
  });

  it('a connection to either port without a header is closed without a banner, logged once', async () => {
    for (const port of [submission.port, submission.securePort]) {
      const { client } = await connect(port, 'EHLO app.example\r\n', { greet: false });
      expect(await client.closedByServer()).toBe(true);
      expect(await client.reply()).toBe('');
    }
    expect(entries('submission.proxy_refused').map((e) => [e.port, e.reason])).toEqual([
      [submission.port, 'no PROXY protocol header'],
      [submission.securePort, 'no PROXY protocol header'],
    ]);
  });

  it('failed authentications lock out the client the header names, not the balancer every client comes through', async () => {
    const locked = '198.51.100.60';
    const attempt = async (client: string, key: string) => {
      const { client: smtp, banner } = await connect(submission.port, proxyV1(client));
      if (!banner.startsWith('220')) return banner;
      await smtp.command('EHLO app.example');
      const secure = await smtp.startTls();
      open.push(secure);
      await secure.command('EHLO app.example');
      return secure.command(`AUTH PLAIN ${plain(key)}`);
    };
    for (let i = 1; i < AUTH_LOCKOUT.failures; i++) expect(await attempt(locked, `${sender.key}x`)).toMatch(/^535 /);
    expect(await attempt(locked, `${sender.key}x`)).toMatch(/^421 4\.7\.0 /);
    // Locked out at the banner now, the right key or not.
    expect(await attempt(locked, sender.key)).toMatch(/^421 4\.7\.0 /);
    // Another client through the same balancer is not.
    expect(await attempt('198.51.100.61', sender.key)).toMatch(/^235 /);
  });
});

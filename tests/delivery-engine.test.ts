import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import { hostname } from 'node:os';
import { eq } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type OutboundRecipientRow, outboundRecipients } from '../db/schema/index.js';
import { createDeliveryEngine, type EngineOptions } from '../mta/delivery-engine.js';
import { singleNode } from '../server/queues/nodes.js';
import { shareOf } from '../server/core/nodes.js';
import { capForeignLeases, claimDueRecipients, releaseDeadLeases, renewLeases } from '../mta/delivery-queue.js';
import { recordOutcome } from '../server/core/outcomes.js';
import { leaseNow } from '../server/shared/clock.js';
import { FAST_TIMEOUTS, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import type { TestDnsServer } from './helpers/dns-server.js';
import { newSender, queued, receipt, recipients, type Sender } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';
import { SmtpSink } from './helpers/smtp-sink.js';
import { parsePrometheusText, sampleValueOrZero } from './helpers/prometheus-text.js';
import { one } from '../db/sql.js';
import { forwardWakes, markQueued } from '../db/queue-wake.js';

/**
 * The delivery engine itself (docs/api/decisions.md section 3), end to end against SMTP peers and a DNS server on loopback:
 * lanes of one destination that fail to connect while another delivers, a connection closed by a 421 and replaced,
 * an outcome that cannot be written, partial DNS failures, a STARTTLS upgrade that fails (plain text for an MX, never
 * for a relay with credentials), the leases of the durable queue, step timeouts, a slow destination beside a fast one,
 * and the overall connection limit.
 */

interface EmailEvent {
  recipient: string;
  status: string;
  dsn: string;
  detail: string;
  occurredAt: string;
}

const MIN = 60_000;
/** Timeouts short enough for the tests of silent peers: a greeting within 500 ms, any later step within 1 s. */
const SHORT_TIMEOUTS = { connectTimeoutMs: 500, greetingTimeoutMs: 500, socketTimeoutMs: 1000 };

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;

/** What a test started beyond the rig (services, sinks, raw servers), stopped after it in reverse order. */
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  ({ dns, sink, service } = await startDeliveryRig());
});

afterAll(() => stopDeliveryRig({ dns, sink, service }));

beforeEach(async () => {
  await service.deps.db.delete(outboundRecipients);
  resetDeliveryRig({ dns, sink });
  // Connections of an earlier test may still be closing: the counts start from none open.
  await waitFor(() => sink.open === 0, 5000, 'the sink to have no connection open');
  sink.resetConnections();
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A further service on the rig's DNS server, delivering to `port` (loopback allowed), stopped after the test. */
async function serviceFor(port: number, env: Record<string, string> = {}): Promise<TestService> {
  const svc = await startService({ DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(port), ALLOW_PRIVATE_TARGETS: 'true', ...env });
  cleanups.push(() => svc.close());
  return svc;
}

function engineFor(svc: TestService, options: Partial<EngineOptions> = {}) {
  return createDeliveryEngine(svc.deps, { timeouts: FAST_TIMEOUTS, ...options });
}

async function send(svc: TestService, s: Sender, to: string | string[]): Promise<string> {
  const res = await svc.api('POST', '/emails', { key: s.key, body: receipt(s.from, to) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

async function events(svc: TestService, s: Sender, id: string): Promise<EmailEvent[]> {
  const res = await svc.api('GET', `/emails/${id}`, { key: s.key });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.events as EmailEvent[];
}

async function suppressed(svc: TestService, s: Sender, address: string): Promise<unknown[]> {
  const res = await svc.api('GET', `/suppressions?address=${encodeURIComponent(address)}`, { key: s.key });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.data as unknown[];
}

async function row(svc: TestService, id: string): Promise<OutboundRecipientRow | undefined> {
  return await one(svc.deps.db.select().from(outboundRecipients).where(eq(outboundRecipients.id, id)));
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `condition` in real time until it holds; fails the test after `timeoutMs`. */
async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** `domain` routed through an MX record to mx.example.net (127.0.0.1, the service's delivery port). */
function routeToLoopback(domain: string): void {
  dns.add(domain, { type: 'MX', priority: 10, exchange: 'mx.example.net' });
}

async function listen(server: Server, host = '127.0.0.1', port = 0): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address();
  return typeof address === 'object' && address ? address.port : 0;
}

/** A TCP server stopped after the test, its open sockets destroyed first. */
async function startTcpServer(onSocket: (socket: Socket) => void, host = '127.0.0.1', atPort = 0): Promise<{ port: number; connections: () => number }> {
  const sockets = new Set<Socket>();
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    onSocket(socket);
  });
  const port = await listen(server, host, atPort);
  cleanups.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { port, connections: () => connections };
}

interface RawReceived {
  from: string;
  to: string[];
  data: string;
}

/**
 * A minimal SMTP server written against node:net: it offers STARTTLS in its EHLO reply and, asked for it, answers
 * "220 Ready" and then replies to the client's TLS hello with bytes that are no TLS record and closes. A client that
 * does not ask for STARTTLS gets plain SMTP (EHLO, MAIL, RCPT, DATA, RSET, QUIT) and its messages are recorded.
 */
async function startRawSmtpServer(opts: {
  starttls: 'broken' | 'none';
  /** How a broken TLS handshake breaks: bytes that are no TLS record (default), the connection closed or reset, or no answer. */
  tlsBreak?: 'garbage' | 'fin' | 'rst' | 'silent';
  greeting?: string;
  onRset?: 'ok' | 'silent' | 'close';
  refuseRcpt?: string[];
  /** The reply to every MAIL FROM (a server that requires TLS refusing plain text: 530), instead of 250. */
  mailReply?: string;
  /** The reply to every RCPT TO not in refuseRcpt, instead of 250. */
  rcptReply?: string;
}) {
  const state = { starttls: 0, rsets: 0, received: [] as RawReceived[] };
  const tcp = await startTcpServer((socket) => {
    let buf = '';
    let mode: 'command' | 'data' | 'tls' | 'closed' = 'command';
    let from = '';
    let to: string[] = [];
    const reply = (text: string) => socket.write(`${text}\r\n`);
    const address = (line: string) => /<([^>]*)>/.exec(line)?.[1] ?? '';
    reply(opts.greeting ?? '220 breaker.test ESMTP');
    socket.on('data', (chunk: Buffer) => {
      if (mode === 'closed') return;
      if (mode === 'tls') {
        // The client's TLS hello: answered with plain text and the connection ended, or closed, reset, or ignored.
        mode = 'closed';
        const how = opts.tlsBreak ?? 'garbage';
        if (how === 'garbage') socket.end('this is not a TLS record\r\n');
        else if (how === 'fin') socket.end();
        else if (how === 'rst') socket.resetAndDestroy();
        return;
      }
      buf += chunk.toString('latin1');
      for (;;) {
        if (mode === 'data') {
          const end = buf.indexOf('\r\n.\r\n');
          if (end < 0) return;
          state.received.push({ from, to, data: buf.slice(0, end) });
          buf = buf.slice(end + 5);
          mode = 'command';
          from = '';
          to = [];
          reply('250 2.0.0 Ok: queued');
          continue;
        }
        const nl = buf.indexOf('\r\n');
        if (nl < 0) return;
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 2);
        const upper = line.toUpperCase();
        if (upper.startsWith('EHLO '))
          reply(opts.starttls === 'broken' ? '250-breaker.test\r\n250-8BITMIME\r\n250 STARTTLS' : '250-breaker.test\r\n250 8BITMIME');
        else if (upper.startsWith('HELO ')) reply('250 breaker.test');
        else if (upper === 'STARTTLS' && opts.starttls === 'none') {
          state.starttls++;
          reply('502 5.5.1 Command not implemented');
        } else if (upper === 'STARTTLS') {
          state.starttls++;
          mode = 'tls';
          buf = '';
          reply('220 2.0.0 Ready to start TLS');
          return;
        } else if (upper.startsWith('MAIL FROM:')) {
          if (opts.mailReply) {
            reply(opts.mailReply);
            continue;
          }
          from = address(line);
          reply('250 2.1.0 Ok');
        } else if (upper.startsWith('RCPT TO:')) {
          if (opts.refuseRcpt?.includes(address(line))) {
            reply('550 5.1.1 No such user');
            continue;
          }
          if (opts.rcptReply) {
            reply(opts.rcptReply);
            continue;
          }
          to.push(address(line));
          reply('250 2.1.5 Ok');
        } else if (upper === 'DATA') {
          mode = 'data';
          reply('354 End data with <CR><LF>.<CR><LF>');
        } else if (upper === 'RSET') {
          state.rsets++;
          if (opts.onRset === 'silent' || opts.onRset === 'close') {
            // A server that went away between transactions: no reply, or the connection closed without one.
            mode = 'closed';
            if (opts.onRset === 'close') socket.end();
            return;
          }
          from = '';
          to = [];
          reply('250 2.0.0 Ok');
        } else if (upper === 'NOOP') reply('250 2.0.0 Ok');
        else if (upper === 'QUIT') {
          mode = 'closed';
          socket.end('221 2.0.0 Bye\r\n');
          return;
        } else reply('502 5.5.2 Command not recognized');
      }
    });
  });
  return { state, port: tcp.port, connections: tcp.connections };
}

describe('lanes of one destination', () => {
  it('delivers every recipient when a second lane is refused (421, one client at a time) while the first delivers', async () => {
    const busy = await SmtpSink.start({ maxClients: 1 });
    cleanups.push(() => busy.stop());
    const svc = await serviceFor(busy.port);
    routeToLoopback('one-at-a-time.example');
    const s = await newSender(svc);
    const to = recipients(6, 'one-at-a-time.example');
    const id = await send(svc, s, to);

    expect(await engineFor(svc, { perDomain: 2 }).runOnce()).toBe(6);

    // The second lane did connect, and was turned away.
    expect(busy.connections).toBeGreaterThanOrEqual(2);
    const ev = await events(svc, s, id);
    expect(ev.filter((e) => e.status !== 'delivered')).toEqual([]);
    expect(ev.map((e) => [e.recipient, e.status, e.dsn]).sort()).toEqual(to.map((r) => [r, 'delivered', '2.0.0']).sort());
    expect(busy.deliveredTo().sort()).toEqual([...to].sort());
    // Every recipient final: the queue holds nothing of the email any more.
    expect((await queued(svc, id)).recipients).toEqual([]);
  });

  it('moves the next recipients to a new connection after a 421, and defers only the recipient that got it', async () => {
    routeToLoopback('reuse.example');
    const [a, b, c] = ['a@reuse.example', 'b@reuse.example', 'c@reuse.example'] as const;
    const text = 'Too many messages on this connection, try again later';
    // smtp-server closes the connection after any 421 it sends.
    sink.rcpt = (address, attempt) => (address === a && attempt === 1 ? { code: 421, message: `4.7.0 ${text}` } : 'accept');
    const s = await newSender(service);
    const id = await send(service, s, [a, b, c]);

    expect(await engineFor(service, { perDomain: 1 }).runOnce()).toBe(3);

    const ev = await events(service, s, id);
    expect(ev.filter((e) => e.recipient === a)).toEqual([expect.objectContaining({ status: 'deferred', dsn: '4.7.0', detail: expect.stringContaining(text) })]);
    expect(ev.filter((e) => e.recipient === b)).toEqual([expect.objectContaining({ status: 'delivered', dsn: '2.0.0' })]);
    expect(ev.filter((e) => e.recipient === c)).toEqual([expect.objectContaining({ status: 'delivered', dsn: '2.0.0' })]);
    expect(ev).toHaveLength(3);
    expect(sink.deliveredTo()).toEqual([b, c]);
    // a's connection was closed by the server; b and c went together on a second one.
    expect(sink.connections).toBe(2);
    expect(sink.received[0]!.session).toBe(sink.received[1]!.session);
    expect(sink.attempts.get(b)).toBe(1);
    const rows = (await queued(service, id)).recipients;
    expect(rows.find((r) => r.recipient === a)).toMatchObject({ status: 'queued', attempts: 1, nextAttemptAt: service.clock.now() + 5 * MIN });
    expect(rows.find((r) => r.recipient === b)).toMatchObject({ status: 'delivered', attempts: 1 });
  });
});

describe('an outcome that cannot be written', () => {
  it('leaves the recipient claimed until its lease runs out, then delivers it again (a documented duplicate)', async () => {
    const leaseMs = 60_000;
    const engine = engineFor(service, { leaseMs });
    const s = await newSender(service);
    const id = await send(service, s, 'once@example.net');
    const [recipient] = (await queued(service, id)).recipients;
    const t0 = service.clock.now();

    const commits = service.deps.commits;
    const original = commits.run;
    let calls = 0;
    commits.run = ((...args: Parameters<typeof commits.run>) => {
      calls++;
      if (calls === 1) throw new Error('disk I/O error');
      return original.apply(commits, args);
    }) as typeof commits.run;
    try {
      expect(await engine.runOnce()).toBe(1);
    } finally {
      commits.run = original;
    }

    // Sent once, not again in that round; nothing recorded; still claimed by the engine.
    expect(calls).toBe(1);
    expect(sink.deliveredTo()).toEqual(['once@example.net']);
    expect(await events(service, s, id)).toEqual([]);
    expect(await row(service, recipient!.id)).toMatchObject({ status: 'queued', attempts: 0, lockedBy: engine.worker, lockedUntil: t0 + leaseMs });
    expect(service.logger.entries.some((e) => e.event === 'delivery.record_failed')).toBe(true);

    // Not claimed again while the lease holds, by this engine or another.
    expect(await engine.runOnce()).toBe(0);
    service.clock.advance(leaseMs - 1);
    expect(await engine.runOnce()).toBe(0);
    expect(await engineFor(service, { leaseMs }).runOnce()).toBe(0);
    expect(sink.deliveredTo()).toEqual(['once@example.net']);

    // Once it has run out, the recipient is tried again: the server gets the message a second time.
    service.clock.advance(2);
    expect(await engine.runOnce()).toBe(1);
    expect(sink.deliveredTo()).toEqual(['once@example.net', 'once@example.net']);
    expect(await events(service, s, id)).toEqual([expect.objectContaining({ recipient: 'once@example.net', status: 'delivered', dsn: '2.0.0' })]);
    // Every recipient has its final outcome: the queued message and its rows are gone.
    expect(await queued(service, id)).toEqual({ message: undefined, recipients: [] });
  });
});

describe('a connection that fails between or before transactions', () => {
  it('sends no RSET after a delivered message (the server reset the transaction itself), one after a refused one', async () => {
    const domain = 'rset-ok.example';
    const raw = await startRawSmtpServer({ starttls: 'none', onRset: 'ok', refuseRcpt: [`b@${domain}`] });
    const svc = await serviceFor(raw.port);
    routeToLoopback(domain);
    const s = await newSender(svc);
    const [a, b, c] = [`a@${domain}`, `b@${domain}`, `c@${domain}`];
    const id = await send(svc, s, [a, b, c]);

    expect(await engineFor(svc, { perDomain: 1 }).runOnce()).toBe(3);

    // a delivered (no RSET after it), b refused at RCPT (its MAIL FROM still open: RSET), then c, on one connection.
    expect(raw.state.rsets).toBe(1);
    expect(raw.connections()).toBe(1);
    expect(raw.state.received.map((r) => r.to)).toEqual([[a], [c]]);
    const ev = await events(svc, s, id);
    expect(ev.map((e) => [e.recipient, e.status])).toEqual([
      [a, 'delivered'],
      [b, 'bounced'],
      [c, 'delivered'],
    ]);
  });

  for (const how of ['silent', 'close'] as const) {
    it(`moves the next recipient to a new connection when the server ${how === 'silent' ? 'never answers' : 'closes on'} RSET; no attempt is lost or invented`, async () => {
      const domain = `rset-${how}.example`;
      const [a, b] = [`a@${domain}`, `b@${domain}`];
      // a is refused at RCPT, so the transaction is left open and the next one starts with RSET.
      const raw = await startRawSmtpServer({ starttls: 'none', onRset: how, refuseRcpt: [a] });
      const svc = await serviceFor(raw.port);
      routeToLoopback(domain);
      const s = await newSender(svc);
      const id = await send(svc, s, [a, b]);

      const started = Date.now();
      // A silent server's RSET is given up after the socket timeout (short, so the test is quick); a closing one needs
      // no timeout at all, and a long one keeps a stall of the test's process (CI's parallel files) from ending a
      // healthy connection meanwhile and opening another (seen once: 3 connections, b still delivered once).
      const timeouts = how === 'silent' ? SHORT_TIMEOUTS : { ...SHORT_TIMEOUTS, socketTimeoutMs: 10_000 };
      expect(await engineFor(svc, { perDomain: 1, timeouts }).runOnce()).toBe(2);
      // Within the RSET step's timeout, not forever.
      expect(Date.now() - started).toBeLessThan(5000);

      expect(raw.state.rsets).toBe(1);
      expect(raw.state.received.map((r) => r.to)).toEqual([[b]]);
      expect(raw.connections()).toBe(2);
      const ev = await events(svc, s, id);
      expect(ev.map((e) => [e.recipient, e.status])).toEqual([
        [a, 'bounced'],
        [b, 'delivered'],
      ]);
    });
  }

  it('tries the next MX host when the first accepts the connection and closes it before any greeting', async () => {
    const backup = await startRawSmtpServer({ starttls: 'none' });
    // The primary: the same port on another loopback address, closing every connection at once.
    const primary = await startTcpServer((socket) => socket.end(), '127.0.0.2', backup.port);
    const svc = await serviceFor(backup.port);
    dns.add('closer.example', { type: 'MX', priority: 10, exchange: 'primary.closer.example' });
    dns.add('closer.example', { type: 'MX', priority: 20, exchange: 'backup.closer.example' });
    dns.add('primary.closer.example', { type: 'A', address: '127.0.0.2' });
    dns.add('backup.closer.example', { type: 'A', address: '127.0.0.1' });
    const s = await newSender(svc);
    const id = await send(svc, s, 'r@closer.example');

    expect(await engineFor(svc).runOnce()).toBe(1);

    expect(primary.connections()).toBe(1);
    expect(backup.state.received.map((r) => r.to)).toEqual([['r@closer.example']]);
    expect((await events(svc, s, id)).map((e) => [e.recipient, e.status])).toEqual([['r@closer.example', 'delivered']]);
  });

  it('defers 4.4.2 when the only host closes every connection before its greeting', async () => {
    const closer = await startTcpServer((socket) => socket.end());
    const svc = await serviceFor(closer.port);
    routeToLoopback('closes.example');
    const s = await newSender(svc);
    const id = await send(svc, s, 'r@closes.example');

    expect(await engineFor(svc).runOnce()).toBe(1);

    const ev = await events(svc, s, id);
    expect(ev).toEqual([expect.objectContaining({ recipient: 'r@closes.example', status: 'deferred', dsn: '4.4.2' })]);
  });
});

describe('partial DNS failure', () => {
  it('defers 4.4.3, without bouncing or suppressing, a domain without MX whose A lookup never answers and AAAA is empty', async () => {
    // The name exists (a TXT record) with no MX and no AAAA; its A query is never answered.
    dns.add('half-dns.example', { type: 'TXT', data: 'v=spf1 -all' });
    dns.silence('half-dns.example', 'A');
    const s = await newSender(service);
    const id = await send(service, s, 'r@half-dns.example');

    expect(await engineFor(service).runOnce()).toBe(1);

    const ev = await events(service, s, id);
    expect(ev).toEqual([expect.objectContaining({ recipient: 'r@half-dns.example', status: 'deferred', dsn: '4.4.3' })]);
    expect(await suppressed(service, s, 'r@half-dns.example')).toEqual([]);
    expect((await queued(service, id)).recipients[0]).toMatchObject({ status: 'queued', nextAttemptAt: service.clock.now() + 5 * MIN });
    const asked = dns.queries.filter((q) => q.name === 'half-dns.example').map((q) => q.type);
    expect(asked).toEqual(expect.arrayContaining(['MX', 'A', 'AAAA']));
    expect(sink.connections).toBe(0);
  });
});

describe('STARTTLS that fails', () => {
  it.each([
    ['answered with bytes that are no TLS record', 'garbage'],
    ['closed during the handshake', 'fin'],
    ['reset during the handshake', 'rst'],
    ['never answered (the handshake times out)', 'silent'],
  ] as const)('delivers to an MX in plain text on a second connection when the TLS upgrade is %s', async (_, tlsBreak) => {
    const breaker = await startRawSmtpServer({ starttls: 'broken', tlsBreak });
    const svc = await serviceFor(breaker.port);
    routeToLoopback('tls-broken.example');
    const s = await newSender(svc);
    const id = await send(svc, s, 'r@tls-broken.example');

    expect(await engineFor(svc).runOnce()).toBe(1);

    expect(await events(svc, s, id)).toEqual([expect.objectContaining({ recipient: 'r@tls-broken.example', status: 'delivered', dsn: '2.0.0' })]);
    // The first connection asked for STARTTLS and broke; the second did not ask and carried the message.
    expect(breaker.state.starttls).toBe(1);
    expect(breaker.connections()).toBe(2);
    expect(breaker.state.received).toHaveLength(1);
    expect(breaker.state.received[0]).toMatchObject({ to: ['r@tls-broken.example'] });
    expect(breaker.state.received[0]!.data).toMatch(/^DKIM-Signature:/im);
  });

  // A refusal of the plain-text session is no verdict on the recipient: a bounce would suppress a good address.
  it.each([
    ['530 to MAIL FROM after a failed handshake', { starttls: 'broken', mailReply: '530 5.7.0 Must issue a STARTTLS command first' }, '4.7.5'],
    ['a 5xx to MAIL FROM after a failed handshake', { starttls: 'broken', mailReply: '554 5.5.1 Plain text is not accepted here' }, '4.7.5'],
    ['a 5.7.x to RCPT after a failed handshake', { starttls: 'broken', rcptReply: '550 5.7.1 TLS is required for this recipient' }, '4.7.5'],
    ['530 to MAIL FROM from a server that offers no STARTTLS', { starttls: 'none', mailReply: '530 5.7.0 Must issue a STARTTLS command first' }, '4.7.0'],
  ] as const)('defers (never bounces or suppresses) %s', async (_, server, dsn) => {
    const breaker = await startRawSmtpServer(server);
    const svc = await serviceFor(breaker.port);
    routeToLoopback('tls-required.example');
    const s = await newSender(svc);
    const id = await send(svc, s, 'r@tls-required.example');

    expect(await engineFor(svc).runOnce()).toBe(1);

    expect(await events(svc, s, id)).toEqual([expect.objectContaining({ recipient: 'r@tls-required.example', status: 'deferred', dsn })]);
    expect((await svc.api('GET', '/suppressions', { key: s.key })).body.data).toEqual([]);
    expect(breaker.state.received).toHaveLength(0);
  });

  it('still bounces a refusal of the recipient itself in a plain-text session after a failed handshake', async () => {
    const breaker = await startRawSmtpServer({ starttls: 'broken', refuseRcpt: ['gone@tls-fallback.example'] });
    const svc = await serviceFor(breaker.port);
    routeToLoopback('tls-fallback.example');
    const s = await newSender(svc);
    const id = await send(svc, s, 'gone@tls-fallback.example');

    expect(await engineFor(svc).runOnce()).toBe(1);

    expect(await events(svc, s, id)).toEqual([expect.objectContaining({ recipient: 'gone@tls-fallback.example', status: 'bounced', dsn: '5.1.1' })]);
  });

  it('defers 4.7.5 and sends nothing to a relay with credentials that does not offer STARTTLS', async () => {
    const svc = await startService({ DNS_SERVERS: dns.address, SMTP_RELAY_URL: `smtp://user:pass@127.0.0.1:${sink.port}` });
    cleanups.push(() => svc.close());
    const s = await newSender(svc);
    const id = await send(svc, s, 'r@example.net');

    expect(await engineFor(svc).runOnce()).toBe(1);

    const ev = await events(svc, s, id);
    expect(ev).toEqual([expect.objectContaining({ recipient: 'r@example.net', status: 'deferred', dsn: '4.7.5' })]);
    expect(sink.connections).toBeGreaterThanOrEqual(1);
    expect(sink.received).toEqual([]);
    expect(sink.attempts.size).toBe(0);
    // The relay is the operator's infrastructure: the tenant reads what failed, never where; the log has the rest.
    expect(ev[0]!.detail).toBe('TLS negotiation failed: the relay');
    expect(ev[0]!.detail).not.toContain('127.0.0.1');
    expect(ev[0]!.detail).not.toContain(String(sink.port));
    expect(svc.logger.entries).toContainEqual(
      expect.objectContaining({ event: 'delivery.connect_failed', attempts: [expect.objectContaining({ address: '127.0.0.1', port: sink.port })] }),
    );
  });

  it('names neither the relay nor its address to the tenant when the relay refuses the connection or cannot be reached', async () => {
    const refusing = await startRawSmtpServer({ starttls: 'none', greeting: '554 5.7.1 relay-internal.corp.example says no to 10.1.2.3' });
    const svc = await startService({ DNS_SERVERS: dns.address, SMTP_RELAY_URL: `smtp://127.0.0.1:${refusing.port}` });
    cleanups.push(() => svc.close());
    const s = await newSender(svc);
    const id = await send(svc, s, 'r@example.net');
    expect(await engineFor(svc).runOnce()).toBe(1);
    const refused = (await events(svc, s, id))[0]!;
    expect(refused).toMatchObject({ status: 'deferred', dsn: '4.7.1', detail: 'the relay refused the connection (554 5.7.1)' });

    // Nothing listens at the relay's address any more.
    const closed = await startService({ DNS_SERVERS: dns.address, SMTP_RELAY_URL: `smtp://127.0.0.1:1` });
    cleanups.push(() => closed.close());
    const s2 = await newSender(closed);
    const id2 = await send(closed, s2, 'r@example.net');
    expect(await engineFor(closed).runOnce()).toBe(1);
    const unreachable = (await events(closed, s2, id2))[0]!;
    expect(unreachable).toMatchObject({ status: 'deferred', dsn: '4.4.1', detail: 'connection refused: the relay' });
    for (const e of [refused, unreachable]) expect(e.detail).not.toMatch(/127\.0\.0\.1|corp\.example|10\.1\.2\.3/);
  });

  it('defers 4.7.5 and sends nothing to a relay with credentials that refuses STARTTLS outright', async () => {
    const plain = await startRawSmtpServer({ starttls: 'none' });
    const svc = await startService({ DNS_SERVERS: dns.address, SMTP_RELAY_URL: `smtp://user:pass@127.0.0.1:${plain.port}` });
    cleanups.push(() => svc.close());
    const s = await newSender(svc);
    const id = await send(svc, s, 'r@example.net');

    expect(await engineFor(svc).runOnce()).toBe(1);

    const ev = await events(svc, s, id);
    expect(ev).toEqual([expect.objectContaining({ recipient: 'r@example.net', status: 'deferred' })]);
    expect(plain.state.received).toEqual([]);
    expect(plain.connections()).toBe(1);
    // A deferral carries a 4.x.x DSN; this one is a failure to get the TLS the relay needs.
    expect(ev[0]!.dsn).toMatch(/^4\./);
    expect(ev[0]!.dsn).toBe('4.7.5');
  });
});

describe('a refusal before any transaction', () => {
  it('defers with a 4.x.x DSN, never a 5.x.x one, when the server greets with 554', async () => {
    const refusing = await startRawSmtpServer({ starttls: 'none', greeting: '554 5.7.1 No service for you' });
    const svc = await serviceFor(refusing.port);
    routeToLoopback('refusing.example');
    const s = await newSender(svc);
    const id = await send(svc, s, 'r@refusing.example');

    expect(await engineFor(svc).runOnce()).toBe(1);

    const ev = await events(svc, s, id);
    expect(ev).toEqual([
      expect.objectContaining({ recipient: 'r@refusing.example', status: 'deferred', detail: expect.stringContaining('No service for you') }),
    ]);
    expect(ev[0]!.dsn).toBe('4.7.1');
    expect(await suppressed(svc, s, 'r@refusing.example')).toEqual([]);
    expect(refusing.state.received).toEqual([]);
  });
});

/** The delivered outcomes counted on the service's /metrics so far. */
async function deliveredCounted(service: TestService): Promise<number> {
  const families = parsePrometheusText(await (await fetch(`${service.url}/metrics`)).text());
  return sampleValueOrZero(families, 'mailstead_delivery_outcomes_total', { status: 'delivered' });
}

describe('wakes and the other nodes', () => {
  it('a wake the engine claims at once is not told to the other nodes; a claim that fills its room is, and so is a wake it has no room for', async () => {
    const svc = await serviceFor(sink.port);
    const told: string[] = [];
    // As server/app/liveness.ts does while other nodes are live.
    forwardWakes(svc.deps.db, (queue) => told.push(queue));
    cleanups.push(() => forwardWakes(svc.deps.db, null));
    const engine = engineFor(svc, { batchSize: 4, pollMs: 60_000 });
    await engine.start();
    cleanups.push(() => engine.stop());
    const s = await newSender(svc);
    const toldRecipients = () => told.filter((q) => q === 'recipients').length;

    // Idle, the engine claims the send's two recipients itself: the other nodes' claims would only race it.
    await send(svc, s, ['w1@example.net', 'w2@example.net']);
    await waitFor(() => sink.deliveredTo().length === 2, 5000, 'both delivered');
    expect(toldRecipients()).toBe(0);

    // Six recipients whose replies are held: the claim takes four (its room) and the others are told of the rest.
    let release!: () => void;
    const held = new Promise<'accept'>((resolve) => (release = () => resolve('accept')));
    sink.data = () => held;
    await send(svc, s, recipients(6, 'example.net'));
    await waitFor(() => toldRecipients() === 1, 5000, 'the other nodes told');
    // Four held of four: a wake made now would not be claimed here at once, so it is told as it comes.
    markQueued(svc.deps.db, 'recipients');
    await new Promise((r) => setImmediate(r));
    expect(toldRecipients()).toBe(2);
    release();
    await waitFor(() => sink.deliveredTo().length === 8, 10_000, 'all eight delivered');
  });

  it("a claim that fills an account's share is told to the other nodes: they may take that account's further mail", async () => {
    const svc = await serviceFor(sink.port);
    const told: string[] = [];
    forwardWakes(svc.deps.db, (queue) => told.push(queue));
    cleanups.push(() => forwardWakes(svc.deps.db, null));
    const engine = engineFor(svc, { batchSize: 8, perAccountHeld: 2, pollMs: 60_000 });
    await engine.start();
    cleanups.push(() => engine.stop());
    const s = await newSender(svc);
    let release!: () => void;
    const held = new Promise<'accept'>((resolve) => (release = () => resolve('accept')));
    sink.data = () => held;
    // Five recipients of one account: the claim takes two (the account's share), far below its room of eight.
    await send(svc, s, recipients(5, 'example.net'));
    await waitFor(() => told.includes('recipients'), 5000, 'the other nodes told');
    release();
    await waitFor(() => sink.deliveredTo().length === 5, 10_000, 'all five delivered');
  });
});

describe('leases on the durable queue', () => {
  const LEASE = 60_000;

  /** `n` queued recipient rows made through POST /emails, in claim order. */
  async function queueRows(n: number): Promise<string[]> {
    const s = await newSender(service);
    const id = await send(service, s, recipients(n, 'lease.example'));
    return (await queued(service, id)).recipients.map((r) => r.id);
  }

  const ids = (claimed: { recipient: OutboundRecipientRow }[]) => claimed.map((c) => c.recipient.id).sort();

  it('gives two workers claiming at the same moment disjoint rows', async () => {
    const all = await queueRows(6);
    const now = service.clock.now();
    const a = await claimDueRecipients(service.deps.db, 'host-a:1:a', now, LEASE, 4);
    const b = await claimDueRecipients(service.deps.db, 'host-b:1:b', now, LEASE, 4);
    expect(a).toHaveLength(4);
    expect(b).toHaveLength(2);
    expect(ids(a).filter((x) => ids(b).includes(x))).toEqual([]);
    expect([...ids(a), ...ids(b)].sort()).toEqual([...all].sort());
    for (const c of a) expect(await row(service, c.recipient.id)).toMatchObject({ lockedBy: 'host-a:1:a', lockedUntil: now + LEASE });
    for (const c of b) expect(await row(service, c.recipient.id)).toMatchObject({ lockedBy: 'host-b:1:b', lockedUntil: now + LEASE });
  });

  it("takes accounts in turn where the limit cuts the claim: each one's earliest, then each one's second, not one backlog first", async () => {
    const backlog = await queueRows(6);
    const few = await queueRows(2);
    const claimed = ids(await claimDueRecipients(service.deps.db, 'host-a:1:a', service.clock.now(), LEASE, 4));
    expect(claimed).toHaveLength(4);
    // Of each account, two: the backlog's earliest two (its rows are due alike, so in id order) and the other's both.
    expect(claimed.filter((id) => backlog.includes(id))).toEqual([...backlog].sort().slice(0, 2));
    expect(claimed.filter((id) => few.includes(id))).toEqual([...few].sort());
  });

  it("lets another worker claim a worker's rows only once their lease has expired", async () => {
    const all = await queueRows(3);
    const t0 = service.clock.now();
    expect(ids(await claimDueRecipients(service.deps.db, 'host-a:1:a', t0, LEASE, 10))).toEqual([...all].sort());

    service.clock.set(t0 + LEASE - 1);
    expect(await claimDueRecipients(service.deps.db, 'host-b:1:b', service.clock.now(), LEASE, 10)).toEqual([]);

    service.clock.set(t0 + LEASE + 1);
    const b = await claimDueRecipients(service.deps.db, 'host-b:1:b', service.clock.now(), LEASE, 10);
    expect(ids(b)).toEqual([...all].sort());
    for (const id of all) expect(await row(service, id)).toMatchObject({ lockedBy: 'host-b:1:b', lockedUntil: t0 + LEASE + 1 + LEASE });
  });

  it('records an outcome only from the claim that still holds the recipient: a lease taken over, or an outcome recorded since, rolls the whole outcome back', async () => {
    const s = await newSender(service);
    const id = await send(service, s, 'one@lease.example');
    const [recipientId] = (await queued(service, id)).recipients.map((r) => r.id);
    const t0 = service.clock.now();
    const [stale] = await claimDueRecipients(service.deps.db, 'host-a:1:a', t0, LEASE, 10);
    expect(stale?.recipient.id).toBe(recipientId);
    const delivered = { status: 'delivered', dsn: '2.0.0', detail: '250 ok' } as const;

    // The lease runs out and another holder takes the recipient: the first holder's outcome writes nothing.
    service.clock.set(t0 + LEASE + 1);
    const [taken] = await claimDueRecipients(service.deps.db, 'host-b:1:b', service.clock.now(), LEASE, 10);
    expect(taken?.recipient.id).toBe(recipientId);
    const counted = await deliveredCounted(service);
    expect(await recordOutcome(service.deps, stale!, delivered)).toBeNull();
    expect(await deliveredCounted(service)).toBe(counted);
    expect(await row(service, recipientId!)).toMatchObject({ status: 'queued', attempts: 0, lockedBy: 'host-b:1:b' });
    expect(await events(service, s, id)).toEqual([]);

    // The holder records a deferral: the row is free again, and a second record of that same claim writes nothing.
    const deferred = { status: 'deferred', dsn: '4.2.0', detail: '451 try later' } as const;
    expect(await recordOutcome(service.deps, taken!, deferred)).toMatchObject({ status: 'deferred' });
    expect(await row(service, recipientId!)).toMatchObject({ status: 'queued', attempts: 1, lockedBy: null });
    expect(await recordOutcome(service.deps, taken!, delivered)).toBeNull();

    // The same holder claims it again when it is due: its older claim (same holder, an outcome recorded since) writes nothing.
    service.clock.set(service.clock.now() + 3_600_000);
    const [again] = await claimDueRecipients(service.deps.db, 'host-b:1:b', service.clock.now(), LEASE, 10);
    expect(again?.recipient).toMatchObject({ id: recipientId, attempts: 1, lockedBy: 'host-b:1:b' });
    expect(await recordOutcome(service.deps, taken!, { status: 'bounced', dsn: '5.1.1', detail: '550 no such user' })).toBeNull();
    expect(await row(service, recipientId!)).toMatchObject({ status: 'queued', attempts: 1, lockedBy: 'host-b:1:b' });

    expect(await recordOutcome(service.deps, again!, delivered)).toMatchObject({ status: 'delivered' });
    expect((await events(service, s, id)).map((e) => e.status)).toEqual(['deferred', 'delivered']);
    expect(await suppressed(service, s, 'one@lease.example')).toEqual([]);
  });

  it('a stale outcome recorded at once with others (one batch) rolls back alone, its writes with it', async () => {
    const s = await newSender(service);
    const staleId = await send(service, s, 'stale@lease.example');
    const freshId = await send(service, s, 'fresh@lease.example');
    const t0 = service.clock.now();
    const claimed = await claimDueRecipients(service.deps.db, 'host-a:1:a', t0, LEASE, 10);
    const stale = claimed.find((c) => c.message.id === staleId)!;
    expect(claimed.map((c) => c.message.id).sort()).toEqual([staleId, freshId].sort());
    // The first claim's lease runs out and another holder takes both recipients: its claim of the second is current.
    service.clock.set(t0 + LEASE + 1);
    const taken = await claimDueRecipients(service.deps.db, 'host-b:1:b', service.clock.now(), LEASE, 10);
    const holder = taken.find((c) => c.message.id === freshId)!;
    const delivered = { status: 'delivered', dsn: '2.0.0', detail: '250 ok' } as const;
    const before = await deliveredCounted(service);
    const [a, b] = await Promise.all([recordOutcome(service.deps, stale, delivered), recordOutcome(service.deps, holder, delivered)]);
    expect(a).toBeNull();
    expect(b).toMatchObject({ status: 'delivered' });
    // Only the outcome that committed is counted on /metrics.
    expect((await deliveredCounted(service)) - before).toBe(1);
    expect(await events(service, s, staleId)).toEqual([]);
    expect((await events(service, s, freshId)).map((e) => e.status)).toEqual(['delivered']);
    expect(await row(service, stale.recipient.id)).toMatchObject({ status: 'queued', attempts: 0, lockedBy: 'host-b:1:b' });
  });

  it('renews only the listed rows that the worker still holds', async () => {
    const all = await queueRows(4);
    const t0 = service.clock.now();
    const a = ids(await claimDueRecipients(service.deps.db, 'host-a:1:a', t0, LEASE, 3));
    const b = ids(await claimDueRecipients(service.deps.db, 'host-b:1:b', t0, LEASE, 3));
    expect(a).toEqual(all.slice(0, 3).sort());
    expect(b).toEqual([all[3]]);

    await renewLeases(service.deps.db, 'host-a:1:a', [all[0]!, all[3]!], t0 + 10 * LEASE);
    expect(await row(service, all[0]!)).toMatchObject({ lockedBy: 'host-a:1:a', lockedUntil: t0 + 10 * LEASE });
    expect(await row(service, all[1]!)).toMatchObject({ lockedBy: 'host-a:1:a', lockedUntil: t0 + LEASE });
    expect(await row(service, all[2]!)).toMatchObject({ lockedBy: 'host-a:1:a', lockedUntil: t0 + LEASE });
    // Held by another worker: untouched.
    expect(await row(service, all[3]!)).toMatchObject({ lockedBy: 'host-b:1:b', lockedUntil: t0 + LEASE });

    // Past the first lease: every row but the renewed one is free again.
    const c = await claimDueRecipients(service.deps.db, 'host-c:1:c', t0 + LEASE + 1, LEASE, 10);
    expect(ids(c)).toEqual([all[1]!, all[2]!, all[3]!].sort());
  });

  it('runs a lease out after its term on the engine’s steady timeline: a wall clock stepped an hour either way neither ends it early nor holds it an hour longer', async () => {
    routeToLoopback('lease.example');
    const [id] = await queueRows(1);
    // Due whatever the wall clock says (the retry schedule itself is kept in wall-clock time).
    await service.deps.db.update(outboundRecipients).set({ nextAttemptAt: 0 }).where(eq(outboundRecipients.id, id!));
    const engine = engineFor(service);
    // Another worker's lease, as this process times them.
    expect(await claimDueRecipients(service.deps.db, 'other-host:1:x', service.clock.now(), LEASE, 1, undefined, leaseNow(service.clock))).toHaveLength(1);
    try {
      service.clock.stepWall(3_600_000);
      expect(await engine.runOnce()).toBe(0);
      service.clock.stepWall(-2 * 3_600_000);
      service.clock.advance(LEASE - 1);
      expect(await engine.runOnce()).toBe(0);
      service.clock.advance(1);
      expect(await engine.runOnce()).toBe(1);
      expect(sink.received).toHaveLength(1);
    } finally {
      service.clock.stepWall(3_600_000);
    }
  });

  it('cuts at start a foreign lease reaching further than one term (written before the wall clock stepped back) to one term from now', async () => {
    const all = await queueRows(3);
    const t0 = service.clock.now();
    // Written an hour ahead of this clock (the clock has since stepped back), by this worker and by another host; and
    // one written on this clock.
    const [own] = await claimDueRecipients(service.deps.db, 'host-self:1:self', t0 + 3_600_000, LEASE, 1);
    const [ahead] = await claimDueRecipients(service.deps.db, 'other-host:1:ahead', t0 + 3_600_000, LEASE, 1);
    const [near] = await claimDueRecipients(service.deps.db, 'other-host:1:near', t0, LEASE, 1);
    expect([ahead, near, own].map((c) => c!.recipient.id).sort()).toEqual([...all].sort());

    expect(await capForeignLeases(service.deps.db, 'host-self:1:self', t0 + 1000, LEASE)).toBe(1);
    expect(await row(service, ahead!.recipient.id)).toMatchObject({ lockedBy: 'other-host:1:ahead', lockedUntil: t0 + 1000 + LEASE });
    expect(await row(service, near!.recipient.id)).toMatchObject({ lockedBy: 'other-host:1:near', lockedUntil: t0 + LEASE });
    expect(await row(service, own!.recipient.id)).toMatchObject({ lockedBy: 'host-self:1:self', lockedUntil: t0 + 3_600_000 + LEASE });
    // So it runs out one term later, not an hour and a term later.
    expect(ids(await claimDueRecipients(service.deps.db, 'host-x:1:x', t0 + 1000 + LEASE, LEASE, 10))).toEqual(
      [ahead!.recipient.id, near!.recipient.id].sort(),
    );
  });

  it('the engine cuts such leases when it starts', async () => {
    const [id] = await queueRows(1);
    await claimDueRecipients(service.deps.db, 'other-host:1:ahead', service.clock.now() + 3_600_000, LEASE, 1);
    const engine = engineFor(service, { leaseMs: LEASE });
    await engine.start();
    await engine.stop();
    expect(service.logger.entries).toContainEqual(expect.objectContaining({ event: 'delivery.leases_capped', capped: 1 }));
    expect(await row(service, id!)).toMatchObject({ lockedBy: 'other-host:1:ahead', lockedUntil: leaseNow(service.clock) + LEASE });
  });

  it('releases at start the rows of dead workers on this host and of an earlier run under this pid, and no others', async () => {
    const child = spawn(process.execPath, ['-e', '']);
    const deadPid = child.pid!;
    await once(child, 'exit');
    const host = hostname();
    const workers = {
      dead: `${host}:${deadPid}:abc`,
      alive: `${host}:${process.ppid}:abc`,
      otherHost: 'other-host:1:abc',
      earlierRun: `${host}:${process.pid}:old`,
      self: `${host}:${process.pid}:new`,
    };
    const all = await queueRows(5);
    const t0 = service.clock.now();
    const held: Record<string, string> = {};
    for (const [name, worker] of Object.entries(workers)) {
      const [claimed] = await claimDueRecipients(service.deps.db, worker, t0, LEASE, 1);
      held[name] = claimed!.recipient.id;
    }
    expect(Object.values(held).sort()).toEqual([...all].sort());

    expect(await releaseDeadLeases(service.deps.db, workers.self)).toBe(2);

    expect(await row(service, held.dead!)).toMatchObject({ lockedBy: null, lockedUntil: null });
    expect(await row(service, held.earlierRun!)).toMatchObject({ lockedBy: null, lockedUntil: null });
    expect(await row(service, held.alive!)).toMatchObject({ lockedBy: workers.alive, lockedUntil: t0 + LEASE });
    expect(await row(service, held.otherHost!)).toMatchObject({ lockedBy: workers.otherHost, lockedUntil: t0 + LEASE });
    expect(await row(service, held.self!)).toMatchObject({ lockedBy: workers.self, lockedUntil: t0 + LEASE });
    // The released rows are due again at once.
    expect(ids(await claimDueRecipients(service.deps.db, 'host-x:1:x', t0, LEASE, 10))).toEqual([held.dead!, held.earlierRun!].sort());
  });
});

describe('step timeouts', () => {
  it('defers 4.4.1 within the greeting timeout when the server accepts and never greets', async () => {
    const mute = await startTcpServer(() => undefined);
    const svc = await serviceFor(mute.port);
    routeToLoopback('mute.example');
    const s = await newSender(svc);
    const id = await send(svc, s, 'r@mute.example');

    const started = Date.now();
    expect(await engineFor(svc, { timeouts: SHORT_TIMEOUTS }).runOnce()).toBe(1);
    const elapsed = Date.now() - started;

    expect(await events(svc, s, id)).toEqual([expect.objectContaining({ recipient: 'r@mute.example', status: 'deferred', dsn: '4.4.1' })]);
    expect(mute.connections()).toBe(1);
    expect(elapsed).toBeGreaterThanOrEqual(SHORT_TIMEOUTS.greetingTimeoutMs - 50);
    expect(elapsed).toBeLessThan(SHORT_TIMEOUTS.greetingTimeoutMs + 1500);
  });

  it('defers 4.4.x within the socket timeout when the server never answers the message data', async () => {
    sink.data = () => new Promise(() => undefined);
    const s = await newSender(service);
    const id = await send(service, s, 'stall@example.net');

    const started = Date.now();
    expect(await engineFor(service, { timeouts: SHORT_TIMEOUTS }).runOnce()).toBe(1);
    const elapsed = Date.now() - started;

    const ev = await events(service, s, id);
    expect(ev).toEqual([expect.objectContaining({ recipient: 'stall@example.net', status: 'deferred' })]);
    expect(ev[0]!.dsn).toMatch(/^4\.4\.\d$/);
    expect(sink.received).toEqual([]);
    expect(elapsed).toBeGreaterThanOrEqual(SHORT_TIMEOUTS.socketTimeoutMs - 50);
    expect(elapsed).toBeLessThan(SHORT_TIMEOUTS.socketTimeoutMs + 1500);
    expect((await queued(service, id)).recipients[0]).toMatchObject({ status: 'queued', nextAttemptAt: service.clock.now() + 5 * MIN });
  });
});

describe('the background loop', () => {
  it('delivers to a fast destination while a slow one is still answering', async () => {
    routeToLoopback('slow.example');
    sink.rcpt = (address) => (address.endsWith('@slow.example') ? sleep(3000).then(() => 'accept' as const) : 'accept');
    const engine = engineFor(service, { pollMs: 50, timeouts: { ...FAST_TIMEOUTS, socketTimeoutMs: 10_000 } });
    const s = await newSender(service);
    let slowId = '';
    let fastId = '';
    const delivered = async (id: string) => (await events(service, s, id)).some((e) => e.status === 'delivered');
    await engine.start();
    try {
      slowId = await send(service, s, 'r@slow.example');
      engine.poke();
      // The slow transaction is under way: its RCPT has reached the server, which takes its time to answer.
      await waitFor(() => sink.attempts.get('r@slow.example') === 1, 5000, 'the RCPT of r@slow.example');

      fastId = await send(service, s, 'r@example.net');
      engine.poke();
      await waitFor(() => delivered(fastId), 2500, 'r@example.net to be delivered');
      expect(await events(service, s, slowId)).toEqual([]);
      expect(sink.deliveredTo()).toEqual(['r@example.net']);

      await waitFor(() => delivered(slowId), 10_000, 'r@slow.example to be delivered');
    } finally {
      await engine.stop();
    }
    expect(await events(service, s, fastId)).toEqual([expect.objectContaining({ recipient: 'r@example.net', status: 'delivered', dsn: '2.0.0' })]);
    expect(await events(service, s, slowId)).toEqual([expect.objectContaining({ recipient: 'r@slow.example', status: 'delivered', dsn: '2.0.0' })]);
    expect(sink.deliveredTo()).toEqual(['r@example.net', 'r@slow.example']);
  });
});

describe('connections to one destination', () => {
  // docs/api/decisions.md section 3: recipients of one domain share a connection. A lane per recipient opened connections
  // that the first one had drained by the time they were up: a handshake and a QUIT each, against the server's
  // limit on concurrent connections (found against a real Postfix).
  it('carries the recipients of one email to one domain over one connection, and opens more only for a backlog', async () => {
    const counting = await SmtpSink.start();
    cleanups.push(() => counting.stop());
    const svc = await serviceFor(counting.port);
    routeToLoopback('shared.example');
    const s = await newSender(svc);
    const four = recipients(4, 'shared.example');
    const id = await send(svc, s, four);

    expect(await engineFor(svc).runOnce()).toBe(4);

    expect(counting.connections).toBe(1);
    expect((await events(svc, s, id)).map((e) => e.status)).toEqual(['delivered', 'delivered', 'delivered', 'delivered']);

    const many = recipients(40, 'backlog.shared.example');
    routeToLoopback('backlog.shared.example');
    await send(svc, s, many);
    expect(await engineFor(svc).runOnce()).toBe(40);
    // Forty waiting: more than one connection, at most one for every four recipients.
    expect(counting.connections - 1).toBeGreaterThan(1);
    expect(counting.connections - 1).toBeLessThanOrEqual(10);
    expect(
      counting
        .deliveredTo()
        .filter((r) => r.endsWith('@backlog.shared.example'))
        .sort(),
    ).toEqual([...many].sort());
  });
});

describe('the connection limit', () => {
  it('never holds more than maxConnections connections at once, across many destinations', async () => {
    const domains = Array.from({ length: 5 }, (_, i) => `d${i + 1}.limit.example`);
    for (const d of domains) routeToLoopback(d);
    sink.rcpt = () => sleep(100).then(() => 'accept' as const);
    const s = await newSender(service);
    const to = domains.flatMap((d) => recipients(4, d));
    const id = await send(service, s, to);

    expect(await engineFor(service, { maxConnections: 3, perDomain: 3 }).runOnce()).toBe(20);

    expect(sink.peakOpen).toBeLessThanOrEqual(3);
    // The whole budget was used.
    expect(sink.peakOpen).toBe(3);
    const ev = await events(service, s, id);
    expect(ev.map((e) => [e.recipient, e.status]).sort()).toEqual(to.map((r) => [r, 'delivered']).sort());
    expect(sink.deliveredTo().sort()).toEqual([...to].sort());
  });

  it('shares a limit between live nodes so that the shares add up to it: the remainder to the first by name, at least one each', () => {
    const all = (limit: number, live: string[]) => live.map((n) => shareOf(limit, live, n));
    expect(all(20, ['n2', 'n3', 'n1'])).toEqual([7, 6, 7]);
    expect(all(20, ['n1', 'n2'])).toEqual([10, 10]);
    expect(all(20, ['n1'])).toEqual([20]);
    expect(all(9, ['d', 'c', 'b', 'a'])).toEqual([2, 2, 2, 3]);
    expect(all(2, ['a', 'b', 'c'])).toEqual([1, 1, 1]);
    // A node that does not see itself among the live ones (its link lost a moment) counts itself in.
    expect(shareOf(20, ['n2', 'n3'], 'n1')).toBe(7);
    expect(shareOf(20, [], 'n1')).toBe(20);
  });

  it("splits a destination's connections between the live nodes: this node's share of perDomain, at least one", async () => {
    routeToLoopback('split.limit.example');
    sink.rcpt = () => sleep(100).then(() => 'accept' as const);
    const s = await newSender(service);
    const to = recipients(24, 'split.limit.example');
    await send(service, s, to);
    const self = service.deps.config.nodeName;
    let live = ['!a', '!b', '!c', self];
    const nodes = { ...singleNode(self), liveCount: () => live.length, share: (limit: number) => shareOf(limit, live, self) };
    sink.resetConnections();
    // Four nodes live: 9 is 3 + 2 + 2 + 2, this node (last by name) has two connections to the destination.
    expect(await createDeliveryEngine({ ...service.deps, nodes }, { timeouts: FAST_TIMEOUTS, perDomain: 9, recipientsPerLane: 1 }).runOnce()).toBe(24);
    expect(sink.peakOpen).toBe(2);
    // First by name, it has the remainder's one more.
    live = [self, `${self}~a`, `${self}~b`, `${self}~c`];
    await send(service, s, to);
    sink.resetConnections();
    expect(await createDeliveryEngine({ ...service.deps, nodes }, { timeouts: FAST_TIMEOUTS, perDomain: 9, recipientsPerLane: 1 }).runOnce()).toBe(24);
    expect(sink.peakOpen).toBe(3);
    live = Array.from({ length: 11 }, (_, i) => `~${i}`).concat(self);
    await send(service, s, recipients(6, 'split.limit.example'));
    sink.resetConnections();
    expect(await createDeliveryEngine({ ...service.deps, nodes }, { timeouts: FAST_TIMEOUTS, perDomain: 9, recipientsPerLane: 1 }).runOnce()).toBe(6);
    expect(sink.peakOpen).toBe(1);
  });
});

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SMTPServer } from 'smtp-server';
import { outboundRecipients } from '../db/schema/index.js';
import { createDeliveryEngine, DEFAULT_ENGINE_OPTIONS } from '../mta/delivery-engine.js';
import { resolveRoute } from '../mta/routing.js';
import { loadConfig } from '../server/shared/config.js';
import { createResolver } from '../server/shared/dns/resolver.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { newSender, receipt, type Sender } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * Where outbound mail goes (docs/api/decisions.md section 3): MX records by preference through the
 * test DNS server, else the domain's own address; a null MX bounces 5.1.10, a name that does not exist 5.1.2, a DNS
 * timeout or failure defers 4.4.3; a host that resolves only to loopback, private or reserved addresses is refused
 * (5.4.4, no connection made) unless ALLOW_PRIVATE_TARGETS is set; with SMTP_RELAY_URL everything goes to the relay.
 * Recipients of one domain share a connection, each with its own transaction; STARTTLS is used when offered.
 */

interface SinkSession {
  ehlo: string;
  secure: boolean;
  mailFrom: string[];
  rcptTo: string[];
}

/** An smtp-server sink that also records its connections: who connected, as what, and what each carried. */
class RoutingSink {
  connections = 0;
  sessions = new Map<string, SinkSession>();
  received: { to: string[]; secure: boolean; session: string }[] = [];
  port = 0;
  private server: SMTPServer;

  constructor(opts: { starttls: boolean }) {
    this.server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['AUTH'],
      // Without a key of its own smtp-server offers STARTTLS with its bundled self-signed certificate.
      hideSTARTTLS: !opts.starttls,
      logger: false,
      onConnect: (session, done) => {
        this.connections++;
        this.sessions.set(session.id, { ehlo: '', secure: false, mailFrom: [], rcptTo: [] });
        done();
      },
      onMailFrom: (address, session, done) => {
        const s = this.sessions.get(session.id)!;
        s.ehlo = session.hostNameAppearsAs;
        s.secure = session.secure;
        s.mailFrom.push(address.address);
        done();
      },
      onRcptTo: (address, session, done) => {
        this.sessions.get(session.id)!.rcptTo.push(address.address);
        done();
      },
      onData: (stream, session, done) => {
        stream.resume();
        stream.on('end', () => {
          this.received.push({ to: session.envelope.rcptTo.map((r) => r.address), secure: session.secure, session: session.id });
          done();
        });
      },
    });
    this.server.on('error', () => undefined);
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', () => resolve()));
    const address = this.server.server.address();
    this.port = typeof address === 'object' && address ? address.port : 0;
    return this;
  }

  reset(): void {
    this.connections = 0;
    this.sessions.clear();
    this.received = [];
  }

  deliveredTo(): string[] {
    return this.received.flatMap((r) => r.to).sort();
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

const FAST = { connectTimeoutMs: 1000, greetingTimeoutMs: 1000, socketTimeoutMs: 2000 };

let dns: TestDnsServer;
let sink: RoutingSink;
let tlsSink: RoutingSink;
/** ALLOW_PRIVATE_TARGETS set: loopback MX hosts are reachable. */
let open: TestService;
/** ALLOW_PRIVATE_TARGETS unset. */
let strict: TestService;
/** SMTP_RELAY_URL pointing at the sink. */
let relay: TestService;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  sink = await new RoutingSink({ starttls: false }).listen();
  tlsSink = await new RoutingSink({ starttls: true }).listen();
  open = await startService({ DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port), ALLOW_PRIVATE_TARGETS: 'true' });
  strict = await startService({ DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port) });
  relay = await startService({ DNS_SERVERS: dns.address, SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}` });
});

afterAll(async () => {
  await open?.close();
  await strict?.close();
  await relay?.close();
  await sink?.stop();
  await tlsSink?.stop();
  await dns?.stop();
});

beforeEach(async () => {
  for (const s of [open, strict, relay]) await s.deps.db.delete(outboundRecipients);
  dns.clear();
  sink.reset();
  tlsSink.reset();
  dns.add('example.net', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
  dns.add('mx.example.net', { type: 'A', address: '127.0.0.1' });
});

interface EmailEvent {
  recipient: string;
  status: string;
  dsn: string;
  detail: string;
}

async function send(service: TestService, s: Sender, to: string | string[]): Promise<string> {
  const res = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, to) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

async function events(service: TestService, s: Sender, id: string): Promise<EmailEvent[]> {
  const res = await service.api('GET', `/emails/${id}`, { key: s.key });
  expect(res.status).toBe(200);
  return res.body.events;
}

async function suppressed(service: TestService, s: Sender, address: string): Promise<string[]> {
  const res = await service.api('GET', `/suppressions?address=${encodeURIComponent(address)}`, { key: s.key });
  expect(res.status).toBe(200);
  return res.body.data.map((e: { reason: string }) => e.reason);
}

/** One send to `to`, one engine round, the recipient's events. */
async function deliverOne(
  service: TestService,
  to: string,
  engine = createDeliveryEngine(service.deps, { timeouts: FAST }),
): Promise<{ s: Sender; events: EmailEvent[] }> {
  const s = await newSender(service);
  const id = await send(service, s, to);
  await engine.runOnce();
  return { s, events: await events(service, s, id) };
}

describe('MX routing', () => {
  it('delivers to the most preferred MX host, whatever order DNS answers in', async () => {
    dns.add('pref.example', { type: 'MX', priority: 50, exchange: 'backup.pref.example' });
    dns.add('pref.example', { type: 'MX', priority: 5, exchange: 'primary.pref.example' });
    dns.add('primary.pref.example', { type: 'A', address: '127.0.0.1' });
    // The backup refuses: nothing listens on 127.0.0.2.
    dns.add('backup.pref.example', { type: 'A', address: '127.0.0.2' });
    const route = await resolveRoute('pref.example', open.deps);
    expect(route.kind === 'targets' && route.targets.map((t) => t.host)).toEqual(['primary.pref.example', 'backup.pref.example']);

    const { events: ev } = await deliverOne(open, 'a@pref.example');
    expect(ev).toEqual([expect.objectContaining({ status: 'delivered', dsn: '2.0.0' })]);
    expect(sink.deliveredTo()).toEqual(['a@pref.example']);
  });

  it('spreads the first attempt over MX hosts of equal preference (RFC 5321 5.1: randomized), the less preferred after them', async () => {
    dns.add('equal.example', { type: 'MX', priority: 10, exchange: 'mx1.equal.example' });
    dns.add('equal.example', { type: 'MX', priority: 10, exchange: 'mx2.equal.example' });
    dns.add('equal.example', { type: 'MX', priority: 20, exchange: 'backup.equal.example' });
    for (const host of ['mx1', 'mx2', 'backup']) dns.add(`${host}.equal.example`, { type: 'A', address: '127.0.0.1' });
    const orders = new Set<string>();
    for (let i = 0; i < 40; i++) {
      const route = await resolveRoute('equal.example', open.deps);
      if (route.kind !== 'targets') throw new Error(JSON.stringify(route));
      expect(route.targets[2]!.host).toBe('backup.equal.example');
      orders.add(route.targets.map((t) => t.host).join(' '));
    }
    // Both orders of the equal pair (each run's chance of missing one: 2^-39).
    expect([...orders].sort()).toEqual([
      'mx1.equal.example mx2.equal.example backup.equal.example',
      'mx2.equal.example mx1.equal.example backup.equal.example',
    ]);
  });

  it('falls back to the next MX host when the preferred one refuses the connection', async () => {
    dns.add('fallback.example', { type: 'MX', priority: 10, exchange: 'down.fallback.example' });
    dns.add('fallback.example', { type: 'MX', priority: 20, exchange: 'up.fallback.example' });
    dns.add('down.fallback.example', { type: 'A', address: '127.0.0.2' });
    dns.add('up.fallback.example', { type: 'A', address: '127.0.0.1' });
    const { events: ev } = await deliverOne(open, 'b@fallback.example');
    expect(ev).toEqual([expect.objectContaining({ status: 'delivered' })]);
    expect(sink.deliveredTo()).toEqual(['b@fallback.example']);
  });

  it("uses the domain's own address when it has no MX record", async () => {
    dns.add('nomx.example', { type: 'A', address: '127.0.0.1' });
    const route = await resolveRoute('nomx.example', open.deps);
    expect(route).toMatchObject({ kind: 'targets', targets: [{ host: 'nomx.example', addresses: ['127.0.0.1'], port: sink.port }] });
    const { events: ev } = await deliverOne(open, 'c@nomx.example');
    expect(ev).toEqual([expect.objectContaining({ status: 'delivered' })]);
    expect(sink.deliveredTo()).toEqual(['c@nomx.example']);
  });

  it('bounces a null MX with 5.1.10 and a name that does not exist with 5.1.2, and suppresses both', async () => {
    dns.add('nullmx.example', { type: 'MX', priority: 0, exchange: '.' });
    dns.add('nullmx.example', { type: 'A', address: '127.0.0.1' });
    const nullMx = await deliverOne(open, 'd@nullmx.example');
    expect(nullMx.events).toEqual([expect.objectContaining({ recipient: 'd@nullmx.example', status: 'bounced', dsn: '5.1.10' })]);
    expect(nullMx.events[0]!.detail.length).toBeGreaterThan(0);
    expect(await suppressed(open, nullMx.s, 'd@nullmx.example')).toEqual(['bounce']);

    const nx = await deliverOne(open, 'e@nowhere.example');
    expect(nx.events).toEqual([expect.objectContaining({ recipient: 'e@nowhere.example', status: 'bounced', dsn: '5.1.2' })]);
    expect(await suppressed(open, nx.s, 'e@nowhere.example')).toEqual(['bounce']);
    expect(sink.connections).toBe(0);
  });

  it('defers a DNS failure (SERVFAIL of the domain or of its MX host) with 4.4.3', async () => {
    dns.fail('servfail.example');
    const a = await deliverOne(open, 'f@servfail.example');
    expect(a.events).toEqual([expect.objectContaining({ status: 'deferred', dsn: '4.4.3' })]);

    dns.add('hostfail.example', { type: 'MX', priority: 10, exchange: 'mx.hostfail.example' });
    dns.add('mx.hostfail.example', { type: 'A', address: '127.0.0.1' });
    dns.fail('mx.hostfail.example');
    const b = await deliverOne(open, 'g@hostfail.example');
    expect(b.events).toEqual([expect.objectContaining({ status: 'deferred', dsn: '4.4.3' })]);
    expect(await suppressed(open, a.s, 'f@servfail.example')).toEqual([]);
    expect(sink.connections).toBe(0);
  });

  it('defers a DNS timeout with 4.4.3', async () => {
    dns.silent = true;
    const { events: ev } = await deliverOne(open, 'h@example.net');
    expect(ev).toEqual([expect.objectContaining({ status: 'deferred', dsn: '4.4.3' })]);
    expect(sink.connections).toBe(0);
  });
});

describe('private and reserved targets', () => {
  it.each([
    ['loopback', '127.0.0.1'],
    ['private', '10.0.0.5'],
    ['link-local', '169.254.169.254'],
  ])('bounces 5.4.4 an MX that resolves only to a %s address, without connecting', async (_, address) => {
    dns.add('inside.example', { type: 'MX', priority: 10, exchange: 'mx.inside.example' });
    dns.add('mx.inside.example', { type: 'A', address });
    // Connection steps that would take 20 s to give up: an answer well before that shows none was attempted, however
    // loaded the machine (a bound near the real timeouts made this a flaky timed test).
    const patient = { connectTimeoutMs: 20_000, greetingTimeoutMs: 20_000, socketTimeoutMs: 20_000 };
    const started = Date.now();
    const { events: ev } = await deliverOne(strict, 'i@inside.example', createDeliveryEngine(strict.deps, { timeouts: patient }));
    expect(ev).toEqual([expect.objectContaining({ recipient: 'i@inside.example', status: 'bounced', dsn: '5.4.4' })]);
    expect(sink.connections).toBe(0);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('defers 4.4.3, never bounces, a host whose A record is private and whose AAAA lookup timed out (it may hold a public one)', async () => {
    dns.add('partial.example', { type: 'MX', priority: 10, exchange: 'mx.partial.example' });
    dns.add('mx.partial.example', { type: 'A', address: '10.0.0.5' });
    dns.silence('mx.partial.example', 'AAAA');
    const { s, events: ev } = await deliverOne(strict, 'p@partial.example');
    expect(ev).toEqual([expect.objectContaining({ status: 'deferred', dsn: '4.4.3' })]);
    expect(await suppressed(strict, s, 'p@partial.example')).toEqual([]);
    // The same for a domain without MX whose own AAAA lookup failed.
    dns.add('partial2.example', { type: 'A', address: '10.0.0.6' });
    dns.silence('partial2.example', 'AAAA');
    expect(await resolveRoute('partial2.example', strict.deps)).toMatchObject({ kind: 'fail', outcome: { status: 'deferred', dsn: '4.4.3' } });
  });

  it('bounces 5.4.4 a domain without MX whose own address is loopback (IPv4 and IPv6)', async () => {
    dns.add('selfhost.example', { type: 'A', address: '127.0.0.1' });
    dns.add('selfhost.example', { type: 'AAAA', address: '::1' });
    const { events: ev } = await deliverOne(strict, 'j@selfhost.example');
    expect(ev).toEqual([expect.objectContaining({ status: 'bounced', dsn: '5.4.4' })]);
    expect(sink.connections).toBe(0);
  });

  it('keeps only the public addresses of a host that has both', async () => {
    dns.add('mixed.example', { type: 'MX', priority: 10, exchange: 'mx.mixed.example' });
    dns.add('mx.mixed.example', { type: 'A', address: '10.1.2.3' });
    dns.add('mx.mixed.example', { type: 'A', address: '8.8.8.8' });
    dns.add('mx.mixed.example', { type: 'AAAA', address: 'fd00::1' });
    dns.add('mx.mixed.example', { type: 'AAAA', address: '2606:4700::1111' });
    const route = await resolveRoute('mixed.example', strict.deps);
    expect(route.kind).toBe('targets');
    if (route.kind === 'targets') expect(route.targets.flatMap((t) => t.addresses).sort()).toEqual(['2606:4700::1111', '8.8.8.8']);
    // With ALLOW_PRIVATE_TARGETS every address is kept.
    const allowed = await resolveRoute('mixed.example', open.deps);
    if (allowed.kind === 'targets') expect(allowed.targets.flatMap((t) => t.addresses)).toHaveLength(4);
    else throw new Error('expected targets');
  });

  it('reaches a loopback MX once ALLOW_PRIVATE_TARGETS is set', async () => {
    const { events: ev } = await deliverOne(open, 'k@example.net');
    expect(ev).toEqual([expect.objectContaining({ status: 'delivered' })]);
    expect(sink.connections).toBe(1);
  });
});

describe('SMTP_RELAY_URL', () => {
  it('sends everything through the relay, whatever the MX records say', async () => {
    dns.add('elsewhere.example', { type: 'MX', priority: 10, exchange: 'mx.elsewhere.example' });
    dns.add('mx.elsewhere.example', { type: 'A', address: '127.0.0.2' });
    const s = await newSender(relay);
    const id = await send(relay, s, ['l@elsewhere.example', 'm@example.net', 'n@does-not-exist.example']);
    await createDeliveryEngine(relay.deps, { timeouts: FAST }).runOnce();
    const ev = await events(relay, s, id);
    expect(ev.map((e) => [e.recipient, e.status]).sort()).toEqual([
      ['l@elsewhere.example', 'delivered'],
      ['m@example.net', 'delivered'],
      ['n@does-not-exist.example', 'delivered'],
    ]);
    expect(sink.deliveredTo()).toEqual(['l@elsewhere.example', 'm@example.net', 'n@does-not-exist.example']);
    // No MX was asked for.
    expect(dns.queries.filter((q) => q.type === 'MX')).toEqual([]);
  });

  it('routes to the relay host and port', async () => {
    const route = await resolveRoute('anything.example', relay.deps);
    expect(route).toMatchObject({ kind: 'targets', targets: [{ host: '127.0.0.1', addresses: ['127.0.0.1'], port: sink.port, secure: false }] });
    const config = loadConfig({ DATA_DIR: relay.dataDir, SMTP_RELAY_URL: 'smtps://user%40x:p%3Ass@relay.example.com:2465' });
    const withAuth = await resolveRoute('anything.example', { config, resolver: createResolver({ servers: null }) });
    expect(withAuth).toMatchObject({
      kind: 'targets',
      targets: [{ host: 'relay.example.com', port: 2465, secure: true, auth: { user: 'user@x', pass: 'p:ss' } }],
    });
  });
});

describe('the SMTP conversation', () => {
  it('shares one connection among the recipients of a domain, one transaction each, EHLO as MAIL_HOSTNAME', async () => {
    const engine = createDeliveryEngine(open.deps, { timeouts: FAST, perDomain: 1 });
    const s = await newSender(open);
    const to = ['p1@example.net', 'p2@example.net', 'p3@example.net', 'p4@example.net', 'p5@example.net'];
    await send(open, s, to);
    await engine.runOnce();
    expect(sink.deliveredTo()).toEqual(to);
    expect(sink.connections).toBe(1);
    const [session] = [...sink.sessions.values()];
    expect(session!.ehlo).toBe('mx.mailstead.test');
    expect(session!.mailFrom).toHaveLength(5);
    expect(session!.rcptTo.sort()).toEqual(to);
    expect(sink.received.every((r) => r.to.length === 1)).toBe(true);
  });

  it('uses at most the per-destination connection limit for many recipients of one domain, and separate connections per domain', async () => {
    dns.add('other.example', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
    const engine = createDeliveryEngine(open.deps, { timeouts: FAST });
    const { perDomain } = DEFAULT_ENGINE_OPTIONS;
    const many = Math.min(48, perDomain * 3);
    const s = await newSender(open);
    const to = [...Array.from({ length: many }, (_, i) => `q${i}@example.net`), 'r1@other.example', 'r2@other.example'];
    await send(open, s, to);
    await engine.runOnce();
    expect(sink.deliveredTo()).toEqual([...to].sort());
    const sessions = [...sink.sessions.values()];
    // No connection carried recipients of two domains.
    for (const session of sessions) expect(new Set(session.rcptTo.map((r) => r.split('@')[1])).size).toBeLessThanOrEqual(1);
    const forExampleNet = sessions.filter((x) => x.rcptTo.some((r) => r.endsWith('@example.net')));
    expect(forExampleNet.length).toBeLessThanOrEqual(perDomain);
    expect(forExampleNet.length).toBeLessThan(many);
    expect(forExampleNet.reduce((n, x) => n + x.mailFrom.length, 0)).toBe(many);
    expect(sessions.filter((x) => x.rcptTo.some((r) => r.endsWith('@other.example'))).length).toBeGreaterThanOrEqual(1);
  });

  it('upgrades with STARTTLS when the server offers it', async () => {
    const tlsService = await startService({ DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(tlsSink.port), ALLOW_PRIVATE_TARGETS: 'true' });
    try {
      const { events: ev } = await deliverOne(tlsService, 's@example.net');
      expect(ev).toEqual([expect.objectContaining({ status: 'delivered' })]);
      expect(tlsSink.received).toEqual([expect.objectContaining({ to: ['s@example.net'], secure: true })]);
    } finally {
      await tlsService.close();
    }
  });
});

import { existsSync, readdirSync } from 'node:fs';
import { connect as tlsConnect } from 'node:tls';
import { domainToASCII } from 'node:url';
import { eq } from 'drizzle-orm';
import nodemailer from 'nodemailer';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { listenCustomerDb } from '../db/customer/connect.js';
import { customerDbWrites, inboundSpoolRecords } from '../db/schema/index.js';
import type { GroupCommit } from '../db/group-commit.js';
import { INLINE_BYTES } from '../mta/inbound/receive.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { spoolDir } from '../db/inbound-spool.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { type CustomerDbWriter, createCustomerDbWriter } from '../server/customer-db/writer.js';
import { createMemoryLogger } from '../server/shared/logger.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { parsePrometheusText, sampleValueOrZero } from './helpers/prometheus-text.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { type Sender, connectDomain, newSender, newSubSender, setDomainState, uniqueDomain } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * Inbound SMTP against the real server on port 0 and a real Postgres with TLS: a message sent with
 * nodemailer to a customer's receiving domain lands parsed in `service.inbound` and `service.attachments`, with a
 * notification, through the spool and the customer-database writer; recipients the server does not receive for are
 * refused alike at RCPT; bare line ends and oversized messages are refused and leave nothing behind.
 */

const MAX_BYTES = 200_000;

let dns: TestDnsServer;
let pgServer: TestPostgres;
let service: TestService;
let inbound: InboundServer;
let port: number;
let writer: CustomerDbWriter;
let customer: pg.Client;
let sender: Sender;
const uncaught = vi.fn();

beforeAll(async () => {
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);
  [dns, pgServer] = await Promise.all([TestDnsServer.start(), startPostgres({ certificate: 'trusted' })]);
  service = await startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true', SMTP_MAX_MESSAGE_BYTES: String(MAX_BYTES) });
  inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
  port = await inbound.listen('127.0.0.1', 0);
  sender = await newSender(service);
  const connected = await service.api('POST', '/database', { key: sender.key, body: { url: pgServer.url('localhost') } });
  expect(connected.status, JSON.stringify(connected.body)).toBe(200);
  customer = await pgServer.connect();
}, 120_000);

afterAll(async () => {
  process.off('uncaughtException', uncaught);
  process.off('unhandledRejection', uncaught);
  await customer?.end().catch(() => undefined);
  await inbound?.close();
  await service?.close();
  await dns?.stop();
  await pgServer?.stop();
});

beforeEach(async () => {
  await service.deps.db.delete(customerDbWrites);
  writer = createCustomerDbWriter(service.deps);
});

afterEach(async () => {
  await writer.stop();
  const calls = uncaught.mock.calls.length;
  uncaught.mockClear();
  expect(calls, 'uncaught exceptions or unhandled rejections').toBe(0);
});

function transport() {
  return nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, tls: { rejectUnauthorized: false }, name: 'client.example.org' });
}

/** The spooled messages left: files in DATA_DIR, and on Postgres the rows of inbound_spool_records (none in files there). */
const spoolFiles = async () => [
  ...(existsSync(spoolDir(service.dataDir)) ? readdirSync(spoolDir(service.dataDir)) : []),
  ...(await service.deps.db.selectDistinct({ id: inboundSpoolRecords.spoolId }).from(inboundSpoolRecords)).map((r) => r.id),
];

describe('a message for a customer’s receiving domain', () => {
  it('arrives parsed in service.inbound with its two attachments’ bytes, and LISTEN service receives its id', async () => {
    const seen: string[] = [];
    const listener = await listenCustomerDb(
      {
        host: '127.0.0.1',
        port: pgServer.port,
        user: pgServer.user,
        password: pgServer.password,
        database: pgServer.database,
        ssl: { rejectUnauthorized: false },
      },
      'service',
      (n) => seen.push(n.payload ?? ''),
      createMemoryLogger(),
    );
    try {
      const pdf = Buffer.from(Array.from({ length: 70_000 }, (_, i) => i % 256));
      const info = await transport().sendMail({
        from: 'Ann Customer <ann@customer.example.org>',
        to: [`support@${sender.domain}`, `Sales <sales@${sender.domain}>`],
        subject: 'Help with order 42 ✓',
        text: 'Hello,\r\nmy order has not arrived.\r\n',
        html: '<p>Hello, my order has <b>not</b> arrived.</p>',
        messageId: '<order-42@customer.example.org>',
        attachments: [
          { filename: 'invoice.pdf', content: pdf, contentType: 'application/pdf' },
          { filename: 'notes.txt', content: 'line one\r\nline two\r\n', contentType: 'text/plain' },
        ],
      });
      expect(info.accepted).toEqual([`support@${sender.domain}`, `sales@${sender.domain}`]);
      expect(info.response).toMatch(/^250 /);
      // Durable before the 250: one customer-database write holding the message (small: no spool file), sealed.
      const queued = await service.deps.db.select().from(customerDbWrites).where(eq(customerDbWrites.kind, 'inbound'));
      expect(queued).toHaveLength(1);
      expect(queued[0]!.payloadSealed).not.toContain('order');
      expect(await spoolFiles()).toEqual([]);

      await writer.runOnce();
      const rows = (await customer.query('select * from service.inbound order by received_at')).rows;
      expect(rows).toHaveLength(1);
      const row = rows[0];
      expect(row).toMatchObject({
        account_id: sender.account.id,
        from_address: 'ann@customer.example.org',
        to_addresses: [`support@${sender.domain}`, `sales@${sender.domain}`],
        subject: 'Help with order 42 ✓',
        message_id: '<order-42@customer.example.org>',
      });
      expect(row.text).toContain('my order has not arrived.');
      expect(row.html).toContain('<b>not</b>');
      expect(row.size).toBeGreaterThan(pdf.length);
      // Headers as sent (unfolded, encoded words kept): the subject column has the decoded text.
      expect(row.headers.subject).toEqual([expect.stringMatching(/^=\?UTF-8\?/i)]);
      expect(row.headers.to[0]).toContain(`sales@${sender.domain}`);
      expect(row.headers['message-id']).toEqual(['<order-42@customer.example.org>']);
      expect(row.spf).toEqual(expect.any(String));
      expect(row.dkim).toBe('none');
      const files = (await customer.query('select * from service.attachments where inbound_id = $1 order by filename', [row.id])).rows;
      expect(files.map((f) => [f.filename, f.content_type, f.size])).toEqual([
        ['invoice.pdf', 'application/pdf', pdf.length],
        ['notes.txt', 'text/plain', 20],
      ]);
      expect(Buffer.compare(files[0].content, pdf)).toBe(0);
      expect(files[1].content.toString()).toBe('line one\r\nline two\r\n');
      await expect.poll(() => seen, { timeout: 5000 }).toEqual([row.id]);
      // Written: the outbox row and the spool file are gone.
      expect(await service.deps.db.select().from(customerDbWrites)).toEqual([]);
      expect(await spoolFiles()).toEqual([]);
    } finally {
      await listener.close();
    }
  });
});

describe('refused at RCPT, all alike: 550 5.7.1', () => {
  it('a relay attempt, an unknown domain, a domain that does not receive, an account without a database', async () => {
    const noDb = await newSender(service, { name: 'No database' });
    const notReceiving = uniqueDomain('ownership');
    await connectDomain(service, sender.key, notReceiving, { state: 'ownership' });
    const { client } = await RawSmtp.connect(port);
    try {
      const replies = await client.envelope('someone@example.org', [
        'friend@gmail.example',
        `x@unknown-${Date.now()}.example`,
        `x@${notReceiving}`,
        `x@${noDb.domain}`,
      ]);
      expect(replies[1]).toMatch(/^250 /);
      const refusals = replies.slice(2);
      expect(refusals.every((r) => r.startsWith('550 5.7.1 '))).toBe(true);
      expect(new Set(refusals).size).toBe(1);
      expect(await client.command('DATA')).toMatch(/^503 /);
    } finally {
      client.close();
    }
  });
});

describe('accepted at RCPT', () => {
  it('a receiving domain with a non-ASCII name, however the client writes it: punycode, Unicode, upper case', async () => {
    const unicode = `bücher-${process.pid}.example.com`;
    await connectDomain(service, sender.key, unicode);
    const ascii = domainToASCII(unicode);
    expect(ascii).toMatch(/^xn--/);
    const { client } = await RawSmtp.connect(port);
    try {
      const replies = await client.envelope('someone@example.org', [`info@${ascii}`, `info2@${unicode}`, `info3@${ascii.toUpperCase()}`]);
      expect(replies.slice(2), JSON.stringify(replies)).toEqual([
        expect.stringMatching(/^250 /),
        expect.stringMatching(/^250 /),
        expect.stringMatching(/^250 /),
      ]);
    } finally {
      client.close();
    }
  });
});

describe('refused in DATA, nothing kept', () => {
  it.each([
    ['\\n.\\n', 'Subject: a\r\n\r\nbody\n.\nMAIL FROM:<x@evil.example>\r\n'],
    ['\\n.\\r\\n', 'Subject: a\r\n\r\nbody\n.\r\nMAIL FROM:<x@evil.example>\r\n'],
    ['\\r.\\r', 'Subject: a\r\n\r\nbody\r.\rMAIL FROM:<x@evil.example>\r\n'],
    ['\\r.\\r\\n', 'Subject: a\r\n\r\nbody\r.\r\nMAIL FROM:<x@evil.example>\r\n'],
    ['\\r\\n.\\r', 'Subject: a\r\n\r\nbody\r\n.\rMAIL FROM:<x@evil.example>\r\n'],
  ])('a bare line end (%s) is 550 5.6.0, one transaction, nothing stored', async (_name, data) => {
    const { client } = await RawSmtp.connect(port);
    try {
      await client.envelope('someone@example.org', [`support@${sender.domain}`]);
      expect(await client.command('DATA')).toMatch(/^354 /);
      client.write(`${data}\r\n.\r\n`);
      expect(await client.reply()).toMatch(/^550 5\.6\.0 /);
      // The smuggled MAIL FROM was message data, never a command of its own: the session is ready for a new one.
      expect(await client.command('RSET')).toMatch(/^250 /);
      expect(await service.deps.db.select().from(customerDbWrites)).toEqual([]);
      expect(await spoolFiles()).toEqual([]);
    } finally {
      client.close();
    }
  });

  it('MAIL FROM SIZE= over the limit is 552; a body that grows past it is 552 after being drained', async () => {
    const { client } = await RawSmtp.connect(port);
    try {
      expect(await client.command('EHLO client.example')).toContain(`SIZE ${MAX_BYTES}`);
      expect(await client.command(`MAIL FROM:<a@example.org> SIZE=${MAX_BYTES + 1}`)).toMatch(/^552 /);
      expect(await client.command(`MAIL FROM:<a@example.org> SIZE=1000`)).toMatch(/^250 /);
      expect(await client.command(`RCPT TO:<support@${sender.domain}>`)).toMatch(/^250 /);
      expect(await client.command('DATA')).toMatch(/^354 /);
      const line = `${'x'.repeat(998)}\r\n`;
      for (let i = 0; i < Math.ceil((MAX_BYTES * 2) / line.length); i++) client.write(line);
      client.write('.\r\n');
      expect(await client.reply()).toMatch(/^552 /);
      expect(await service.deps.db.select().from(customerDbWrites)).toEqual([]);
      expect(await spoolFiles()).toEqual([]);
    } finally {
      client.close();
    }
  });

  it('a client that disconnects mid-DATA leaves nothing stored', async () => {
    const { client } = await RawSmtp.connect(port);
    await client.envelope('someone@example.org', [`support@${sender.domain}`]);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write('Subject: half\r\n\r\nthe first half of the message\r\n');
    await new Promise((r) => setTimeout(r, 100));
    client.close();
    await expect.poll(() => service.logger.entries.some((e) => e.event === 'inbound.aborted'), { timeout: 5000 }).toBe(true);
    expect(await service.deps.db.select().from(customerDbWrites)).toEqual([]);
    expect(await spoolFiles()).toEqual([]);
  });

  it('at most 100 recipients: 452 for the rest', async () => {
    const { client } = await RawSmtp.connect(port);
    try {
      const replies = await client.envelope(
        'someone@example.org',
        Array.from({ length: 101 }, (_, i) => `r${i}@${sender.domain}`),
      );
      expect(replies.slice(2, 102).every((r) => r.startsWith('250 '))).toBe(true);
      expect(replies[102]).toMatch(/^452 /);
    } finally {
      client.close();
    }
  });
});

describe('a failure to store answers 451, never 250', () => {
  /** A second server on the same service, its messages up to 1 MB (so one can go to the spool), committing through `commits`. */
  async function serverCommittingThrough(commits: GroupCommit) {
    const deps = { ...service.deps, commits, config: { ...service.deps.config, smtpMaxMessageBytes: 1_000_000 } };
    const server = inboundServerFor(deps, loadOrCreateSmtpTls(service.deps.config));
    return { server, port: await server.listen('127.0.0.1', 0) };
  }
  async function send(toPort: number, body: string): Promise<string> {
    const { client } = await RawSmtp.connect(toPort);
    try {
      await client.envelope('someone@example.org', [`support@${sender.domain}`]);
      expect(await client.command('DATA')).toMatch(/^354 /);
      client.write(`Subject: stored?\r\n\r\n${body}\r\n.\r\n`);
      return await client.reply();
    } finally {
      client.close();
    }
  }
  const large = `${'y'.repeat(998)}\r\n`.repeat(Math.ceil((INLINE_BYTES + 10_000) / 1000));

  it('a commit that fails (a full disk) is 451 4.3.0 and keeps nothing, in the outbox or the spool', async () => {
    const full = Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    const { server, port: failing } = await serverCommittingThrough({ run: () => Promise.reject(full) });
    try {
      expect(await send(failing, 'small')).toMatch(/^451 4\.3\.0 /);
      expect(await send(failing, large)).toMatch(/^451 4\.3\.0 /);
      expect(await service.deps.db.select().from(customerDbWrites)).toEqual([]);
      expect(await spoolFiles()).toEqual([]);
    } finally {
      await server.close();
    }
  });
});

describe('the session', () => {
  it('greets and answers EHLO as MAIL_HOSTNAME, offers STARTTLS, never AUTH', async () => {
    const { client, banner } = await RawSmtp.connect(port);
    try {
      expect(banner).toMatch(/^220 mx\.mailstead\.test /);
      const ehlo = await client.command('EHLO client.example');
      expect(ehlo).toMatch(/^250-mx\.mailstead\.test/);
      expect(ehlo).toContain('STARTTLS');
      expect(ehlo).not.toContain('AUTH');
    } finally {
      client.close();
    }
  });

  it('plaintext pipelined behind STARTTLS is discarded, never answered inside the TLS session', async () => {
    const { client } = await RawSmtp.connect(port);
    try {
      await client.command('EHLO client.example');
      // The injected MAIL FROM rides in the same packet as STARTTLS.
      client.write('STARTTLS\r\nMAIL FROM:<injected@evil.example>\r\n');
      expect(await client.reply()).toMatch(/^220 /);
      const secure = tlsConnect({ socket: client.socket, rejectUnauthorized: false, servername: 'mx.mailstead.test' });
      await new Promise<void>((resolve, reject) => {
        secure.once('secureConnect', () => resolve());
        secure.once('error', reject);
      });
      let received = '';
      secure.on('data', (c: Buffer) => (received += c.toString()));
      secure.write('EHLO client.example\r\n');
      await expect.poll(() => received, { timeout: 5000 }).toMatch(/^250 /m);
      // The first answer in TLS is EHLO's; the session has no sender (the injected one was dropped).
      expect(received).toMatch(/^250-mx\.mailstead\.test/);
      received = '';
      secure.write(`RCPT TO:<support@${sender.domain}>\r\n`);
      await expect.poll(() => received, { timeout: 5000 }).toMatch(/^503 /);
      secure.destroy();
    } finally {
      client.close();
    }
  });

  it('a client that talks before the banner, and an HTTP request, are refused and closed', async () => {
    const early = await RawSmtp.connect(port, { greet: false });
    early.client.write('EHLO too.soon\r\n');
    expect(await early.client.reply()).toMatch(/^421 /);
    expect(await early.client.closedByServer()).toBe(true);
    const { client } = await RawSmtp.connect(port);
    client.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(await client.reply()).toMatch(/^421 /);
    expect(await client.closedByServer()).toBe(true);
  });
});

// The transaction that stores the message judges its recipients once more: a domain switched off after RCPT, or even
// after DATA began (smtp-server calls onData before its 354), stores nothing, and the message is refused (550), as
// RCPT would refuse it now: 250 only for what was kept.
it.each([
  ['after RCPT', 'rcpt'],
  ['after DATA began', 'data'],
] as const)('a domain switched to not receiving %s stores nothing and is refused', async (_when, at) => {
  const domain = uniqueDomain(`flip-${at}`);
  const id = await connectDomain(service, sender.key, domain);
  const { client } = await RawSmtp.connect(port);
  try {
    await client.envelope('someone@example.org', [`x@${domain}`]);
    if (at === 'rcpt') await setDomainState(service, id, 'ownership');
    expect(await client.command('DATA')).toMatch(/^354 /);
    if (at === 'data') await setDomainState(service, id, 'ownership');
    client.write('Subject: late\r\n\r\nbody\r\n.\r\n');
    expect(await client.reply()).toMatch(/^550 5\.7\.1 /);
    expect(await service.deps.db.select().from(customerDbWrites)).toEqual([]);
    expect(await spoolFiles()).toEqual([]);
  } finally {
    client.close();
  }
});

// SMTP has one answer for the whole message: when some of its recipients stop receiving between RCPT and the end of
// DATA, a 250 would drop their copies unsaid. It is deferred whole (nothing kept), and the retry hears 550 for those
// at RCPT and stores the rest.
it('a message some of whose recipients stopped receiving since RCPT is deferred whole, and its retry stores the rest', async () => {
  const staying = uniqueDomain('stays');
  const leaving = uniqueDomain('leaves');
  await connectDomain(service, sender.key, staying);
  const leavingId = await connectDomain(service, sender.key, leaving);
  const { client } = await RawSmtp.connect(port);
  try {
    const replies = await client.envelope('someone@example.org', [`a@${staying}`, `b@${leaving}`]);
    expect(replies.slice(-2)).toEqual([expect.stringMatching(/^250 /), expect.stringMatching(/^250 /)]);
    await setDomainState(service, leavingId, 'ownership');
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write('Subject: partly gone\r\n\r\nbody\r\n.\r\n');
    expect(await client.reply()).toMatch(/^451 4\.3\.0 /);
    expect(await service.deps.db.select().from(customerDbWrites)).toEqual([]);
    expect(await spoolFiles()).toEqual([]);

    // The client's retry of the same message.
    expect(await client.command('MAIL FROM:<someone@example.org>')).toMatch(/^250 /);
    expect(await client.command(`RCPT TO:<a@${staying}>`)).toMatch(/^250 /);
    expect(await client.command(`RCPT TO:<b@${leaving}>`)).toMatch(/^550 5\.7\.1 /);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write('Subject: partly gone\r\n\r\nbody\r\n.\r\n');
    expect(await client.reply()).toMatch(/^250 /);
  } finally {
    client.close();
  }
  const stored = await service.deps.db.select().from(customerDbWrites);
  expect(stored).toHaveLength(1);
  await writer.runOnce();
  const { rows } = await customer.query('select to_addresses from service.inbound where subject = $1', ['partly gone']);
  expect(rows).toEqual([{ to_addresses: [`a@${staying}`] }]);
});

// TCP splits a line end anywhere: a chunk of DATA that ends in the CR of a CRLF whose LF opens the next chunk is
// whole mail, not a bare CR. smtp-server passes on all but the last bytes it holds back for the end-of-data line, so
// the first write below reaches the store as a chunk ending in CR (found with a real Postfix: such chunks were
// dropped, answered 250).
it('stores a message whole when a chunk of its data ends in the CR of a CRLF', async () => {
  const { client } = await RawSmtp.connect(port);
  try {
    await client.envelope('someone@example.org', [`split@${sender.domain}`]);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write('From: a@example.org\r\nSubject: split line end\r\nMessage-ID: <split@example.org>\r\n\r\nfirst line\r\nabc');
    // The first part read and passed on by the server before the rest arrives.
    await new Promise((r) => setTimeout(r, 300));
    client.write('def second line\r\n.\r\n');
    expect(await client.reply()).toMatch(/^250 /);
  } finally {
    client.close();
  }
  await writer.runOnce();
  const { rows } = await customer.query('select subject, message_id, text from service.inbound where message_id = $1', ['<split@example.org>']);
  expect(rows).toEqual([{ subject: 'split line end', message_id: '<split@example.org>', text: 'first line\nabcdef second line\n' }]);
});

it('counts what it accepts and refuses in /metrics, by stage and code', async () => {
  const scrape = async () => parsePrometheusText(await (await fetch(`${service.url}/metrics`)).text());
  const before = await scrape();
  const { client } = await RawSmtp.connect(port);
  try {
    const replies = await client.envelope('someone@example.org', [`x@${sender.domain}`, 'y@nowhere.example']);
    expect(replies.at(-1)).toMatch(/^550 /);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write('Subject: counted\r\n\r\nbody\r\n.\r\n');
    expect(await client.reply()).toMatch(/^250 /);
    expect(await client.command('MAIL FROM:<someone@example.org>')).toMatch(/^250 /);
    expect(await client.command(`RCPT TO:<x@${sender.domain}>`)).toMatch(/^250 /);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write('Subject: smuggled\r\n\r\nbody\n.\r\n.\r\n');
    expect(await client.reply()).toMatch(/^550 /);
  } finally {
    client.close();
  }
  const after = await scrape();
  const delta = (name: string, labels: Record<string, string> = {}) => sampleValueOrZero(after, name, labels) - sampleValueOrZero(before, name, labels);
  expect(delta('mailstead_inbound_accepted_total')).toBe(1);
  expect(delta('mailstead_inbound_refused_total', { stage: 'rcpt', code: '550' })).toBe(1);
  expect(delta('mailstead_inbound_refused_total', { stage: 'data', code: '550' })).toBe(1);
});

it('a sub-account’s receiving domain is accepted through its parent’s database, and the mail lands there as the sub-account’s', async () => {
  const sub = await newSubSender(service, sender.key, 'Receiving sub-account');
  const { client } = await RawSmtp.connect(port);
  try {
    const replies = await client.envelope('someone@example.org', [`help@${sub.domain}`]);
    expect(replies.at(-1)).toMatch(/^250 /);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write('Subject: for the sub-account\r\n\r\nbody\r\n.\r\n');
    expect(await client.reply()).toMatch(/^250 /);
  } finally {
    client.close();
  }
  const [queued] = await service.deps.db.select().from(customerDbWrites);
  expect(queued).toMatchObject({ kind: 'inbound', databaseAccountId: sender.account.id, accountId: sub.id });
  await writer.runOnce();
  const { rows } = await customer.query('select account_id, to_addresses from service.inbound where subject = $1', ['for the sub-account']);
  expect(rows).toEqual([{ account_id: sub.id, to_addresses: [`help@${sub.domain}`] }]);
});

import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { and, eq } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { accounts, customerDbWrites, emailEvents, emails, suppressions, webhookDeliveries } from '../db/schema/index.js';
import { MAX_DEFERRED_EVENTS, REPORT_BYTES, reportIsNews } from '../mta/inbound/report-matching.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { verpAddress } from '../mta/verp.js';
import { createCustomerDbWriter } from '../server/customer-db/writer.js';
import { newId } from '../server/shared/ids.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { parsePrometheusText, sampleValueOrZero } from './helpers/prometheus-text.js';
import { fblReporter } from './helpers/fbl.js';
import { seedEndpoint } from './helpers/outcomes.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { type Sender, newSender, newSubSender } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * Asynchronous bounces and complaints received on inbound SMTP, built from the RFC examples: a
 * Postfix DSN (RFC 3464) and an Exchange-style notice with only X-Failed-Recipients at the VERP address of a sent
 * email record `bounced` (5.x.x: suppressed on the account's and the parent's lists, counted) or `deferred`
 * (`Action: delayed`) events on the right recipient; an ARF report (RFC 5965) at fbl@MAIL_HOSTNAME records
 * `complained`, complainedAt, the suppression with reason complaint and totalComplained; each fans out its webhook
 * and reaches the customer database like any outcome. A DATA during a database outage waits in the outbox.
 */

const HOST = 'mx.mailstead.test';

let dns: TestDnsServer;
let pgServer: TestPostgres;
let service: TestService;
let inbound: InboundServer;
let port: number;
let sender: Sender;
let reporter: ReturnType<typeof fblReporter>;
let stranger: ReturnType<typeof fblReporter>;
const uncaught = vi.fn();
// gc() for the memory test: a fresh context picks up the flag.
setFlagsFromString('--expose-gc');

beforeAll(async () => {
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);
  [dns, pgServer] = await Promise.all([TestDnsServer.start(), startPostgres({ certificate: 'trusted' })]);
  service = await startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true', MAIL_HOSTNAME: HOST, FBL_REPORTERS: 'mailbox.example' });
  // A feedback loop's reports are signed by a subdomain of the trusted domain, as Yahoo's are by arf.mail.yahoo.com's.
  reporter = fblReporter(dns, 'feedback.mailbox.example');
  stranger = fblReporter(dns, 'attacker.example');
  inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
  port = await inbound.listen('127.0.0.1', 0);
}, 120_000);

afterAll(async () => {
  process.off('uncaughtException', uncaught);
  process.off('unhandledRejection', uncaught);
  await inbound?.close();
  await service?.close();
  await dns?.stop();
  await pgServer?.stop();
});

beforeEach(async () => {
  sender = await newSender(service);
});

afterEach(() => {
  const calls = uncaught.mock.calls.length;
  uncaught.mockClear();
  expect(calls, 'uncaught exceptions or unhandled rejections').toBe(0);
});

/** A sent email as the engine leaves it: in the send log, its recipients delivered. */
async function sentEmail(accountId: string, to: string[]): Promise<string> {
  const at = service.clock.now();
  const id = newId(at);
  await service.deps.db
    .insert(emails)
    .values({ id, accountId, fromAddress: sender.from, to, subject: 'Your receipt', template: 'receipt', status: 'sent', sandbox: false, createdAt: at });
  return id;
}

async function deliverRaw(from: string, to: string, message: string): Promise<string> {
  const { client } = await RawSmtp.connect(port);
  try {
    const replies = await client.envelope(from, [to]);
    expect(replies[2], replies.join(' | ')).toMatch(/^250 /);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write(`${message.replace(/\r?\n/g, '\r\n')}\r\n.\r\n`);
    return await client.reply();
  } finally {
    client.close();
  }
}

const eventsOf = async (emailId: string) =>
  await service.deps.db
    .select({ recipient: emailEvents.recipient, status: emailEvents.status, dsn: emailEvents.dsn, detail: emailEvents.detail })
    .from(emailEvents)
    .where(eq(emailEvents.emailId, emailId));
const suppressionOf = async (accountId: string, address: string) =>
  await one(
    service.deps.db
      .select()
      .from(suppressions)
      .where(and(eq(suppressions.accountId, accountId), eq(suppressions.address, address))),
  );
const account = async (id: string) => (await one(service.deps.db.select().from(accounts).where(eq(accounts.id, id))))!;
const email = async (id: string) => (await one(service.deps.db.select().from(emails).where(eq(emails.id, id))))!;
const hooks = async (endpointId: string) => await service.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, endpointId));

function postfixDsn(emailId: string, index: number, recipient: string, action: 'failed' | 'delayed', status: string, diagnostic: string): string {
  return `Return-Path: <>
From: MAILER-DAEMON@mail.example.net (Mail Delivery System)
To: ${verpAddress(emailId, index, HOST, service.deps.secretKey)}
Subject: Undelivered Mail Returned to Sender
Date: Sun, 22 Nov 2026 10:00:00 +0000
Message-ID: <20261122100000.AB12@mail.example.net>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
\tboundary="B1.1763805600/mail.example.net"

This is a MIME-encapsulated message.

--B1.1763805600/mail.example.net
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mail.example.net.
I'm sorry to have to inform you that your message could not
be delivered to one or more recipients.

--B1.1763805600/mail.example.net
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mail.example.net
X-Postfix-Queue-ID: AB12
Arrival-Date: Sun, 22 Nov 2026 09:59:58 +0000

Final-Recipient: rfc822; ${recipient}
Original-Recipient: rfc822;${recipient}
Action: ${action}
Status: ${status}
Remote-MTA: dns; mx.example.net
Diagnostic-Code: smtp; ${diagnostic}

--B1.1763805600/mail.example.net
Content-Description: Undelivered Message Headers
Content-Type: text/rfc822-headers

Return-Path: <${verpAddress(emailId, index, HOST, service.deps.secretKey)}>
From: ${sender.from}
To: ${recipient}
Subject: Your receipt
Message-ID: <${emailId}@${HOST}>

--B1.1763805600/mail.example.net--`;
}

/** The outcomes counted on /metrics so far, by status. */
async function outcomesCounted(): Promise<Record<'bounced' | 'deferred' | 'complained', number>> {
  const families = parsePrometheusText(await (await fetch(`${service.url}/metrics`)).text());
  const of = (status: string) => sampleValueOrZero(families, 'mailstead_delivery_outcomes_total', { status });
  return { bounced: of('bounced'), deferred: of('deferred'), complained: of('complained') };
}

describe('a DSN at a VERP address', () => {
  it('a 5.x.x failure records bounced on the right recipient, suppresses on both lists, counts it, fans out the webhook', async () => {
    const sub = await newSubSender(service, sender.key);
    const endpoint = await seedEndpoint(service, sub.id, ['email.bounced']);
    const id = await sentEmail(sub.id, ['ann@example.net', 'bob@example.net']);
    const reply = await deliverRaw(
      '',
      verpAddress(id, 1, HOST, service.deps.secretKey),
      postfixDsn(id, 1, 'bob@example.net', 'failed', '5.1.1', '550 5.1.1 <bob@example.net>: Recipient address rejected: User unknown'),
    );
    expect(reply).toMatch(/^250 /);
    expect(await eventsOf(id)).toEqual([
      { recipient: 'bob@example.net', status: 'bounced', dsn: '5.1.1', detail: '550 5.1.1 <bob@example.net>: Recipient address rejected: User unknown' },
    ]);
    expect((await email(id)).bouncedAt).toBe(service.clock.now());
    expect(await suppressionOf(sub.id, 'bob@example.net')).toMatchObject({ reason: 'bounce' });
    expect(await suppressionOf(sender.account.id, 'bob@example.net')).toMatchObject({ reason: 'bounce' });
    expect(await suppressionOf(sub.id, 'ann@example.net')).toBeUndefined();
    expect((await account(sub.id)).totalBounced).toBe(1);
    expect((await hooks(endpoint)).map((h) => [h.eventType, JSON.parse(h.data).recipient, JSON.parse(h.data).dsn])).toEqual([
      ['email.bounced', 'bob@example.net', '5.1.1'],
    ]);
  });

  it('Action: delayed with 4.x.x records deferred and suppresses nothing', async () => {
    const id = await sentEmail(sender.account.id, ['cy@example.net']);
    expect(
      await deliverRaw(
        '',
        verpAddress(id, 0, HOST, service.deps.secretKey),
        postfixDsn(id, 0, 'cy@example.net', 'delayed', '4.4.1', '421 4.4.1 Connection timed out'),
      ),
    ).toMatch(/^250 /);
    expect(await eventsOf(id)).toEqual([{ recipient: 'cy@example.net', status: 'deferred', dsn: '4.4.1', detail: '421 4.4.1 Connection timed out' }]);
    expect((await email(id)).bouncedAt).toBeNull();
    expect(await suppressionOf(sender.account.id, 'cy@example.net')).toBeUndefined();
    expect((await account(sender.account.id)).totalBounced).toBe(0);
  });

  it('an Exchange-style notice with only X-Failed-Recipients records bounced', async () => {
    const id = await sentEmail(sender.account.id, ['dee@example.net']);
    const notice = `From: postmaster@outlook.example
To: ${verpAddress(id, 0, HOST, service.deps.secretKey)}
Subject: Undeliverable: Your receipt
X-Failed-Recipients: dee@example.net
Content-Type: text/plain; charset=us-ascii

Delivery has failed to these recipients or groups:

dee@example.net
The email address you entered couldn't be found.

Diagnostic information for administrators:
Remote Server returned '550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup'`;
    expect(await deliverRaw('', verpAddress(id, 0, HOST, service.deps.secretKey), notice)).toMatch(/^250 /);
    const [event] = await eventsOf(id);
    expect(event).toMatchObject({ recipient: 'dee@example.net', status: 'bounced' });
    expect(event!.dsn).toMatch(/^5\./);
    expect(await suppressionOf(sender.account.id, 'dee@example.net')).toMatchObject({ reason: 'bounce' });
  });

  it('a report sent again records nothing more: one bounce counted per recipient, a delay only when its code is new and before any bounce', async () => {
    const endpoint = await seedEndpoint(service, sender.account.id, ['email.bounced', 'email.deferred']);
    const id = await sentEmail(sender.account.id, ['jo@example.net']);
    const at = verpAddress(id, 0, HOST, service.deps.secretKey);
    const dsn = (action: 'failed' | 'delayed', status: string, diagnostic: string) => postfixDsn(id, 0, 'jo@example.net', action, status, diagnostic);
    const counted = await outcomesCounted();
    for (const report of [
      dsn('delayed', '4.4.1', '421 4.4.1 Connection timed out'),
      dsn('delayed', '4.4.1', '421 4.4.1 Timed out again, said differently'),
      dsn('delayed', '4.2.2', '452 4.2.2 Mailbox full'),
      dsn('failed', '5.1.1', '550 5.1.1 User unknown'),
      dsn('failed', '5.1.1', '550 5.1.1 User unknown'),
      dsn('failed', '5.2.1', '550 5.2.1 Disabled, said differently'),
      dsn('delayed', '4.7.0', '450 4.7.0 After the bounce'),
    ]) {
      expect(await deliverRaw('', at, report)).toMatch(/^250 /);
    }
    expect((await eventsOf(id)).map((e) => [e.status, e.dsn])).toEqual([
      ['deferred', '4.4.1'],
      ['deferred', '4.2.2'],
      ['bounced', '5.1.1'],
    ]);
    expect((await account(sender.account.id)).totalBounced).toBe(1);
    expect((await hooks(endpoint)).map((h) => h.eventType)).toEqual(['email.deferred', 'email.deferred', 'email.bounced']);
    // On /metrics too, each recorded outcome once, the repeats not at all.
    const now = await outcomesCounted();
    expect({ bounced: now.bounced - counted.bounced, deferred: now.deferred - counted.deferred }).toEqual({ bounced: 1, deferred: 2 });
  });

  it('a 5.x.x bounce after one that did not suppress (a 4.x.x failure) is recorded, suppresses and counts', async () => {
    const id = await sentEmail(sender.account.id, ['kai@example.net']);
    const at = verpAddress(id, 0, HOST, service.deps.secretKey);
    expect(await deliverRaw('', at, postfixDsn(id, 0, 'kai@example.net', 'failed', '4.4.7', '4.4.7 Delivery time expired'))).toMatch(/^250 /);
    expect(await suppressionOf(sender.account.id, 'kai@example.net')).toBeUndefined();
    expect(await deliverRaw('', at, postfixDsn(id, 0, 'kai@example.net', 'failed', '5.1.1', '550 5.1.1 User unknown'))).toMatch(/^250 /);
    expect((await eventsOf(id)).map((e) => [e.status, e.dsn])).toEqual([
      ['bounced', '4.4.7'],
      ['bounced', '5.1.1'],
    ]);
    expect(await suppressionOf(sender.account.id, 'kai@example.net')).toMatchObject({ reason: 'bounce' });
    expect((await account(sender.account.id)).totalBounced).toBe(1);
  });

  it('a DSN of many blocks records one event, its most severe: a 5.x.x failure over a 4.x.x one over a delay', async () => {
    const id = await sentEmail(sender.account.id, ['lu@example.net']);
    const block = (action: string, status: string) =>
      `Final-Recipient: rfc822; lu@example.net\nAction: ${action}\nStatus: ${status}\nDiagnostic-Code: smtp; ${status} block`;
    const blocks = [
      block('delayed', '4.4.1'),
      block('failed', '4.2.2'),
      block('failed', '5.1.1'),
      ...Array.from({ length: 50 }, () => block('delayed', '4.4.2')),
    ].join('\n\n');
    const report = postfixDsn(id, 0, 'lu@example.net', 'failed', '5.0.0', 'x').replace(/Final-Recipient: [^]*?Diagnostic-Code: smtp; x/, blocks);
    expect(await deliverRaw('', verpAddress(id, 0, HOST, service.deps.secretKey), report)).toMatch(/^250 /);
    expect((await eventsOf(id)).map((e) => [e.status, e.dsn])).toEqual([['bounced', '5.1.1']]);
  });

  it('an untagged VERP address (mail sent by an earlier version) is taken for an email to one recipient, refused for one to several', async () => {
    const legacy = (id: string, index: number) => `bounce+${id.replace(/-/g, '')}.${index}@${HOST}`;
    const single = await sentEmail(sender.account.id, ['ola@example.net']);
    expect(await deliverRaw('', legacy(single, 0), postfixDsn(single, 0, 'ola@example.net', 'failed', '5.1.1', '550 5.1.1 User unknown'))).toMatch(/^250 /);
    expect((await eventsOf(single)).map((e) => [e.recipient, e.status])).toEqual([['ola@example.net', 'bounced']]);
    const several = await sentEmail(sender.account.id, ['pia@example.net', 'quin@example.net']);
    const { client } = await RawSmtp.connect(port);
    try {
      expect((await client.envelope('', [legacy(several, 1)]))[2]).toMatch(/^550 5\.7\.1 /);
    } finally {
      client.close();
    }
  });

  it('a VERP address of no sent email is refused at RCPT; a bounce that does not parse is accepted and records nothing', async () => {
    const { client } = await RawSmtp.connect(port);
    try {
      const replies = await client.envelope('', [verpAddress(newId(Date.now()), 0, HOST, service.deps.secretKey)]);
      expect(replies[2]).toMatch(/^550 5\.7\.1 /);
    } finally {
      client.close();
    }
    const id = await sentEmail(sender.account.id, ['eve@example.net']);
    expect(await deliverRaw('', verpAddress(id, 0, HOST, service.deps.secretKey), 'Subject: out of office\n\nI am away until Monday.')).toMatch(/^250 /);
    expect(await eventsOf(id)).toEqual([]);
  });

  it('a DSN that returns the whole original message (1 MB of it after the report) still records the bounce', async () => {
    const id = await sentEmail(sender.account.id, ['gus@example.net']);
    const dsn = postfixDsn(id, 0, 'gus@example.net', 'failed', '5.1.1', '550 5.1.1 User unknown').replace(
      /--B1\.1763805600\/mail\.example\.net--$/,
      `--B1.1763805600/mail.example.net\nContent-Type: message/rfc822\n\nFrom: ${sender.from}\nSubject: Your receipt\n\n${'0123456789'.repeat(7).concat('\n').repeat(15_000)}\n--B1.1763805600/mail.example.net--`,
    );
    expect(dsn.length).toBeGreaterThan(REPORT_BYTES * 4);
    expect(await deliverRaw('', verpAddress(id, 0, HOST, service.deps.secretKey), dsn)).toMatch(/^250 /);
    expect(await eventsOf(id)).toMatchObject([{ recipient: 'gus@example.net', status: 'bounced', dsn: '5.1.1' }]);
  });

  it('a report is held in memory only to its first REPORT_BYTES: sessions sending 2 MB reports at once hold a few MB, not 2 MB each', {
    timeout: 60_000,
  }, async () => {
    // What anyone may do: fbl@ takes mail from every client, up to the cap on concurrent clients.
    const gc = runInNewContext('gc') as () => void;
    const sessions = await Promise.all(
      Array.from({ length: 16 }, async () => {
        const { client } = await RawSmtp.connect(port);
        expect((await client.envelope('feedback@mailbox.example', [`fbl@${HOST}`]))[2]).toMatch(/^250 /);
        expect(await client.command('DATA')).toMatch(/^354 /);
        return client;
      }),
    );
    gc();
    const before = process.memoryUsage().arrayBuffers;
    const report = `Subject: abuse report\r\nContent-Type: text/plain\r\n\r\n${'x'.repeat(998).concat('\r\n').repeat(2100)}`;
    for (const c of sessions) c.write(report);
    // Every byte handed to the server and read by it (the sockets drained, the server's reads done).
    for (let i = 0; i < 1500 && sessions.some((c) => c.socket.writableLength > 0); i++) await new Promise((r) => setTimeout(r, 20));
    expect(sessions.map((c) => c.socket.writableLength)).toEqual(sessions.map(() => 0));
    // And what the kernel still buffered read too: the server reads a large stream at the pace of its collections
    // (server/shared/memory.ts), seconds under load, so what is held is measured until the reads are done.
    // 16 × 2 MB would be 32 MB; 16 × 256 KB (and a chunk read past it each) is about 5.
    const limit = 8 * 1024 * 1024;
    let held = Number.POSITIVE_INFINITY;
    for (let i = 0; i < 80 && held >= limit; i++) {
      await new Promise((r) => setTimeout(r, 250));
      gc();
      held = process.memoryUsage().arrayBuffers - before;
    }
    expect(held).toBeLessThan(limit);
    for (const c of sessions) c.write('\r\n.\r\n');
    for (const c of sessions) expect(await c.reply()).toMatch(/^250 /);
    for (const c of sessions) c.close();
  });
});

describe('an ARF complaint at fbl@MAIL_HOSTNAME', () => {
  function arf(original: { returnPath: string; messageId: string; to: string }, feedbackType = 'abuse'): string {
    return `From: feedback@mailbox.example
To: fbl@${HOST}
Subject: FW: Your receipt
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report;
     boundary="part1_13d.2e68ed54_boundary"

--part1_13d.2e68ed54_boundary
Content-Type: text/plain; charset="US-ASCII"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message received from IP 192.0.2.1 on Sun, 22 Nov 2026 10:00:00 +0000.

--part1_13d.2e68ed54_boundary
Content-Type: message/feedback-report

Feedback-Type: ${feedbackType}
User-Agent: SomeGenerator/1.0
Version: 1
Original-Mail-From: <${original.returnPath}>
Original-Rcpt-To: <${original.to}>
Arrival-Date: Sun, 22 Nov 2026 09:59:00 +0000
Source-IP: 192.0.2.1

--part1_13d.2e68ed54_boundary
Content-Type: message/rfc822
Content-Disposition: inline

Return-Path: <${original.returnPath}>
From: <${sender.from}>
To: <${original.to}>
Subject: Your receipt
Message-ID: <${original.messageId}>
Date: Sun, 22 Nov 2026 09:58:00 +0000

Your receipt body.

--part1_13d.2e68ed54_boundary--`;
  }

  /** A report as the trusted feedback loop sends it: signed with its DKIM key. */
  const signedArf = (original: Parameters<typeof arf>[0], feedbackType?: string) => reporter.sign(arf(original, feedbackType));

  it.each(['sandboxed', 'failed'] as const)(
    'quoting a %s send (which has no events, docs/api/contract.md Email) records nothing, by Message-ID or by VERP address',
    async (status) => {
      const id = await sentEmail(sender.account.id, ['ivy@example.net']);
      await service.deps.db
        .update(emails)
        .set({ status, sandbox: status === 'sandboxed' })
        .where(eq(emails.id, id));
      const before = (await account(sender.account.id)).totalComplained;
      const byMessageId = await signedArf({ returnPath: 'someone@elsewhere.example', messageId: `${id}@${HOST}`, to: 'ivy@example.net' });
      expect(await deliverRaw('feedback@mailbox.example', `fbl@${HOST}`, byMessageId)).toMatch(/^250 /);
      const byVerp = await signedArf({
        returnPath: verpAddress(id, 0, HOST, service.deps.secretKey),
        messageId: 'other@elsewhere.example',
        to: 'ivy@example.net',
      });
      expect(await deliverRaw('feedback@mailbox.example', `fbl@${HOST}`, byVerp)).toMatch(/^250 /);
      expect(await eventsOf(id)).toEqual([]);
      expect((await email(id)).complainedAt).toBeNull();
      expect(await suppressionOf(sender.account.id, 'ivy@example.net')).toBeUndefined();
      expect((await account(sender.account.id)).totalComplained).toBe(before);
      // Nor is its VERP address a recipient the server takes mail for.
      const { client } = await RawSmtp.connect(port);
      try {
        const replies = await client.envelope('mailer-daemon@elsewhere.example', [verpAddress(id, 0, HOST, service.deps.secretKey)]);
        expect(replies[2]).toMatch(/^550 5\.7\.1 /);
      } finally {
        client.close();
      }
    },
  );

  it('records complained, complainedAt, the complaint suppression on both lists, totalComplained, the webhook, and the customer database event', async () => {
    const connected = await service.api('POST', '/database', { key: sender.key, body: { url: pgServer.url('localhost') } });
    expect(connected.status, JSON.stringify(connected.body)).toBe(200);
    const sub = await newSubSender(service, sender.key);
    const endpoint = await seedEndpoint(service, sub.id, ['email.complained']);
    const id = await sentEmail(sub.id, ['fay@example.net', 'gus@example.net']);
    const reply = await deliverRaw(
      'feedback@mailbox.example',
      `fbl@${HOST}`,
      await signedArf({ returnPath: verpAddress(id, 1, HOST, service.deps.secretKey), messageId: `${id}@${HOST}`, to: 'gus@example.net' }),
    );
    expect(reply).toMatch(/^250 /);
    expect(await eventsOf(id)).toEqual([
      { recipient: 'gus@example.net', status: 'complained', dsn: expect.any(String), detail: expect.stringMatching(/complaint/i) },
    ]);
    expect((await email(id)).complainedAt).toBe(service.clock.now());
    expect(await suppressionOf(sub.id, 'gus@example.net')).toMatchObject({ reason: 'complaint' });
    expect(await suppressionOf(sender.account.id, 'gus@example.net')).toMatchObject({ reason: 'complaint' });
    expect((await account(sub.id)).totalComplained).toBe(1);
    expect((await hooks(endpoint)).map((h) => [h.eventType, JSON.parse(h.data).recipient])).toEqual([['email.complained', 'gus@example.net']]);
    // The account's (here the parent's) database gets the event and complained_at.
    const writer = createCustomerDbWriter(service.deps);
    try {
      // The email row itself was never written (seeded here): write it, then the event lands on it.
      await writer.runOnce();
    } finally {
      await writer.stop();
    }
    const client = await pgServer.connect();
    try {
      const events = (await client.query('select recipient, status from service.events where email_id = $1', [id])).rows;
      expect(events).toEqual([{ recipient: 'gus@example.net', status: 'complained' }]);
    } finally {
      await client.end();
    }
  });

  it('matched through the Message-ID when the return path is not a VERP address', async () => {
    const id = await sentEmail(sender.account.id, ['hal@example.net']);
    expect(
      await deliverRaw(
        'feedback@mailbox.example',
        `fbl@${HOST}`,
        await signedArf({ returnPath: 'someone@else.example', messageId: `${id}@${HOST}`, to: 'hal@example.net' }),
      ),
    ).toMatch(/^250 /);
    expect((await eventsOf(id)).map((e) => [e.recipient, e.status])).toEqual([['hal@example.net', 'complained']]);
    expect((await account(sender.account.id)).totalComplained).toBe(1);
  });

  it('a complaint replayed ten times is recorded and counted once: a forged report cannot push the account over the breaker', async () => {
    const endpoint = await seedEndpoint(service, sender.account.id, ['email.complained']);
    // Enough recipients sent that one complaint stays under the breaker's rate, ten would not.
    await service.deps.db.update(accounts).set({ totalSent: 2000 }).where(eq(accounts.id, sender.account.id));
    const id = await sentEmail(sender.account.id, ['kim@example.net', 'lee@example.net']);
    const report = await signedArf({ returnPath: verpAddress(id, 1, HOST, service.deps.secretKey), messageId: `${id}@${HOST}`, to: 'lee@example.net' });
    for (let i = 0; i < 10; i++) expect(await deliverRaw('anyone@attacker.example', `fbl@${HOST}`, report)).toMatch(/^250 /);
    expect((await eventsOf(id)).map((e) => [e.recipient, e.status])).toEqual([['lee@example.net', 'complained']]);
    expect(await account(sender.account.id)).toMatchObject({ totalComplained: 1, suspendedBy: null });
    expect(await hooks(endpoint)).toHaveLength(1);
  });

  it('one recipient cannot complain or bounce in another’s name: the VERP decides, and the Message-ID alone names nobody of several', async () => {
    const id = await sentEmail(sender.account.id, ['mo@example.net', 'ned@example.net']);
    const mine = verpAddress(id, 0, HOST, service.deps.secretKey);
    const forged = mine.replace(`.0.`, `.1.`);
    // Another recipient's address, written from one's own: refused at RCPT, and not read in a report.
    const { client } = await RawSmtp.connect(port);
    try {
      expect((await client.envelope('', [forged]))[2]).toMatch(/^550 5\.7\.1 /);
    } finally {
      client.close();
    }
    expect(
      await deliverRaw('x@attacker.example', `fbl@${HOST}`, await signedArf({ returnPath: forged, messageId: `${id}@${HOST}`, to: 'ned@example.net' })),
    ).toMatch(/^250 /);
    expect(
      await deliverRaw(
        'x@attacker.example',
        `fbl@${HOST}`,
        await signedArf({ returnPath: 'someone@else.example', messageId: `${id}@${HOST}`, to: 'ned@example.net' }),
      ),
    ).toMatch(/^250 /);
    // At one's own VERP address, a report naming the other recipient is about one's own copy.
    expect(await deliverRaw('', mine, postfixDsn(id, 0, 'ned@example.net', 'failed', '5.1.1', '550 5.1.1 User unknown'))).toMatch(/^250 /);
    expect((await eventsOf(id)).map((e) => [e.recipient, e.status])).toEqual([['mo@example.net', 'bounced']]);
    expect(await suppressionOf(sender.account.id, 'ned@example.net')).toBeUndefined();
    expect(await account(sender.account.id)).toMatchObject({ totalComplained: 0, totalBounced: 1 });
  });

  it('a report that is not abuse records nothing', async () => {
    const id = await sentEmail(sender.account.id, ['ivy@example.net']);
    expect(
      await deliverRaw(
        'feedback@mailbox.example',
        `fbl@${HOST}`,
        await signedArf({ returnPath: verpAddress(id, 0, HOST, service.deps.secretKey), messageId: `${id}@${HOST}`, to: 'ivy@example.net' }, 'not-spam'),
      ),
    ).toMatch(/^250 /);
    expect(await eventsOf(id)).toEqual([]);
  });
});

describe('forged reports (docs/api/decisions.md section 13): with 51 recipients sent, one report cannot suspend the account', () => {
  /** An account that has sent 51 recipients, one of them the email a report will name. */
  async function fiftyOneSent(): Promise<string> {
    await service.deps.db.update(accounts).set({ totalSent: 51 }).where(eq(accounts.id, sender.account.id));
    return sentEmail(sender.account.id, ['pat@example.net']);
  }
  async function expectNothingChanged(id: string): Promise<void> {
    expect(await eventsOf(id)).toEqual([]);
    expect(await email(id)).toMatchObject({ complainedAt: null, bouncedAt: null });
    expect(await suppressionOf(sender.account.id, 'pat@example.net')).toBeUndefined();
    expect(await account(sender.account.id)).toMatchObject({ totalSent: 51, totalBounced: 0, totalComplained: 0, suspendedBy: null });
  }
  const complaint = (id: string) =>
    `From: feedback@mailbox.example\nTo: fbl@${HOST}\nSubject: complaint\nMIME-Version: 1.0\nContent-Type: multipart/report; report-type=feedback-report; boundary="b"\n\n--b\nContent-Type: text/plain\n\nAn abuse report.\n--b\nContent-Type: message/feedback-report\n\nFeedback-Type: abuse\nVersion: 1\nOriginal-Rcpt-To: <pat@example.net>\n\n--b\nContent-Type: text/rfc822-headers\n\nFrom: <${sender.from}>\nTo: <pat@example.net>\nMessage-ID: <${id}@${HOST}>\n\n--b--`;
  const logged = (event: string) => service.logger.entries.filter((e) => e.event === event);

  it('an unsigned complaint at fbl@, quoting only the Message-ID of a one-recipient email, changes nothing', async () => {
    const id = await fiftyOneSent();
    const before = logged('inbound.report_unauthenticated').length;
    expect(await deliverRaw('anyone@attacker.example', `fbl@${HOST}`, complaint(id))).toMatch(/^250 /);
    await expectNothingChanged(id);
    expect(logged('inbound.report_unauthenticated').slice(before)).toEqual([expect.objectContaining({ kind: 'arf', reason: 'no DKIM signature passes' })]);
  });

  it('a complaint signed by a domain outside FBL_REPORTERS (with a key that verifies) changes nothing', async () => {
    const id = await fiftyOneSent();
    const before = logged('inbound.report_unauthenticated').length;
    expect(await deliverRaw('anyone@attacker.example', `fbl@${HOST}`, await stranger.sign(complaint(id)))).toMatch(/^250 /);
    await expectNothingChanged(id);
    expect(logged('inbound.report_unauthenticated').slice(before)).toEqual([
      expect.objectContaining({ signedBy: ['attacker.example'], reason: 'not signed by a domain of FBL_REPORTERS' }),
    ]);
  });

  it("a trusted reporter's signature over another message (the report altered after signing) does not pass", async () => {
    const id = await fiftyOneSent();
    const genuine = await reporter.sign(complaint(await sentEmail(sender.account.id, ['quinn@example.net'])));
    const altered = genuine.replace(/Message-ID: <[^>]+>/, `Message-ID: <${id}@${HOST}>`);
    expect(await deliverRaw('anyone@attacker.example', `fbl@${HOST}`, altered)).toMatch(/^250 /);
    await expectNothingChanged(id);
  });

  it('a DSN sent to fbl@ (a 5.x.x bounce quoting the VERP address) changes nothing: delivery reports are read at VERP addresses only', async () => {
    const id = await fiftyOneSent();
    const before = logged('inbound.report_ignored').length;
    expect(await deliverRaw('', `fbl@${HOST}`, postfixDsn(id, 0, 'pat@example.net', 'failed', '5.1.1', '550 5.1.1 User unknown'))).toMatch(/^250 /);
    await expectNothingChanged(id);
    expect(logged('inbound.report_ignored').slice(before)).toEqual([expect.objectContaining({ kind: 'dsn' })]);
  });

  it('one genuine complaint is recorded, and at 51 sent it does not suspend (paused needs 3 complaints)', async () => {
    const id = await fiftyOneSent();
    expect(await deliverRaw('feedback@mailbox.example', `fbl@${HOST}`, await reporter.sign(complaint(id)))).toMatch(/^250 /);
    expect((await eventsOf(id)).map((e) => [e.recipient, e.status])).toEqual([['pat@example.net', 'complained']]);
    expect(await account(sender.account.id)).toMatchObject({ totalSent: 51, totalComplained: 1, suspendedBy: null });
    const view = await service.api('GET', '/account', { key: sender.key });
    expect(view.body.sending).toMatchObject({ tier: 'healthy', suspended: false });
  });
});

describe('a database outage during DATA', () => {
  it('the message is answered 250 from the outbox and arrives once the database is back', async () => {
    const connected = await service.api('POST', '/database', { key: sender.key, body: { url: pgServer.url('localhost') } });
    expect(connected.status).toBe(200);
    await service.deps.db.delete(customerDbWrites);
    await pgServer.kill();
    let reply: string;
    try {
      reply = await deliverRaw('someone@example.org', `help@${sender.domain}`, 'Subject: during the outage\nMessage-ID: <outage-1@example.org>\n\nstill here');
    } finally {
      await pgServer.restart();
    }
    expect(reply).toMatch(/^250 /);
    expect((await service.api('GET', '/database', { key: sender.key })).body.pending).toBe(1);
    const writer = createCustomerDbWriter(service.deps);
    try {
      await writer.runOnce();
    } finally {
      await writer.stop();
    }
    const client = await pgServer.connect();
    try {
      const rows = (await client.query("select subject, text from service.inbound where message_id = '<outage-1@example.org>'")).rows;
      expect(rows).toEqual([{ subject: 'during the outage', text: 'still here\n' }]);
    } finally {
      await client.end();
    }
    expect((await service.api('GET', '/database', { key: sender.key })).body.pending).toBe(0);
  });
});

describe('reportIsNews: what a report adds to a recipient’s events', () => {
  const ev = (status: string, dsn: string) => ({ status, dsn });
  it.each([
    ['a first complaint', [], 'complained', '5.7.1', true],
    ['a second complaint', [ev('complained', '5.7.1')], 'complained', '5.7.1', false],
    ['a bounce after a delivery', [ev('delivered', '2.0.0')], 'bounced', '5.1.1', true],
    ['a second 5.x.x bounce', [ev('bounced', '5.1.1')], 'bounced', '5.2.2', false],
    ['a 5.x.x bounce after the 4.4.7 give-up', [ev('bounced', '4.4.7')], 'bounced', '5.1.1', true],
    ['a 4.x.x failure after any bounce', [ev('bounced', '4.4.7')], 'bounced', '4.2.2', false],
    ['a delay with a new code', [ev('deferred', '4.4.1')], 'deferred', '4.2.2', true],
    ['a delay with a code seen', [ev('deferred', '4.4.1')], 'deferred', '4.4.1', false],
    ['a delay after a bounce', [ev('bounced', '5.1.1')], 'deferred', '4.2.2', false],
    ['a delay after a complaint', [ev('complained', '5.7.1')], 'deferred', '4.2.2', false],
    [
      `a delay after ${MAX_DEFERRED_EVENTS - 1} deferrals`,
      Array.from({ length: MAX_DEFERRED_EVENTS - 1 }, (_, i) => ev('deferred', `4.0.${i}`)),
      'deferred',
      '4.9.9',
      true,
    ],
    [
      `a delay after ${MAX_DEFERRED_EVENTS} deferrals`,
      Array.from({ length: MAX_DEFERRED_EVENTS }, (_, i) => ev('deferred', `4.0.${i}`)),
      'deferred',
      '4.9.9',
      false,
    ],
  ] as const)('%s: %s', (_name, earlier, status, dsn, news) => {
    expect(reportIsNews(earlier, status, dsn)).toBe(news);
  });
});

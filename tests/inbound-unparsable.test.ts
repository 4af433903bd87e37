import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { customerDbWrites, customerDatabases } from '../db/schema/index.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { INLINE_BYTES } from '../mta/inbound/receive.js';
import { UNPARSABLE_ATTACHMENT } from '../server/customer-db/inbound/parse-message.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { type CustomerDbWriter, createCustomerDbWriter } from '../server/customer-db/writer.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { type Sender, newSender } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * Mail that mailparser cannot parse (mailsplit's limits: a header section over 1 MB, more than 1000 MIME parts) was
 * answered 250 and then lost: set aside at once (a small one), or taken for a database failure that held up every
 * later write of the account (a large one). Accepted means kept: such a message is stored with its envelope and its
 * bytes whole as one attachment, and the writes behind it go on.
 */

let dns: TestDnsServer;
let pgServer: TestPostgres;
let service: TestService;
let inbound: InboundServer;
let port: number;
let writer: CustomerDbWriter;
let customer: pg.Client;
let sender: Sender;

beforeAll(async () => {
  [dns, pgServer] = await Promise.all([TestDnsServer.start(), startPostgres({ certificate: 'trusted' })]);
  service = await startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true' });
  inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
  port = await inbound.listen('127.0.0.1', 0);
  sender = await newSender(service);
  expect((await service.api('POST', '/database', { key: sender.key, body: { url: pgServer.url('localhost') } })).status).toBe(200);
  customer = await pgServer.connect();
}, 120_000);
afterAll(async () => {
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
afterEach(() => writer.stop());

/** Sends `message` (CRLF line ends, no final dot) to `to` over raw SMTP; the reply to its end of data. */
async function send(to: string, message: string): Promise<string> {
  const { client } = await RawSmtp.connect(port);
  try {
    const replies = await client.envelope('someone@example.org', [to]);
    expect(replies.at(-1)).toMatch(/^250 /);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write(
      `${message
        .split('\r\n')
        .map((l) => (l.startsWith('.') ? `.${l}` : l))
        .join('\r\n')}\r\n.\r\n`,
    );
    return await client.reply();
  } finally {
    client.close();
  }
}

async function inboundRow(subjectOrAttachment: string) {
  const rows = (
    await customer.query(
      `select i.id, i.subject, i.from_address, i.size, a.filename, a.content_type, a.content from service.inbound i left join service.attachments a on a.inbound_id = i.id
       where i.subject = $1 or convert_from(substring(a.content from 1 for 200), 'UTF8') like '%' || $1 || '%'`,
      [subjectOrAttachment],
    )
  ).rows;
  return rows;
}

describe('a message mailparser cannot parse', () => {
  it('small, with more than 1000 MIME parts: stored with its bytes as message.eml', async () => {
    const parts = Array.from({ length: 1100 }, (_, i) => `--b\r\nContent-Type: text/plain\r\n\r\npart ${i}\r\n`).join('');
    const message = `Subject: many-parts\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n${parts}--b--`;
    expect(message.length).toBeLessThan(INLINE_BYTES);
    expect(await send(`x@${sender.domain}`, message)).toMatch(/^250 /);
    await writer.runOnce();
    const rows = await inboundRow('many-parts');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      subject: '',
      from_address: 'someone@example.org',
      filename: UNPARSABLE_ATTACHMENT.filename,
      content_type: UNPARSABLE_ATTACHMENT.contentType,
    });
    expect(rows[0].content.toString('utf8')).toContain('part 1099');
    expect(await service.deps.db.select().from(customerDbWrites)).toEqual([]);
  });

  it('small, failing while an attachment is read (its 1000th part): stored as message.eml, and the writer finishes its run and stops', async () => {
    // The attachment's stream was left open when the parser failed: the parse never finished, the account's writes
    // waited behind it for ever (a restart met the same write first), and so did the graceful stop.
    const parts = Array.from(
      { length: 1000 },
      (_, i) => `--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=a${i}.bin\r\n\r\nx\r\n`,
    ).join('');
    const message = `Subject: many-attachments\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n${parts}--b--`;
    expect(message.length).toBeLessThan(INLINE_BYTES);
    expect(await send(`x@${sender.domain}`, message)).toMatch(/^250 /);
    const within = (p: Promise<unknown>, ms: number, done: string) =>
      Promise.race([p.then(() => done), new Promise((r) => setTimeout(() => r(`still waiting after ${ms} ms`), ms))]);
    expect(await within(writer.runOnce(), 10_000, 'finished')).toBe('finished');
    expect(await within(writer.stop(), 5_000, 'stopped')).toBe('stopped');
    const rows = await inboundRow('many-attachments');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ subject: '', filename: UNPARSABLE_ATTACHMENT.filename, content_type: UNPARSABLE_ATTACHMENT.contentType });
  }, 30_000);

  it('large, with a header section over 1 MB: stored whole, and the mail after it is not held up', async () => {
    const filler = Array.from({ length: 1300 }, (_, i) => `X-Filler-${i}: ${'y'.repeat(900)}`).join('\r\n');
    const message = `Subject: huge-header\r\n${filler}\r\n\r\nbody`;
    expect(message.length).toBeGreaterThan(INLINE_BYTES);
    expect(await send(`x@${sender.domain}`, message)).toMatch(/^250 /);
    expect(await send(`y@${sender.domain}`, 'Subject: after-it\r\n\r\nhello')).toMatch(/^250 /);
    await writer.runOnce();
    expect(await one(service.deps.db.select().from(customerDatabases))).toMatchObject({ state: 'connected' });
    expect(await inboundRow('after-it')).toHaveLength(1);
    const rows = await inboundRow('X-Filler-0');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ subject: '', filename: UNPARSABLE_ATTACHMENT.filename });
    expect(rows[0].content.length).toBe(rows[0].size);
    expect(await service.deps.db.select().from(customerDbWrites)).toEqual([]);
  });
});

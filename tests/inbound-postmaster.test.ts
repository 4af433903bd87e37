import { asc, count, eq } from 'drizzle-orm';
import nodemailer from 'nodemailer';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { customerDbWrites, operatorMessages } from '../db/schema/index.js';
import {
  HEADER_FIELD_CHARS,
  HEADER_SCAN_BYTES,
  OPERATOR_MAIL_LIMIT,
  OPERATOR_MESSAGE_BYTES,
  decodeEncodedWords,
  headerBasics,
  prepareOperatorMessage,
  readOperatorMessage,
  storeOperatorMessage,
} from '../server/core/operator-mail.js';
import { judgeRecipient } from '../mta/inbound/recipients.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { newId } from '../server/shared/ids.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { type Sender, connectDomain, newSender, uniqueDomain } from './helpers/sending.js';
import { type TestService, refuseInsertsInto, startService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * Mail for the operator (docs/api/decisions.md section 13) over real SMTP: `postmaster@` and `abuse@`
 * MAIL_HOSTNAME, in any case, and a bare `postmaster` (RFC 5321 4.5.1 and 4.1.1.3, RFC 2142) are accepted and the
 * message is kept, sealed, in `operator_messages` before the 250; every other local part of MAIL_HOSTNAME is still
 * refused (no relay). What is kept is bounded: the first OPERATOR_MESSAGE_BYTES of a message, the newest
 * OPERATOR_MAIL_LIMIT messages, From and Subject read from a bounded scan of the header.
 */

const HOST = 'mx.mailstead.test';

let dns: TestDnsServer;
let pgServer: TestPostgres;
let service: TestService;
let inbound: InboundServer;
let port: number;
let sender: Sender;
const uncaught = vi.fn();

beforeAll(async () => {
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);
  [dns, pgServer] = await Promise.all([TestDnsServer.start(), startPostgres({ certificate: 'trusted' })]);
  service = await startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true', MAIL_HOSTNAME: HOST });
  inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
  port = await inbound.listen('127.0.0.1', 0);
  sender = await newSender(service);
  const connected = await service.api('POST', '/database', { key: sender.key, body: { url: pgServer.url('localhost') } });
  expect(connected.status, JSON.stringify(connected.body)).toBe(200);
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
  await service.deps.db.delete(operatorMessages);
  await service.deps.db.delete(customerDbWrites);
});

afterEach(() => {
  const calls = uncaught.mock.calls.length;
  uncaught.mockClear();
  expect(calls, 'uncaught exceptions or unhandled rejections').toBe(0);
});

function transport() {
  return nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, tls: { rejectUnauthorized: false }, name: 'client.example.org' });
}

/** Sends `message` (LF line ends, sent as CRLF) to `to` with a raw client; the reply to the end of DATA. */
async function deliverRaw(from: string, to: string[], message: string): Promise<string> {
  const { client } = await RawSmtp.connect(port);
  try {
    const replies = await client.envelope(from, to);
    expect(replies.slice(2), replies.join(' | ')).toEqual(to.map(() => expect.stringMatching(/^250 /)));
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write(`${message.replace(/\r?\n/g, '\r\n')}\r\n.\r\n`);
    return await client.reply();
  } finally {
    client.close();
  }
}

const kept = async () => await service.deps.db.select().from(operatorMessages).orderBy(asc(operatorMessages.seq));
const open = async (id: string) => (await readOperatorMessage(service.deps.db, service.deps.secretKey, id))!;

describe('at RCPT', () => {
  it('postmaster@ and abuse@ MAIL_HOSTNAME in any case, and a bare postmaster, are accepted with 250', async () => {
    const { client } = await RawSmtp.connect(port);
    try {
      const replies = await client.envelope('someone@example.org', [
        `postmaster@${HOST}`,
        `PostMaster@${HOST.toUpperCase()}`,
        `ABUSE@${HOST}`,
        'postmaster',
        'Postmaster',
      ]);
      expect(replies.slice(2), replies.join(' | ')).toEqual(Array.from({ length: 5 }, () => expect.stringMatching(/^250 /)));
    } finally {
      client.close();
    }
  });

  it('every other local part of MAIL_HOSTNAME, and postmaster@ a domain the server does not receive for, are still refused alike (no relay)', async () => {
    const notReceiving = uniqueDomain('ownership');
    await connectDomain(service, sender.key, notReceiving, { state: 'ownership' });
    const { client } = await RawSmtp.connect(port);
    try {
      const replies = await client.envelope('someone@example.org', [
        `hostmaster@${HOST}`,
        `webmaster@${HOST}`,
        `root@${HOST}`,
        `postmaster2@${HOST}`,
        `post.master@${HOST}`,
        `abuse+x@${HOST}`,
        `postmaster@sub.${HOST}`,
        'postmaster@gmail.example',
        `postmaster@${notReceiving}`,
      ]);
      const refusals = replies.slice(2);
      expect(
        refusals.every((r) => r.startsWith('550 5.7.1 ')),
        refusals.join(' | '),
      ).toBe(true);
      expect(new Set(refusals).size).toBe(1);
      expect(await client.command('DATA')).toMatch(/^503 /);
    } finally {
      client.close();
    }
  });

  it('with SECRET_KEY=off nothing can be kept sealed, so postmaster is refused like any other address', async () => {
    const deps = { db: service.deps.db, config: service.deps.config, secretKey: null };
    expect(await judgeRecipient(deps, `postmaster@${HOST}`)).toEqual({ kind: 'refused' });
    expect(await judgeRecipient(deps, 'postmaster')).toEqual({ kind: 'refused' });
    expect(await judgeRecipient({ ...deps, secretKey: service.deps.secretKey }, 'postmaster')).toEqual({ kind: 'operator', address: `postmaster@${HOST}` });
  });
});

describe('a message to postmaster', () => {
  it('is kept, sealed, before the 250: its envelope, From, Subject (decoded), size and bytes', async () => {
    const info = await transport().sendMail({
      envelope: { from: 'bounces@remote.example', to: [`Postmaster@${HOST}`] },
      from: 'Ops Désk <ops@remote.example>',
      to: `postmaster@${HOST}`,
      subject: 'Your server sent us spam — please look ✓',
      text: 'Hello,\r\nyour server 198.51.100.7 sent mail to our spam traps.\r\n',
    });
    expect(info.response).toMatch(/^250 2\.0\.0 Ok: queued as /);
    // Durable when the 250 came: read right away, no waiting.
    const rows = await kept();
    expect(rows).toHaveLength(1);
    const row = rows[0]!;
    expect(info.response).toContain(row.id);
    expect(row).toMatchObject({
      recipients: [`postmaster@${HOST}`],
      mailFrom: 'bounces@remote.example',
      fromHeader: 'Ops Désk <ops@remote.example>',
      subject: 'Your server sent us spam — please look ✓',
      remoteAddress: '127.0.0.1',
      helo: 'client.example.org',
      truncated: false,
    });
    // Sealed: neither the text nor the subject is in the stored bytes.
    expect(row.messageSealed.includes('spam traps')).toBe(false);
    expect(row.messageSealed.includes('remote.example')).toBe(false);
    const { raw } = await open(row.id);
    expect(raw.length).toBe(row.size);
    expect(raw.toString('utf8')).toContain('your server 198.51.100.7 sent mail to our spam traps.');
    expect((await one(service.deps.db.select({ n: count() }).from(customerDbWrites)))!.n).toBe(0);
    expect(service.logger.entries.find((e) => e.event === 'inbound.received' && e.id === row.id)).toMatchObject({ operator: true, stored: 0 });
  });

  it('to abuse@ and postmaster@ at once: one copy naming both; a null sender and no headers are kept too', async () => {
    expect(await deliverRaw('', [`abuse@${HOST}`, `postmaster@${HOST}`, 'postmaster'], 'no header at all, just text')).toMatch(/^250 /);
    const rows = await kept();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ recipients: [`abuse@${HOST}`, `postmaster@${HOST}`], mailFrom: '', fromHeader: '', subject: '' });
  });

  it('to postmaster and a customer’s mailbox: both kept, the customer’s copy for its database', async () => {
    const reply = await deliverRaw(
      'reporter@isp.example',
      [`postmaster@${HOST}`, `support@${sender.domain}`],
      'From: reporter@isp.example\nSubject: both\n\nfor you both',
    );
    expect(reply).toMatch(/^250 /);
    expect((await kept()).map((r) => [r.recipients, r.subject])).toEqual([[[`postmaster@${HOST}`], 'both']]);
    const writes = await service.deps.db.select().from(customerDbWrites).where(eq(customerDbWrites.kind, 'inbound'));
    expect(writes.map((w) => w.accountId)).toEqual([sender.account.id]);
  });

  it(`past OPERATOR_MESSAGE_BYTES is accepted; its first ${OPERATOR_MESSAGE_BYTES} bytes are kept, its size counts all`, async () => {
    const body = `${'0123456789abcdef'.repeat(6).concat('\n').repeat(7000)}the end`;
    expect(await deliverRaw('big@remote.example', [`postmaster@${HOST}`], `Subject: large\n\n${body}`)).toMatch(/^250 /);
    const [row] = await kept();
    expect(row!.truncated).toBe(true);
    expect(row!.size).toBeGreaterThan(OPERATOR_MESSAGE_BYTES * 2);
    const { raw } = await open(row!.id);
    expect(raw.length).toBe(OPERATOR_MESSAGE_BYTES);
    expect(raw.toString('latin1').startsWith('Subject: large\r\n\r\n0123456789abcdef')).toBe(true);
  });

  it('that cannot be kept is 451, never 250, and its customer’s copy is not kept either (one commit)', async () => {
    // A store refusing the write inside the commit, as a full disk would (a trigger: no store fault to recover from).
    const allow = await refuseInsertsInto(service, 'operator_messages');
    try {
      const { client } = await RawSmtp.connect(port);
      try {
        const replies = await client.envelope('x@remote.example', [`postmaster@${HOST}`, `support@${sender.domain}`]);
        expect(replies.slice(2)).toEqual([expect.stringMatching(/^250 /), expect.stringMatching(/^250 /)]);
        expect(await client.command('DATA')).toMatch(/^354 /);
        client.write('Subject: not kept\r\n\r\nbody\r\n.\r\n');
        expect(await client.reply()).toMatch(/^451 4\.3\.0 /);
      } finally {
        client.close();
      }
    } finally {
      await allow();
    }
    expect(await kept()).toEqual([]);
    expect((await one(service.deps.db.select({ n: count() }).from(customerDbWrites)))!.n).toBe(0);
  });

  it('with a bare line end is refused 550 5.6.0 and nothing is kept, as for any address', async () => {
    const { client } = await RawSmtp.connect(port);
    try {
      expect((await client.envelope('x@remote.example', [`postmaster@${HOST}`]))[2]).toMatch(/^250 /);
      expect(await client.command('DATA')).toMatch(/^354 /);
      client.write('Subject: a\r\n\r\nbody\n.\nMAIL FROM:<x@evil.example>\r\n.\r\n');
      expect(await client.reply()).toMatch(/^550 5\.6\.0 /);
    } finally {
      client.close();
    }
    expect(await kept()).toEqual([]);
  });

  it('with a Subject folded over 70,000 lines: accepted, its subject cut to HEADER_FIELD_CHARS, and read in one bounded pass', async () => {
    const folded = `Subject: start${'\n x'.repeat(70_000)}\nFrom: folded@remote.example\n\nbody`;
    expect(await deliverRaw('x@remote.example', [`postmaster@${HOST}`], folded)).toMatch(/^250 /);
    const [row] = await kept();
    expect(row!.subject.startsWith('start x x')).toBe(true);
    expect(row!.subject.length).toBeLessThanOrEqual(HEADER_FIELD_CHARS);
    // Past the first HEADER_SCAN_BYTES: not read.
    expect(row!.fromHeader).toBe('');
    // mailauth's quadratic unfolding took 39 s over 70,000 lines; a linear pass over 200,000 takes milliseconds.
    const bomb = Buffer.from(`Subject: a${'\r\n b'.repeat(200_000)}\r\n\r\n`);
    const started = performance.now();
    expect(headerBasics(bomb).subject.length).toBeLessThanOrEqual(HEADER_FIELD_CHARS);
    expect(performance.now() - started).toBeLessThan(1000);
  });
});

describe('what is kept', () => {
  it(`is the newest OPERATOR_MAIL_LIMIT (${OPERATOR_MAIL_LIMIT}) messages: each new one drops the oldest`, async () => {
    const db = service.deps.db;
    const at = service.clock.now();
    const ids: string[] = [];
    await db.transaction(async () => {
      for (let i = 0; i < OPERATOR_MAIL_LIMIT + 3; i++) {
        const id = newId(at + i);
        ids.push(id);
        const raw = Buffer.from(`Subject: number ${i}\r\n\r\nx\r\n`);
        await storeOperatorMessage(
          db,
          prepareOperatorMessage(service.deps.secretKey!, {
            id,
            recipients: [`abuse@${HOST}`],
            mailFrom: '',
            remoteAddress: '192.0.2.1',
            helo: 'h',
            size: raw.length,
            raw,
            truncated: false,
            receivedAt: at + i,
          }),
        );
      }
    });
    const rows = await kept();
    expect(rows).toHaveLength(OPERATOR_MAIL_LIMIT);
    expect(rows[0]!.subject).toBe('number 3');
    expect(rows.at(-1)!.subject).toBe(`number ${OPERATOR_MAIL_LIMIT + 2}`);
    expect(await readOperatorMessage(db, service.deps.secretKey, ids[2]!)).toBeNull();
    expect((await open(ids.at(-1)!)).raw.toString()).toContain(`number ${OPERATOR_MAIL_LIMIT + 2}`);
  });

  it('opens only with the key it was sealed with, and only as the message it was sealed as', async () => {
    const db = service.deps.db;
    const raw = Buffer.from('Subject: sealed\r\n\r\nx\r\n');
    const id = newId(service.clock.now());
    await storeOperatorMessage(
      db,
      prepareOperatorMessage(service.deps.secretKey!, {
        id,
        recipients: [`abuse@${HOST}`],
        mailFrom: '',
        remoteAddress: '192.0.2.1',
        helo: 'h',
        size: raw.length,
        raw,
        truncated: false,
        receivedAt: 1,
      }),
    );
    expect(await readOperatorMessage(db, null, id)).toBeNull();
    await expect(readOperatorMessage(db, Buffer.alloc(32, 7), id)).rejects.toThrow();
    // Another row's sealed bytes under this id do not open (the id is bound into the seal).
    const other = newId(service.clock.now() + 1);
    await storeOperatorMessage(
      db,
      prepareOperatorMessage(service.deps.secretKey!, {
        id: other,
        recipients: [`abuse@${HOST}`],
        mailFrom: '',
        remoteAddress: '192.0.2.1',
        helo: 'h',
        size: 1,
        raw: Buffer.from('y'),
        truncated: false,
        receivedAt: 2,
      }),
    );
    const sealed = (await one(db.select({ s: operatorMessages.messageSealed }).from(operatorMessages).where(eq(operatorMessages.id, other))))!.s;
    await db.update(operatorMessages).set({ messageSealed: sealed }).where(eq(operatorMessages.id, id));
    await expect(readOperatorMessage(db, service.deps.secretKey, id)).rejects.toThrow();
  });
});

describe('From and Subject for the list', () => {
  it.each([
    ['plain', 'Subject: Hello there\r\n\r\n', 'Hello there'],
    ['folded', 'Subject: Hello\r\n there\r\n\r\n', 'Hello there'],
    ['B, UTF-8', 'Subject: =?UTF-8?B?w4fDqSDinJM=?=\r\n\r\n', 'Çé ✓'],
    ['Q, ISO-8859-1, underscores', 'Subject: =?iso-8859-1?q?caf=E9_cr=E8me?=\r\n\r\n', 'café crème'],
    ['two words: the space between them goes', 'Subject: =?utf-8?q?a?= =?utf-8?q?b?= c\r\n\r\n', 'ab c'],
    ['an unknown charset stays as sent', 'Subject: =?x-unknown?q?a?=\r\n\r\n', '=?x-unknown?q?a?='],
    ['control characters go', 'Subject: a\u0000b\u001bc\r\n\r\n', 'a b c'],
    ['the first Subject', 'Subject: one\r\nSubject: two\r\n\r\n', 'one'],
    ['not in the body', 'X: y\r\n\r\nSubject: body\r\n', ''],
    ['any case of the name', 'SUBJECT:  shouted \r\n\r\n', 'shouted'],
  ])('%s', (_name, message, subject) => {
    expect(headerBasics(Buffer.from(message)).subject).toBe(subject);
  });

  it(`reads only the first HEADER_SCAN_BYTES (${HEADER_SCAN_BYTES}) of a message`, () => {
    const filler = `X-Filler: ${'f'.repeat(990)}\r\n`.repeat(Math.ceil(HEADER_SCAN_BYTES / 1000));
    expect(headerBasics(Buffer.from(`From: early@example.org\r\n${filler}Subject: late\r\n\r\n`))).toEqual({ from: 'early@example.org', subject: '' });
  });

  it('decodes encoded words in From, leaving the address as written', () => {
    expect(headerBasics(Buffer.from('From: =?utf-8?q?Z=C3=BCrich_Abuse?= <abuse@isp.example>\r\n\r\n')).from).toBe('Zürich Abuse <abuse@isp.example>');
    expect(decodeEncodedWords('no words here')).toBe('no words here');
  });
});

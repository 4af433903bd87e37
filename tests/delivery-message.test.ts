import { eq } from 'drizzle-orm';
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { domainKeys, outboundMessages } from '../db/schema/index.js';
import type { DeliveryEngine } from '../mta/delivery-engine.js';
import { publishSigningRecord, verifyDkim } from './helpers/dkim-check.js';
import { resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import type { TestDnsServer } from './helpers/dns-server.js';
import { newSender, type Sender } from './helpers/sending.js';
import type { TestService } from './helpers/service.js';
import type { SmtpSink } from './helpers/smtp-sink.js';
import { one } from '../db/sql.js';

/**
 * The message as it reaches the recipient's server: Message-ID, Date, the rebuilt From, Reply-To
 * when given, MIME-Version, multipart/alternative text and html, no bare CR or LF anywhere, and a DKIM signature
 * (rsa-sha256, relaxed/relaxed, the from-domain's selector) that mailauth's verifier accepts against the Signing
 * record the test DNS server publishes, body hash included.
 */

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;
let engine: DeliveryEngine;

beforeAll(async () => {
  ({ dns, sink, service, engine } = await startDeliveryRig());
});

afterAll(() => stopDeliveryRig({ dns, sink, service }));

beforeEach(() => {
  resetDeliveryRig({ dns, sink });
});

async function sendAndDeliver(s: Sender, body: Record<string, unknown>): Promise<{ id: string; raw: Buffer }> {
  const res = await service.api('POST', '/emails', { key: s.key, body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await engine.runOnce();
  expect(sink.received, 'one message at the sink').toHaveLength(1);
  return { id: res.body.id as string, raw: sink.received[0]!.raw };
}

/** The header section, unfolded, as name (lower-cased) → values. */
function headersOf(raw: Buffer): Map<string, string[]> {
  const text = raw.toString('latin1');
  const head = text.slice(0, text.indexOf('\r\n\r\n')).replace(/\r\n[ \t]+/g, ' ');
  const map = new Map<string, string[]>();
  for (const line of head.split('\r\n')) {
    const i = line.indexOf(':');
    const name = line.slice(0, i).trim().toLowerCase();
    map.set(name, [...(map.get(name) ?? []), line.slice(i + 1).trim()]);
  }
  return map;
}

const BARE_CR_OR_LF = /[^\r]\n|^\n|\r(?!\n)/;

describe('the message sent', () => {
  it('carries Message-ID, Date, the rebuilt From, Reply-To, MIME-Version and multipart/alternative text and html', async () => {
    const s = await newSender(service);
    const sentAt = service.clock.now();
    const { raw, id } = await sendAndDeliver(s, {
      from: `Billing Team <billing@${s.domain}>`,
      to: 'alice@example.net',
      replyTo: `Support Desk <support@${s.domain}>`,
      template: { name: 'receipt', receiptNumber: 'R-7731', paidOn: '2026-03-10', paymentMethod: 'Visa 4242', total: '$99.00' },
    });
    const h = headersOf(raw);
    for (const name of ['message-id', 'date', 'from', 'reply-to', 'mime-version', 'content-type', 'subject', 'to', 'dkim-signature']) {
      expect(h.get(name), name).toHaveLength(1);
    }
    expect(h.get('message-id')![0]).toMatch(/^<[^<>@\s]+@[^<>@\s]+>$/);
    expect(h.get('mime-version')![0]).toBe('1.0');
    expect(h.get('content-type')![0]).toMatch(/^multipart\/alternative;\s*boundary=/i);

    const mail = await simpleParser(raw);
    expect(mail.from?.value).toEqual([{ name: 'Billing Team', address: `billing@${s.domain}` }]);
    const replyTo = mail.replyTo?.value;
    expect(replyTo).toEqual([{ name: 'Support Desk', address: `support@${s.domain}` }]);
    expect(mail.date?.getTime()).toBe(Math.floor(sentAt / 1000) * 1000);
    expect(mail.text).toContain('R-7731');
    expect(mail.text).toContain('$99.00');
    expect(mail.html).toContain('R-7731');
    const email = (await service.api('GET', `/emails/${id}`, { key: s.key })).body;
    expect(mail.subject).toBe(email.subject);

    // Exactly two alternatives: text/plain, then text/html.
    const text = raw.toString('latin1');
    const boundary = /boundary="?([^";\r\n]+)"?/i.exec(h.get('content-type')![0]!)![1]!;
    const parts = text.split(`--${boundary}`).slice(1, -1);
    expect(parts.map((p) => /content-type:\s*([^;\r\n]+)/i.exec(p)?.[1]?.toLowerCase())).toEqual(['text/plain', 'text/html']);
  });

  it('has no Reply-To when none was given, and one Message-ID per email', async () => {
    const s = await newSender(service);
    const { raw } = await sendAndDeliver(s, { from: `billing@${s.domain}`, to: 'bob@example.net', template: { name: 'welcome' } });
    expect(headersOf(raw).has('reply-to')).toBe(false);
    const first = headersOf(raw).get('message-id')![0];
    sink.received = [];
    const { raw: second } = await sendAndDeliver(s, { from: `billing@${s.domain}`, to: 'bob@example.net', template: { name: 'welcome' } });
    expect(headersOf(second).get('message-id')![0]).not.toBe(first);
  });

  it('rebuilds a non-ASCII display name as an RFC 2047 encoded word: the header section stays ASCII', async () => {
    const s = await newSender(service);
    const { raw } = await sendAndDeliver(s, {
      from: `Zoë Café <billing@${s.domain}>`,
      to: 'carol@example.net',
      template: { name: 'notification', subject: 'Café news', body: 'Grüße' },
    });
    const text = raw.toString('latin1');
    const head = text.slice(0, text.indexOf('\r\n\r\n'));
    expect(head).toMatch(/^[\x20-\x7e\r\n\t]*$/);
    expect(headersOf(raw).get('from')![0]).toMatch(/=\?utf-8\?[bq]\?/i);
    const mail = await simpleParser(raw);
    expect(mail.from?.value).toEqual([{ name: 'Zoë Café', address: `billing@${s.domain}` }]);
  });

  it('puts a non-ASCII display name out as bare encoded words (never quoted, RFC 2047 section 5), each at most 75 characters, folded', async () => {
    const s = await newSender(service);
    const name = 'Zoë’s Café — Abrechnung & Kundenservice für alle Bestellungen (日本語)';
    const reply = 'Служба поддержки';
    const { raw } = await sendAndDeliver(s, {
      from: `${name} <billing@${s.domain}>`,
      replyTo: `${reply} <help@example.org>`,
      to: 'erin@example.net',
      template: { name: 'welcome', firstName: 'Erin' },
    });
    const text = raw.toString('latin1');
    const head = text.slice(0, text.indexOf('\r\n\r\n'));
    // Folded: the From field spans several lines, none over 78 characters.
    const fromLines = /(?:^|\r\n)(From:[^\r\n]*(?:\r\n[ \t][^\r\n]*)*)/.exec(head)![1]!.split('\r\n');
    expect(fromLines.length).toBeGreaterThan(1);
    for (const line of fromLines) expect(line.length).toBeLessThanOrEqual(78);
    // As a strict RFC 2047 reader sees it: a phrase of bare encoded words, each decodable alone, then the address.
    const h = headersOf(raw);
    for (const [field, shown, address] of [
      ['from', name, `billing@${s.domain}`],
      ['reply-to', reply, 'help@example.org'],
    ] as const) {
      const value = h.get(field)![0]!;
      expect(value).not.toContain('"');
      const m = /^((?:=\?UTF-8\?B\?[A-Za-z0-9+/=]+\?=)(?: =\?UTF-8\?B\?[A-Za-z0-9+/=]+\?=)*) <([^<>]+)>$/.exec(value);
      expect(m, value).not.toBeNull();
      const words = m![1]!.split(' ');
      for (const w of words) expect(w.length).toBeLessThanOrEqual(75);
      expect(words.map((w) => new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(w.slice(10, -2), 'base64'))).join('')).toBe(shown);
      expect(m![2]).toBe(address);
    }
    const mail = await simpleParser(raw);
    expect(mail.from?.value).toEqual([{ name, address: `billing@${s.domain}` }]);
    expect(mail.replyTo?.value).toEqual([{ name: reply, address: 'help@example.org' }]);
    expect(mail.text).toContain('Welcome, Erin!');
  });

  it('keeps an ASCII display name quoted, and the From signed by DKIM', async () => {
    const s = await newSender(service);
    await publishSigningRecord(service, dns, s);
    const { raw } = await sendAndDeliver(s, {
      from: `O'Brien & Sons Billing Department of a Long Company Name <billing@${s.domain}>`,
      to: 'fay@example.net',
      template: { name: 'welcome' },
    });
    expect(headersOf(raw).get('from')![0]).toBe(`"O'Brien & Sons Billing Department of a Long Company Name" <billing@${s.domain}>`);
    const mail = await simpleParser(raw);
    expect(mail.from?.value).toEqual([{ name: "O'Brien & Sons Billing Department of a Long Company Name", address: `billing@${s.domain}` }]);
    const result = await verifyDkim(service, raw);
    expect(result.results[0]?.status.result).toBe('pass');
    expect(
      /\bh=([^;]+)/
        .exec(headersOf(raw).get('dkim-signature')![0]!)![1]!
        .toLowerCase()
        .split(':')
        .map((x) => x.trim()),
    ).toContain('from');
  });

  it('sends no bare CR or LF anywhere, even when the variables hold them', async () => {
    const s = await newSender(service);
    const body = `line one\nline two\rline three\r\nline four\n\n${'x'.repeat(1200)}\n.\n..leading dots\n`;
    const { raw } = await sendAndDeliver(s, {
      from: `billing@${s.domain}`,
      to: 'dave@example.net',
      template: { name: 'notification', subject: 'Status\nupdate', body },
    });
    expect(raw.toString('latin1')).not.toMatch(BARE_CR_OR_LF);
    // Every line within the 998-character limit.
    expect(
      raw
        .toString('latin1')
        .split('\r\n')
        .every((l) => l.length <= 998),
    ).toBe(true);
    const mail = await simpleParser(raw);
    expect(mail.text).toContain('line four');
    expect(mail.text).toContain('..leading dots');
    expect(mail.subject).toBe('Status update');
  });
});

describe('the DKIM signature', () => {
  it('verifies with mailauth against the published Signing record, body hash included', async () => {
    const s = await newSender(service);
    const { selector } = await publishSigningRecord(service, dns, s);
    const { raw } = await sendAndDeliver(s, {
      from: `Shop <billing@${s.domain}>`,
      to: ['erin@example.net'],
      template: { name: 'receipt', receiptNumber: 'R-1', paidOn: '2026-03-10', paymentMethod: 'Visa', total: '$1.00' },
    });
    const signature = headersOf(raw).get('dkim-signature')![0]!;
    const tags = Object.fromEntries(
      signature
        .split(';')
        .map((t) =>
          t
            .trim()
            .split(/=(.*)/s)
            .map((x) => x.replace(/\s+/g, '')),
        )
        .filter((t) => t[0]),
    );
    expect(tags).toMatchObject({ v: '1', a: 'rsa-sha256', c: 'relaxed/relaxed', d: s.domain, s: selector });
    expect(tags.h!.toLowerCase().split(':')).toEqual(expect.arrayContaining(['from', 'subject', 'date', 'message-id', 'to']));
    expect(tags.bh).toMatch(/^[A-Za-z0-9+/]+=*$/);

    const result = await verifyDkim(service, raw);
    expect(result.results).toHaveLength(1);
    expect(result.results[0]?.status.result).toBe('pass');
    expect(result.results[0]?.signingDomain).toBe(s.domain);
    expect(result.results[0]?.selector).toBe(selector);
  });

  it('fails verification once the body or a signed header is changed', async () => {
    const s = await newSender(service);
    await publishSigningRecord(service, dns, s);
    const { raw } = await sendAndDeliver(s, {
      from: `billing@${s.domain}`,
      to: 'frank@example.net',
      template: { name: 'notification', subject: 'Hello there', body: 'The original body text.' },
    });
    expect((await verifyDkim(service, raw)).results[0]?.status.result).toBe('pass');

    const text = raw.toString('latin1');
    const split = text.indexOf('\r\n\r\n');
    const bodyChanged = Buffer.from(text.slice(0, split) + text.slice(split).replace('original', 'ORIGINAL'), 'latin1');
    expect(bodyChanged.equals(raw)).toBe(false);
    const bodyResult = (await verifyDkim(service, bodyChanged)).results[0];
    expect(bodyResult?.status.result).not.toBe('pass');

    const headerChanged = Buffer.from(text.slice(0, split).replace(/^Subject: .*$/m, 'Subject: Hello there!') + text.slice(split), 'latin1');
    expect(headerChanged.equals(raw)).toBe(false);
    expect((await verifyDkim(service, headerChanged)).results[0]?.status.result).not.toBe('pass');
  });

  it('does not verify against a different published key', async () => {
    const s = await newSender(service);
    const other = await newSender(service);
    const row = (await one(service.deps.db.select().from(domainKeys).where(eq(domainKeys.accountId, s.account.id))))!;
    const wrong = (await one(service.deps.db.select().from(domainKeys).where(eq(domainKeys.accountId, other.account.id))))!;
    dns.add(`${row.selector}._domainkey.${s.domain}`, { type: 'TXT', data: `v=DKIM1; h=sha256; k=rsa; p=${wrong.dkimPublicKey}`.match(/.{1,255}/g)! });
    const { raw } = await sendAndDeliver(s, { from: `billing@${s.domain}`, to: 'gina@example.net', template: { name: 'welcome' } });
    expect((await verifyDkim(service, raw)).results[0]?.status.result).not.toBe('pass');
  });
});

describe('a queued message with attachments', () => {
  it('is delivered with them (inline part in multipart/related, the rest in multipart/mixed), its bytes intact, DKIM-signed', async () => {
    const s = await newSender(service);
    await publishSigningRecord(service, dns, s);
    const res = await service.api('POST', '/emails', {
      key: s.key,
      body: { from: `billing@${s.domain}`, to: 'hana@example.net', template: { name: 'welcome' } },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const id = res.body.id as string;
    // POST /emails takes `attachments` on the lead's branch; here the queued row is given them as the send stores them.
    const pdf = Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 7) % 256));
    const png = Buffer.from(Array.from({ length: 900 }, (_, i) => (i * 13) % 256));
    const attachments = [
      { filename: 'Rechnung März 2026.pdf', contentType: 'application/pdf', content: pdf.toString('base64'), contentId: null },
      { filename: 'logo.png', contentType: 'image/png', content: png.toString('base64'), contentId: 'logo' },
    ];
    await service.deps.db.update(outboundMessages).set({ attachments }).where(eq(outboundMessages.id, id));
    await engine.runOnce();
    expect(sink.received).toHaveLength(1);
    const raw = sink.received[0]!.raw;

    expect((await verifyDkim(service, raw)).results[0]?.status.result).toBe('pass');
    expect(raw.toString('latin1')).not.toMatch(BARE_CR_OR_LF);
    expect(headersOf(raw).get('content-type')![0]).toMatch(/^multipart\/mixed;/);
    const mail = await simpleParser(raw, { keepCidLinks: true });
    expect(mail.text).toContain('Welcome');
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    expect(mail.attachments.map((a) => [a.filename, a.contentType, a.cid ?? null, sha(a.content)])).toEqual([
      ['logo.png', 'image/png', 'logo', sha(png)],
      ['Rechnung März 2026.pdf', 'application/pdf', null, sha(pdf)],
    ]);
  });
});

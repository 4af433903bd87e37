import { createHash } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { outboundMessages } from '../db/schema/index.js';
import type { DeliveryEngine } from '../mta/delivery-engine.js';
import { publishSigningRecord, verifyDkim } from './helpers/dkim-check.js';
import { resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import type { TestDnsServer } from './helpers/dns-server.js';
import { newSender } from './helpers/sending.js';
import type { TestService } from './helpers/service.js';
import type { SmtpSink } from './helpers/smtp-sink.js';
import { one } from '../db/sql.js';

/**
 * Issue 34's whole path, from outside: an account writes a layout with its brand CSS and a template that names it
 * (html only), sends it with a PDF and an inline image referenced by `cid:`, and the message that reaches a real SMTP
 * sink has the CSS inlined into the elements, a text part generated from the html, a DKIM signature mailauth accepts,
 * and both attachments byte for byte; the log records the template's version and each attachment's name, type, size
 * and SHA-256, and the queued bytes are gone once delivered.
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

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** A 1x1 PNG and a small PDF-looking file: bytes that are not text, so any re-encoding would show. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');
const PDF = Buffer.concat([Buffer.from('%PDF-1.4\n'), Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 37) % 256))]);

const LAYOUT = {
  name: 'brand',
  kind: 'layout',
  html: '<html><head><style>.brand { color: #0a7d4f; font-weight: bold; } p { margin: 0 0 12px; }</style></head><body><div class="brand">{{ company }}</div>{{ content }}<p>Sent by {{ company }}</p></body></html>',
  variables: { company: { required: true, kind: 'text' } },
};

const TEMPLATE = {
  name: 'order-shipped',
  subject: 'Order {{ orderNumber }} has shipped',
  html: '<p>Hello {{ firstName }}, your order <strong>{{ orderNumber }}</strong> is on its way.</p><p><img src="cid:logo" alt="Logo"></p><p><a href="{{ trackUrl }}">Track it</a></p>',
  layout: 'brand',
  variables: {
    firstName: { required: false, kind: 'text' },
    orderNumber: { required: true, kind: 'text' },
    trackUrl: { required: true, kind: 'url' },
  },
};

describe('an own template with a layout and attachments, delivered', () => {
  it('arrives signed and styled, with a text part and both attachments intact; the log keeps the version and the records', async () => {
    const s = await newSender(service);
    await publishSigningRecord(service, dns, s);
    expect((await service.api('POST', '/templates', { key: s.key, body: LAYOUT })).status).toBe(201);
    const created = await service.api('POST', '/templates', { key: s.key, body: TEMPLATE });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    // A second version: what is sent is the current one.
    const replaced = await service.api('PUT', `/templates/${TEMPLATE.name}`, { key: s.key, body: { ...TEMPLATE, subject: 'Order {{ orderNumber }} shipped' } });
    expect(replaced.status, JSON.stringify(replaced.body)).toBe(200);
    expect(replaced.body.version).toBe(2);

    const res = await service.api('POST', '/emails', {
      key: s.key,
      body: {
        from: s.from,
        to: 'ada@example.net',
        template: { name: TEMPLATE.name, firstName: '<Ada>', orderNumber: 'A-1042', trackUrl: 'https://track.example.org/A-1042?x=1&y=2', company: 'Acme' },
        attachments: [
          { filename: 'Rechnung März 2026.pdf', content: PDF.toString('base64') },
          { filename: 'logo.png', content: PNG.toString('base64'), contentType: 'image/png', contentId: 'logo' },
        ],
      },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const id = res.body.id as string;
    await engine.runOnce();
    expect(sink.received).toHaveLength(1);
    const raw = sink.received[0]!.raw;

    const dkim = await verifyDkim(service, raw);
    expect(dkim.results.map((r: { status: { result: string } }) => r.status.result)).toEqual(['pass']);

    const mail = await simpleParser(raw);
    expect(mail.subject).toBe('Order A-1042 shipped');
    // The layout's CSS is inlined into the elements it styles; the value is escaped, the link kept as given.
    expect(mail.html).toMatch(/<div class="brand" style="color: #0a7d4f; font-weight: bold;?">Acme<\/div>/);
    expect(mail.html).toMatch(/<p style="margin: 0 0 12px;?">Hello &lt;Ada&gt;/);
    expect(mail.html).toContain('href="https://track.example.org/A-1042?x=1&amp;y=2"');
    // mailparser shows an inline part where the html references it: the cid: link resolved to the image's bytes.
    expect(mail.html).toContain(`src="data:image/png;base64,${PNG.toString('base64')}"`);
    // No text part was written: one was generated from the html.
    expect(mail.text).toContain('Hello <Ada>, your order A-1042 is on its way.');
    expect(mail.text).toContain('https://track.example.org/A-1042?x=1&y=2');
    expect(mail.text).not.toContain('<p');

    const byName = new Map(mail.attachments.map((a) => [a.filename, a]));
    const pdf = byName.get('Rechnung März 2026.pdf');
    const logo = byName.get('logo.png');
    expect(pdf?.contentType).toBe('application/pdf');
    expect(pdf?.contentDisposition).toBe('attachment');
    expect(sha256(pdf!.content)).toBe(sha256(PDF));
    expect(logo?.contentType).toBe('image/png');
    expect(logo?.contentId).toBe('<logo>');
    expect(logo?.contentDisposition).toBe('inline');
    expect(sha256(logo!.content)).toBe(sha256(PNG));

    const email = await service.api('GET', `/emails/${id}`, { key: s.key });
    expect(email.body).toMatchObject({
      template: TEMPLATE.name,
      templateVersion: 2,
      attachments: [
        { filename: 'Rechnung März 2026.pdf', contentType: 'application/pdf', size: PDF.length, sha256: sha256(PDF), contentId: null },
        { filename: 'logo.png', contentType: 'image/png', size: PNG.length, sha256: sha256(PNG), contentId: 'logo' },
      ],
    });
    // Delivered: the service no longer holds the content, attachments included.
    expect(await one(service.deps.db.select().from(outboundMessages).where(eq(outboundMessages.id, id)))).toBeUndefined();
  });
});

import { eq } from 'drizzle-orm';
import { simpleParser } from 'mailparser';
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { domainKeys } from '../db/schema/index.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { FAST_TIMEOUTS } from './helpers/delivery-rig.js';
import { newSender, type Sender } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * What a hostile or careless caller puts in a send cannot change what the recipient reads (found by an audit, each
 * watched failing): encoded words that hide an address in a display name, line breaks and controls beyond CR and LF,
 * link variables carrying more than a link, and a subject shaped like an encoded word. Capture mode: the exact signed
 * bytes, DKIM-verified, read back with mailparser.
 */

let service: TestService;
let s: Sender;

beforeAll(async () => {
  service = await startService({ DELIVERY_MODE: 'capture' });
  s = await newSender(service);
});

afterAll(async () => {
  await service?.close();
});

const TO = 'reader@example.net';

/** Sends, runs the engine once, and returns the captured bytes for TO, DKIM-verified, and mailparser's reading. */
async function sendAndRead(body: Record<string, unknown>) {
  const res = await service.api('POST', '/emails', { key: s.key, body: { to: TO, ...body } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const id = res.body.id as string;
  await createDeliveryEngine(service.deps, { timeouts: FAST_TIMEOUTS }).runOnce();
  const got = await fetch(`${service.base}/emails/${id}/message?recipient=${encodeURIComponent(TO)}`, { headers: { Authorization: `Bearer ${s.key}` } });
  expect(got.status).toBe(200);
  const raw = Buffer.from(await got.arrayBuffer());
  const key = (await one(service.deps.db.select().from(domainKeys).where(eq(domainKeys.accountId, s.account.id))))!;
  const verdict = await dkimVerify(raw, {
    resolver: async (name: string, type: string) => {
      if (type === 'TXT' && name === `${key.selector}._domainkey.${s.domain}`) return [[`v=DKIM1; h=sha256; k=rsa; p=${key.dkimPublicKey}`]];
      throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    },
  });
  expect(verdict.results[0]?.status.result).toBe('pass');
  const logged = (await service.api('GET', `/emails/${id}`, { key: s.key })).body;
  return { id, raw, mail: await simpleParser(raw), logged };
}

describe('From display name: an encoded word hiding an address (docs/api/behaviour.md, Sending, "from and replyTo")', () => {
  // docs/api/behaviour.md: "RFC 2047 encoded words in it ... are decoded first and the rules apply to the decoded text, so
  // `=?utf-8?b?...?=` hiding `support@paypal.com <security@paypal.com>` is refused".
  // The service's ENCODED_WORD regex ([^?\s]*) skipped a word with whitespace in its encoded text; mailparser
  // (libmime, [^?]*) decodes it.
  const hidden = [
    // B: base64 of "support@paypal.com <security@paypal.com>", one space before ?=
    '=?utf-8?b?c3VwcG9ydEBwYXlwYWwuY29tIDxzZWN1cml0eUBwYXlwYWwuY29tPg== ?=',
    // Q with a space in the encoded text
    '=?utf-8?q?support=40paypal.com =3Csecurity=40paypal.com=3E?=',
  ];
  for (const name of hidden) {
    it(`is refused: ${name}`, async () => {
      const res = await service.api('POST', '/emails', {
        key: s.key,
        body: { from: `${name} <${s.from}>`, to: TO, template: { name: 'welcome' }, sandbox: true },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(422);
    });
  }
});

describe('From display name: a line break (docs/api/behaviour.md: "A comma anywhere (even quoted), a second address or a line break is refused")', () => {
  it('refuses U+0085 NEXT LINE as it refuses U+2028/U+2029', async () => {
    const control = await service.api('POST', '/emails', {
      key: s.key,
      body: { from: `Bob\u2028Evil <${s.from}>`, to: TO, template: { name: 'welcome' }, sandbox: true },
    });
    expect(control.status).toBe(422);
    const res = await service.api('POST', '/emails', {
      key: s.key,
      body: { from: `Bob\u0085Evil <${s.from}>`, to: TO, template: { name: 'welcome' }, sandbox: true },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
  });

  it.each([
    ['a C1 control', 'Bob\u009bEvil'],
    ['a right-to-left override, which turns the address after it around', '\u202emoc.lapyap'],
    ['a bidi isolate', 'Bob\u2067Evil\u2069'],
  ])('refuses %s', async (_, name) => {
    const res = await service.api('POST', '/emails', {
      key: s.key,
      body: { from: `${name} <${s.from}>`, to: TO, template: { name: 'welcome' }, sandbox: true },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
  });

  it('still takes a name in any script, with emoji', async () => {
    const res = await service.api('POST', '/emails', {
      key: s.key,
      body: { from: `Zoë Ünal שלום 商店 🚀 <${s.from}>`, to: TO, template: { name: 'welcome' }, sandbox: true },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  });
});

describe('link variables (docs/api/behaviour.md: "link variables (`resetUrl`, `url`) must be http or https URLs")', () => {
  // new URL() strips tabs/newlines and percent-encodes spaces, so this parses; the raw value is rendered.
  const url = 'https://bank.example/signin \n\nYour account is locked. Call +1 555 0100 to unlock it.';

  it('refuses a link carrying whitespace and line breaks', async () => {
    const res = await service.api('POST', '/emails', { key: s.key, body: { from: s.from, to: TO, template: { name: 'magic-link', url }, sandbox: true } });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
  });

  it.each([
    ['a leading space', ' https://bank.example/signin'],
    ['no slashes', 'https:bank.example/signin'],
    ['a backslash', 'https:\\\\bank.example\\signin'],
    ['a tab', 'https://bank.example/sign\tin'],
  ])('refuses %s (the URL parser would repair it; the value as given is what is rendered)', async (_, resetUrl) => {
    const res = await service.api('POST', '/emails', {
      key: s.key,
      body: { from: s.from, to: TO, template: { name: 'password-reset', resetUrl }, sandbox: true },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
  });

  it('a plain link, with a query and a fragment, is sent as given', async () => {
    const resetUrl = 'https://bank.example/reset?token=a1b2_C3-d4%2F&x=1#now';
    const { mail } = await sendAndRead({ from: s.from, template: { name: 'password-reset', resetUrl } });
    expect(mail.text).toContain(resetUrl);
  });
});

describe('Subject: what the recipient reads is what was sent and logged', () => {
  it('a subject holding text shaped like an RFC 2047 encoded word reads back as given', async () => {
    const subject = 'Invoice 42 =?utf-8?q?PAID_-_no_action_needed?=';
    const { mail, logged } = await sendAndRead({ from: s.from, template: { name: 'notification', subject, body: 'b' } });
    expect(logged.subject).toBe(subject);
    // It read "Invoice 42 PAID - no action needed" (sent as plain ASCII, decoded by the reader).
    expect(mail.subject).toBe(logged.subject);
  });
});

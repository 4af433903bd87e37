import { generateKeyPairSync } from 'node:crypto';
import { dkimSign } from 'mailauth/lib/dkim/sign.js';
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { describe, expect, it } from 'vitest';
import { dkimSignature, prepareSigningKey } from '../mta/dkim.js';
import { signMessage } from '../mta/message.js';
import { buildMime } from '../mta/mime.js';

/**
 * The signing path (mta/dkim.ts): its own relaxed canonicalization with a key parsed once. mailauth's verifier must
 * pass what it signs, and it must agree with mailauth's own signer on what it signs: the same body hash and the same
 * header fields.
 */

const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const p = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
const key = prepareSigningKey('shop.example.com', 'ms2026', pem);
const signTime = new Date('2026-11-22T10:00:00Z');

const resolver = async (name: string, rrtype: string): Promise<string[][]> => {
  if (rrtype === 'TXT' && name === 'ms2026._domainkey.shop.example.com') return [`v=DKIM1; h=sha256; k=rsa; p=${p}`.match(/.{1,255}/g)!];
  throw Object.assign(new Error(`no ${rrtype} at ${name}`), { code: 'ENOTFOUND' });
};

const messages: [string, string][] = [
  [
    'plain text',
    [
      'From: Shop <billing@shop.example.com>',
      'To: a@example.net',
      'Subject: Receipt',
      'Date: Sun, 22 Nov 2026 10:00:00 +0000',
      'Message-ID: <1@mx.test>',
      'MIME-Version: 1.0',
      'Content-Type: text/plain; charset=utf-8',
      '',
      'Thanks for your order.',
      '',
    ].join('\r\n'),
  ],
  [
    'folded headers, trailing spaces and blank lines at the end of the body',
    [
      'From: "Shop  Billing" <billing@shop.example.com>',
      'To: a@example.net,',
      '\tb@example.net',
      'Subject:   A   long\r\n  subject ',
      'Date: Sun, 22 Nov 2026 10:00:00 +0000',
      'MIME-Version: 1.0',
      'Content-Type: text/plain',
      '',
      'Line  with   spaces   ',
      '',
      '',
      '',
    ].join('\r\n'),
  ],
  ['an empty body', ['From: billing@shop.example.com', 'To: a@example.net', 'Subject: Empty', '', ''].join('\r\n')],
  [
    'multipart/alternative',
    [
      'From: billing@shop.example.com',
      'To: a@example.net',
      'Subject: Both',
      'MIME-Version: 1.0',
      'Content-Type: multipart/alternative; boundary="b1"',
      '',
      '--b1',
      'Content-Type: text/plain',
      '',
      'Text',
      '--b1',
      'Content-Type: text/html',
      '',
      '<p>Html</p>',
      '--b1--',
      '',
    ].join('\r\n'),
  ],
];

describe('the DKIM signer', () => {
  for (const [name, raw] of messages) {
    it(`signs what mailauth's signer signs (body hash, header fields), and mailauth's verifier passes it: ${name}`, async () => {
      const ours = dkimSignature(Buffer.from(raw), key, signTime);
      const options = {
        signingDomain: key.domain,
        selector: key.selector,
        privateKey: pem,
        algorithm: 'rsa-sha256',
        canonicalization: 'relaxed/relaxed',
        signTime,
      };
      const theirs = await dkimSign(raw, { ...options, signatureData: [options] });
      expect(theirs.errors).toEqual([]);
      const tag = (header: string, name: string) => new RegExp(`[;\\s]${name}=([^;]*)`).exec(header.replace(/\r\n[ \t]/g, ' '))?.[1]?.replace(/\s+/g, '');
      expect(tag(ours, 'bh')).toBe(tag(theirs.signatures, 'bh'));
      expect(tag(ours, 'h')?.toLowerCase().split(':').sort()).toEqual(tag(theirs.signatures, 'h')?.toLowerCase().split(':').sort());
      expect(ours).toMatch(/^DKIM-Signature: v=1; a=rsa-sha256; c=relaxed\/relaxed;\s+d=shop\.example\.com;/);
      expect(ours).toContain(`t=${signTime.getTime() / 1000}`);
      // Folded: no line over 78 characters, every continuation starting with a space.
      for (const line of ours.split('\r\n').slice(0, -1)) expect(line.length).toBeLessThanOrEqual(78);

      const result = await dkimVerify(signMessage(Buffer.from(raw), key, signTime), { resolver, curTime: signTime });
      expect(result.results[0]?.status.result, JSON.stringify(result.results[0]?.status)).toBe('pass');
    });
  }

  it('signs a message built with inline parts and attachments, and mailauth verifies it; a changed attachment byte fails', async () => {
    const raw = buildMime({
      fromHeader: 'Shop <billing@shop.example.com>',
      replyToHeader: null,
      to: ['a@example.net'],
      subject: 'Your invoice',
      messageId: '<3@mx.test>',
      date: signTime.getTime(),
      text: 'Attached.',
      html: '<p>Attached.</p><img src="cid:logo">',
      attachments: [
        { filename: 'Rechnung März 2026.pdf', contentType: 'application/pdf', content: Buffer.alloc(3000, 9).toString('base64'), contentId: null },
        { filename: 'logo.png', contentType: 'image/png', content: Buffer.alloc(300, 4).toString('base64'), contentId: 'logo' },
      ],
    });
    const signed = signMessage(raw, key, signTime);
    expect((await dkimVerify(signed, { resolver, curTime: signTime })).results[0]?.status.result).toBe('pass');
    // One base64 character of the PDF changed (CQkJ is three 9 bytes): the body hash no longer matches.
    const altered = Buffer.from(signed.toString('latin1').replace('CQkJCQkJ', 'CQkJCQkK'), 'latin1');
    expect(altered.equals(signed)).toBe(false);
    expect((await dkimVerify(altered, { resolver, curTime: signTime })).results[0]?.status.comment).toMatch(/body hash/);
  });

  it('signs a body change into a failing verification', async () => {
    const signed = signMessage(Buffer.from(messages[0]![1]), key, signTime).toString().replace('Thanks', 'Thank');
    const result = await dkimVerify(signed, { resolver, curTime: signTime });
    expect(result.results[0]?.status.result).toBe('neutral');
    expect(result.results[0]?.status.comment).toMatch(/body hash/);
  });

  it('signs the header fields: a changed subject fails verification', async () => {
    const signed = signMessage(Buffer.from(messages[0]![1]), key, signTime).toString().replace('Subject: Receipt', 'Subject: Refund');
    const result = await dkimVerify(signed, { resolver, curTime: signTime });
    expect(result.results[0]?.status.result).toBe('fail');
  });

  it('signs each instance of a repeated field, the bottom one first, as a verifier takes them', async () => {
    const raw = ['From: billing@shop.example.com', 'To: a@example.net', 'Subject: One', 'Subject: Two', '', 'Body', ''].join('\r\n');
    const signed = signMessage(Buffer.from(raw), key, signTime);
    expect(signed.toString()).toMatch(/h=From:To:Subject:Subject;/);
    expect((await dkimVerify(signed, { resolver, curTime: signTime })).results[0]?.status.result).toBe('pass');
  });

  it('refuses a message without a header/body separator', () => {
    expect(() => dkimSignature(Buffer.from('From: a@b.example\r\nSubject: x'), key, signTime)).toThrow(/separator/);
  });
});

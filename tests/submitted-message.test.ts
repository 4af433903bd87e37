import { describe, expect, it } from 'vitest';
import addressparser from 'nodemailer/lib/addressparser';
import { ApiError } from '../server/shared/errors.js';
import { headerEnd, readSubmittedHeader, rfc5322Date } from '../server/core/submitted-message.js';

/**
 * The header of a message submitted over SMTP (docs/api/decisions.md section 10): what the rules read from it (the
 * From mailbox, the subject, the client's Message-ID) and what is rebuilt (Bcc removed, Message-ID and Date added
 * when missing), every other byte kept as sent.
 */

const ours = { id: '019cd79e-4600-7004-ac31-979840a7059a', mailHostname: 'mx.mailstead.test', now: Date.parse('2026-11-28T12:00:00Z') };
const read = (header: string) => readSubmittedHeader(Buffer.from(header, 'latin1'), ours);
const refusal = (header: string): string => {
  try {
    read(header);
  } catch (err) {
    if (err instanceof ApiError) return `${err.code}: ${err.message}`;
    throw err;
  }
  throw new Error('accepted');
};

describe('headerEnd', () => {
  it('is just past the blank line, -1 while none has come, 2 for a message that starts with one', () => {
    expect(headerEnd(Buffer.from('From: a@b.example\r\nSubject: x\r\n\r\nbody'))).toBe(33);
    expect(headerEnd(Buffer.from('From: a@b.example\r\nSubject: x\r\n'))).toBe(-1);
    expect(headerEnd(Buffer.from('\r\nbody'))).toBe(2);
  });
});

describe('what is rebuilt', () => {
  it('every Bcc field is removed, folded lines and any case included; the rest stays byte for byte, in order', () => {
    const r = read(
      'From: Shop <billing@shop.example>\r\nBcc: hidden@example.net,\r\n  other@example.net\r\nTo: ada@example.net\r\nBCC: x@example.net\r\n' +
        'Message-ID: <abc@client.example>\r\nDate: Fri, 27 Nov 2026 10:00:00 +0000\r\nX-Raw: caf\xc3\xa9\r\n\r\n',
    );
    expect(r.header.toString('latin1')).toBe(
      'From: Shop <billing@shop.example>\r\nTo: ada@example.net\r\nMessage-ID: <abc@client.example>\r\nDate: Fri, 27 Nov 2026 10:00:00 +0000\r\nX-Raw: caf\xc3\xa9\r\n\r\n',
    );
    expect(r.clientMessageId).toBe('<abc@client.example>');
    expect(r.messageId).toBe('<abc@client.example>');
  });

  it('a missing Message-ID is ours (<id@MAIL_HOSTNAME>) and a missing Date is now, both after the client fields', () => {
    const r = read('From: billing@shop.example\r\nSubject: Hi\r\n\r\n');
    expect(r.clientMessageId).toBeNull();
    expect(r.messageId).toBe(`<${ours.id}@mx.mailstead.test>`);
    expect(r.header.toString('latin1')).toBe(
      `From: billing@shop.example\r\nSubject: Hi\r\nMessage-ID: <${ours.id}@mx.mailstead.test>\r\nDate: ${rfc5322Date(ours.now)}\r\n\r\n`,
    );
    expect(rfc5322Date(ours.now)).toBe('Sat, 28 Nov 2026 12:00:00 +0000');
  });

  it('an empty Message-ID field is replaced by ours, not kept beside it', () => {
    const r = read('From: billing@shop.example\r\nMessage-ID: \r\nSubject: Hi\r\nDate: Fri, 27 Nov 2026 10:00:00 +0000\r\n\r\n');
    expect(r.clientMessageId).toBeNull();
    expect(r.header.toString('latin1')).toBe(
      `From: billing@shop.example\r\nSubject: Hi\r\nDate: Fri, 27 Nov 2026 10:00:00 +0000\r\nMessage-ID: <${ours.id}@mx.mailstead.test>\r\n\r\n`,
    );
  });

  it('a header without its blank line (a message with no body) gets one', () => {
    const r = read('From: billing@shop.example\r\nDate: Fri, 27 Nov 2026 10:00:00 +0000\r\nMessage-ID: <a@b>\r\n');
    expect(r.header.toString('latin1')).toBe('From: billing@shop.example\r\nDate: Fri, 27 Nov 2026 10:00:00 +0000\r\nMessage-ID: <a@b>\r\n\r\n');
  });
});

describe('what the rules read', () => {
  it('the From mailbox: a quoted name with a comma, an RFC 2047 name, a bare address; the domain lower-cased and in punycode', () => {
    expect(read('From: "Doe, Jane" <jane@Shop.Example>\r\n\r\n').from).toEqual({ address: 'jane@shop.example', domain: 'shop.example' });
    expect(read('From: =?UTF-8?B?w4lsaXNl?= <elise@shop.example>\r\n\r\n').from.domain).toBe('shop.example');
    expect(read('From: billing@b\xc3\xbccher.example\r\n\r\n').from).toEqual({ address: 'billing@xn--bcher-kva.example', domain: 'xn--bcher-kva.example' });
  });

  it('the subject, unfolded and its encoded words decoded; empty when there is none', () => {
    expect(read('From: a@shop.example\r\nSubject: =?UTF-8?Q?H=C3=A9llo?=\r\n =?UTF-8?Q?_w=C3=B6rld?=\r\n\r\n').subject).toBe('Héllo wörld');
    expect(read('From: a@shop.example\r\nSubject: caf\xc3\xa9 (8-bit, RFC 6532)\r\n\r\n').subject).toBe('café (8-bit, RFC 6532)');
    expect(read('From: a@shop.example\r\n\r\n').subject).toBe('');
  });

  it('a From that is missing, repeated, a list, a group, or no address at all is refused', () => {
    expect(refusal('To: a@b.example\r\n\r\n')).toBe('invalid_request: From: the message has no From header.');
    expect(refusal('From: a@shop.example\r\nFrom: b@shop.example\r\n\r\n')).toBe('invalid_request: From: the message has more than one From header.');
    expect(refusal('From: a@shop.example, b@shop.example\r\n\r\n')).toBe('invalid_request: From: must be exactly one mailbox.');
    expect(refusal('From: Team: a@shop.example, b@shop.example;\r\n\r\n')).toBe('invalid_request: From: must be exactly one mailbox.');
    expect(refusal('From: Just A Name\r\n\r\n')).toMatch(/^invalid_request: From: /);
  });
});

describe('reading the header costs what it must', () => {
  it('a header with nothing to remove or add goes out as the very bytes that came, folding and 8-bit text included', () => {
    const sent = Buffer.from(
      'From: Shop <billing@shop.example>\r\nTo: ada@example.net,\r\n  bob@example.net\r\nSubject: caf\xc3\xa9\r\n' +
        'Message-ID: <abc@client.example>\r\nDate: Fri, 27 Nov 2026 10:00:00 +0000\r\n\r\n',
      'latin1',
    );
    const r = readSubmittedHeader(sent, ours);
    expect(r.header.equals(sent)).toBe(true);
    expect(r.from).toEqual({ address: 'billing@shop.example', domain: 'shop.example' });
  });

  it('a From read without the full address parser reads as that parser reads it', () => {
    const froms = [
      'billing@shop.example',
      'Shop <billing@shop.example>',
      'Shop<billing@Shop.Example>',
      '<billing@shop.example>',
      '=?UTF-8?B?w4lsaXNl?= <elise@shop.example>',
      'Ada Lovelace Jr. <ada.lovelace+news@shop.example>',
      '"Doe, Jane" <jane@shop.example>',
      'jane@shop.example (Jane Doe)',
    ];
    for (const from of froms) {
      const [mailbox] = addressparser(from, { flatten: true });
      const address = mailbox!.address.toLowerCase();
      expect(read(`From: ${from}\r\n\r\n`).from, from).toEqual({ address, domain: address.split('@')[1] });
    }
  });
});

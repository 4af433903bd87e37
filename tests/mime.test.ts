import { simpleParser } from 'mailparser';
import { describe, expect, it } from 'vitest';
import { buildMime, foldHeader, quotedPrintable, subjectHeader, toCrlf } from '../mta/mime.js';

/**
 * The outbound MIME writer (mta/mime.ts): quoted-printable as RFC 2045 section 6.7 has it, checked against a reader
 * (mailparser, which decodes with libqp), and a whole message as a reader sees it.
 */

/** What a quoted-printable reader makes of `encoded`: soft breaks removed, =XX decoded. */
function decodeQp(encoded: string): string {
  const bytes = encoded.replace(/=\r\n/g, '').replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
  return Buffer.from(bytes, 'latin1').toString('utf8');
}

const samples: [string, string][] = [
  ['plain ASCII', 'Thanks for your order.'],
  ['an equals sign and a long line', `a=b ${'x'.repeat(200)} = ${'y=z '.repeat(40)}`],
  ['spaces and tabs that end lines, and the text', 'trailing space \r\nand tab\t\r\nin the middle  stays\r\nlast line ends in a space '],
  ['UTF-8 in long lines', `Grüße aus Köln — ${'日本語のテキスト '.repeat(20)} ✓`],
  ['control characters and blank lines', 'bell\x07 and nul\x00\r\n\r\n\r\nend'],
  ['exactly 75 and 76 characters', `${'a'.repeat(75)}\r\n${'b'.repeat(76)}\r\n${'c'.repeat(74)}=`],
  ['a leading dot and From', '.hidden\r\nFrom the start\r\n..two'],
];

describe('quotedPrintable', () => {
  for (const [name, text] of samples) {
    it(`round-trips and keeps every line within 76 characters: ${name}`, () => {
      const encoded = quotedPrintable(text).toString('latin1');
      expect(decodeQp(encoded)).toBe(text);
      for (const line of encoded.split('\r\n')) {
        expect(line.length, line).toBeLessThanOrEqual(76);
        // Only printable ASCII, and no line ends in whitespace (it would not survive transit).
        expect(line).toMatch(/^[\x21-\x7e \t]*$/);
        expect(line).not.toMatch(/[ \t]$/);
        // `=` only as an escape or a soft break.
        expect(line.replace(/=[0-9A-F]{2}/g, '')).toMatch(/^[^=]*=?$/);
      }
    });
  }

  it('escapes = and bytes outside printable ASCII, and never splits an escape across a soft break', () => {
    const encoded = quotedPrintable(`${'é'.repeat(60)}=`).toString('latin1');
    expect(encoded.startsWith('=C3=A9')).toBe(true);
    expect(encoded.endsWith('=3D')).toBe(true);
    for (const line of encoded.split('=\r\n')) expect(line).toMatch(/^(=[0-9A-F]{2})+$/);
  });
});

describe('headers', () => {
  it('folds long header values at spaces within 78 characters', () => {
    const folded = foldHeader('To', Array.from({ length: 12 }, (_, i) => `customer${i}@example.net`).join(', '));
    const lines = folded.split('\r\n').slice(0, -1);
    expect(lines.length).toBeGreaterThan(1);
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(78);
    expect(lines.slice(1).every((l) => l.startsWith(' '))).toBe(true);
  });

  it('keeps an ASCII subject as it is and encodes any other as RFC 2047 words, one line break never starting a header', () => {
    expect(subjectHeader('Order 7 shipped')).toBe('Subject: Order 7 shipped\r\n');
    expect(subjectHeader('Status\nupdate')).toBe('Subject: Status update\r\n');
    expect(subjectHeader('Grüße')).toMatch(/^Subject: =\?UTF-8\?B\?[A-Za-z0-9+/=]+\?=\r\n$/);
    // A long non-ASCII subject and display name: every line within RFC 2047's 76, the first one too.
    for (const line of subjectHeader(`Votre reçu n° ${'é'.repeat(60)}`)
      .split('\r\n')
      .slice(0, -1))
      expect(line.length, line).toBeLessThanOrEqual(76);
  });

  it('encodes a subject with a word too long to fold, so no line comes near the 998 of RFC 5322, and it reads back whole', async () => {
    // The longest subjects a send takes (templates.ts: 998 characters for a subject's variable), without spaces.
    for (const subject of ['x'.repeat(998), `Receipt ${'7'.repeat(990)}`, `Your sign-in link ${'a'.repeat(80)} expires`]) {
      const header = subjectHeader(subject);
      // RFC 2047 section 2: a line that holds an encoded word is at most 76 characters, the first one too.
      for (const line of header.split('\r\n').slice(0, -1)) expect(line.length).toBeLessThanOrEqual(76);
      const parsed = await simpleParser(`${header}From: a@example.org\r\n\r\nbody\r\n`);
      expect(parsed.subject).toBe(subject);
    }
    // Words that fold stay as they are.
    expect(subjectHeader(`Order ${'7'.repeat(76)} shipped`)).toBe(`Subject: Order\r\n ${'7'.repeat(76)}\r\n shipped\r\n`);
  });
});

describe('buildMime', () => {
  const base = {
    fromHeader: '"Shop" <billing@shop.example>',
    replyToHeader: null,
    to: ['a@example.net', 'b@example.net'],
    messageId: '<1@mx.test>',
    date: Date.UTC(2026, 10, 22, 10, 0, 0),
  };

  it('writes a message a reader parses back: headers, text and html, CRLF throughout', async () => {
    const text = `Hello Zoë,\nyour order ${'is on its way '.repeat(10)}\n.\nBye `;
    const html = `<p>Hello Zoë</p>\n<p style="color:red">${'x'.repeat(300)}</p>`;
    const raw = buildMime({ ...base, subject: 'Café order', text, html });
    const wire = raw.toString('latin1');
    expect(wire).not.toMatch(/[^\r]\n|\r(?!\n)/);
    for (const line of wire.split('\r\n')) expect(line.length).toBeLessThanOrEqual(78);
    expect(wire.slice(0, wire.indexOf('\r\n\r\n'))).toMatch(/^[\x20-\x7e\r\n]*$/);

    const mail = await simpleParser(raw);
    expect(mail.subject).toBe('Café order');
    expect(mail.messageId).toBe('<1@mx.test>');
    expect(mail.date?.toISOString()).toBe('2026-11-22T10:00:00.000Z');
    expect(mail.from?.value).toEqual([{ name: 'Shop', address: 'billing@shop.example' }]);
    expect((Array.isArray(mail.to) ? mail.to[0] : mail.to)?.value.map((v) => v.address)).toEqual(base.to);
    expect(mail.text?.replace(/\n$/, '')).toBe(toCrlf(text).replace(/\r\n/g, '\n'));
    expect(mail.html).toBe(toCrlf(html).replace(/\r\n/g, '\n'));
    expect(mail.headers.get('mime-version')).toBe('1.0');
  });

  it('sends short printable ASCII as 7bit and anything else as quoted-printable, text then html', () => {
    const wire = buildMime({ ...base, subject: 'Hi', text: 'Short and plain.', html: '<p>Grüße</p>' }).toString('latin1');
    const boundary = /boundary="([^"]+)"/.exec(wire)![1]!;
    const parts = wire.split(`--${boundary}`).slice(1, -1);
    expect(parts).toHaveLength(2);
    expect(parts[0]).toContain('Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 7bit\r\n\r\nShort and plain.\r\n');
    expect(parts[1]).toContain('Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n<p>Gr=C3=BC=C3=9Fe</p>\r\n');
    expect(wire.endsWith(`--${boundary}--\r\n`)).toBe(true);
  });

  it('gives every message its own boundary', () => {
    const boundaries = new Set(
      Array.from({ length: 50 }, () => /boundary="([^"]+)"/.exec(buildMime({ ...base, subject: 's', text: 't', html: 'h' }).toString())![1]),
    );
    expect(boundaries.size).toBe(50);
  });
});

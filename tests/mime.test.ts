import { createHash, randomBytes } from 'node:crypto';
import { simpleParser } from 'mailparser';
import { describe, expect, it } from 'vitest';
import type { OutboundAttachment } from '../db/schema/index.js';
import { buildMime, filenameParams, foldHeader, nameParam, quotedPrintable, subjectHeader, toCrlf } from '../mta/mime.js';

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

  it('with no html (an own template written as text alone): the text part alone, no empty alternative', async () => {
    const raw = buildMime({ ...base, subject: 'Plain', text: 'Only words.\nTwo lines.', html: '' });
    const wire = raw.toString('latin1');
    expect(wire).not.toContain('multipart/');
    expect(wire).toContain('MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 7bit\r\n\r\nOnly words.\r\nTwo lines.');
    const mail = await simpleParser(raw);
    expect(mail.text).toBe('Only words.\nTwo lines.');
    expect(mail.html).toBe(false);
    // With an attachment, the text part and the file in multipart/mixed.
    const withFile = await simpleParser(
      buildMime({
        ...base,
        subject: 'Plain',
        text: 'See the file.',
        html: '',
        attachments: [{ filename: 'a.txt', contentType: 'text/plain', content: 'aGk=', contentId: null }],
      }),
    );
    expect(withFile.text).toBe('See the file.');
    expect(withFile.html).toBe(false);
    expect(withFile.attachments.map((a) => [a.filename, a.content.toString()])).toEqual([['a.txt', 'hi']]);
  });

  it('gives every message its own boundary', () => {
    const boundaries = new Set(
      Array.from({ length: 50 }, () => /boundary="([^"]+)"/.exec(buildMime({ ...base, subject: 's', text: 't', html: 'h' }).toString())![1]),
    );
    expect(boundaries.size).toBe(50);
  });
});

describe('buildMime with attachments', () => {
  const base = {
    fromHeader: '"Shop" <billing@shop.example>',
    replyToHeader: null,
    to: ['a@example.net'],
    subject: 'Your invoice',
    messageId: '<2@mx.test>',
    date: Date.UTC(2026, 10, 22, 10, 0, 0),
    text: 'Your invoice is attached.\nGrüße',
    html: '<p>Your invoice is attached.</p><img src="cid:logo" alt="Shop"><p>Grüße</p>',
  };
  const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
  const attachment = (filename: string, contentType: string, bytes: Buffer, contentId: string | null = null): OutboundAttachment => ({
    filename,
    contentType,
    content: bytes.toString('base64'),
    contentId,
  });
  const pdf = randomBytes(5000);
  const png = randomBytes(1200);
  const longName = `${'Quarterly statement '.repeat(10).slice(0, 196)}.pdf`;
  const longUnicode = `${'Überweisungsbestätigung für März '.repeat(6)}.pdf`;
  const files: OutboundAttachment[] = [
    attachment('Rechnung März 2026.pdf', 'application/pdf', pdf),
    attachment(longName, 'application/pdf', Buffer.from('a long name')),
    attachment(longUnicode, 'application/pdf', Buffer.from('a long non-ASCII name')),
    attachment('say "hi"; now.txt', 'text/plain', Buffer.from('quoted')),
    attachment('report.docx', 'application/vnd.openxmlformats-officedocument.wordprocessingml.document', Buffer.from('PK')),
  ];
  const inline = [attachment('logo.png', 'image/png', png, 'logo'), attachment('ロゴ.gif', 'image/gif', Buffer.from('GIF89a'), 'banner@shop.example')];

  /** The MIME tree by its content types: `mixed[related[alternative[text/plain,text/html],image/png],application/pdf]`. */
  function shape(entity: string): string {
    const head = entity.slice(0, entity.indexOf('\r\n\r\n')).replace(/\r\n[ \t]+/g, ' ');
    const type = /^content-type:\s*([^;\r\n]+)/im.exec(head)![1]!.trim().toLowerCase();
    if (!type.startsWith('multipart/')) return type;
    const boundary = /boundary="([^"]+)"/i.exec(head)![1]!;
    // Each delimiter is CRLF `--boundary`; the first follows the blank line after the header, the last ends `--`.
    const inner = entity
      .split(`\r\n--${boundary}`)
      .slice(1, -1)
      .map((p) => p.slice(2));
    return `${type.slice('multipart/'.length)}[${inner.map(shape).join(',')}]`;
  }

  function checkWire(raw: Buffer): string {
    const wire = raw.toString('latin1');
    expect(wire).not.toMatch(/[^\r]\n|\r(?!\n)/);
    expect(wire).toMatch(/^[\x20-\x7e\r\n]*$/);
    for (const line of wire.split('\r\n')) expect(line.length, line).toBeLessThanOrEqual(78);
    const boundaries = [...wire.matchAll(/boundary="([^"]+)"/g)].map((m) => m[1]!);
    expect(new Set(boundaries).size).toBe(boundaries.length);
    for (const a of boundaries) for (const b of boundaries) if (a !== b) expect(b.startsWith(a)).toBe(false);
    return wire;
  }

  it('without attachments (none, null or an empty list) writes the same multipart/alternative as before', () => {
    const norm = (b: Buffer) => b.toString('latin1').replace(/--_ms_[0-9a-f]{24}/g, 'BOUNDARY');
    const without = norm(buildMime(base));
    expect(norm(buildMime({ ...base, attachments: null }))).toBe(without);
    expect(norm(buildMime({ ...base, attachments: [] }))).toBe(without);
    expect(shape(buildMime(base).toString('latin1'))).toBe('alternative[text/plain,text/html]');
  });

  it('with inline parts only: multipart/related of the alternative and the parts, each with its Content-ID', async () => {
    const raw = buildMime({ ...base, attachments: inline });
    const wire = checkWire(raw);
    expect(shape(wire)).toBe('related[alternative[text/plain,text/html],image/png,image/gif]');
    expect(wire).toMatch(/^Content-Type: multipart\/related;\r\n type="multipart\/alternative";\r\n boundary=/m);
    expect(wire).toContain('Content-ID: <logo>\r\n');
    expect(wire).toContain('Content-Disposition: inline;\r\n filename="logo.png"\r\n');

    const mail = await simpleParser(raw, { keepCidLinks: true });
    expect(mail.text).toContain('Grüße');
    expect(mail.html).toContain('<p>Grüße</p>');
    expect(mail.attachments.map((a) => [a.filename, a.contentType, a.contentDisposition, a.cid, a.related, sha(a.content)])).toEqual([
      ['logo.png', 'image/png', 'inline', 'logo', true, sha(png)],
      ['ロゴ.gif', 'image/gif', 'inline', 'banner@shop.example', true, sha(Buffer.from('GIF89a'))],
    ]);
  });

  it('with attachments only: multipart/mixed of the alternative and the attachments, RFC 2231 names read back whole', async () => {
    const raw = buildMime({ ...base, attachments: files });
    const wire = checkWire(raw);
    expect(shape(wire)).toBe(
      'mixed[alternative[text/plain,text/html],application/pdf,application/pdf,application/pdf,text/plain,application/vnd.openxmlformats-officedocument.wordprocessingml.document]',
    );
    expect(wire).toContain("filename*=utf-8''Rechnung%20M%C3%A4rz%202026.pdf\r\n");
    expect(wire).toMatch(/filename\*0\*=utf-8''Quarterly%20statement/);
    expect(wire).toMatch(/filename\*1\*=/);
    expect(wire).not.toContain('Content-ID');

    const mail = await simpleParser(raw, { keepCidLinks: true });
    expect(mail.text).toBe('Your invoice is attached.\nGrüße');
    expect(mail.html).toBe(base.html);
    expect(mail.attachments.map((a) => [a.filename, a.contentType, a.contentDisposition, a.related ?? false])).toEqual(
      files.map((f) => [f.filename, f.contentType, 'attachment', false]),
    );
    expect(mail.attachments.map((a) => sha(a.content))).toEqual(files.map((f) => sha(Buffer.from(f.content, 'base64'))));
    expect(mail.attachments[0]!.size).toBe(5000);
  });

  it('with both: multipart/mixed of the related (alternative and inline parts) and the attachments', async () => {
    const raw = buildMime({ ...base, attachments: [files[0]!, inline[0]!, files[1]!] });
    const wire = checkWire(raw);
    expect(shape(wire)).toBe('mixed[related[alternative[text/plain,text/html],image/png],application/pdf,application/pdf]');
    const mail = await simpleParser(raw, { keepCidLinks: true });
    expect(mail.html).toBe(base.html);
    expect(mail.attachments.map((a) => [a.filename, a.cid ?? null, sha(a.content)])).toEqual([
      ['logo.png', 'logo', sha(png)],
      ['Rechnung März 2026.pdf', null, sha(pdf)],
      [longName, null, sha(Buffer.from('a long name'))],
    ]);
  });

  it('writes the content as base64 in lines of 76', () => {
    const wire = buildMime({ ...base, attachments: [files[0]!] }).toString('latin1');
    const body = wire.slice(wire.indexOf('Content-Transfer-Encoding: base64'));
    const lines = body.slice(body.indexOf('\r\n\r\n') + 4).split('\r\n');
    const encoded = lines.slice(
      0,
      lines.findIndex((l) => l.startsWith('--')),
    );
    expect(encoded.slice(0, -1).every((l) => l.length === 76)).toBe(true);
    expect(Buffer.from(encoded.join(''), 'base64').equals(pdf)).toBe(true);
  });

  it('names a file for older clients too: a quoted name when it fits, else RFC 2047 words inside the quotes', async () => {
    expect(nameParam('invoice.pdf')).toBe('name="invoice.pdf"');
    const encoded = nameParam('Rechnung März 2026.pdf');
    expect(encoded).toMatch(/^name="=\?UTF-8\?B\?[^"]+\?="$/);
    const long = nameParam(longName);
    for (const line of ` ${long}`.split('\r\n')) expect(line.length).toBeLessThanOrEqual(78);
    // A reader that knows only `name` reads the whole name back.
    const onlyName = `Content-Type: application/pdf;\r\n ${long}\r\nContent-Transfer-Encoding: base64\r\n\r\nQUJD\r\n`;
    expect((await simpleParser(`From: a@b.example\r\nMIME-Version: 1.0\r\n${onlyName}`)).attachments[0]?.filename).toBe(longName);
  });

  it('never quotes a name holding =? as it is (a reader would decode it as RFC 2047 words)', () => {
    // The API refuses such a name (server/core/attachments.ts): readers decode the words even in an RFC 2231 value,
    // so no encoding brings it through. The writer still never puts one in a quoted-string as it is.
    const name = 'x.pdf=?UTF-8?B?LmV4ZQ==?=';
    expect(filenameParams(name)).toEqual(["filename*=utf-8''x.pdf%3D%3FUTF-8%3FB%3FLmV4ZQ%3D%3D%3F%3D"]);
    expect(nameParam(name)).toMatch(/^name="=\?UTF-8\?B\?[A-Za-z0-9+/=]+\?="$/);
  });

  it('continues a long name as filename*0*, filename*1*, ... each line within 78 and each segment whole characters', () => {
    for (const name of [longName, longUnicode, '😀'.repeat(255)]) {
      const params = filenameParams(name);
      expect(params.length).toBeGreaterThan(1);
      params.forEach((p, i) => {
        expect(p.startsWith(`filename*${i}*=`)).toBe(true);
        expect(1 + p.length + 1).toBeLessThanOrEqual(78);
      });
      const joined = params.map((p) => p.slice(p.indexOf('=') + 1)).join('');
      expect(decodeURIComponent(joined.replace(/^utf-8''/, ''))).toBe(name);
      for (const p of params) expect(() => decodeURIComponent(p.slice(p.indexOf('=') + 1).replace(/^utf-8''/, ''))).not.toThrow();
    }
  });
});

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { parseInput } from '../server/api/http/validate.js';
import { CONTENT_TYPES, REFUSED_EXTENSIONS, contentTypeFor, extensionOf } from '../server/core/attachment-types.js';
import {
  type Attachment,
  MAX_ATTACHMENTS,
  attachmentRecords,
  attachmentsInput,
  base64Problem,
  checkInlineReferences,
  toOutbound,
} from '../server/core/attachments.js';
import { ApiError } from '../server/shared/errors.js';

/**
 * The `attachments` field of POST /emails (server/core/attachments.ts): each refusal as parseInput answers it (422
 * invalid_request naming the field), each accepted shape, the content types derived from the extension, the refused
 * extensions however they are disguised, strict base64, the log's records and the inline-reference rule.
 */

/** The field inside a send body, validated as the route validates it. */
const body = z.strictObject({ attachments: attachmentsInput });
const parse = (attachments: unknown): Attachment[] => parseInput(body, { attachments }).attachments;

function refusal(attachments: unknown): { status: number; code: string; message: string } {
  try {
    parse(attachments);
  } catch (err) {
    if (err instanceof ApiError) return { status: err.status, code: err.code, message: err.message };
    throw err;
  }
  throw new Error('accepted');
}

const PDF = Buffer.from('%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n', 'latin1');
const b64 = (b: Buffer | string) => Buffer.from(b).toString('base64');
const file = (extra: Record<string, unknown> = {}) => ({ filename: 'invoice.pdf', content: b64(PDF), ...extra });

const refusals: [string, unknown, string][] = [
  ['not an array', 'invoice.pdf', 'attachments: must be an array'],
  ['more than ten', Array.from({ length: MAX_ATTACHMENTS + 1 }, () => file()), 'attachments: must have at most 10 entries'],
  ['an entry that is not an object', [file(), 'x'], 'attachments.1: must be an object'],
  ['an unknown field', [file({ name: 'x' })], 'attachments.0.name: is not a known field'],
  ['no filename', [{ content: b64(PDF) }], 'attachments.0.filename: is required'],
  ['no content', [{ filename: 'a.pdf' }], 'attachments.0.content: is required'],
  ['a filename that is not a string', [file({ filename: 7 })], 'attachments.0.filename: must be a string'],
  ['an empty filename', [file({ filename: '' })], 'attachments.0.filename: must be 1 to 255 characters'],
  ['a filename of 256 characters', [file({ filename: `${'a'.repeat(252)}.pdf` })], 'attachments.0.filename: must be 1 to 255 characters'],
  ['a slash', [file({ filename: 'a/b.pdf' })], 'attachments.0.filename: must not contain / or \\'],
  ['a backslash', [file({ filename: '..\\b.pdf' })], 'attachments.0.filename: must not contain / or \\'],
  ['a line break', [file({ filename: 'a\r\nX-Injected: yes.pdf' })], 'attachments.0.filename: must not contain control characters'],
  ['a tab', [file({ filename: 'a\tb.pdf' })], 'attachments.0.filename: must not contain control characters'],
  ['DEL', [file({ filename: 'a\x7fb.pdf' })], 'attachments.0.filename: must not contain control characters'],
  ['a C1 control', [file({ filename: 'a\x85b.pdf' })], 'attachments.0.filename: must not contain control characters'],
  ['right-to-left override', [file({ filename: 'invoice\u202Efdp.exe' })], 'attachments.0.filename: must not contain bidirectional control characters'],
  ['right-to-left isolate', [file({ filename: 'a\u2067b.pdf' })], 'attachments.0.filename: must not contain bidirectional control characters'],
  ['a right-to-left mark', [file({ filename: 'a\u200Fb.pdf' })], 'attachments.0.filename: must not contain bidirectional control characters'],
  ['an Arabic letter mark', [file({ filename: 'a\u061Cb.pdf' })], 'attachments.0.filename: must not contain bidirectional control characters'],
  [
    'an RFC 2047 word hiding a refused type',
    [file({ filename: 'x.pdf=?UTF-8?B?LmV4ZQ==?=' })],
    'attachments.0.filename: must not contain =? (mail clients would read it as an RFC 2047 encoded word)',
  ],
  ['a blank filename', [file({ filename: '   ' })], 'attachments.0.filename: must not be blank'],
  ['empty content', [file({ content: '' })], 'attachments.0.content: must not be empty'],
  ['content that is not a string', [file({ content: [1, 2] })], 'attachments.0.content: must be a string'],
  [
    'a content type without a subtype',
    [file({ contentType: 'pdf' })],
    'attachments.0.contentType: must be a MIME type such as application/pdf (type/subtype, without parameters)',
  ],
  [
    'a content type with parameters',
    [file({ contentType: 'text/plain; charset=utf-8' })],
    'attachments.0.contentType: must be a MIME type such as application/pdf (type/subtype, without parameters)',
  ],
  [
    'a content type with a line break',
    [file({ contentType: 'text/plain\r\nBcc: x@y.z' })],
    'attachments.0.contentType: must be a MIME type such as application/pdf (type/subtype, without parameters)',
  ],
  ['a multipart content type', [file({ contentType: 'multipart/mixed' })], 'attachments.0.contentType: must not be a multipart or message type'],
  ['a message content type', [file({ contentType: 'message/rfc822' })], 'attachments.0.contentType: must not be a multipart or message type'],
  ['an empty content id', [file({ contentId: '' })], 'attachments.0.contentId: must be 1 to 255 characters'],
  ['a content id of 256 characters', [file({ contentId: 'a'.repeat(256) })], 'attachments.0.contentId: must be 1 to 255 characters'],
  ['a content id with cid:', [file({ contentId: 'cid:logo' })], 'attachments.0.contentId: must be the id alone, without cid: or angle brackets'],
  ['a content id in angle brackets', [file({ contentId: '<logo>' })], 'attachments.0.contentId: must be the id alone, without cid: or angle brackets'],
  ['a content id with a space', [file({ contentId: 'my logo' })], 'attachments.0.contentId: must be letters, digits and . _ - + = @ $ ! ~ * only'],
  ['a content id with >', [file({ contentId: 'a>b' })], 'attachments.0.contentId: must be letters, digits and . _ - + = @ $ ! ~ * only'],
  ['a content id with a line break', [file({ contentId: 'a\r\nb' })], 'attachments.0.contentId: must be letters, digits and . _ - + = @ $ ! ~ * only'],
  ['a content id with %', [file({ contentId: 'a%20b' })], 'attachments.0.contentId: must be letters, digits and . _ - + = @ $ ! ~ * only'],
  [
    'a content id twice (case aside), named at the second',
    [file({ contentId: 'logo' }), file(), file({ contentId: 'LOGO' })],
    'attachments.2.contentId: must be unique within the message',
  ],
  [
    'the third of three refused, by its index',
    [file(), file(), file({ filename: 'setup.exe' })],
    'attachments.2.filename: is a file type mailbox providers refuse (.exe, refused by Gmail and Outlook)',
  ],
];

describe('the attachments field: refusals', () => {
  for (const [name, value, message] of refusals) {
    it(`422 invalid_request: ${name}`, () => {
      expect(refusal(value)).toEqual({ status: 422, code: 'invalid_request', message });
    });
  }

  it('counts the entries before reading any: eleven with a bad first one is refused for the count', () => {
    const list = [file({ content: 'not base64' }), ...Array.from({ length: MAX_ATTACHMENTS }, () => file())];
    expect(refusal(list).message).toBe('attachments: must have at most 10 entries');
  });

  it('is described entry by entry in JSON Schema as a client sends it (the OpenAPI document is written from it)', () => {
    const schema = z.toJSONSchema(attachmentsInput, { target: 'draft-2020-12', io: 'input' }) as { items: { properties: Record<string, unknown> } };
    expect(schema).toMatchObject({ type: 'array', maxItems: 10, items: { type: 'object', required: ['filename', 'content'], additionalProperties: false } });
    expect(Object.keys(schema.items.properties)).toEqual(['filename', 'content', 'contentType', 'contentId']);
  });

  it('never echoes the content it refuses', () => {
    const content = 'c2VjcmV0IGludm9pY2U'; // unpadded
    const { message } = refusal([file({ content })]);
    expect(message).toBe('attachments.0.content: must be standard base64 with its = padding');
    expect(message).not.toContain(content);
  });
});

describe('base64', () => {
  const bad: [string, string, string][] = [
    ['no padding', 'QQ', 'must be standard base64 with its = padding'],
    ['short padding', 'QQ=', 'must be standard base64 with its = padding'],
    ['too much padding', 'Q===', 'must be standard base64 with its = padding'],
    ['padding in the middle', 'QQ==QUJD', 'must be standard base64 with its = padding'],
    ['unused bits set after ==', 'QR==', 'must be standard base64 with its = padding'],
    ['unused bits set after =', 'QUJ=', 'must be standard base64 with its = padding'],
    ['a line break', 'QUJD\r\nREVG', 'must be standard base64 without line breaks or spaces'],
    ['a space', 'QUJD REVG', 'must be standard base64 without line breaks or spaces'],
    ['URL-safe -', 'ab-_', 'must be standard base64 (+ and /), not the URL-safe alphabet'],
    ['a data URL', 'data:application/pdf;base64,QUJD', 'must be standard base64 with its = padding'],
    ['not base64 at all', 'é', 'must be standard base64 with its = padding'],
    ['empty', '', 'must not be empty'],
  ];
  for (const [name, text, problem] of bad) {
    it(`refuses ${name}`, () => expect(base64Problem(text)).toBe(problem));
  }

  it('accepts each length of final quad, and every byte value', () => {
    for (const bytes of [Buffer.from('A'), Buffer.from('AB'), Buffer.from('ABC'), Buffer.from(Array.from({ length: 256 }, (_, i) => i))]) {
      const text = bytes.toString('base64');
      expect(base64Problem(text), text).toBeNull();
      const [a] = parse([{ filename: 'x.bin', content: text }]);
      expect(a!.content.equals(bytes)).toBe(true);
    }
  });

  it('checks 700 KB of base64 in one pass without running out of stack', () => {
    const big = Buffer.alloc(525_000, 0xa5).toString('base64');
    const started = performance.now();
    expect(base64Problem(big)).toBeNull();
    expect(base64Problem(`${big.slice(0, -4)}QR==`)).toBe('must be standard base64 with its = padding');
    expect(performance.now() - started).toBeLessThan(1000);
  });
});

describe('the attachments field: accepted', () => {
  it('decodes the content once, keeps the name as given, and an absent contentId is null', () => {
    const [a] = parse([file({ filename: 'Rechnung März 2026.pdf' })]);
    expect(a).toEqual({ filename: 'Rechnung März 2026.pdf', contentType: 'application/pdf', content: PDF, contentId: null });
  });

  it('takes ten, an empty list, 255 characters (code points) of name and 255 of content id', () => {
    expect(parse(Array.from({ length: 10 }, () => file()))).toHaveLength(10);
    expect(parse([])).toEqual([]);
    const emoji = `${'😀'.repeat(251)}.pdf`;
    expect(parse([file({ filename: emoji })])[0]!.filename).toBe(emoji);
    const id = `${'a'.repeat(250)}@x.io`;
    expect(parse([file({ contentId: id })])[0]!.contentId).toBe(id);
  });

  it('lower-cases a given content type and keeps it over the extension', () => {
    expect(parse([file({ filename: 'data.bin', contentType: 'Application/Vnd.Custom+JSON' })])[0]!.contentType).toBe('application/vnd.custom+json');
    expect(parse([file({ filename: 'photo.png', contentType: 'image/jpeg' })])[0]!.contentType).toBe('image/jpeg');
  });

  it('takes the id characters of a message id: a filename-like id, an @, + = $ ! ~ *', () => {
    const ids = ['logo.png', 'image001.png@01DA1234.5678ABCD', 'a+b=c$d!e~f*g_h-i'];
    expect(parse(ids.map((contentId) => file({ contentId }))).map((a) => a.contentId)).toEqual(ids);
  });

  const derived: [string, string][] = [
    ['invoice.pdf', 'application/pdf'],
    ['logo.PNG', 'image/png'],
    ['photo.jpg', 'image/jpeg'],
    ['photo.jpeg', 'image/jpeg'],
    ['anim.gif', 'image/gif'],
    ['pic.webp', 'image/webp'],
    ['icon.svg', 'image/svg+xml'],
    ['notes.txt', 'text/plain'],
    ['export.csv', 'text/csv'],
    ['page.html', 'text/html'],
    ['meeting.ics', 'text/calendar'],
    ['data.json', 'application/json'],
    ['feed.xml', 'application/xml'],
    ['archive.zip', 'application/zip'],
    ['letter.doc', 'application/msword'],
    ['letter.docx', 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'],
    ['sheet.xls', 'application/vnd.ms-excel'],
    ['sheet.xlsx', 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet'],
    ['deck.ppt', 'application/vnd.ms-powerpoint'],
    ['deck.pptx', 'application/vnd.openxmlformats-officedocument.presentationml.presentation'],
    ['ticket.pkpass', 'application/vnd.apple.pkpass'],
    ['contact.vcf', 'text/vcard'],
    ['unknown.xyz', 'application/octet-stream'],
    ['README', 'application/octet-stream'],
    ['trailing-dot.pdf.', 'application/pdf'],
    ['constructor', 'application/octet-stream'],
    ['x.constructor', 'application/octet-stream'],
    ['x.__proto__', 'application/octet-stream'],
  ];
  for (const [name, type] of derived) {
    it(`derives ${type} for ${name}`, () => {
      expect(contentTypeFor(name)).toBe(type);
      expect(parse([file({ filename: name })])[0]!.contentType).toBe(type);
    });
  }

  it('has a valid MIME type for every extension of the table', () => {
    for (const [ext, type] of Object.entries(CONTENT_TYPES)) expect(type, ext).toMatch(/^[a-z]+\/[a-z0-9.+-]+$/);
  });
});

describe('the refused extensions', () => {
  it('refuses every extension of the table, by name', () => {
    for (const [ext, by] of Object.entries(REFUSED_EXTENSIONS)) {
      expect(refusal([file({ filename: `file.${ext}` })]).message, ext).toBe(
        `attachments.0.filename: is a file type mailbox providers refuse (.${ext}, refused by ${by})`,
      );
    }
  });

  it('holds what Gmail and Outlook both refuse', () => {
    for (const ext of [
      'exe',
      'bat',
      'cmd',
      'com',
      'js',
      'jar',
      'msi',
      'scr',
      'vbs',
      'vbe',
      'jse',
      'wsf',
      'wsh',
      'ps1',
      'pif',
      'cpl',
      'hta',
      'lnk',
      'msc',
      'msp',
    ])
      expect(REFUSED_EXTENSIONS[ext], ext).toBe('Gmail and Outlook');
    for (const ext of ['reg', 'application', 'gadget', 'app', 'dll', 'apk', 'iso']) expect(REFUSED_EXTENSIONS[ext], ext).toBeDefined();
  });

  const disguises: [string, string][] = [
    ['invoice.pdf.exe', 'exe'],
    ['INVOICE.EXE', 'exe'],
    ['Invoice.Exe', 'exe'],
    ['invoice.exe.', 'exe'],
    ['invoice.exe...', 'exe'],
    ['invoice.exe   ', 'exe'],
    ['invoice.exe. . ', 'exe'],
    ['.exe', 'exe'],
    ['report.pdf.js', 'js'],
    ['update.MSI', 'msi'],
  ];
  for (const [name, ext] of disguises) {
    it(`refuses ${JSON.stringify(name)} as .${ext}`, () => {
      expect(extensionOf(name)).toBe(ext);
      expect(refusal([file({ filename: name })]).message).toMatch(
        new RegExp(`^attachments\\.0\\.filename: is a file type mailbox providers refuse \\(\\.${ext},`),
      );
    });
  }

  it('refuses the file type whatever content type is given', () => {
    expect(refusal([file({ filename: 'setup.exe', contentType: 'application/pdf' })]).message).toMatch(/refuse \(\.exe/);
  });

  for (const name of ['invoice.exe.pdf', 'exe', 'my.executable', 'notes.json', 'script.jsx', 'comics.cbz']) {
    it(`accepts ${name}: its last extension is not refused`, () => expect(parse([file({ filename: name })])).toHaveLength(1));
  }
});

describe('what is kept', () => {
  const list = parse([file(), { filename: 'logo.png', content: b64(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2])), contentId: 'logo' }]);

  it('the log records name, type, decoded size, the SHA-256 of the bytes and the content id', () => {
    expect(attachmentRecords(list)).toEqual([
      { filename: 'invoice.pdf', contentType: 'application/pdf', size: PDF.length, sha256: createHash('sha256').update(PDF).digest('hex'), contentId: null },
      {
        filename: 'logo.png',
        contentType: 'image/png',
        size: 7,
        sha256: createHash('sha256')
          .update(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2]))
          .digest('hex'),
        contentId: 'logo',
      },
    ]);
  });

  it('the queued message carries the content as standard base64 again, equal to what was given', () => {
    expect(toOutbound(list)).toEqual([
      { filename: 'invoice.pdf', contentType: 'application/pdf', content: b64(PDF), contentId: null },
      { filename: 'logo.png', contentType: 'image/png', content: b64(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2])), contentId: 'logo' },
    ]);
  });
});

describe('inline references', () => {
  const list = parse([file(), file({ filename: 'logo.png', contentId: 'logo' }), file({ filename: 'banner.png', contentId: 'banner.png@shop' })]);

  it('passes when every inline part is referenced as cid:<id>, the scheme in any case', () => {
    expect(checkInlineReferences('<img src="cid:logo"><img src=\'CID:banner.png@shop\'>', list)).toBeNull();
    expect(checkInlineReferences('<td style="background:url(cid:logo)"><img src=cid:banner.png@shop>', list)).toBeNull();
  });

  it('refuses an inline part the html never references, naming its field', () => {
    expect(checkInlineReferences('<img src="cid:logo">', list)).toEqual({
      field: 'attachments.2.contentId',
      message: 'is not referenced in the html as cid:<contentId>',
    });
  });

  it('does not take a longer id, a different case or the bare id for a reference', () => {
    const only = parse([file({ filename: 'logo.png', contentId: 'logo' })]);
    expect(checkInlineReferences('<img src="cid:logo2">', only)?.field).toBe('attachments.0.contentId');
    expect(checkInlineReferences('<img src="cid:logo.png">', only)?.field).toBe('attachments.0.contentId');
    expect(checkInlineReferences('<img src="cid:LOGO">', only)?.field).toBe('attachments.0.contentId');
    expect(checkInlineReferences('<img src="logo"> logo', only)?.field).toBe('attachments.0.contentId');
    expect(checkInlineReferences('<img src="cid:logo2"><img src="cid:logo">', only)).toBeNull();
  });

  it('leaves a cid: naming no attachment alone, and needs nothing of attachments without a content id', () => {
    expect(checkInlineReferences('<img src="cid:nothing">', parse([file()]))).toBeNull();
    expect(checkInlineReferences('', [])).toBeNull();
  });
});

describe('docs/api/attachments.md', () => {
  const doc = readFileSync(new URL('../docs/api/attachments.md', import.meta.url), 'utf8');

  it('lists exactly the refused extensions of the table', () => {
    const section = doc.slice(doc.indexOf('## Refused file types'), doc.indexOf('## The message'));
    const listed = section
      .slice(section.indexOf('scripts, shortcuts'))
      .match(/`[a-z0-9_-]+`/g)!
      .map((e) => e.slice(1, -1));
    expect(listed).toEqual(Object.keys(REFUSED_EXTENSIONS).sort());
  });

  it('gives each extension of the content-type table the type the code derives', () => {
    const section = doc.slice(doc.indexOf('## Content types by extension'), doc.indexOf('## Refused file types'));
    const rows = [...section.matchAll(/^\| ([a-z0-9, ]+) \| ([^|]+) \|$/gm)].filter((m) => m[1] !== 'Extension');
    const documented = new Set<string>();
    for (const [, exts, types] of rows) {
      const list = exts!.split(', ');
      // `odt, ods, odp` share one row: "application/vnd.oasis.opendocument.text, .spreadsheet, .presentation".
      const names = types!.trim().split(', ');
      list.forEach((ext, i) => {
        const type = names.length === 1 ? names[0]! : i === 0 ? names[0]! : names[0]!.replace(/\.[a-z]+$/, names[i]!);
        expect(contentTypeFor(`file.${ext}`), ext).toBe(type);
        documented.add(ext);
      });
    }
    expect([...documented].sort()).toEqual(Object.keys(CONTENT_TYPES).sort());
  });
});

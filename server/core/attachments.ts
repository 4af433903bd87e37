import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { AttachmentRecord } from '../../db/schema/emails.js';
import type { OutboundAttachment } from '../../db/schema/outbound-messages.js';
import { REFUSED_EXTENSIONS, contentTypeFor, extensionOf } from './attachment-types.js';

/**
 * The `attachments` field of POST /emails (docs/api/decisions.md section 9; the rules as decided in
 * docs/api/attachments.md): validated field by field, the content decoded once. The policy (the content types of the
 * extensions, the extensions refused) is the tables of attachment-types.ts.
 */

export const MAX_ATTACHMENTS = 10;
export const MAX_FILENAME = 255;
export const MAX_CONTENT_ID = 255;
const TOO_MANY = `must have at most ${MAX_ATTACHMENTS} entries`;

/** An attachment as validated: `content` is the decoded bytes (never empty); `contentId` makes it an inline part. */
export interface Attachment {
  filename: string;
  /** Lower case, `type/subtype`, no parameters. */
  contentType: string;
  content: Buffer;
  contentId: string | null;
}

/** Code points of `text` (the API's characters: an emoji is one), counting no further than `limit + 1`. */
function codePointsUpTo(text: string, limit: number): number {
  if (text.length <= limit) return [...text].length;
  let n = 0;
  for (const _ of text) if (++n > limit) break;
  return n;
}

/** Filename characters refused, with the reason given for each class, checked in this order. */
const FILENAME_RULES: readonly [RegExp, string][] = [
  [/[/\\]/, 'must not contain / or \\'],
  [/[\x00-\x1f\x7f-\x9f]/, 'must not contain control characters'],
  [/[\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]/, 'must not contain bidirectional control characters'],
  // Mail clients (and mailparser) decode RFC 2047 words in a file name however it is sent, RFC 2231 included, so
  // `x.pdf=?UTF-8?B?LmV4ZQ==?=` would arrive as `x.pdf.exe`, past the refused types.
  [/=\?/, 'must not contain =? (mail clients would read it as an RFC 2047 encoded word)'],
];

const filename = z
  .string()
  .superRefine((name, ctx) => {
    const n = codePointsUpTo(name, MAX_FILENAME);
    if (n === 0 || n > MAX_FILENAME) {
      ctx.addIssue({ code: 'custom', message: `must be 1 to ${MAX_FILENAME} characters` });
      return;
    }
    for (const [pattern, message] of FILENAME_RULES) {
      if (pattern.test(name)) {
        ctx.addIssue({ code: 'custom', message });
        return;
      }
    }
    if (name.trim() === '') {
      ctx.addIssue({ code: 'custom', message: 'must not be blank' });
      return;
    }
    const ext = extensionOf(name);
    if (ext !== null && Object.hasOwn(REFUSED_EXTENSIONS, ext)) {
      ctx.addIssue({ code: 'custom', message: `is a file type mailbox providers refuse (.${ext}, refused by ${REFUSED_EXTENSIONS[ext]})` });
    }
  })
  .describe('1 to 255 characters; no `/`, `\\`, control or bidi characters, no `=?`; not a file type mailbox providers refuse (`.exe`, `.js`, ...).');

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
/** Standard base64 with its padding: whole quads, then at most one padded one. No whitespace, no URL-safe `-` `_`. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * Why `text` is not canonical standard base64, or null when it is. Canonical: the bits a padded last quad leaves
 * unused are zero, so that one byte string has one encoding (`QR==` is refused for `QQ==`). Never echoes the text.
 */
export function base64Problem(text: string): string | null {
  if (text === '') return 'must not be empty';
  if (text.length % 4 !== 0 || !BASE64.test(text)) {
    if (/[\s]/.test(text)) return 'must be standard base64 without line breaks or spaces';
    if (/[-_]/.test(text)) return 'must be standard base64 (+ and /), not the URL-safe alphabet';
    return 'must be standard base64 with its = padding';
  }
  if (text.endsWith('==')) {
    if (B64.indexOf(text[text.length - 3]!) & 0x0f) return 'must be standard base64 with its = padding';
  } else if (text.endsWith('=')) {
    if (B64.indexOf(text[text.length - 2]!) & 0x03) return 'must be standard base64 with its = padding';
  }
  return null;
}

const content = z
  .string()
  .transform((text, ctx): Buffer => {
    const problem = base64Problem(text);
    if (problem !== null) {
      ctx.addIssue({ code: 'custom', message: problem });
      return z.NEVER;
    }
    return Buffer.from(text, 'base64');
  })
  .describe('The file, standard base64 with its `=` padding, in one piece (no line breaks); not empty.');

/** RFC 2045 token characters (no space, control or tspecial). */
const TOKEN = "[!#$%&'*+\\-.^_`|~0-9A-Za-z]+";
const MIME_TYPE = new RegExp(`^${TOKEN}/${TOKEN}$`);

const contentType = z
  .string()
  .max(255, 'must be at most 255 characters')
  .superRefine((type, ctx) => {
    if (!MIME_TYPE.test(type)) {
      ctx.addIssue({ code: 'custom', message: 'must be a MIME type such as application/pdf (type/subtype, without parameters)' });
    } else if (/^(multipart|message)\//i.test(type)) {
      // A multipart or message part cannot be sent base64-encoded (RFC 2045 section 6.4): give its bytes as application/octet-stream.
      ctx.addIssue({ code: 'custom', message: 'must not be a multipart or message type' });
    }
  })
  .transform((type) => type.toLowerCase())
  .describe("A MIME type `type/subtype` without parameters; derived from the file name's extension when missing.");

/**
 * A Content-ID's characters: the letters, digits and `. _ - + = @ $ ! ~ *` of a message id (RFC 5322 atext), without
 * `<`, `>`, spaces, `%` (a cid: URL's escape), or `&`, quotes and `:` (so `cid:<id>` reads the same in an html attribute).
 */
const CONTENT_ID = /^[A-Za-z0-9._\-+=@$!~*]+$/;

const contentId = z
  .string()
  .superRefine((id, ctx) => {
    if (id.length === 0 || id.length > MAX_CONTENT_ID) {
      ctx.addIssue({ code: 'custom', message: `must be 1 to ${MAX_CONTENT_ID} characters` });
    } else if (/^cid:|^<.*>$/i.test(id)) {
      ctx.addIssue({ code: 'custom', message: 'must be the id alone, without cid: or angle brackets' });
    } else if (!CONTENT_ID.test(id)) {
      ctx.addIssue({ code: 'custom', message: 'must be letters, digits and . _ - + = @ $ ! ~ * only' });
    }
  })
  .describe(
    'Makes the attachment an inline part, referenced in the html as `cid:<contentId>` (which it must be). 1 to 255 of letters, digits and `. _ - + = @ $ ! ~ *`; unique in the message.',
  );

const attachmentInput = z.strictObject({ filename, content, contentType: contentType.optional(), contentId: contentId.optional() }).transform(
  (a): Attachment => ({
    filename: a.filename,
    contentType: a.contentType ?? contentTypeFor(a.filename),
    content: a.content,
    contentId: a.contentId ?? null,
  }),
);

/**
 * The `attachments` field: at most MAX_ATTACHMENTS strict objects, counted before any is read; each content id unique
 * in the message (compared without regard to case). An issue's path is the field's below `attachments` (`2.filename`),
 * as parseInput names it.
 */
export const attachmentsInput = z
  .preprocess(
    (value, ctx) => {
      // Counted first: an eleventh entry is refused before any entry's content is read. (A preprocess, not a pipe
      // from an array of unknowns, so the OpenAPI document, written from the input side, still shows the entries.)
      if (Array.isArray(value) && value.length > MAX_ATTACHMENTS) {
        ctx.addIssue({ code: 'custom', message: TOO_MANY });
        return z.NEVER;
      }
      return value;
    },
    z.array(attachmentInput).max(MAX_ATTACHMENTS, TOO_MANY),
  )
  // A transform runs only once every entry is valid (a refinement would see the raw input of a refused entry).
  .transform((list, ctx) => {
    const seen = new Set<string>();
    list.forEach((a, i) => {
      if (a.contentId === null) return;
      const key = a.contentId.toLowerCase();
      if (seen.has(key)) ctx.addIssue({ code: 'custom', path: [i, 'contentId'], message: 'must be unique within the message' });
      seen.add(key);
    });
    return list;
  })
  .describe('At most 10 files; the request body stays under 1 MiB.');

/** What the send log keeps of each attachment: its name, type, decoded size and the SHA-256 (hex) of its bytes. */
export function attachmentRecords(list: readonly Attachment[]): AttachmentRecord[] {
  return list.map((a) => ({
    filename: a.filename,
    contentType: a.contentType,
    size: a.content.length,
    sha256: createHash('sha256').update(a.content).digest('hex'),
    contentId: a.contentId,
  }));
}

/** The attachments as the queued message carries them until it is delivered: `content` base64 again. */
export function toOutbound(list: readonly Attachment[]): OutboundAttachment[] {
  return list.map((a) => ({ filename: a.filename, contentType: a.contentType, content: a.content.toString('base64'), contentId: a.contentId }));
}

const ID_CHAR = /[A-Za-z0-9._\-+=@$!~*]/;

/** Whether `html` holds `cid:<id>` (the scheme in any case, the id exactly) not followed by more of an id. */
function references(html: string, id: string): boolean {
  const lower = html.toLowerCase();
  const needle = `cid:${id.toLowerCase()}`;
  for (let at = lower.indexOf(needle); at >= 0; at = lower.indexOf(needle, at + 1)) {
    const next = html[at + needle.length];
    if (html.startsWith(id, at + 4) && (next === undefined || !ID_CHAR.test(next))) return true;
  }
  return false;
}

/**
 * An inline part the html never shows is refused: each attachment with a `contentId` must be referenced in the
 * rendered html as `cid:<contentId>` (clients differ on an unreferenced inline part: some list it as an attachment,
 * some hide it, so a mistyped id would send an image nobody sees). A `cid:` in the html naming no attachment is left
 * as it is. The first problem as `{ field, message }` (`attachments.1.contentId`), or null.
 */
export function checkInlineReferences(html: string, list: readonly Attachment[]): { field: string; message: string } | null {
  for (const [i, a] of list.entries()) {
    if (a.contentId !== null && !references(html, a.contentId)) {
      return { field: `attachments.${i}.contentId`, message: 'is not referenced in the html as cid:<contentId>' };
    }
  }
  return null;
}

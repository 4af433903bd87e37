import { randomBytes } from 'node:crypto';
import type { OutboundAttachment } from '../db/schema/index.js';
import { encodeWords } from '../server/core/addresses.js';

/**
 * The MIME of an outbound message, written directly: a header section of ASCII lines folded within 78 characters,
 * then multipart/alternative with the text and the html, each part 7bit when it is printable ASCII in short lines and
 * quoted-printable otherwise. Every line ends CRLF and none is longer than 78 characters (quoted-printable's 76
 * included), but where a header's first line holds its name and a first word that cannot be broken, so the message
 * needs no further encoding on any SMTP path.
 */

/** Every line break as CRLF: no bare CR or LF reaches the wire. */
export function toCrlf(text: string): string {
  return text.replace(/\r\n|\r|\n/g, '\r\n');
}

/** Lines of a header field, folded where it has spaces so that each stays within 78 characters where it can. */
export function foldHeader(name: string, value: string): string {
  let out = `${name}:`;
  let line = out.length;
  // Values are built here or by formatMailbox (no line breaks); a stray one must still never start a header of its own.
  for (const token of value.replace(/[\r\n]+/g, ' ').split(' ')) {
    // Never fold before an empty token: a folded line must not be whitespace only.
    if (token !== '' && line + 1 + token.length > 78 && line > name.length + 1) {
      out += `\r\n ${token}`;
      line = 1 + token.length;
    } else {
      out += ` ${token}`;
      line += 1 + token.length;
    }
  }
  return `${out}\r\n`;
}

/** RFC 5322 date-time in UTC: `Sun, 22 Nov 2026 10:00:00 +0000`. */
export function rfc5322Date(ms: number): string {
  return new Date(ms).toUTCString().replace('GMT', '+0000');
}

const PRINTABLE_HEADER = /^[\x20-\x7e]*$/;

/** The longest word a folded line holds: a continuation line is a space and the word, within 78 characters. */
const FOLDABLE_WORD = 77;

/**
 * A Subject header: the text as it is when it is printable ASCII in words that fold, else RFC 2047 encoded words
 * (which split anywhere: a 998-character receipt number must not make a line past RFC 5322's 998); folded.
 */
export function subjectHeader(subject: string): string {
  const oneLine = subject.replace(/\r\n|\r|\n/g, ' ');
  // Text shaped like an encoded word (`=?...?=`) would be decoded by the reader into something else: encoded, it reads as sent.
  const plain = PRINTABLE_HEADER.test(oneLine) && !oneLine.includes('=?') && oneLine.split(' ').every((word) => word.length <= FOLDABLE_WORD);
  return foldHeader('Subject', plain ? oneLine : encodeWords(oneLine));
}

/** Printable ASCII (and tabs) in lines of at most 76 characters: sent as it is. */
function is7bitSafe(crlfText: string): boolean {
  if (!/^[\x20-\x7e\t\r\n]*$/.test(crlfText)) return false;
  let start = 0;
  for (;;) {
    const end = crlfText.indexOf('\r\n', start);
    if ((end < 0 ? crlfText.length : end) - start > 76) return false;
    if (end < 0) return true;
    start = end + 2;
  }
}

const HEX = Buffer.from('0123456789ABCDEF');
const CR = 13;
const LF = 10;
const SPACE = 32;
const TAB = 9;
const EQUALS = 61;
/** Characters on an encoded line before its soft break `=`: lines are at most 76 characters in all (RFC 2045 6.7). */
const QP_WIDTH = 75;

/**
 * Quoted-printable (RFC 2045 section 6.7) of a CRLF text's UTF-8 bytes: CRLF pairs stay line breaks; `=`, bytes
 * outside printable ASCII and a space or tab that ends a line are `=XX`; lines are broken softly (`=` CRLF) so that
 * none exceeds 76 characters, never inside an `=XX`.
 */
export function quotedPrintable(crlfText: string): Buffer {
  const src = Buffer.from(crlfText, 'utf8');
  // Each byte at most three characters, and a soft break (three) at most every 25 input bytes.
  const out = Buffer.allocUnsafe(src.length * 3 + Math.ceil(src.length / 25) * 3 + 3);
  let o = 0;
  let col = 0;
  for (let i = 0; i < src.length; i++) {
    const c = src[i]!;
    if (c === CR && src[i + 1] === LF) {
      out[o++] = CR;
      out[o++] = LF;
      col = 0;
      i++;
      continue;
    }
    let encode: boolean;
    if (c === SPACE || c === TAB) {
      // Whitespace at the end of a line (or of the text) would be lost in transit.
      encode = i + 1 === src.length || (src[i + 1] === CR && src[i + 2] === LF);
    } else {
      encode = c < 33 || c > 126 || c === EQUALS;
    }
    const width = encode ? 3 : 1;
    if (col + width > QP_WIDTH) {
      out[o++] = EQUALS;
      out[o++] = CR;
      out[o++] = LF;
      col = 0;
    }
    if (encode) {
      out[o++] = EQUALS;
      out[o++] = HEX[c >> 4]!;
      out[o++] = HEX[c & 15]!;
    } else {
      out[o++] = c;
    }
    col += width;
  }
  return out.subarray(0, o);
}

/** One part of the alternative: its headers and its body, encoded. */
function part(type: 'text/plain' | 'text/html', text: string): Buffer[] {
  const crlf = toCrlf(text);
  if (is7bitSafe(crlf)) {
    return [Buffer.from(`Content-Type: ${type}; charset=utf-8\r\nContent-Transfer-Encoding: 7bit\r\n\r\n${crlf}`, 'ascii')];
  }
  return [Buffer.from(`Content-Type: ${type}; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n`, 'ascii'), quotedPrintable(crlf)];
}

export interface MimeInput {
  /** The header values as the send built them (formatMailbox: ASCII). */
  fromHeader: string;
  replyToHeader: string | null;
  to: readonly string[];
  subject: string;
  messageId: string;
  date: number;
  text: string;
  html: string;
  /** The queued message's attachments (server/core/attachments.ts validated them); none keeps the message as it was. */
  attachments?: readonly OutboundAttachment[] | null;
}

/** A boundary of its own for each multipart: random, so none is a prefix of another or found in a part. */
const newBoundary = () => `--_ms_${randomBytes(12).toString('hex')}`;

/**
 * A multipart entity: its Content-Type (with `params`, each a folded line ending `;`), a blank line, then the parts
 * between its delimiters. The CRLF before each delimiter belongs to the delimiter (RFC 2046 section 5.1.1).
 */
function multipart(subtype: 'alternative' | 'related' | 'mixed', parts: readonly Buffer[][], params = ''): Buffer[] {
  const boundary = newBoundary();
  const out: Buffer[] = [Buffer.from(`Content-Type: multipart/${subtype};\r\n${params} boundary="${boundary}"\r\n\r\n--${boundary}\r\n`, 'ascii')];
  parts.forEach((p, i) => {
    if (i > 0) out.push(Buffer.from(`\r\n--${boundary}\r\n`, 'ascii'));
    out.push(...p);
  });
  out.push(Buffer.from(`\r\n--${boundary}--\r\n`, 'ascii'));
  return out;
}

/** RFC 2231 attribute characters: what a parameter value may hold unescaped (any other byte is `%XX`). */
const ATTR_CHAR = /^[A-Za-z0-9!#$&+\-.^_`|~]$/;

function percentEncoded(ch: string): string {
  if (ATTR_CHAR.test(ch)) return ch;
  let out = '';
  for (const b of Buffer.from(ch, 'utf8')) out += `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  return out;
}

/**
 * A value sent as a quoted-string as it is: printable ASCII without a quote or backslash, and without `=?` (clients
 * decode RFC 2047 words inside a quoted name, so `x.pdf=?UTF-8?B?LmV4ZQ==?=` would read as `x.pdf.exe`).
 */
const QUOTABLE = /^[\x20-\x7e]*$/;
const quotable = (value: string) => QUOTABLE.test(value) && !/["\\]/.test(value) && !value.includes('=?');

/** Whether a parameter line (a leading space, then `text` and its `;`) stays within 78 characters. */
const fits = (text: string) => 1 + text.length + 1 <= 78;

/**
 * A Content-Disposition `filename` as parameter lines: a quoted-string when the name is printable ASCII and fits;
 * else RFC 2231's `filename*=utf-8''` with UTF-8 percent-encoded, continued as `filename*0*=`, `filename*1*=`, ...
 * (section 3) when one line cannot hold it, each segment ending on a whole character.
 */
export function filenameParams(name: string): string[] {
  if (quotable(name) && fits(`filename="${name}"`)) return [`filename="${name}"`];
  const encoded = [...name].map(percentEncoded);
  const whole = `filename*=utf-8''${encoded.join('')}`;
  if (fits(whole)) return [whole];
  const lines: string[] = [];
  let line = `filename*0*=utf-8''`;
  for (const piece of encoded) {
    if (!fits(line + piece)) {
      lines.push(line);
      line = `filename*${lines.length}*=`;
    }
    line += piece;
  }
  lines.push(line);
  return lines;
}

/**
 * The Content-Type `name` older clients read instead of RFC 2231: a quoted-string of the name when it is printable
 * ASCII and fits, else RFC 2047 encoded words inside the quotes (what those clients decode there), folded between words.
 */
export function nameParam(name: string): string {
  if (quotable(name) && fits(`name="${name}"`)) return `name="${name}"`;
  return `name="${encodeWords(name).replace(/ /g, '\r\n ')}"`;
}

/** A header that folds after its colon when its value (one word that cannot break) does not fit beside its name. */
function shortHeader(name: string, value: string): string {
  return name.length + 2 + value.length <= 78 ? `${name}: ${value}` : `${name}:\r\n ${value}`;
}

/** An attachment's part: its type with `name`, base64 in lines of 76, its disposition and file name, its Content-ID. */
function attachmentPart(a: OutboundAttachment): Buffer[] {
  const inline = a.contentId !== null;
  const head =
    `${shortHeader('Content-Type', `${a.contentType};`)}\r\n ${nameParam(a.filename)}\r\n` +
    'Content-Transfer-Encoding: base64\r\n' +
    `Content-Disposition: ${inline ? 'inline' : 'attachment'};\r\n ${filenameParams(a.filename).join(';\r\n ')}\r\n` +
    (inline ? `${shortHeader('Content-ID', `<${a.contentId}>`)}\r\n` : '') +
    '\r\n';
  const lines: string[] = [];
  for (let i = 0; i < a.content.length; i += 76) lines.push(a.content.slice(i, i + 76));
  return [Buffer.from(head, 'ascii'), Buffer.from(lines.join('\r\n'), 'ascii')];
}

/**
 * The body entity: the text and html as multipart/alternative (the text alone when there is no html); with inline parts (a contentId), that alternative
 * and the inline parts in multipart/related; with other attachments, that and the attachments in multipart/mixed.
 */
function bodyEntity(m: MimeInput): Buffer[] {
  // An own template written as text alone renders no html: the message is that text part, not an empty alternative.
  let entity = m.html === '' ? part('text/plain', m.text) : multipart('alternative', [part('text/plain', m.text), part('text/html', m.html)]);
  const all = m.attachments ?? [];
  const inline = all.filter((a) => a.contentId !== null);
  const attached = all.filter((a) => a.contentId === null);
  if (inline.length > 0) entity = multipart('related', [entity, ...inline.map(attachmentPart)], ' type="multipart/alternative";\r\n');
  if (attached.length > 0) entity = multipart('mixed', [entity, ...attached.map(attachmentPart)]);
  return entity;
}

/** The whole message, CRLF throughout, ready to sign. */
export function buildMime(m: MimeInput): Buffer {
  const head =
    foldHeader('From', m.fromHeader) +
    (m.replyToHeader ? foldHeader('Reply-To', m.replyToHeader) : '') +
    foldHeader('To', m.to.join(', ')) +
    subjectHeader(m.subject) +
    foldHeader('Message-ID', m.messageId) +
    `Date: ${rfc5322Date(m.date)}\r\n` +
    'MIME-Version: 1.0\r\n';
  return Buffer.concat([Buffer.from(head, 'ascii'), ...bodyEntity(m)]);
}

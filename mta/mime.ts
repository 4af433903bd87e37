import { randomBytes } from 'node:crypto';
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
}

/** The whole message, CRLF throughout, ready to sign. */
export function buildMime(m: MimeInput): Buffer {
  const boundary = `--_ms_${randomBytes(12).toString('hex')}`;
  const head =
    foldHeader('From', m.fromHeader) +
    (m.replyToHeader ? foldHeader('Reply-To', m.replyToHeader) : '') +
    foldHeader('To', m.to.join(', ')) +
    subjectHeader(m.subject) +
    foldHeader('Message-ID', m.messageId) +
    `Date: ${rfc5322Date(m.date)}\r\n` +
    'MIME-Version: 1.0\r\n' +
    `Content-Type: multipart/alternative;\r\n boundary="${boundary}"\r\n` +
    '\r\n';
  const delimiter = Buffer.from(`\r\n--${boundary}\r\n`, 'ascii');
  return Buffer.concat([
    Buffer.from(`${head}--${boundary}\r\n`, 'ascii'),
    ...part('text/plain', m.text),
    delimiter,
    ...part('text/html', m.html),
    Buffer.from(`\r\n--${boundary}--\r\n`, 'ascii'),
  ]);
}

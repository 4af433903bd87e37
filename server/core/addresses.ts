import { domainToASCII } from 'node:url';
import { HIDDEN_CONTROLS } from './text-rules.js';

/**
 * Mail addresses as the send request carries them (docs/api/decisions.md section 2). A recipient is a bare address; `from`
 * and `replyTo` are exactly one mailbox, a bare address or a display name and an address in angle brackets.
 */

export const MAX_DISPLAY_NAME = 80;

const ATEXT = "A-Za-z0-9!#$%&'*+/=?^_`{|}~-";
const LOCAL_PART = new RegExp(`^[${ATEXT}]+(\\.[${ATEXT}]+)*$`);
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

export type Parsed<T> = { ok: true; value: T } | { ok: false; reason: string };

export interface Mailbox {
  /** local@domain, the domain lower-cased and in punycode. */
  address: string;
  domain: string;
  name: string | null;
}

/** A bare address: dot-atom local part of at most 64 characters, a domain of at least two valid labels, 254 in all. */
export function parseAddress(input: string): Parsed<{ address: string; domain: string }> {
  const s = input.trim();
  if (/[\r\n]/.test(s)) return { ok: false, reason: 'must not contain line breaks' };
  const at = s.lastIndexOf('@');
  if (at <= 0 || at === s.length - 1) return { ok: false, reason: 'must be an email address such as name@example.com' };
  const local = s.slice(0, at);
  const domain = domainToASCII(s.slice(at + 1).toLowerCase());
  if (local.length > 64 || !LOCAL_PART.test(local)) return { ok: false, reason: 'must be an email address such as name@example.com' };
  const labels = domain.split('.');
  if (domain === '' || domain.length > 253 || labels.length < 2 || !labels.every((l) => LABEL.test(l)) || /^\d+$/.test(labels[labels.length - 1]!)) {
    return { ok: false, reason: 'must be an email address on a valid domain' };
  }
  const address = `${local}@${domain}`;
  // A path is at most 256 octets with its brackets (RFC 5321 4.5.3.1.3): a longer address can only bounce.
  if (address.length > MAX_ADDRESS) return { ok: false, reason: `must be an email address of at most ${MAX_ADDRESS} characters` };
  return { ok: true, value: { address, domain } };
}

/**
 * How an address is compared: as a send's recipient is stored (IDN domain as punycode), lower-cased. Text that is not
 * an address is only trimmed and lower-cased, so a lookup of it simply finds nothing.
 */
export function addressKey(address: string): string {
  const parsed = parseAddress(address);
  return (parsed.ok ? parsed.value.address : address.trim()).toLowerCase();
}

/** The longest address SMTP carries (RFC 5321: a 256-octet path, less its angle brackets). */
export const MAX_ADDRESS = 254;

/**
 * An RFC 2047 encoded word: `=?charset?B|Q?text?=` (the charset may carry an RFC 2231 `*language`). Its text is taken
 * up to the next `?` whatever it holds, as mail clients' decoders (libmime) take it: one with a space inside is still
 * decoded by them, so it is judged (and refused, being invalid) rather than passed through as plain text.
 */
const ENCODED_WORD = /=\?([^?\s]+)\?([BbQq])\?([^?]*)\?=/g;
/** Whitespace between two encoded words is not shown (RFC 2047 section 6.2). */
const BETWEEN_ENCODED_WORDS = /(=\?[^?\s]+\?[BbQq]\?[^?]*\?=)\s+(?==\?[^?\s]+\?[BbQq]\?[^?]*\?=)/g;
/** Line breaks beyond CR and LF: NEL and the Unicode line and paragraph separators. */
const OTHER_LINE_BREAKS = /[\u0085\u2028\u2029]/;

function decodeWordBytes(encoding: string, data: string): Buffer | null {
  if (encoding === 'B' || encoding === 'b') {
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(data) || data.replace(/=+$/, '').length % 4 === 1) return null;
    return Buffer.from(data, 'base64');
  }
  const bytes: number[] = [];
  for (let i = 0; i < data.length; i++) {
    const c = data[i]!;
    if (c === '_') bytes.push(0x20);
    else if (c === '=') {
      const hex = data.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) return null;
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else {
      const code = c.charCodeAt(0);
      if (code < 0x21 || code > 0x7e) return null;
      bytes.push(code);
    }
  }
  return Buffer.from(bytes);
}

/**
 * The text a mail client shows for a display name: every RFC 2047 encoded word (B or Q, any charset TextDecoder
 * knows) decoded. Null when one cannot be decoded (unknown charset, bad base64 or hex, bytes invalid in its charset).
 */
export function decodeEncodedWords(text: string): string | null {
  let failed = false;
  const decoded = text.replace(BETWEEN_ENCODED_WORDS, '$1').replace(ENCODED_WORD, (_word, charset: string, encoding: string, data: string) => {
    const bytes = decodeWordBytes(encoding, data);
    if (bytes === null) {
      failed = true;
      return '';
    }
    try {
      return new TextDecoder(charset.split('*')[0]!, { fatal: true }).decode(bytes);
    } catch {
      failed = true;
      return '';
    }
  });
  return failed ? null : decoded;
}

const NOT_ONE_MAILBOX = 'must be exactly one mailbox: an address, or a display name and <address>';

/**
 * One mailbox: `addr@example.com`, `Name <addr@example.com>` or `"Name" <addr@example.com>`. The display name is
 * judged as a mail client shows it, its RFC 2047 encoded words decoded (an undecodable one is refused): a comma
 * anywhere, a second address, CR or LF, or a display name over 80 characters is refused. The name kept is the
 * decoded text.
 */
export function parseMailbox(input: string): Parsed<Mailbox> {
  if (/[\r\n\0]/.test(input)) return { ok: false, reason: 'must not contain line breaks' };
  if (input.includes(',')) return { ok: false, reason: 'must be exactly one mailbox (no comma)' };
  const s = input.trim();
  const angle = /^(.*?)\s*<([^<>]*)>$/.exec(s);
  let name: string | null = null;
  let addr = s;
  if (angle) {
    name = angle[1]!.trim();
    addr = angle[2]!;
    if (/^".*"$/.test(name)) name = name.slice(1, -1).replace(/\\(.)/g, '$1');
    // Decoded inside quotes too: RFC 2047 forbids encoded words there, but some clients decode them all the same.
    const decoded = decodeEncodedWords(name);
    if (decoded === null) return { ok: false, reason: 'display name has an encoded word (=?charset?B|Q?...?=) that cannot be decoded' };
    name = decoded.trim();
    if (name === '') name = null;
  }
  if (/[<>]/.test(addr)) return { ok: false, reason: NOT_ONE_MAILBOX };
  if (name !== null) {
    if (/[\r\n]/.test(name) || OTHER_LINE_BREAKS.test(name)) return { ok: false, reason: 'must not contain line breaks' };
    // Checked in compatibility form too: a full-width or small comma, at sign or bracket (＠ ﹫ ， ＜) reads as one.
    const folded = name.normalize('NFKC');
    if (name.includes(',') || folded.includes(',')) return { ok: false, reason: 'must be exactly one mailbox (no comma)' };
    // What is left of an encoded word after decoding (one encoded twice) would be decoded by the next reader.
    if (/[<>"@]/.test(name) || HIDDEN_CONTROLS.test(name) || /[<>"@]/.test(folded) || new RegExp(ENCODED_WORD.source).test(name))
      return { ok: false, reason: NOT_ONE_MAILBOX };
    if ([...name].length > MAX_DISPLAY_NAME) return { ok: false, reason: `display name must be at most ${MAX_DISPLAY_NAME} characters` };
  }
  const parsed = parseAddress(addr);
  if (!parsed.ok) return parsed;
  return { ok: true, value: { ...parsed.value, name } };
}

/**
 * The header value rebuilt from the parsed parts, never copied from the request: a quoted ASCII name, or for a
 * non-ASCII one bare RFC 2047 encoded words (never quoted: RFC 2047 section 5 forbids an encoded word inside a quoted
 * string), then the address in angle brackets. ASCII only; mta/message.ts folds it.
 */
export function formatMailbox(m: Mailbox): string {
  if (m.name === null) return m.address;
  const phrase = /^[\x20-\x7e]*$/.test(m.name) ? `"${m.name.replace(/(["\\])/g, '\\$1')}"` : encodeWords(m.name);
  return `${phrase} <${m.address}>`;
}

/**
 * RFC 2047 B-encoded words of at most 64 characters each (39 bytes of UTF-8 make 52 of base64, plus `=?UTF-8?B?` and
 * `?=`), split between characters, never inside one, so each decodes alone. Short enough that the first one fits
 * beside its header's name (`Reply-To: `) within RFC 2047's 76 characters a line.
 */
export function encodeWords(text: string): string {
  const words: string[] = [];
  let chunk = '';
  for (const ch of text) {
    if (Buffer.byteLength(chunk + ch) > 39) {
      words.push(chunk);
      chunk = '';
    }
    chunk += ch;
  }
  if (chunk) words.push(chunk);
  return words.map((w) => `=?UTF-8?B?${Buffer.from(w, 'utf8').toString('base64')}?=`).join(' ');
}

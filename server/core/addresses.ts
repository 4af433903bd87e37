import { domainToASCII } from 'node:url';

/**
 * Mail addresses as the send request carries them (decisions.md section 2). A recipient is a bare address; `from`
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

/** A bare address: dot-atom local part of at most 64 characters, a domain of at least two valid labels. */
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
  return { ok: true, value: { address: `${local}@${domain}`, domain } };
}

/**
 * One mailbox: `addr@example.com`, `Name <addr@example.com>` or `"Name" <addr@example.com>`. A comma anywhere, a
 * second address, CR or LF, or a display name over 80 characters is refused.
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
    if (name === '') name = null;
  }
  if (/[<>]/.test(addr) || (name !== null && /[<>"@]|[\x00-\x1f\x7f]/.test(name))) {
    return { ok: false, reason: 'must be exactly one mailbox: an address, or a display name and <address>' };
  }
  if (name !== null && [...name].length > MAX_DISPLAY_NAME) return { ok: false, reason: `display name must be at most ${MAX_DISPLAY_NAME} characters` };
  const parsed = parseAddress(addr);
  if (!parsed.ok) return parsed;
  return { ok: true, value: { ...parsed.value, name } };
}

/**
 * The header value rebuilt from the parsed parts, never copied from the request: a quoted ASCII name or an RFC 2047
 * encoded word for a non-ASCII one, then the address in angle brackets.
 */
export function formatMailbox(m: Mailbox): string {
  if (m.name === null) return m.address;
  const phrase = /^[\x20-\x7e]*$/.test(m.name) ? `"${m.name.replace(/(["\\])/g, '\\$1')}"` : encodeWords(m.name);
  return `${phrase} <${m.address}>`;
}

/** RFC 2047 B-encoded words of at most 75 characters each, split between characters, never inside one. */
function encodeWords(text: string): string {
  const words: string[] = [];
  let chunk = '';
  for (const ch of text) {
    if (Buffer.byteLength(chunk + ch) > 45) {
      words.push(chunk);
      chunk = '';
    }
    chunk += ch;
  }
  if (chunk) words.push(chunk);
  return words.map((w) => `=?UTF-8?B?${Buffer.from(w, 'utf8').toString('base64')}?=`).join(' ');
}

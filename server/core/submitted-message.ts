import addressparser from 'nodemailer/lib/addressparser';
import { ApiError } from '../shared/errors.js';
import { parseAddress } from './addresses.js';
import { decodeEncodedWords } from './operator-mail.js';

/**
 * A message submitted over SMTP (docs/api/decisions.md section 10), as the rules see its header: the From mailbox that
 * decides the account's domain, the subject for the log, the Message-ID a retry is known by; and the header as sent,
 * rebuilt only where it must be: `Bcc` removed, `Message-ID` and `Date` added when missing. The body is never parsed
 * and never copied here: it goes out byte for byte.
 */

/** The most header a message may have before its body; more is refused (a header is a few KB in practice). */
export const MAX_HEADER_BYTES = 256 * 1024;

const CRLF_CRLF = Buffer.from('\r\n\r\n');

export interface SubmittedHeader {
  /** The header to send: the client's fields in their order and bytes, less Bcc, plus what was missing; ends CRLF CRLF. */
  header: Buffer;
  from: { address: string; domain: string };
  /** RFC 2047 words decoded, unfolded; '' when there is none. */
  subject: string;
  /** The Message-ID as the client wrote it (trimmed), or null when it wrote none (then `messageId` is ours). */
  clientMessageId: string | null;
  messageId: string;
}

/**
 * Where the header ends in the first bytes of a message: the index just past its blank line, or -1 while it has not
 * ended. A message that starts with a blank line has an empty header.
 */
export function headerEnd(head: Buffer): number {
  if (head[0] === 0x0d && head[1] === 0x0a) return 2;
  const at = head.indexOf(CRLF_CRLF);
  return at === -1 ? -1 : at + 4;
}

/** The header's fields, each with its folded lines and its CRLF, in the bytes the client sent (latin1 keeps them). */
function fieldsOf(header: string): string[] {
  return header.split(/(?<=\r\n)(?![ \t])/).filter((f) => f !== '' && f !== '\r\n');
}

const nameOf = (field: string): string =>
  field
    .slice(0, Math.max(0, field.indexOf(':')))
    .trim()
    .toLowerCase();

/** A field's value, unfolded, its bytes read as UTF-8 (RFC 6532 allows it in a header). */
const fieldValue = (field: string): string =>
  Buffer.from(field.slice(field.indexOf(':') + 1), 'latin1')
    .toString('utf8')
    .replace(/\r\n(?=[ \t])/g, '')
    .trim();

/** RFC 5322 3.3 date-time, as a Date header is written. */
export function rfc5322Date(ms: number): string {
  return new Date(ms).toUTCString().replace(/GMT$/, '+0000');
}

/** Characters that make an address or a display name more than plain (RFC 5322 specials, and `@` in a name). */
const PLAIN_ADDRESS = /^[^\s<>"(),;:\\[\]@]+@[^\s<>"(),;:\\[\]@]+$/;
const NAMED_ADDRESS = /^[^<>"(),;:\\[\]@]*<([^\s<>"(),;:\\[\]@]+@[^\s<>"(),;:\\[\]@]+)>$/;

/**
 * The address of a From value that is one mailbox: `a@b` or `Name <a@b>` (the name plain or RFC 2047 encoded) are read
 * here; anything else (quotes, comments, groups, lists) by nodemailer's address parser. Null when it is not one mailbox.
 */
function fromAddress(value: string): string | null {
  if (PLAIN_ADDRESS.test(value)) return value;
  const named = NAMED_ADDRESS.exec(value);
  if (named) return named[1]!;
  const mailboxes = addressparser(value, { flatten: false });
  const mailbox = mailboxes.length === 1 ? mailboxes[0] : undefined;
  return mailbox && 'address' in mailbox && mailbox.address ? mailbox.address : null;
}

/**
 * Reads and rebuilds the header of a submitted message (`header` is its bytes up to and including the blank line, or
 * the whole message when it has no body). Refuses, with the API's words, a message whose From is missing, repeated,
 * or not exactly one mailbox.
 */
export function readSubmittedHeader(header: Buffer, ours: { id: string; mailHostname: string; now: number }): SubmittedHeader {
  const fields = fieldsOf(header.toString('latin1'));
  const names = fields.map(nameOf);
  const named = (name: string) => fields.filter((_f, i) => names[i] === name);
  const froms = named('from');
  if (froms.length !== 1) {
    throw new ApiError('invalid_request', froms.length === 0 ? 'From: the message has no From header.' : 'From: the message has more than one From header.');
  }
  const address = fromAddress(fieldValue(froms[0]!));
  if (address === null) throw new ApiError('invalid_request', 'From: must be exactly one mailbox.');
  const parsed = parseAddress(address);
  if (!parsed.ok) throw new ApiError('invalid_request', `From: ${parsed.reason}.`);

  const ids = named('message-id').map(fieldValue);
  const given = ids.find((v) => v !== '');
  const clientMessageId = given ?? null;
  const messageId = clientMessageId ?? `<${ours.id}@${ours.mailHostname}>`;
  const hasDate = names.includes('date');
  const subject = named('subject')[0];
  const read = {
    from: parsed.value,
    subject: subject === undefined ? '' : decodeEncodedWords(fieldValue(subject)),
    clientMessageId,
    messageId,
  };
  // Nothing to remove or add, and the blank line there: the header goes out as the very bytes that came.
  if (clientMessageId !== null && hasDate && !names.includes('bcc') && !ids.includes('') && header.subarray(-4).equals(CRLF_CRLF)) {
    return { header, ...read };
  }
  // Bcc goes; so does an empty Message-ID field, which ours replaces (a message has one Message-ID).
  const kept = fields.filter((f, i) => names[i] !== 'bcc' && !(names[i] === 'message-id' && fieldValue(f) === ''));
  if (clientMessageId === null) kept.push(`Message-ID: ${messageId}\r\n`);
  if (!hasDate) kept.push(`Date: ${rfc5322Date(ours.now)}\r\n`);
  return { header: Buffer.from(`${kept.join('')}\r\n`, 'latin1'), ...read };
}

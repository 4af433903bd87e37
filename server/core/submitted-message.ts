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

/**
 * Reads and rebuilds the header of a submitted message (`header` is its bytes up to and including the blank line, or
 * the whole message when it has no body). Refuses, with the API's words, a message whose From is missing, repeated,
 * or not exactly one mailbox.
 */
export function readSubmittedHeader(header: Buffer, ours: { id: string; mailHostname: string; now: number }): SubmittedHeader {
  const fields = fieldsOf(header.toString('latin1'));
  const named = (name: string) => fields.filter((f) => nameOf(f) === name);
  const froms = named('from');
  if (froms.length !== 1) {
    throw new ApiError('invalid_request', froms.length === 0 ? 'From: the message has no From header.' : 'From: the message has more than one From header.');
  }
  const mailboxes = addressparser(fieldValue(froms[0]!), { flatten: false });
  const mailbox = mailboxes.length === 1 ? mailboxes[0] : undefined;
  if (!mailbox || !('address' in mailbox) || !mailbox.address) throw new ApiError('invalid_request', 'From: must be exactly one mailbox.');
  const parsed = parseAddress(mailbox.address);
  if (!parsed.ok) throw new ApiError('invalid_request', `From: ${parsed.reason}.`);

  const given = named('message-id').find((f) => fieldValue(f) !== '');
  const clientMessageId = given === undefined ? null : fieldValue(given);
  // Bcc goes; so does an empty Message-ID field, which ours replaces (a message has one Message-ID).
  const kept = fields.filter((f) => nameOf(f) !== 'bcc' && !(nameOf(f) === 'message-id' && fieldValue(f) === ''));
  const messageId = clientMessageId ?? `<${ours.id}@${ours.mailHostname}>`;
  if (clientMessageId === null) kept.push(`Message-ID: ${messageId}\r\n`);
  if (named('date').length === 0) kept.push(`Date: ${rfc5322Date(ours.now)}\r\n`);
  const subject = named('subject')[0];
  return {
    header: Buffer.from(`${kept.join('')}\r\n`, 'latin1'),
    from: parsed.value,
    subject: subject === undefined ? '' : decodeEncodedWords(fieldValue(subject)),
    clientMessageId,
    messageId,
  };
}

import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * The envelope sender of every outbound transaction: a VERP address on MAIL_HOSTNAME that names the email and the
 * recipient's position in its `to` list, so an asynchronous bounce or complaint can be tied to the right recipient:
 * `bounce+<email id, 32 hex>.<index>.<tag>@MAIL_HOSTNAME`.
 *
 * The tag (the first TAG_HEX hex digits of an HMAC-SHA256 of the rest under the server's secret key, as BATV signs a
 * return path) makes the address unforgeable: each recipient's copy carries only its own, and a recipient who saw
 * `...0.<tag>` cannot write the address of the recipient at index 1, so nobody can bounce or complain in another
 * recipient's name, and a made-up address is refused at RCPT. A server without a secret key (SECRET_KEY=off) writes and
 * reads addresses without a tag, and cannot tell a forged index. One with a key reads an address without a tag (mail
 * sent by an earlier version) as unsigned: trusted only where forging gains nothing (verpTrusted), and an address
 * with a wrong tag (another key's) not at all.
 */

/** 40 bits: guessing a tag takes about 2^39 SMTP transactions. */
const TAG_HEX = 10;

const tagOf = (key: Buffer, hex: string, index: number): string => createHmac('sha256', key).update(`verp:${hex}.${index}`).digest('hex').slice(0, TAG_HEX);

export function verpAddress(emailId: string, recipientIndex: number, mailHostname: string, key: Buffer | null): string {
  const hex = emailId.replace(/-/g, '').toLowerCase();
  return `bounce+${hex}.${recipientIndex}${key ? `.${tagOf(key, hex, recipientIndex)}` : ''}@${mailHostname}`;
}

export interface Verp {
  emailId: string;
  recipientIndex: number;
  /** Carried a tag this server's key made (false: no tag at all). */
  signed: boolean;
}

/** The email id and recipient index a VERP address names, or null (also when it has a tag that is wrong). */
export function parseVerp(address: string, mailHostname: string, key: Buffer | null): Verp | null {
  const m = /^bounce\+([0-9a-f]{32})\.(\d{1,2})(?:\.([0-9a-f]+))?@(.+)$/i.exec(address.trim());
  if (!m || m[4]!.toLowerCase() !== mailHostname.toLowerCase()) return null;
  const h = m[1]!.toLowerCase();
  const index = Number(m[2]);
  const tag = m[3]?.toLowerCase();
  if (tag !== undefined) {
    // Remote servers may change the case of a local part: compared in lower case, in constant time.
    if (!key || tag.length !== TAG_HEX || !timingSafeEqual(Buffer.from(tag), Buffer.from(tagOf(key, h, index)))) return null;
  }
  return {
    emailId: `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`,
    recipientIndex: index,
    signed: tag !== undefined,
  };
}

/**
 * Whether a parsed VERP address may stand for its recipient of an email to `recipients` addresses: a signed one always;
 * an unsigned one (an earlier version's, or any on a server without a key) only where no other recipient could be
 * named, an email to one recipient, or on a server without a key, which has nothing better.
 */
export function verpTrusted(verp: Verp, recipients: number, key: Buffer | null): boolean {
  return verp.signed || !key || recipients === 1;
}

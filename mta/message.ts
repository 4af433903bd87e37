import MailComposer from 'nodemailer/lib/mail-composer';
import type { OutboundMessageRow } from '../db/schema/index.js';
import { type SigningKey, dkimSignature } from './dkim.js';

/** Every line break as CRLF: no bare CR or LF reaches the wire. */
export function toCrlf(text: string): string {
  return text.replace(/\r\n|\r|\n/g, '\r\n');
}

/** Lines of a header field, folded where it has spaces so that each stays within 78 characters where it can. */
export function foldHeader(name: string, value: string): string {
  let out = `${name}:`;
  let line = out.length;
  // The value is built by formatMailbox (no line breaks); a stray one must still never start a header of its own.
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

/**
 * The message as sent: From and Reply-To as the send built them (ASCII, non-ASCII names as bare RFC 2047 encoded
 * words; the composer would re-parse them and quote the encoded words, which RFC 2047 forbids), Message-ID, Date,
 * MIME-Version, multipart/alternative text and html, every line ending CRLF; then a DKIM-Signature (rsa-sha256,
 * relaxed/relaxed) with the domain's prepared key, timestamped `signTime`.
 */
export async function buildSignedMessage(msg: OutboundMessageRow, recipients: string[], key: SigningKey, signTime: Date): Promise<Buffer> {
  const addressHeaders = foldHeader('From', msg.fromHeader) + (msg.replyToHeader ? foldHeader('Reply-To', msg.replyToHeader) : '');
  const mime = new MailComposer({
    to: recipients,
    subject: msg.subject,
    messageId: msg.messageId,
    date: new Date(msg.createdAt),
    text: toCrlf(msg.text),
    html: toCrlf(msg.html),
    disableFileAccess: true,
    disableUrlAccess: true,
  }).compile();
  mime.newline = '\r\n';
  return signMessage(Buffer.concat([Buffer.from(addressHeaders, 'ascii'), await mime.build()]), key, signTime);
}

/** The message with its DKIM-Signature prepended. */
export function signMessage(raw: Buffer, key: SigningKey, signTime: Date): Buffer {
  return Buffer.concat([Buffer.from(dkimSignature(raw, key, signTime)), raw]);
}

import MailComposer from 'nodemailer/lib/mail-composer';
import type { OutboundMessageRow } from '../db/schema/index.js';
import { type SigningKey, dkimSignature } from './dkim.js';

/** Every line break as CRLF: no bare CR or LF reaches the wire. */
export function toCrlf(text: string): string {
  return text.replace(/\r\n|\r|\n/g, '\r\n');
}

/**
 * The message as sent: Message-ID, Date, the rebuilt From, Reply-To, MIME-Version, multipart/alternative text and
 * html, every line ending CRLF; then a DKIM-Signature (rsa-sha256, relaxed/relaxed) with the domain's prepared key,
 * timestamped `signTime`.
 */
export async function buildSignedMessage(msg: OutboundMessageRow, recipients: string[], key: SigningKey, signTime: Date): Promise<Buffer> {
  const mime = new MailComposer({
    from: msg.fromHeader,
    to: recipients,
    replyTo: msg.replyToHeader ?? undefined,
    subject: msg.subject,
    messageId: msg.messageId,
    date: new Date(msg.createdAt),
    text: toCrlf(msg.text),
    html: toCrlf(msg.html),
    disableFileAccess: true,
    disableUrlAccess: true,
  }).compile();
  mime.newline = '\r\n';
  return signMessage(await mime.build(), key, signTime);
}

/** The message with its DKIM-Signature prepended. */
export function signMessage(raw: Buffer, key: SigningKey, signTime: Date): Buffer {
  return Buffer.concat([Buffer.from(dkimSignature(raw, key, signTime)), raw]);
}

import type { OutboundMessageRow } from '../db/schema/index.js';
import { type SigningKey, dkimSignature } from './dkim.js';
import { buildMime } from './mime.js';

/**
 * The message as sent: From and Reply-To as the send built them (ASCII, non-ASCII names as bare RFC 2047 encoded
 * words), To, Subject, Message-ID, Date, MIME-Version, multipart/alternative text and html, in multipart/related with
 * its inline parts and multipart/mixed with its attachments when it has them (mta/mime.ts), every line
 * ending CRLF; then a DKIM-Signature (rsa-sha256, relaxed/relaxed) with the domain's prepared key, timestamped
 * `signTime`. Runs in the signer's thread (mta/signer.ts). A message submitted over SMTP (`raw`) is sent as submitted,
 * with only the signature added.
 */
export function buildSignedMessage(msg: OutboundMessageRow, recipients: readonly string[], key: SigningKey, signTime: Date): Buffer {
  // A submitted message goes as the client wrote it (its own To and Cc), only signed; a row handed to the signer's
  // thread carries it as a Uint8Array.
  if (msg.raw) return signMessage(Buffer.from(msg.raw.buffer, msg.raw.byteOffset, msg.raw.byteLength), key, signTime);
  const raw = buildMime({
    fromHeader: msg.fromHeader,
    replyToHeader: msg.replyToHeader,
    to: recipients,
    subject: msg.subject,
    messageId: msg.messageId,
    date: msg.createdAt,
    text: msg.text,
    html: msg.html,
    attachments: msg.attachments,
  });
  return signMessage(raw, key, signTime);
}

/** The message with its DKIM-Signature prepended. */
export function signMessage(raw: Buffer, key: SigningKey, signTime: Date): Buffer {
  return Buffer.concat([Buffer.from(dkimSignature(raw, key, signTime)), raw]);
}

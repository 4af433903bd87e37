import MailComposer from 'nodemailer/lib/mail-composer';
import { dkimSign } from 'mailauth/lib/dkim/sign.js';
import type { OutboundMessageRow } from '../db/schema/index.js';

/** Every line break as CRLF: no bare CR or LF reaches the wire. */
export function toCrlf(text: string): string {
  return text.replace(/\r\n|\r|\n/g, '\r\n');
}

export interface SigningKey {
  domain: string;
  selector: string;
  /** PKCS#8 PEM, decrypted once per domain key and cached by the engine. */
  privateKeyPem: string;
}

/**
 * The message as sent: Message-ID, Date, the rebuilt From, Reply-To, MIME-Version, multipart/alternative text and
 * html, every line ending CRLF; then a DKIM-Signature (rsa-sha256, relaxed/relaxed) made by mailauth.
 */
export async function buildSignedMessage(msg: OutboundMessageRow, recipients: string[], key: SigningKey): Promise<Buffer> {
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
  return signMessage(await mime.build(), key);
}

/** Prepends a DKIM-Signature made by mailauth: rsa-sha256, relaxed/relaxed, the domain's selector and key. */
export async function signMessage(raw: Buffer, key: SigningKey): Promise<Buffer> {
  const signature = { signingDomain: key.domain, selector: key.selector, privateKey: key.privateKeyPem, algorithm: 'rsa-sha256', canonicalization: 'relaxed/relaxed' };
  // mailauth 4 signs only what is listed in signatureData; its types also want the fields at the top level.
  const signed = await dkimSign(raw, { ...signature, signatureData: [signature] });
  // Its errors are { err } records, whatever the types say.
  const failure: unknown = signed.errors?.[0];
  if (failure) {
    const reason = (failure as { err?: Error }).err?.message ?? String(failure);
    throw new Error(`DKIM signing failed for ${key.domain}: ${reason}`);
  }
  return Buffer.concat([Buffer.from(signed.signatures), raw]);
}

import { type KeyObject, createPrivateKey, sign } from 'node:crypto';
import { dkimBody } from 'mailauth/lib/dkim/body/index.js';
import { generateCanonicalizedHeader } from 'mailauth/lib/dkim/header/index.js';
import { defaultDKIMFieldNames, formatSignatureHeaderLine, getSigningHeaderLines, parseHeaders } from 'mailauth/lib/tools.js';

/** A domain's DKIM key, prepared once: the PEM is parsed into a KeyObject when the key is first used, not per message. */
export interface SigningKey {
  domain: string;
  selector: string;
  privateKey: KeyObject;
}

export function prepareSigningKey(domain: string, selector: string, privateKeyPem: string): SigningKey {
  return { domain, selector, privateKey: createPrivateKey(privateKeyPem) };
}

const ALGORITHM = 'rsa-sha256';
const CANONICALIZATION = 'relaxed/relaxed';
const HEADER_END = Buffer.from('\r\n\r\n');

/**
 * The DKIM-Signature header line (with its CRLF) for a CRLF message: rsa-sha256, relaxed/relaxed, mailauth's default
 * header list. mailauth's own body hasher, header canonicalizer and header formatter do the DKIM work; only the RSA
 * signature is made here, with the prepared key, because mailauth's dkimSign takes a PEM and parses it on every call,
 * which costs more than the signature itself.
 */
export function dkimSignature(raw: Buffer, key: SigningKey, signTime: Date): string {
  const split = raw.indexOf(HEADER_END);
  if (split < 0) throw new Error('DKIM: the message has no header/body separator');
  const headers = parseHeaders(raw.subarray(0, split + 2));
  const body = dkimBody('relaxed', 'sha256', false);
  body.update(raw.subarray(split + HEADER_END.length));
  const lines = getSigningHeaderLines(headers.parsed, defaultDKIMFieldNames);
  const { canonicalizedHeader, dkimHeaderOpts } = generateCanonicalizedHeader('DKIM', lines, {
    signingDomain: key.domain,
    selector: key.selector,
    algorithm: ALGORITHM,
    canonicalization: CANONICALIZATION,
    bodyHash: body.digest('base64'),
    signTime,
  });
  const b = sign(ALGORITHM, canonicalizedHeader, key.privateKey).toString('base64');
  return `${formatSignatureHeaderLine('DKIM', { ...dkimHeaderOpts, b }, true)}\r\n`;
}

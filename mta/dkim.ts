import { type KeyObject, createHash, createPrivateKey, sign } from 'node:crypto';

/**
 * DKIM signing (RFC 6376) of the service's own outbound messages: rsa-sha256, relaxed/relaxed, with a domain key
 * parsed once. Written here rather than through mailauth's signer, which takes a PEM and parses it on every call and
 * whose canonicalization costs a third of the RSA signature; mailauth's verifier is what the tests check it against
 * (tests/dkim-signer.test.ts).
 */

/** A domain's DKIM key, prepared once: the PEM is parsed into a KeyObject when the key is first used, not per message. */
export interface SigningKey {
  domain: string;
  selector: string;
  privateKey: KeyObject;
}

export function prepareSigningKey(domain: string, selector: string, privateKeyPem: string): SigningKey {
  return { domain, selector, privateKey: createPrivateKey(privateKeyPem) };
}

/**
 * The header fields signed when present (mailauth's default list): those a receiver shows or that change how the
 * body reads. Each instance present is signed.
 */
export const SIGNED_FIELDS: ReadonlySet<string> = new Set(
  [
    'From',
    'Sender',
    'Reply-To',
    'Subject',
    'Date',
    'Message-ID',
    'To',
    'Cc',
    'MIME-Version',
    'Content-Type',
    'Content-Transfer-Encoding',
    'Content-ID',
    'Content-Description',
    'Resent-Date',
    'Resent-From',
    'Resent-Sender',
    'Resent-To',
    'Resent-Cc',
    'Resent-Message-ID',
    'In-Reply-To',
    'References',
    'List-Id',
    'List-Help',
    'List-Unsubscribe',
    'List-Subscribe',
    'List-Post',
    'List-Owner',
    'List-Archive',
    'BIMI-Selector',
  ].map((f) => f.toLowerCase()),
);

const CR = 13;
const LF = 10;
const SP = 32;
const TAB = 9;
const HEADER_END = Buffer.from('\r\n\r\n');

/**
 * The relaxed body (RFC 6376 3.4.4): whitespace at the end of each line removed, runs of it inside a line made one
 * space, empty lines at the end removed, and a last line without CRLF given one. An empty body stays empty.
 */
export function relaxedBody(body: Buffer): Buffer {
  const out = Buffer.allocUnsafe(body.length + 2);
  let o = 0;
  let pendingSpace = false;
  let lineHasContent = false;
  /** Where the canonical body ends: after the CRLF of the last line that is not empty. */
  let end = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (c === SP || c === TAB) {
      pendingSpace = true;
    } else if (c === CR && body[i + 1] === LF) {
      pendingSpace = false;
      out[o++] = CR;
      out[o++] = LF;
      i++;
      if (lineHasContent) end = o;
      lineHasContent = false;
    } else {
      if (pendingSpace) out[o++] = SP;
      pendingSpace = false;
      out[o++] = c;
      lineHasContent = true;
    }
  }
  if (lineHasContent) {
    out[o++] = CR;
    out[o++] = LF;
    end = o;
  }
  return out.subarray(0, end);
}

/** A header field in relaxed form (RFC 6376 3.4.2), with its CRLF: name lower-cased, value unfolded and trimmed. */
function relaxedHeader(field: string): string {
  const colon = field.indexOf(':');
  const name = field.slice(0, colon).trim().toLowerCase();
  const value = field
    .slice(colon + 1)
    .replace(/\r\n/g, '')
    .replace(/[ \t]+/g, ' ')
    .trim();
  return `${name}:${value}\r\n`;
}

/** The fields of a header section (CRLF after each), folded lines kept with their field. */
function headerFields(head: string): string[] {
  return head.split(/\r\n(?![ \t])/).filter((f) => f !== '');
}

/** Names joined by colons, a fold after a colon wherever a line would pass 77 characters. */
function foldList(names: readonly string[], column: number): string {
  let out = '';
  let width = column;
  names.forEach((name, i) => {
    const piece = i === 0 ? name : `:${name}`;
    if (i > 0 && width + piece.length > 76) {
      out += `:\r\n ${name}`;
      width = 1 + name.length;
    } else {
      out += piece;
      width += piece.length;
    }
  });
  return out;
}

/**
 * The DKIM-Signature header line (with its CRLF) for a CRLF message, timestamped `signTime`. Each instance of a
 * signed field is signed, the bottom one first for a name that repeats (RFC 6376 5.4.2).
 */
export function dkimSignature(raw: Buffer, key: SigningKey, signTime: Date): string {
  const split = raw.indexOf(HEADER_END);
  if (split < 0) throw new Error('DKIM: the message has no header/body separator');
  const bodyHash = createHash('sha256')
    .update(relaxedBody(raw.subarray(split + HEADER_END.length)))
    .digest('base64');

  const byName = new Map<string, string[]>();
  const names: string[] = [];
  for (const field of headerFields(raw.toString('latin1', 0, split))) {
    const colon = field.indexOf(':');
    if (colon <= 0) continue;
    const name = field.slice(0, colon).trim();
    const lower = name.toLowerCase();
    if (!SIGNED_FIELDS.has(lower)) continue;
    names.push(name);
    byName.set(lower, [...(byName.get(lower) ?? []), field]);
  }
  // h= lists one name per instance; the verifier takes the instances of a name from the bottom up.
  let signed = '';
  for (const name of names) signed += relaxedHeader(byName.get(name.toLowerCase())!.pop()!);

  const t = Math.floor(signTime.getTime() / 1000);
  // Folded within 78 characters where the values allow: between tags, between the names of h=, and inside b=.
  // The header is signed as a verifier reads it (relaxed: a fold is the space it stands for), with b= empty; then b=
  // is filled in, whose value (with its whitespace) a verifier removes before it checks.
  const head = `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed;\r\n d=${key.domain}; q=dns/txt; s=${key.selector};\r\n t=${t}; h=${foldList(names, 't=0000000000; h='.length)};\r\n bh=${bodyHash};\r\n b=`;
  const b = sign('sha256', Buffer.from(signed + relaxedHeader(head).slice(0, -2), 'latin1'), key.privateKey).toString('base64');
  const folded = `${head}${b.replace(/.{1,72}/g, '$&\r\n ').trimEnd()}`;
  return `${folded}\r\n`;
}

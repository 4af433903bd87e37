import { isIP } from 'node:net';
import { domainToASCII } from 'node:url';

export type NameResult = { ok: true; name: string } | { ok: false; reason: string };

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * A domain name as the service stores it (docs/api/decisions.md section 5): trimmed, lower-cased, trailing dot removed, IDN as
 * punycode. A scheme, path, port, user info, IP address, single label or malformed label is refused with a reason.
 */
export function normalizeDomainName(input: unknown): NameResult {
  if (typeof input !== 'string') return { ok: false, reason: 'must be a string' };
  let s = input.trim().toLowerCase();
  if (s === '') return { ok: false, reason: 'must not be empty' };
  if (/^[a-z][a-z0-9+.-]*:\/\//.test(s)) return { ok: false, reason: 'must be a bare domain name, without a scheme' };
  if (/[/?#\\]/.test(s)) return { ok: false, reason: 'must be a bare domain name, without a path' };
  if (s.includes('@')) return { ok: false, reason: 'must be a bare domain name, without user info' };
  if (isIP(s) || isIP(s.replace(/^\[|\]$/g, '')) || s.startsWith('[')) return { ok: false, reason: 'must be a domain name, not an IP address' };
  if (s.includes(':')) return { ok: false, reason: 'must be a bare domain name, without a port' };
  if (/\s/.test(s)) return { ok: false, reason: 'must not contain spaces' };
  // domainToASCII would decode percent-escapes (URL host parsing): a name is never URL-encoded.
  if (s.includes('%')) return { ok: false, reason: 'must be a bare domain name, not URL-encoded' };
  if (s.endsWith('.')) s = s.slice(0, -1);
  if (isIP(s)) return { ok: false, reason: 'must be a domain name, not an IP address' };
  const ascii = domainToASCII(s);
  if (ascii === '') return { ok: false, reason: 'is not a valid domain name' };
  const labels = ascii.split('.');
  if (labels.length < 2) return { ok: false, reason: 'must have at least two labels, such as example.com' };
  if (ascii.length > 253) return { ok: false, reason: 'must be at most 253 characters' };
  for (const label of labels) {
    if (label.length > 63) return { ok: false, reason: 'has a label longer than 63 characters' };
    if (!LABEL.test(label)) return { ok: false, reason: `has an invalid label "${label}"` };
  }
  if (/^\d+$/.test(labels[labels.length - 1]!)) return { ok: false, reason: 'must end in a top-level domain, not a number' };
  return { ok: true, name: ascii };
}

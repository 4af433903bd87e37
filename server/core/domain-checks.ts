import type { CheckValue, RecordKind, RecordStatus } from '../../db/schema/index.js';
import type { DeliveryMode } from '../shared/config.js';
import type { Lookup, MxRecord } from '../shared/dns/resolver.js';

/**
 * Reading DNS answers as DNS means them: a TXT record's character-strings joined, names compared case-insensitively
 * and without a trailing dot, SPF matched by its include: mechanism among others.
 */

export type Checks = Record<RecordKind, CheckValue>;

const joinTxt = (record: string[]) => record.join('');
const hostOf = (name: string) => name.trim().toLowerCase().replace(/\.$/, '');

function fromTxt(lookup: Lookup<string[]>, match: (text: string[]) => boolean, found: 'proven' | 'published'): CheckValue {
  if (lookup.status === 'unknown') return 'unknown';
  if (lookup.status === 'missing') return 'missing';
  return match(lookup.records.map(joinTxt)) ? found : 'missing';
}

export function checkOwnership(lookup: Lookup<string[]>, token: string): CheckValue {
  return fromTxt(lookup, (texts) => texts.some((t) => t.trim() === `service-verify=${token}`), 'proven');
}

/** Published when the domain's one SPF record includes `spfDomain`; two SPF records are an error in SPF itself. */
export function checkSpf(lookup: Lookup<string[]>, spfDomain: string): CheckValue {
  return fromTxt(
    lookup,
    (texts) => {
      const spf = texts.filter((t) => /^v=spf1(\s|$)/i.test(t.trim()));
      if (spf.length !== 1) return false;
      const wanted = `include:${hostOf(spfDomain)}`;
      return spf[0]!
        .trim()
        .split(/\s+/)
        .some((term) => hostOf(term.replace(/^\+/, '')) === wanted);
    },
    'published',
  );
}

export function checkMx(lookup: Lookup<MxRecord>, mailHostname: string): CheckValue {
  if (lookup.status !== 'found') return lookup.status;
  return lookup.records.some((r) => hostOf(r.exchange) === hostOf(mailHostname)) ? 'published' : 'missing';
}

/** DKIM tags as RFC 6376 writes them: `tag=value` pairs separated by semicolons, whitespace ignored. */
export function dkimTags(text: string): Map<string, string> {
  const tags = new Map<string, string>();
  for (const part of text.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0) tags.set(part.slice(0, eq).trim().toLowerCase(), part.slice(eq + 1).replace(/\s+/g, ''));
  }
  return tags;
}

export function checkSigning(lookup: Lookup<string[]>, publicKey: string): CheckValue {
  return fromTxt(
    lookup,
    (texts) =>
      texts.some((t) => {
        const tags = dkimTags(t);
        const k = tags.get('k');
        return tags.get('p') === publicKey && (k === undefined || k.toLowerCase() === 'rsa');
      }),
    'published',
  );
}

/**
 * A check's effect on a record's stored status: found publishes it, a definite absence withdraws it, and no answer
 * (unknown) leaves what the last verification found.
 */
export function nextRecordStatus(previous: RecordStatus, check: CheckValue): RecordStatus {
  if (check === 'unknown') return previous;
  return check === 'missing' ? 'pending' : 'published';
}

export interface DomainFlags {
  status: 'pending' | 'verified';
  ownershipVerified: boolean;
  sending: boolean;
  receiving: boolean;
  direct: boolean;
}

/**
 * The Domain resource's flags from what DNS showed (docs/api/contract.md, Domain transitions; docs/api/decisions.md section 5). Ownership
 * gates everything: without it a domain neither sends nor receives, so a name's mail cannot be taken over by an
 * account that never proved it holds the name.
 */
export function deriveFlags(records: Record<RecordKind, RecordStatus>, relayConfigured: boolean): DomainFlags {
  const ownershipVerified = records.ownership === 'published';
  const direct = ownershipVerified && records.signing === 'published' && records.spf === 'published';
  return {
    status: ownershipVerified ? 'verified' : 'pending',
    ownershipVerified,
    sending: ownershipVerified && (direct || relayConfigured),
    receiving: ownershipVerified && records.receiving === 'published',
    direct,
  };
}

/**
 * Top-level names no one can register (RFC 2606, RFC 6761). In DELIVERY_MODE=capture a domain under one verifies
 * without DNS, every record found, since no DNS could ever prove it and its mail never leaves the machine; in direct
 * mode they are checked against DNS like any other name.
 */
export const RESERVED_TLDS: readonly string[] = ['test', 'example', 'invalid', 'localhost'];

export function isUnderReservedTld(name: string): boolean {
  const tld = name.toLowerCase().replace(/\.$/, '').split('.').pop() ?? '';
  return RESERVED_TLDS.includes(tld);
}

/** Whether a verify of `name` skips DNS: capture mode and a name under a reserved TLD (verifyDomain's rule). */
export function verifiesWithoutDns(deliveryMode: DeliveryMode, name: string): boolean {
  return deliveryMode === 'capture' && isUnderReservedTld(name);
}

/** What a verify of a reserved name answers in capture mode: everything found. */
export const RESERVED_NAME_CHECKS: Readonly<Checks> = { ownership: 'proven', receiving: 'published', signing: 'published', spf: 'published' };

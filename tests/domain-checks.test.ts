import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { CheckValue, RecordKind, RecordStatus } from '../db/schema/index.js';
import { checkMx, checkOwnership, checkSigning, checkSpf, deriveFlags, nextRecordStatus, type DomainFlags } from '../server/core/domain-checks.js';
import type { Lookup, MxRecord } from '../server/shared/dns/resolver.js';

/**
 * The checks read DNS answers as DNS means them (docs/api/decisions.md section 5): a TXT record's strings
 * joined, names case-insensitive and with or without the trailing dot, SPF matched by its include: among other
 * mechanisms. Each is a table: what the resolver answered, what the check makes of it.
 */

const txt = (...records: (string | string[])[]): Lookup<string[]> => ({
  status: 'found',
  records: records.map((r) => (Array.isArray(r) ? r : [r])),
});
const mx = (...records: [number, string][]): Lookup<MxRecord> => ({
  status: 'found',
  records: records.map(([priority, exchange]) => ({ priority, exchange })),
});
const NXDOMAIN = { status: 'missing', nxdomain: true } as const;
const NODATA = { status: 'missing', nxdomain: false } as const;
const TIMEOUT = { status: 'unknown', reason: 'timeout' } as const;
const SERVFAIL = { status: 'unknown', reason: 'eservfail' } as const;

/** Splits a value into DNS character-strings of at most `size` octets, as a zone file or provider does. */
const split = (value: string, size = 255): string[] => value.match(new RegExp(`[^]{1,${size}}`, 'g')) ?? [''];

describe('checkOwnership: _service-verify.<domain> TXT service-verify=<token>', () => {
  const token = '5f0c6a1e9b2d4c7f8a3e6d1b0c9f2a4e7d8b1c3a';
  const cases: [string, Lookup<string[]>, CheckValue][] = [
    ['the exact record', txt(`service-verify=${token}`), 'proven'],
    ['the record among other TXT records at the name', txt('something-else=1', `service-verify=${token}`, 'v=spf1 -all'), 'proven'],
    ['the record split across character-strings', txt(['service-verify=', token.slice(0, 10), token.slice(10)]), 'proven'],
    ['another token', txt(`service-verify=${'0'.repeat(40)}`), 'missing'],
    ['the token with something appended', txt(`service-verify=${token}x`), 'missing'],
    ['a truncated token', txt(`service-verify=${token.slice(0, -1)}`), 'missing'],
    ['the token under another prefix', txt(`other-verify=${token}`), 'missing'],
    ['the token alone', txt(token), 'missing'],
    ['other TXT records only', txt('google-site-verification=abc'), 'missing'],
    ['NXDOMAIN', NXDOMAIN, 'missing'],
    ['a name without TXT records', NODATA, 'missing'],
    ['no answer in time', TIMEOUT, 'unknown'],
    ['SERVFAIL', SERVFAIL, 'unknown'],
  ];
  it.each(cases)('%s → %s', (_, lookup, expected) => {
    expect(checkOwnership(lookup, token)).toBe(expected);
  });
});

describe('checkSpf: the domain’s one SPF record includes SPF_DOMAIN', () => {
  const spfDomain = 'mx.mailstead.test';
  const cases: [string, Lookup<string[]>, CheckValue][] = [
    ['the record as returned', txt('v=spf1 include:mx.mailstead.test ~all'), 'published'],
    ['the include among other mechanisms', txt('v=spf1 ip4:1.2.3.4 include:_spf.google.com include:mx.mailstead.test -all'), 'published'],
    ['the include first, then others', txt('v=spf1 include:mx.mailstead.test a mx ip6:2001:db8::/32 ?all'), 'published'],
    ['an explicit + qualifier', txt('v=spf1 +include:mx.mailstead.test -all'), 'published'],
    ['upper case throughout', txt('V=SPF1 INCLUDE:MX.MAILSTEAD.TEST ~ALL'), 'published'],
    ['mixed case host', txt('v=spf1 include:Mx.MailStead.Test ~all'), 'published'],
    ['a trailing dot on the included host', txt('v=spf1 include:mx.mailstead.test. ~all'), 'published'],
    ['extra whitespace between terms', txt('v=spf1   ip4:1.2.3.4    include:mx.mailstead.test  -all'), 'published'],
    ['the record split across character-strings', txt(['v=spf1 ip4:1.2.3.4 include:_spf.goo', 'gle.com include:mx.mailstead.test -all']), 'published'],
    ['beside other, non-SPF TXT records', txt('google-site-verification=abc', 'v=spf1 include:mx.mailstead.test ~all', 'ms-verify=1'), 'published'],
    [
      'two SPF records, both with the include (a permerror in SPF)',
      txt('v=spf1 include:mx.mailstead.test ~all', 'v=spf1 include:mx.mailstead.test -all'),
      'missing',
    ],
    ['two SPF records, one with the include', txt('v=spf1 include:_spf.google.com ~all', 'v=spf1 include:mx.mailstead.test ~all'), 'missing'],
    ['an SPF record without the include', txt('v=spf1 include:_spf.google.com ~all'), 'missing'],
    ['no SPF record, only other TXT records', txt('google-site-verification=abc', 'include:mx.mailstead.test'), 'missing'],
    ['the include with a fail qualifier', txt('v=spf1 -include:mx.mailstead.test ~all'), 'missing'],
    ['a longer host ending in another domain', txt('v=spf1 include:mx.mailstead.test.evil.example ~all'), 'missing'],
    ['a host that merely ends with the name', txt('v=spf1 include:xmx.mailstead.test ~all'), 'missing'],
    ['the host under another mechanism', txt('v=spf1 a:mx.mailstead.test ~all'), 'missing'],
    ['a version that is not spf1', txt('v=spf10 include:mx.mailstead.test ~all'), 'missing'],
    ['NXDOMAIN', NXDOMAIN, 'missing'],
    ['a name without TXT records', NODATA, 'missing'],
    ['no answer in time', TIMEOUT, 'unknown'],
    ['SERVFAIL', SERVFAIL, 'unknown'],
  ];
  it.each(cases)('%s → %s', (_, lookup, expected) => {
    expect(checkSpf(lookup, spfDomain)).toBe(expected);
  });

  it('matches the configured SPF_DOMAIN, not the mail host', () => {
    const lookup = txt('v=spf1 include:mx.mailstead.test ~all');
    expect(checkSpf(lookup, 'spf.mailstead.test')).toBe('missing');
    expect(checkSpf(txt('v=spf1 include:spf.mailstead.test ~all'), 'spf.mailstead.test')).toBe('published');
  });
});

describe('checkMx: an MX at the domain pointing at MAIL_HOSTNAME', () => {
  const host = 'mx.mailstead.test';
  const cases: [string, Lookup<MxRecord>, CheckValue][] = [
    ['the record as returned', mx([10, 'mx.mailstead.test']), 'published'],
    ['a trailing dot', mx([10, 'mx.mailstead.test.']), 'published'],
    ['upper case', mx([10, 'MX.MAILSTEAD.TEST']), 'published'],
    ['upper case with a trailing dot', mx([10, 'MX.Mailstead.TEST.']), 'published'],
    ['among other MX records, at another priority', mx([5, 'mx1.example.net'], [20, 'mx.mailstead.test'], [30, 'mx2.example.net']), 'published'],
    ['other hosts only', mx([10, 'mx1.example.net'], [20, 'mx2.example.net']), 'missing'],
    ['a host that merely ends with the name', mx([10, 'xmx.mailstead.test']), 'missing'],
    ['a longer host ending in another domain', mx([10, 'mx.mailstead.test.evil.example']), 'missing'],
    ['a null MX', mx([0, '']), 'missing'],
    ['NXDOMAIN', NXDOMAIN, 'missing'],
    ['a name without MX records', NODATA, 'missing'],
    ['no answer in time', TIMEOUT, 'unknown'],
    ['SERVFAIL', SERVFAIL, 'unknown'],
  ];
  it.each(cases)('%s → %s', (_, lookup, expected) => {
    expect(checkMx(lookup, host)).toBe(expected);
  });
});

describe('checkSigning: <selector>._domainkey.<domain> TXT with the domain’s public key', () => {
  const spki = (bits = 2048) =>
    generateKeyPairSync('rsa', {
      modulusLength: bits,
      publicKeyEncoding: { type: 'spki', format: 'der' },
      privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    }).publicKey.toString('base64');
  const key = spki();
  const other = spki();
  const record = `v=DKIM1; h=sha256; k=rsa; p=${key}`;
  const spaced = `v=DKIM1; h=sha256; k=rsa; p=${key.match(/.{1,64}/g)!.join(' ')}`;
  const cases: [string, Lookup<string[]>, CheckValue][] = [
    ['the record as one string', txt(record), 'published'],
    ['the record split into 255-octet strings, as real DNS serves it', txt(split(record)), 'published'],
    ['the record split into many short strings', txt(split(record, 60)), 'published'],
    ['whitespace inside p=', txt(spaced), 'published'],
    ['whitespace inside p= and split across strings', txt(split(spaced, 100)), 'published'],
    ['folding whitespace around tags', txt(`v = DKIM1 ;\th=sha256 ;  k = rsa ; p = ${key} ;`), 'published'],
    ['tags in another order', txt(`k=rsa; p=${key}; v=DKIM1`), 'published'],
    ['no k= tag (rsa is the default)', txt(`v=DKIM1; p=${key}`), 'published'],
    ['beside another TXT record at the name', txt('unrelated=1', record), 'published'],
    ['another key', txt(`v=DKIM1; h=sha256; k=rsa; p=${other}`), 'missing'],
    ['a revoked key (empty p=)', txt('v=DKIM1; h=sha256; k=rsa; p='), 'missing'],
    ['the key with a string missing', txt(split(record).slice(0, -1)), 'missing'],
    ['the key under another algorithm', txt(`v=DKIM1; k=ed25519; p=${key}`), 'missing'],
    ['no p= tag', txt('v=DKIM1; h=sha256; k=rsa'), 'missing'],
    ['NXDOMAIN', NXDOMAIN, 'missing'],
    ['a name without TXT records', NODATA, 'missing'],
    ['no answer in time', TIMEOUT, 'unknown'],
    ['SERVFAIL', SERVFAIL, 'unknown'],
  ];
  it.each(cases)('%s → %s', (_, lookup, expected) => {
    expect(checkSigning(lookup, key)).toBe(expected);
  });
});

describe('nextRecordStatus: what a check does to a record’s stored status', () => {
  const cases: [RecordStatus, CheckValue, RecordStatus][] = [
    ['pending', 'proven', 'published'],
    ['pending', 'published', 'published'],
    ['pending', 'missing', 'pending'],
    ['pending', 'unknown', 'pending'],
    ['published', 'proven', 'published'],
    ['published', 'published', 'published'],
    // A record found before and now gone withdraws what it granted.
    ['published', 'missing', 'pending'],
    // No answer is not an absence: the last verification's finding stands.
    ['published', 'unknown', 'published'],
  ];
  it.each(cases)('%s, check %s → %s', (previous, check, expected) => {
    expect(nextRecordStatus(previous, check)).toBe(expected);
  });
});

describe('deriveFlags: the Domain resource’s status and flags from its records', () => {
  type Published = Partial<Record<RecordKind, true>>;
  const records = (published: Published): Record<RecordKind, RecordStatus> => ({
    ownership: published.ownership ? 'published' : 'pending',
    spf: published.spf ? 'published' : 'pending',
    receiving: published.receiving ? 'published' : 'pending',
    signing: published.signing ? 'published' : 'pending',
  });
  const flags = (status: 'pending' | 'verified', ownershipVerified: boolean, sending: boolean, receiving: boolean, direct: boolean): DomainFlags => ({
    status,
    ownershipVerified,
    sending,
    receiving,
    direct,
  });
  const NOTHING = flags('pending', false, false, false, false);
  const all: Published = { ownership: true, spf: true, receiving: true, signing: true };

  const cases: [string, Published, boolean, DomainFlags][] = [
    ['nothing published', {}, false, NOTHING],
    ['nothing published, relay set', {}, true, NOTHING],
    ['everything published', all, false, flags('verified', true, true, true, true)],
    ['everything published, relay set', all, true, flags('verified', true, true, true, true)],
    ['ownership only', { ownership: true }, false, flags('verified', true, false, false, false)],
    ['ownership only, relay set: sends through the relay', { ownership: true }, true, flags('verified', true, true, false, false)],
    ['ownership, signing and SPF: sends directly', { ownership: true, signing: true, spf: true }, false, flags('verified', true, true, false, true)],
    ['ownership and signing without SPF', { ownership: true, signing: true }, false, flags('verified', true, false, false, false)],
    ['ownership and SPF without signing', { ownership: true, spf: true }, false, flags('verified', true, false, false, false)],
    ['ownership and signing without SPF, relay set', { ownership: true, signing: true }, true, flags('verified', true, true, false, false)],
    ['ownership and MX', { ownership: true, receiving: true }, false, flags('verified', true, false, true, false)],
    // Ownership gates everything (decided): a name's mail cannot be taken by an account that never proved it.
    ['everything but ownership', { spf: true, receiving: true, signing: true }, false, NOTHING],
    ['everything but ownership, relay set', { spf: true, receiving: true, signing: true }, true, NOTHING],
    ['MX without ownership', { receiving: true }, false, NOTHING],
    ['signing and SPF without ownership', { signing: true, spf: true }, false, NOTHING],
  ];
  it.each(cases)('%s', (_, published, relay, expected) => {
    expect(deriveFlags(records(published), relay)).toEqual(expected);
  });
});

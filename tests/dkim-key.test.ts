import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { and, eq } from 'drizzle-orm';
import { dkimSign } from 'mailauth/lib/dkim/sign.js';
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { domainKeys } from '../db/schema/index.js';
import { openDomainPrivateKey } from '../server/core/dkim-keys.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { startService, type TestService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * The DKIM key POST /domains makes is a real one: the private half, stored sealed,
 * signs a message that mailauth verifies against the Signing record as the test DNS server serves it.
 */

interface RecordBody {
  record: string;
  type: string;
  name: string;
  value: string;
}

let dns: TestDnsServer;
let service: TestService;
beforeAll(async () => {
  dns = await TestDnsServer.start();
  service = await startService({ DNS_SERVERS: dns.address });
});
afterAll(async () => {
  await service?.close();
  await dns?.stop();
});
beforeEach(() => dns.clear());

/** mailauth's resolver option (dns.promises.resolve's shape), answered by the service's own resolver module. */
async function resolveTxt(name: string, rrtype: string): Promise<string[][]> {
  const lookup = rrtype === 'TXT' ? await service.deps.resolver.txt(name) : null;
  if (lookup?.status === 'found') return lookup.records;
  throw Object.assign(new Error(`no ${rrtype} records at ${name}`), { code: 'ENOTFOUND' });
}

const message = (domain: string, body = 'Hello,\r\n\r\nthis message is signed with the domain key.\r\n') =>
  [
    `From: Sender <sender@${domain}>`,
    'To: Recipient <recipient@example.net>',
    'Subject: DKIM check',
    'Date: Tue, 10 Mar 2026 12:00:00 +0000',
    `Message-ID: <dkim-check@${domain}>`,
    'MIME-Version: 1.0',
    'Content-Type: text/plain; charset=utf-8',
    '',
    body,
  ].join('\r\n');

/** Connects a domain, publishes its Signing record split into 255-octet strings, and opens the stored private key. */
async function connectDomain(name: string) {
  const { account, key } = await service.newAccount();
  const res = await service.api('POST', '/domains', { key, body: { name } });
  expect(res.status).toBe(201);
  const signing = (res.body.records as RecordBody[]).find((r) => r.record === 'Signing')!;
  const selector = signing.name.slice(0, signing.name.indexOf('._domainkey.'));
  dns.add(signing.name, { type: 'TXT', data: signing.value.match(/[^]{1,255}/g)! });
  const row = await one(
    service.deps.db
      .select()
      .from(domainKeys)
      .where(and(eq(domainKeys.accountId, account.id), eq(domainKeys.name, name))),
  );
  if (!row) throw new Error('no domain_keys row');
  const secretKey = service.deps.secretKey;
  if (!secretKey) throw new Error('the test service has no secret key');
  return { account, key, domain: res.body, signing, selector, row, privateKey: openDomainPrivateKey(secretKey, row) };
}

async function sign(raw: string, domain: string, selector: string, privateKey: string): Promise<string> {
  // signTime fixed: without it mailauth 4.13 reads the clock twice (once for the header it signs, once for the header
  // it writes), and a t= that moves across a half second between them makes a bad signature (about 1 run in 300).
  const options = { signingDomain: domain, selector, privateKey, canonicalization: 'relaxed/relaxed', algorithm: 'rsa-sha256', signTime: new Date() };
  // mailauth 4.13 signs with the entries of signatureData; the top-level fields only satisfy its typings.
  const signed = await dkimSign(raw, { ...options, signatureData: [options] });
  expect(signed.errors).toEqual([]);
  expect(signed.signatures).toMatch(/^DKIM-Signature: /);
  return signed.signatures + raw;
}

describe('the DKIM key of a connected domain', () => {
  it('signs a message that mailauth verifies (pass, body hash included) against the record served by DNS', async () => {
    const name = 'dkim-pass.example.com';
    const { key, domain, signing, selector, privateKey } = await connectDomain(name);
    expect(signing.value.length).toBeGreaterThan(255);

    // The service itself sees the record as published.
    const verified = await service.api('POST', `/domains/${domain.id}/verify`, { key });
    expect(verified.body.checks.signing).toBe('published');

    const signed = await sign(message(name), name, selector, privateKey);
    expect(signed).toMatch(/\bbh=/);
    dns.queries = [];
    const result = await dkimVerify(signed, { resolver: resolveTxt });
    expect(result.results).toHaveLength(1);
    const [dkim] = result.results;
    expect(dkim?.status.result, JSON.stringify(dkim)).toBe('pass');
    expect(dkim?.signingDomain).toBe(name);
    expect(dkim?.selector).toBe(selector);
    // The key came from the test DNS server, not from anywhere else.
    expect(dns.queries).toContainEqual({ name: signing.name, type: 'TXT' });
  });

  it('fails verification when the body is altered after signing (the body hash is checked)', async () => {
    const name = 'dkim-body.example.com';
    const { selector, privateKey } = await connectDomain(name);
    const signed = await sign(message(name), name, selector, privateKey);
    const tampered = signed.replace('this message is signed', 'this message was changed');
    expect(tampered).not.toBe(signed);
    const result = await dkimVerify(tampered, { resolver: resolveTxt });
    expect(result.results[0]?.status.result).not.toBe('pass');
    expect(result.results[0]?.status.comment).toMatch(/body hash/);
  });

  it('fails verification for a message signed by another key under the same selector', async () => {
    const name = 'dkim-other.example.com';
    const { selector } = await connectDomain(name);
    const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const signed = await sign(message(name), name, selector, stranger);
    const result = await dkimVerify(signed, { resolver: resolveTxt });
    expect(result.results[0]?.status.result).toBe('fail');
  });

  it('is an RSA-2048 pair whose public half is the p= of the Signing record', async () => {
    const { signing, privateKey } = await connectDomain('dkim-pair.example.com');
    const priv = createPrivateKey(privateKey);
    expect(priv.asymmetricKeyType).toBe('rsa');
    expect(priv.asymmetricKeyDetails?.modulusLength).toBe(2048);
    const published = signing.value.slice(signing.value.indexOf('p=') + 2);
    expect(createPublicKey(priv).export({ type: 'spki', format: 'der' }).toString('base64')).toBe(published);
  });

  it('is stored sealed: no PEM in the column, and it opens only with the server’s secret key and its own account and name', async () => {
    const name = 'dkim-sealed.example.com';
    const { account, row, privateKey } = await connectDomain(name);
    expect(row.dkimPrivateKeySealed).not.toContain('PRIVATE KEY');
    expect(row.dkimPrivateKeySealed).not.toContain('-----');
    const pemBody = privateKey
      .split('\n')
      .filter((l) => l && !l.startsWith('-----'))
      .join('');
    expect(row.dkimPrivateKeySealed).not.toContain(pemBody.slice(40, 80));
    expect(privateKey).toContain('PRIVATE KEY');

    expect(() => openDomainPrivateKey(Buffer.alloc(32, 7), row)).toThrow();
    expect(() => openDomainPrivateKey(service.deps.secretKey!, { ...row, name: 'other.example.com' })).toThrow();
    const other = (await service.newAccount()).account;
    expect(other.id).not.toBe(account.id);
    expect(() => openDomainPrivateKey(service.deps.secretKey!, { ...row, accountId: other.id })).toThrow();
  });

  it('never travels in an API answer', async () => {
    const name = 'dkim-secret.example.com';
    const { key, domain, row, privateKey } = await connectDomain(name);
    const pemBody = privateKey
      .split('\n')
      .filter((l) => l && !l.startsWith('-----'))
      .join('');
    const answers = [
      await service.api('GET', '/domains', { key }),
      await service.api('GET', `/domains/${domain.id}`, { key }),
      await service.api('POST', `/domains/${domain.id}/verify`, { key }),
    ];
    for (const res of answers) {
      expect(res.status).toBe(200);
      const text = JSON.stringify(res.body);
      expect(text).not.toContain('PRIVATE');
      expect(text).not.toContain(pemBody.slice(100, 160));
      expect(text).not.toContain(row.dkimPrivateKeySealed);
    }
  });
});

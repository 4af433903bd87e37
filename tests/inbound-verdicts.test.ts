import { generateKeyPairSync } from 'node:crypto';
import { Readable } from 'node:stream';
import { authenticate, dkimSign } from 'mailauth';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ParseDeps, verdictsOf } from '../server/customer-db/inbound/verdicts.js';
import { createResolver, mailauthResolver } from '../server/shared/dns/resolver.js';
import { createMemoryLogger } from '../server/shared/logger.js';
import { TestDnsServer } from './helpers/dns-server.js';

/**
 * The inbound verdicts (server/customer-db/inbound/verdicts.ts verdictsOf) are mailauth's `authenticate` without ARC and BIMI, composed
 * from its parts so an unsigned message skips the DKIM verifier: here each case is checked against authenticate's own
 * answer for the same message, envelope and DNS.
 */

let dns: TestDnsServer;
let deps: ParseDeps;
const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const p = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');

beforeAll(async () => {
  dns = await TestDnsServer.start();
  dns.add('sender.example', { type: 'TXT', data: 'v=spf1 ip4:192.0.2.10 -all' });
  dns.add('_dmarc.sender.example', { type: 'TXT', data: 'v=DMARC1; p=reject' });
  // In character-strings of at most 255 bytes, as a DNS TXT record holds a long key.
  dns.add('sel._domainkey.sender.example', { type: 'TXT', data: `v=DKIM1; k=rsa; p=${p}`.match(/.{1,255}/g)! });
  dns.add('other.example', { type: 'TXT', data: 'v=spf1 ip4:192.0.2.20 ~all' });
  deps = {
    config: { mailHostname: 'mx.mailstead.test' },
    resolver: createResolver({ servers: [{ host: '127.0.0.1', port: dns.port }] }),
    logger: createMemoryLogger(),
  };
});
afterAll(() => dns.stop());

const body = (from: string) =>
  Buffer.from(
    [`From: ${from}`, 'To: <support@shop.example>', 'Subject: Order 1', 'Message-ID: <o1@sender.example>', '', 'Order 1 has shipped.', ''].join('\r\n'),
  );

async function signed(message: Buffer): Promise<Buffer> {
  // mailauth's types ask for a single signer at the top level; its code reads signatureData (and signTime at the top:
  // without it, it reads the clock twice and a t= that moves between the reads breaks the signature, see dkim-key.test.ts).
  const { signatures } = await dkimSign(message, {
    signTime: new Date(),
    signatureData: [{ signingDomain: 'sender.example', selector: 'sel', privateKey: pem }],
  } as never);
  return Buffer.concat([Buffer.from(signatures), message]);
}

/** authenticate's answer, read the way the service reads verdicts. */
async function reference(raw: Buffer, w: { remoteAddress: string; helo: string; mailFrom: string }) {
  const result = await authenticate(raw, {
    ip: w.remoteAddress,
    helo: w.helo,
    sender: w.mailFrom,
    mta: 'mx.mailstead.test',
    resolver: mailauthResolver(deps.resolver) as never,
    disableArc: true,
    disableBimi: true,
  });
  return {
    spf: result.spf ? String(result.spf.status?.result ?? 'none') : null,
    dkim: String(result.dkim?.results?.[0]?.status?.result ?? 'none'),
    dmarc: result.dmarc ? String(result.dmarc.status?.result ?? 'none') : null,
  };
}

const cases: { name: string; raw: () => Promise<Buffer>; w: { remoteAddress: string; helo: string; mailFrom: string }; expected: object }[] = [
  {
    name: 'unsigned, SPF pass, DMARC pass by SPF',
    raw: async () => body('Orders <orders@sender.example>'),
    w: { remoteAddress: '192.0.2.10', helo: 'mail.sender.example', mailFrom: 'orders@sender.example' },
    expected: { spf: 'pass', dkim: 'none', dmarc: 'pass' },
  },
  {
    name: 'unsigned, SPF fail, DMARC fail',
    raw: async () => body('orders@sender.example'),
    w: { remoteAddress: '198.51.100.7', helo: 'mail.sender.example', mailFrom: 'orders@sender.example' },
    expected: { spf: 'fail', dkim: 'none', dmarc: 'fail' },
  },
  {
    name: 'signed, DKIM pass aligned: DMARC pass with SPF failing',
    raw: () => signed(body('orders@sender.example')),
    w: { remoteAddress: '198.51.100.7', helo: 'x.example', mailFrom: 'bounce@other.example' },
    expected: { spf: 'softfail', dkim: 'pass', dmarc: 'pass' },
  },
  {
    name: 'signed, body changed after signing: DKIM fail',
    raw: async () => Buffer.from((await signed(body('orders@sender.example'))).toString().replace('has shipped', 'was lost')),
    w: { remoteAddress: '198.51.100.7', helo: 'x.example', mailFrom: 'orders@sender.example' },
    expected: { spf: 'fail', dkim: 'neutral', dmarc: 'fail' }, // mailauth's word for a body hash that does not match
  },
  {
    name: 'two From addresses: no DMARC verdict',
    raw: async () => body('a@sender.example, b@other.example'),
    w: { remoteAddress: '192.0.2.10', helo: 'mail.sender.example', mailFrom: 'orders@sender.example' },
    expected: { spf: 'pass', dkim: 'none', dmarc: null },
  },
  {
    name: 'no From header: no DMARC verdict',
    raw: async () => Buffer.from('Subject: none\r\n\r\nbody\r\n'),
    w: { remoteAddress: '192.0.2.10', helo: 'mail.sender.example', mailFrom: 'orders@sender.example' },
    expected: { spf: 'pass', dkim: 'none', dmarc: null },
  },
  {
    name: 'null sender, address-literal HELO',
    raw: async () => body('orders@sender.example'),
    w: { remoteAddress: '192.0.2.10', helo: '192.0.2.10', mailFrom: '' },
    expected: { dkim: 'none' },
  },
  {
    name: 'null sender and no HELO: SPF has only the address to go on',
    raw: async () => body('orders@sender.example'),
    w: { remoteAddress: '192.0.2.10', helo: '', mailFrom: '' },
    expected: { dkim: 'none' },
  },
  {
    name: 'null sender, HELO of a domain with SPF',
    raw: async () => body('orders@sender.example'),
    w: { remoteAddress: '198.51.100.7', helo: 'other.example', mailFrom: '' },
    expected: { spf: 'softfail', dkim: 'none' },
  },
  {
    name: 'no HELO at all',
    raw: async () => body('orders@sender.example'),
    w: { remoteAddress: '192.0.2.10', helo: '', mailFrom: 'orders@sender.example' },
    expected: { spf: 'pass', dkim: 'none' },
  },
  {
    name: 'a header block without a body',
    raw: async () => Buffer.from('From: orders@sender.example\r\nSubject: x\r\n'),
    w: { remoteAddress: '192.0.2.10', helo: 'mail.sender.example', mailFrom: 'orders@sender.example' },
    expected: { spf: 'pass', dkim: 'none' },
  },
];

describe('verdictsOf answers what authenticate answers', () => {
  for (const c of cases) {
    it(c.name, async () => {
      const raw = await c.raw();
      const mine = await verdictsOf(deps, raw, c.w);
      expect(mine).toEqual(await reference(raw, c.w));
      // Read as a stream (a spooled message), the same.
      expect(await verdictsOf(deps, () => Readable.from([raw]), c.w)).toEqual(mine);
      expect(mine).toMatchObject(c.expected);
    });
  }

  it('reads the message in small chunks just the same', async () => {
    const raw = await signed(body('orders@sender.example'));
    const chunks = () => Readable.from(Array.from({ length: Math.ceil(raw.length / 7) }, (_, i) => raw.subarray(i * 7, i * 7 + 7)));
    const w = { remoteAddress: '192.0.2.10', helo: 'mail.sender.example', mailFrom: 'orders@sender.example' };
    expect(await verdictsOf(deps, chunks, w)).toEqual({ spf: 'pass', dkim: 'pass', dmarc: 'pass' });
  });
});

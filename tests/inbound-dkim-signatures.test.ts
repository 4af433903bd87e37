import { createHash } from 'node:crypto';
import { expect, it } from 'vitest';
import { MAX_DKIM_KEY_LOOKUPS, verdictsOf } from '../server/customer-db/inbound/verdicts.js';
import { createMemoryLogger } from '../server/shared/logger.js';

/**
 * verdicts.ts verdictsOf hands every DKIM-Signature of a received message to mailauth's dkimVerify, which resolves each
 * signature's key one after another, with no cap on the number of signatures; failed lookups are never cached
 * (docs/api/behaviour.md: "failures are never kept") and each may take the resolver's 3 s bound (server/shared/dns/resolver.ts). So one
 * small message (here 43 KB: 300 signatures, each for a subdomain of one zone whose DNS is slow) holds the parse of its batch,
 * and every later customer-database write of the account, for 300 × the lookup time: 15 minutes with an
 * unresponsive name server. Here each lookup takes 100 ms and the verdicts take 30 s.
 */

/**
 * mailauth looks up each DKIM signature's key in turn, with no limit: a 44 KB message with 300 signatures on a slow
 * name server held the account's database writes for 300 resolver timeouts (15 minutes at 3 s). Key lookups stop at
 * MAX_DKIM_KEY_LOOKUPS a message; SPF and DMARC add a few of their own.
 */

let lookups = 0;
const slow = async () => {
  lookups++;
  await new Promise((r) => setTimeout(r, 100));
  return { status: 'unknown' as const, reason: 'timeout' };
};
const deps = { config: { mailHostname: 'mx.mailstead.test' }, resolver: { txt: slow, mx: slow, a: slow, aaaa: slow } as never, logger: createMemoryLogger() };

it('the verdicts of a small message with many DKIM signatures take a bounded number of DNS lookups', async () => {
  // One attacker-held zone whose name server is slow: a subdomain of it per signature.
  // The right body hash (relaxed: the body as sent here), so mailauth goes on to fetch each signature's key.
  const bh = createHash('sha256').update('body\r\n').digest('base64');
  const signatures = Array.from(
    { length: 300 },
    (_, i) => `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=s${i}.slow-dns.example; s=k; h=from; bh=${bh}; b=AAAA\r\n`,
  ).join('');
  const raw = Buffer.from(`${signatures}From: a@slow-dns.example\r\nSubject: hi\r\n\r\nbody\r\n`);
  expect(raw.length).toBeLessThan(64 * 1024);
  const started = Date.now();
  const outcome = await Promise.race([
    verdictsOf(deps, raw, { remoteAddress: '192.0.2.1', helo: 'mail.slow-dns.example', mailFrom: 'a@slow-dns.example' }).then(() => 'done'),
    new Promise((resolve) => setTimeout(() => resolve('still resolving after 10 s'), 10_000)),
  ]);
  expect({ outcome, lookups }).toEqual({ outcome: 'done', lookups: expect.any(Number) });
  expect(MAX_DKIM_KEY_LOOKUPS).toBeLessThanOrEqual(10);
  expect(lookups).toBeLessThan(MAX_DKIM_KEY_LOOKUPS + 10);
  expect(Date.now() - started).toBeLessThan(10_000);
}, 60_000);

import { generateKeyPairSync } from 'node:crypto';
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { simpleParser } from 'mailparser';
import { afterAll, describe, expect, it } from 'vitest';
import type { OutboundMessageRow } from '../db/schema/index.js';
import { prepareSigningKey } from '../mta/dkim.js';
import { createSigner } from '../mta/signer.js';

/**
 * The signing threads (mta/signer.ts): messages built and DKIM-signed off the event loop, requests of one turn sent
 * as one batch, each answered with its own bytes; a thread that dies refuses what it held and the next request starts
 * another.
 */

const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const p = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
const key = { id: 'key-1', ...prepareSigningKey('shop.example.com', 'ms2026', pem) };
const signTime = new Date('2026-11-22T10:00:00Z');
const resolver = async (name: string, rrtype: string): Promise<string[][]> => {
  if (rrtype === 'TXT' && name === 'ms2026._domainkey.shop.example.com') return [`v=DKIM1; k=rsa; p=${p}`.match(/.{1,255}/g)!];
  throw Object.assign(new Error(`no ${rrtype} at ${name}`), { code: 'ENOTFOUND' });
};

function message(i: number): OutboundMessageRow {
  return {
    id: `019a0000-0000-7000-8000-${String(i).padStart(12, '0')}`,
    accountId: 'a',
    domainKeyId: key.id,
    raw: null,
    fromHeader: '"Shop" <billing@shop.example.com>',
    attachments: null,
    fromAddress: 'billing@shop.example.com',
    replyToHeader: null,
    messageId: `<${i}@mx.test>`,
    subject: `Receipt ${i}`,
    html: `<p>Receipt number ${i}</p>`,
    text: `Receipt number ${i}`,
    createdAt: signTime.getTime(),
    expiresAt: signTime.getTime() + 1000,
  };
}

const signers: ReturnType<typeof createSigner>[] = [];
afterAll(async () => {
  for (const s of signers) await s.close();
});

describe('the signer', () => {
  it('builds and signs a batch of messages in a thread, each answered with its own message, each verifying', async () => {
    const signer = createSigner({ threads: 2 });
    signers.push(signer);
    const built = await Promise.all(Array.from({ length: 20 }, (_, i) => signer.build(message(i), [`c${i}@example.net`], key, signTime)));
    for (const [i, raw] of built.entries()) {
      const mail = await simpleParser(raw);
      expect(mail.subject).toBe(`Receipt ${i}`);
      expect((Array.isArray(mail.to) ? mail.to[0] : mail.to)?.value[0]?.address).toBe(`c${i}@example.net`);
      const verdict = await dkimVerify(raw, { resolver, curTime: signTime });
      expect(verdict.results[0]?.status.result).toBe('pass');
    }
  });

  it('refuses what a thread that died held, and the next request starts a new thread', async () => {
    const crashes: Error[] = [];
    const signer = createSigner({
      threads: 1,
      workerUrl: new URL('./fixtures/workers/crashing-signer.mjs', import.meta.url),
      onCrash: (err) => crashes.push(err),
    });
    signers.push(signer);
    await expect(
      Promise.all([signer.build(message(1), ['a@example.net'], key, signTime), signer.build(message(2), ['b@example.net'], key, signTime)]),
    ).rejects.toThrow(/the signing thread stopped \(exit 4\)/);
    // A new thread for the next one (which dies the same way here: proof that it was started and reached).
    await expect(signer.build(message(3), ['c@example.net'], key, signTime)).rejects.toThrow(/exit 4/);
  });

  it('refuses what is in flight when closed, and works again after', async () => {
    const signer = createSigner({ threads: 1 });
    signers.push(signer);
    const pending = signer.build(message(1), ['a@example.net'], key, signTime);
    await signer.close();
    await expect(pending).rejects.toThrow(/closed/);
    const raw = await signer.build(message(2), ['b@example.net'], key, signTime);
    expect((await dkimVerify(raw, { resolver, curTime: signTime })).results[0]?.status.result).toBe('pass');
  });
});

import { generateKeyPairSync } from 'node:crypto';
import { dkimSign } from 'mailauth';
import type { TestDnsServer } from './dns-server.js';

/**
 * A feedback-loop reporter the tests control: its DKIM key published in the test DNS, and a signer for the reports it
 * sends (docs/api/decisions.md section 13: a complaint at fbl@ counts only when it passes DKIM for a domain of FBL_REPORTERS).
 */
export function fblReporter(dns: TestDnsServer, domain: string, selector = 'fbl') {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const record = `v=DKIM1; k=rsa; p=${publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`;
  dns.add(`${selector}._domainkey.${domain}`, { type: 'TXT', data: record.match(/.{1,255}/g)! });
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  return {
    domain,
    /** The message with CRLF line ends and the reporter's DKIM-Signature on top. */
    async sign(message: string): Promise<string> {
      const crlf = message.replace(/\r?\n/g, '\r\n');
      const options = { canonicalization: 'relaxed/relaxed', signingDomain: domain, selector, privateKey: pem };
      const signed = await dkimSign(crlf, { ...options, signatureData: [options] });
      if (!signed.signatures.startsWith('DKIM-Signature:')) throw new Error('signing made no signature');
      if (signed.errors.length > 0) throw new Error(`signing failed: ${JSON.stringify(signed.errors)}`);
      return signed.signatures + crlf;
    },
  };
}

import { generateKeyPair, randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { decryptSecret, encryptSecret } from '../shared/secrets.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';

const generateRsa = promisify(generateKeyPair);

export interface NewDomainKeys {
  token: string;
  selector: string;
  publicKey: string;
  privateKeySealed: string;
}

/**
 * What a new domain publishes: an ownership token of 160 random bits, a selector, and a fresh RSA-2048 pair whose
 * private half is sealed with the secret key at once (it is never stored or returned in the clear).
 */
export async function createDomainKeys(secretKey: Buffer, accountId: string, name: string): Promise<NewDomainKeys> {
  const { publicKey, privateKey } = await generateRsa('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'der' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  });
  return {
    token: randomBytes(20).toString('hex'),
    selector: `ms${randomBytes(4).toString('hex')}`,
    publicKey: publicKey.toString('base64'),
    privateKeySealed: encryptSecret(secretKey, privateKey, SEAL_CONTEXTS.dkimKey(accountId, name)),
  };
}

/** The PKCS#8 PEM private key of a domain, for signing. */
export function openDomainPrivateKey(secretKey: Buffer, key: { accountId: string; name: string; dkimPrivateKeySealed: string }): string {
  return decryptSecret(secretKey, key.dkimPrivateKeySealed, SEAL_CONTEXTS.dkimKey(key.accountId, key.name)).toString('utf8');
}

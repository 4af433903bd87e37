import { createCipheriv, createDecipheriv, createHash, randomInt, timingSafeEqual } from 'node:crypto';
import { pooledRandomBytes } from './random-pool.js';

/**
 * Authenticated encryption of stored secrets (DKIM keys, webhook secrets, database URLs) with the server's
 * secret key: AES-256-GCM, a fresh 96-bit nonce per value, stored as `v1.<nonce>.<tag>.<ciphertext>` in base64url.
 */
export function encryptSecret(key: Buffer, plaintext: string | Buffer, context = ''): string {
  const nonce = pooledRandomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(Buffer.from(context));
  const ct = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return ['v1', nonce.toString('base64url'), cipher.getAuthTag().toString('base64url'), ct.toString('base64url')].join('.');
}

export function decryptSecret(key: Buffer, sealed: string, context = ''): Buffer {
  const [v, nonce, tag, ct] = sealed.split('.');
  if (v !== 'v1' || nonce === undefined || tag === undefined || ct === undefined) throw new Error('unknown secret format');
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(nonce, 'base64url'));
  decipher.setAAD(Buffer.from(context));
  decipher.setAuthTag(Buffer.from(tag, 'base64url'));
  return Buffer.concat([decipher.update(Buffer.from(ct, 'base64url')), decipher.final()]);
}

/** The binary form of encryptSecret, for bulk bytes (a received message): `0x01 | nonce(12) | tag(16) | ciphertext`. */
export function sealBytes(key: Buffer, plaintext: Buffer, context: string): Buffer {
  const nonce = pooledRandomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(Buffer.from(context));
  const ct = cipher.update(plaintext);
  cipher.final();
  return Buffer.concat([SEALED_BYTES_V1, nonce, cipher.getAuthTag(), ct]);
}

export function openBytes(key: Buffer, sealed: Buffer, context: string): Buffer {
  if (sealed.length < 29 || sealed[0] !== SEALED_BYTES_V1[0]) throw new Error('unknown sealed bytes format');
  const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(1, 13));
  decipher.setAAD(Buffer.from(context));
  decipher.setAuthTag(sealed.subarray(13, 29));
  return Buffer.concat([decipher.update(sealed.subarray(29)), decipher.final()]);
}

const SEALED_BYTES_V1 = Buffer.from([0x01]);

export function sha256Hex(value: string | Buffer): string {
  return createHash('sha256').update(value).digest('hex');
}

/** Compares two strings in time independent of where they differ. */
export function constantTimeEqual(a: string, b: string): boolean {
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb) && a.length === b.length;
}

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** Uniformly random base62 characters (randomInt rejects biased draws). */
export function randomBase62(length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) out += BASE62[randomInt(62)];
  return out;
}

import { randomBytes } from 'node:crypto';

/**
 * CSPRNG bytes taken from a pooled block: one call into OpenSSL per 4 KB instead of one per id or nonce (each call
 * costs microseconds, and the hot paths draw several per message). Node's own randomUUID pools the same way. Every
 * byte is handed out once.
 */
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let offset = 0;

/** A new Buffer of `n` random bytes (n at most POOL_BYTES). */
export function pooledRandomBytes(n: number): Buffer {
  if (n > POOL_BYTES) return randomBytes(n);
  if (offset + n > pool.length) {
    pool = randomBytes(POOL_BYTES);
    offset = 0;
  }
  const out = Buffer.allocUnsafe(n);
  pool.copy(out, 0, offset, offset + n);
  offset += n;
  return out;
}

import { eq } from 'drizzle-orm';
import { domainKeys } from '../../db/schema/index.js';
import type { Deps } from '../../server/core/deps.js';
import { openDomainPrivateKey } from '../../server/core/dkim-keys.js';
import { type SigningKey, prepareSigningKey } from '../dkim.js';
import { one } from '../../db/sql.js';

/** The DKIM keys of the from-domains, each decrypted and parsed once and kept for every later message. */
export function createSigningKeyCache(deps: Pick<Deps, 'db' | 'secretKey'>) {
  const keys = new Map<string, SigningKey & { id: string }>();

  /** The from-domain's key, decrypted and parsed once and kept for every later message. */
  async function open(domainKeyId: string): Promise<SigningKey & { id: string }> {
    const cached = keys.get(domainKeyId);
    if (cached) return cached;
    const row = await one(deps.db.select().from(domainKeys).where(eq(domainKeys.id, domainKeyId)));
    if (!row) throw new Error(`domain key ${domainKeyId} not found`);
    if (!deps.secretKey) throw new Error('SECRET_KEY=off: DKIM keys cannot be opened');
    const key = { id: domainKeyId, ...prepareSigningKey(row.name, row.selector, openDomainPrivateKey(deps.secretKey, row)) };
    keys.set(domainKeyId, key);
    return key;
  }

  return { open };
}

export type SigningKeyCache = ReturnType<typeof createSigningKeyCache>;

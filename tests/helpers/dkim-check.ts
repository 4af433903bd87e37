import { eq } from 'drizzle-orm';
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { domainKeys } from '../../db/schema/index.js';
import type { TestDnsServer } from './dns-server.js';
import type { Sender } from './sending.js';
import type { TestService } from './service.js';
import { one } from '../../db/sql.js';

/** Publishes the sender's Signing record as real DNS holds a long TXT record: strings of at most 255 characters. */
export async function publishSigningRecord(service: TestService, dns: TestDnsServer, s: Sender): Promise<{ selector: string }> {
  const row = await one(service.deps.db.select().from(domainKeys).where(eq(domainKeys.accountId, s.account.id)));
  if (!row) throw new Error('no domain key');
  const record = `v=DKIM1; h=sha256; k=rsa; p=${row.dkimPublicKey}`;
  dns.add(`${row.selector}._domainkey.${s.domain}`, { type: 'TXT', data: record.match(/.{1,255}/g)! });
  return { selector: row.selector };
}

/** mailauth's verifier, reading DNS from the test server through the service's own resolver. */
export async function verifyDkim(service: TestService, raw: Buffer) {
  return dkimVerify(raw, {
    resolver: async (name: string, type: string) => {
      const r = await service.deps.resolver.txt(name);
      if (type !== 'TXT' || r.status !== 'found') throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
      return r.records;
    },
  });
}

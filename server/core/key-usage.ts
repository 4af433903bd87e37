import { eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { apiKeys } from '../../db/schema/index.js';

/**
 * lastUsedAt without a write per request: uses are kept in memory and written in one transaction by `flush`,
 * which main runs every few seconds and at shutdown. Reads overlay what is not yet written.
 */
export function createKeyUsage() {
  const pending = new Map<string, number>();
  return {
    touch(keyId: string, at: number): void {
      pending.set(keyId, at);
    },
    lastUsed(keyId: string, stored: number | null): number | null {
      const p = pending.get(keyId);
      return p !== undefined && (stored === null || p > stored) ? p : stored;
    },
    async flush(db: Db): Promise<number> {
      if (pending.size === 0) return 0;
      const batch = [...pending];
      pending.clear();
      await db.transaction(async (tx) => {
        for (const [id, at] of batch) await tx.update(apiKeys).set({ lastUsedAt: at }).where(eq(apiKeys.id, id));
      });
      return batch.length;
    },
  };
}

export type KeyUsage = ReturnType<typeof createKeyUsage>;

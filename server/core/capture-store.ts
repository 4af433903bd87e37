import { and, eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { capturedMessages } from '../../db/schema/index.js';
import { openBytes, sealBytes } from '../shared/secrets.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';
import type { Classified } from './dsn.js';
import { one } from '../../db/sql.js';

/**
 * The capture store of DELIVERY_MODE=capture: the message each recipient would have received, byte for byte as it
 * would have gone out (built and DKIM-signed by the engine's own code), sealed with the secret key like every other
 * stored content, in the service's database under DATA_DIR. It holds the newest CAPTURE_LIMIT messages; each new one
 * drops what falls beyond. A capture is written in the transaction that records its `delivered` outcome, so the two
 * are durable together or not at all.
 */

export const CAPTURE_LIMIT = 10_000;

/** A captured message, sealed, ready to be written inside the outcome's transaction. */
export interface Capture {
  emailId: string;
  accountId: string;
  recipient: string;
  sealed: Buffer;
  capturedAt: number;
}

/** Seals `message` (outside any transaction: the cipher is the slow part). */
export function sealCapture(secretKey: Buffer, c: { emailId: string; accountId: string; recipient: string; message: Buffer; capturedAt: number }): Capture {
  const recipient = c.recipient.toLowerCase();
  return {
    emailId: c.emailId,
    accountId: c.accountId,
    recipient,
    sealed: sealBytes(secretKey, c.message, SEAL_CONTEXTS.captured(c.emailId, recipient)),
    capturedAt: c.capturedAt,
  };
}

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  upsert: db
    .insert(capturedMessages)
    .values({ emailId: p('emailId'), accountId: p('accountId'), recipient: p('recipient'), messageSealed: p('sealed'), createdAt: p('capturedAt') })
    .onConflictDoUpdate({
      target: [capturedMessages.emailId, capturedMessages.recipient],
      set: { messageSealed: sql`excluded.message_sealed`, createdAt: sql`excluded.created_at` },
    })
    .prepare(),
  prune: db
    .delete(capturedMessages)
    .where(sql`${capturedMessages.seq} <= (select max(${capturedMessages.seq}) from ${capturedMessages}) - ${p('limit')}`)
    .prepare(),
  read: db
    .select({ sealed: capturedMessages.messageSealed, recipient: capturedMessages.recipient })
    .from(capturedMessages)
    .where(and(eq(capturedMessages.emailId, p('emailId')), eq(capturedMessages.accountId, p('accountId')), eq(capturedMessages.recipient, p('recipient'))))
    .prepare(),
}));

/**
 * Writes a capture (a recipient's later attempt replaces its earlier copy in place) and drops the oldest beyond
 * CAPTURE_LIMIT; inside the caller's transaction.
 */
export async function storeCapture(db: Db, capture: Capture): Promise<void> {
  const q = statements(db);
  await q.upsert.execute({ ...capture });
  await q.prune.execute({ limit: CAPTURE_LIMIT });
}

/** The captured message of one recipient of the account's email, or null when none is kept. */
export async function readCapture(db: Db, secretKey: Buffer | null, q: { accountId: string; emailId: string; recipient: string }): Promise<Buffer | null> {
  const row = await one(statements(db).read.execute({ ...q, recipient: q.recipient.toLowerCase() }));
  if (!row || !secretKey) return null;
  return openBytes(secretKey, row.sealed, SEAL_CONTEXTS.captured(q.emailId, row.recipient));
}

/** The outcome of every captured recipient. */
export const CAPTURED: Classified = { status: 'delivered', dsn: '2.0.0', detail: 'captured' };

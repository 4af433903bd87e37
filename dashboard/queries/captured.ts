import { and, asc, count, desc, eq, lt, or } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { accounts, capturedMessages, emails } from '../../db/schema/index.js';
import { PAGE_SIZE } from './id-pages.js';
import { containsNoCase, one } from '../../db/sql.js';

/**
 * The capture store across every account, for the operator (the API shows one account's copies, one at a time): what
 * a row shows comes from the send log (from, subject) and the store (recipient, when captured); the sealed bytes are
 * opened only through the API's own getCapturedMessage.
 */

export interface CapturedEntry {
  seq: number;
  emailId: string;
  accountId: string;
  accountName: string;
  from: string;
  recipient: string;
  subject: string;
  capturedAt: number;
}

export interface CapturedListQuery {
  /** Part of the recipient address or of the subject (case-insensitive for ASCII, as SQLite's LIKE is). */
  search: string;
  /** Keyset: only captures older than this seq (the list is newest first). */
  before: number | null;
}

const entryColumns = {
  seq: capturedMessages.seq,
  emailId: capturedMessages.emailId,
  accountId: capturedMessages.accountId,
  accountName: accounts.name,
  from: emails.fromAddress,
  recipient: capturedMessages.recipient,
  subject: emails.subject,
  capturedAt: capturedMessages.createdAt,
};

/** One page of captures, newest first, and whether older ones follow. */
export async function listCaptured(db: Db, q: CapturedListQuery): Promise<{ entries: CapturedEntry[]; more: boolean }> {
  const rows = await db
    .select(entryColumns)
    .from(capturedMessages)
    .innerJoin(emails, eq(emails.id, capturedMessages.emailId))
    .innerJoin(accounts, eq(accounts.id, capturedMessages.accountId))
    .where(
      and(
        q.before === null ? undefined : lt(capturedMessages.seq, q.before),
        q.search === '' ? undefined : or(containsNoCase(db, capturedMessages.recipient, q.search), containsNoCase(db, emails.subject, q.search)),
      ),
    )
    .orderBy(desc(capturedMessages.seq))
    .limit(PAGE_SIZE + 1);
  return { entries: rows.slice(0, PAGE_SIZE), more: rows.length > PAGE_SIZE };
}

/** How many messages the store holds (at most CAPTURE_LIMIT, so a count is cheap). */
export async function countCaptured(db: Db): Promise<number> {
  return (await one(db.select({ n: count() }).from(capturedMessages)))?.n ?? 0;
}

/** The capture of one recipient of an email (recipient compared lower-cased, as the store keeps it), or undefined. */
export async function findCaptured(db: Db, emailId: string, recipient: string): Promise<CapturedEntry | undefined> {
  return await one(
    db
      .select(entryColumns)
      .from(capturedMessages)
      .innerJoin(emails, eq(emails.id, capturedMessages.emailId))
      .innerJoin(accounts, eq(accounts.id, capturedMessages.accountId))
      .where(and(eq(capturedMessages.emailId, emailId), eq(capturedMessages.recipient, recipient.toLowerCase()))),
  );
}

/** The recipients of an email whose messages are kept, in capture order. */
export async function capturedRecipientsOf(db: Db, emailId: string): Promise<string[]> {
  return (
    await db
      .select({ recipient: capturedMessages.recipient })
      .from(capturedMessages)
      .where(eq(capturedMessages.emailId, emailId))
      .orderBy(asc(capturedMessages.seq))
  ).map((r) => r.recipient);
}

import { count, desc, getTableColumns, lt } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { operatorMessages } from '../../db/schema/index.js';
import type { OperatorMessageSummary } from '../../server/core/operator-mail.js';
import { PAGE_SIZE } from './id-pages.js';
import { one } from '../../db/sql.js';

/**
 * The operator's own mail (postmaster@ and abuse@ MAIL_HOSTNAME) for the dashboard's list: what the store keeps beside
 * the sealed bytes, newest first; a message is opened only through server/core/operator-mail.ts readOperatorMessage.
 */

const { messageSealed: _sealed, ...summaryColumns } = getTableColumns(operatorMessages);

/** One page of kept messages, newest first (keyset: only those before `before`), and whether older ones follow. */
export async function listOperatorMessages(db: Db, before: number | null): Promise<{ entries: OperatorMessageSummary[]; more: boolean }> {
  const rows = await db
    .select(summaryColumns)
    .from(operatorMessages)
    .where(before === null ? undefined : lt(operatorMessages.seq, before))
    .orderBy(desc(operatorMessages.seq))
    .limit(PAGE_SIZE + 1);
  return { entries: rows.slice(0, PAGE_SIZE), more: rows.length > PAGE_SIZE };
}

/** How many messages are kept (at most OPERATOR_MAIL_LIMIT, so a count is cheap). */
export async function countOperatorMessages(db: Db): Promise<number> {
  return (await one(db.select({ n: count() }).from(operatorMessages)))?.n ?? 0;
}

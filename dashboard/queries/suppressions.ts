import { and, eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { type SuppressionReason, accounts, emailEvents, suppressions } from '../../db/schema/index.js';
import { type SuppressionView, suppressionKey, suppressionView } from '../../server/core/suppressions.js';
import { ApiError } from '../../server/shared/errors.js';
import type { BadgeTone } from '../ui.js';
import { type IdPage, PAGE_SIZE, type PageLink, pageByIds } from './id-pages.js';
import { idFloor } from './id-time.js';
import { one } from '../../db/sql.js';

/**
 * Every account's suppression list, for the operator (the API lists one account's, and matches one address
 * exactly). Rows are presented through the API's suppressionView.
 */

/** How each reason reads; the outcome that put a bounce or complaint on the list is its source email. */
export const REASONS = {
  bounce: { label: 'Bounce', tone: 'bad', outcome: 'bounced' },
  complaint: { label: 'Complaint', tone: 'warn', outcome: 'complained' },
  manual: { label: 'Manual', tone: 'neutral', outcome: null },
} as const satisfies Record<SuppressionReason, { label: string; tone: BadgeTone; outcome: 'bounced' | 'complained' | null }>;

/** The longest search text, as the API's address filter (1 to 320 characters). */
export const MAX_SEARCH = 320;

export interface SuppressionSummary {
  view: SuppressionView;
  accountId: string;
  accountName: string;
  /** The email whose bounce or complaint listed the address; null for a manual entry (or a deleted email). */
  sourceEmailId: string | null;
}

export interface SuppressionFilter {
  accountId?: string | undefined;
  /** An address or the start of one, any case: keyed as the list keys addresses, then matched as a prefix. */
  search?: string | undefined;
}

/** The search text as the list keys an address (lower-cased, an IDN domain as punycode); too long is 422. */
export function searchKey(text: string | undefined): string | undefined {
  const trimmed = text?.trim() ?? '';
  if (trimmed === '') return undefined;
  if (trimmed.length > MAX_SEARCH) throw new ApiError('invalid_request', `address: must be 1 to ${MAX_SEARCH} characters`);
  return suppressionKey(trimmed);
}

/** Every account's suppressed addresses, newest first, filtered by account and searched by address. */
export async function listAllSuppressions(db: Db, filter: SuppressionFilter, link: PageLink): Promise<IdPage<SuppressionSummary>> {
  const search = filter.search;
  const where = and(
    filter.accountId ? eq(suppressions.accountId, filter.accountId) : undefined,
    // Addresses are stored lower-cased and the key is too: a byte prefix match is a case-insensitive one, with no
    // LIKE wildcards to escape.
    search ? sql`substr(${suppressions.address}, 1, ${search.length}) = ${search}` : undefined,
  );
  return await pageByIds(
    suppressions.id,
    link,
    PAGE_SIZE,
    (s: SuppressionSummary) => s.view.id,
    async (bound, order, take) => {
      const rows = await db
        .select({ row: suppressions, accountName: accounts.name })
        .from(suppressions)
        .innerJoin(accounts, eq(accounts.id, suppressions.accountId))
        .where(and(where, bound))
        .orderBy(order)
        .limit(take);
      const summaries: SuppressionSummary[] = [];
      for (const { row, accountName } of rows) {
        summaries.push({
          view: suppressionView(row),
          accountId: row.accountId,
          accountName,
          sourceEmailId: REASONS[row.reason].outcome ? await sourceEmailOf(db, row.accountId, row.address, REASONS[row.reason].outcome!, row.createdAt) : null,
        });
      }
      return summaries;
    },
  );
}

/**
 * The email of the outcome that listed an address: the engine writes the event and the suppression in one
 * transaction, both at the outcome's time (server/core/outcomes.ts writeOutcome), on the account's list and its parent's.
 * So the event is the account's or a sub-account's, of that recipient and status, at the entry's creation time; its
 * id is no earlier than that time (idFloor), which bounds the walk of the account index.
 */
async function sourceEmailOf(db: Db, accountId: string, address: string, status: 'bounced' | 'complained', at: number): Promise<string | null> {
  const row = await one(
    db
      .select({ emailId: emailEvents.emailId })
      .from(emailEvents)
      .where(
        and(
          sql`${emailEvents.accountId} in (select id from accounts where id = ${accountId} or parent_id = ${accountId})`,
          sql`${emailEvents.id} >= ${idFloor(at)}`,
          eq(emailEvents.occurredAt, at),
          eq(emailEvents.status, status),
          sql`lower(${emailEvents.recipient}) = ${address}`,
        ),
      )
      .orderBy(emailEvents.id)
      .limit(1),
  );
  return row?.emailId ?? null;
}

import { and, eq, gte, lt } from 'drizzle-orm';
import { z } from 'zod';
import type { Db } from '../../db/client.js';
import { listHasLowered } from '../../db/sql.js';
import { EMAIL_STATUSES, type EmailStatus, accounts, emails } from '../../db/schema/index.js';
import { DAY_MS } from '../../server/shared/clock.js';
import { type EmailView, emailView } from '../../server/core/emails.js';
import { addressKey } from '../../server/core/addresses.js';
import { isUuid } from '../../server/shared/ids.js';
import { ID_CLOCK_SLACK_MS, idFloor } from './id-time.js';
import { type IdPage, PAGE_SIZE, type PageLink, pageByIds } from './id-pages.js';

/** The send log's filters, as the form's query string carries them (all optional; empty means no filter). */
export interface SendLogFilter {
  account: string | null;
  status: EmailStatus | null;
  /** Midnight UTC of the first day kept. */
  from: number | null;
  /** Midnight UTC after the last day kept. */
  until: number | null;
  /** Lower-cased; matched against each recipient, case-insensitively. */
  recipient: string | null;
}

/** A UTC day as the date input sends it, read as its midnight. */
const utcDate = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}$/, 'must be a date such as 2026-03-10')
  .refine((s) => !Number.isNaN(Date.parse(`${s}T00:00:00Z`)) && new Date(`${s}T00:00:00Z`).toISOString().startsWith(s), 'is not a real date')
  .transform((s) => Date.parse(`${s}T00:00:00Z`));

const blankIsNull = (v: unknown) => (typeof v === 'string' && v.trim() === '' ? undefined : typeof v === 'string' ? v.trim() : v);

const querySchema = z.object({
  account: z.preprocess(blankIsNull, z.string().refine(isUuid, 'is not an account id').optional()),
  status: z.preprocess(blankIsNull, z.enum(EMAIL_STATUSES, { error: `must be one of ${EMAIL_STATUSES.join(', ')}` }).optional()),
  from: z.preprocess(blankIsNull, utcDate.optional()),
  to: z.preprocess(blankIsNull, utcDate.optional()),
  recipient: z.preprocess(
    blankIsNull,
    z
      .string()
      .max(320, 'must be at most 320 characters')
      .regex(/^[^\s@]+@[^\s@]+$/, 'must be one email address, such as alice@example.com')
      .optional(),
  ),
});

const FIELD_LABELS: Record<string, string> = { account: 'Account', status: 'Status', from: 'From date', to: 'To date', recipient: 'Recipient' };

/**
 * Reads the form's fields (the page link is read apart, by readPageLink); each problem comes back as one sentence
 * naming its field, never as an exception.
 */
export function parseSendLogQuery(query: Record<string, string>): { filter: SendLogFilter; errors: string[] } {
  const parsed = querySchema.safeParse(query);
  const none: SendLogFilter = { account: null, status: null, from: null, until: null, recipient: null };
  if (!parsed.success) {
    const errors = parsed.error.issues.map((i) => `${FIELD_LABELS[String(i.path[0])] ?? String(i.path[0])}: ${i.message}.`);
    return { filter: none, errors };
  }
  const q = parsed.data;
  const filter: SendLogFilter = {
    account: q.account ?? null,
    status: q.status ?? null,
    from: q.from ?? null,
    until: q.to === undefined ? null : q.to + DAY_MS,
    // Keyed as a recipient is stored (an IDN domain as punycode), so the address as it was sent finds it.
    recipient: q.recipient === undefined ? null : addressKey(q.recipient),
  };
  if (filter.from !== null && filter.until !== null && filter.until <= filter.from) {
    return { filter: none, errors: ['To date: must be on or after the from date.'] };
  }
  return { filter, errors: [] };
}

export interface SendLogRow {
  email: EmailView;
  accountId: string;
  accountName: string;
}

/**
 * One page of the send log across every account, newest first, each row presented by the API's own emailView (so a
 * status means what GET /emails/{id} says). An account narrows it to emails_account_idx, dates to a range of the
 * primary key (UUIDv7, id-time.ts); a recipient is matched inside each email's recipient list.
 */
export async function listSendLog(db: Db, filter: SendLogFilter, link: PageLink, limit = PAGE_SIZE): Promise<IdPage<SendLogRow>> {
  const where = and(
    filter.account ? eq(emails.accountId, filter.account) : undefined,
    filter.status ? eq(emails.status, filter.status) : undefined,
    filter.from !== null ? and(gte(emails.id, idFloor(filter.from)), gte(emails.createdAt, filter.from)) : undefined,
    filter.until !== null ? and(lt(emails.id, idFloor(filter.until + ID_CLOCK_SLACK_MS)), lt(emails.createdAt, filter.until)) : undefined,
    filter.recipient ? listHasLowered(db, emails.to, filter.recipient) : undefined,
  );
  return await pageByIds(
    emails.id,
    link,
    limit,
    (r: SendLogRow) => r.email.id,
    async (bound, order, take) =>
      (
        await db
          .select({ email: emails, accountName: accounts.name })
          .from(emails)
          .innerJoin(accounts, eq(accounts.id, emails.accountId))
          .where(and(where, bound))
          .orderBy(order)
          .limit(take)
      ).map((r) => ({ email: emailView(r.email), accountId: r.email.accountId, accountName: r.accountName })),
  );
}

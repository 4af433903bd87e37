import { and, asc, desc, eq, gte, lt } from 'drizzle-orm';
import { z } from 'zod';
import { EMAIL_STATUSES, type EmailRow, type EventStatus, emailEvents, emails } from '../../db/schema/index.js';
import { iso, isoOrNull } from '../clock.js';
import type { Deps } from '../deps.js';
import { ApiError } from '../errors.js';
import type { PageRequest, RequestContext } from './context.js';

export interface EmailView {
  id: string;
  from: string;
  to: string[];
  subject: string;
  template: string;
  status: EmailRow['status'];
  error: string | null;
  createdAt: string;
  deliveredAt: string | null;
  bouncedAt: string | null;
  complainedAt: string | null;
  sandbox: boolean;
  tags?: Record<string, string>;
}

export interface EventView {
  recipient: string;
  status: EventStatus;
  dsn: string;
  detail: string;
  occurredAt: string;
}

export const emailFilter = z.strictObject({
  status: z.enum(EMAIL_STATUSES, { error: `must be one of ${EMAIL_STATUSES.join(', ')}` }).optional(),
  since: z.iso
    .datetime({ offset: true, error: 'must be a date-time with a zone offset or Z, such as 2026-01-31T12:00:00Z' })
    .transform((s) => Date.parse(s))
    .optional(),
  limit: z.string().optional(),
  cursor: z.string().optional(),
});

function emailView(row: EmailRow): EmailView {
  const view: EmailView = {
    id: row.id,
    from: row.fromAddress,
    to: row.to,
    subject: row.subject,
    template: row.template,
    status: row.status,
    error: row.error,
    createdAt: iso(row.createdAt),
    deliveredAt: isoOrNull(row.deliveredAt),
    bouncedAt: isoOrNull(row.bouncedAt),
    complainedAt: isoOrNull(row.complainedAt),
    sandbox: row.sandbox,
  };
  if (row.tags) view.tags = row.tags;
  return view;
}

/** Rows are read this many at a time, so a page cut short by its byte budget never loaded the rest. */
const LIST_CHUNK = 16;

/**
 * The account's log, newest first, from the page's cursor: at most `limit + 1` entries, read lazily in chunks. The
 * caller (toPage) stops pulling once a page is full, by count or by bytes, so rows stored before the input limits
 * (a megabyte subject) are never all loaded at once.
 */
export function* listEmails({ deps, ctx, page, filter }: { deps: Deps; ctx: RequestContext; page: PageRequest; filter: z.output<typeof emailFilter> }): Generator<EmailView> {
  let after = page.after;
  let left = page.limit + 1;
  while (left > 0) {
    const n = Math.min(LIST_CHUNK, left);
    const rows = deps.db
      .select()
      .from(emails)
      .where(
        and(
          eq(emails.accountId, ctx.account.id),
          filter.status ? eq(emails.status, filter.status) : undefined,
          filter.since !== undefined ? gte(emails.createdAt, filter.since) : undefined,
          after ? lt(emails.id, after) : undefined,
        ),
      )
      .orderBy(desc(emails.id))
      .limit(n)
      .all();
    for (const row of rows) yield emailView(row);
    if (rows.length < n) return;
    left -= n;
    after = rows[rows.length - 1]!.id;
  }
}

/** GET /emails/{id}: the entry and its recipients' events in the order they happened. */
export function getEmail({ deps, ctx, id }: { deps: Deps; ctx: RequestContext; id: string }): EmailView & { events: EventView[] } {
  const row = deps.db.select().from(emails).where(and(eq(emails.id, id), eq(emails.accountId, ctx.account.id))).get();
  if (!row) throw new ApiError('email_not_found', 'No email with that id on this account.');
  const events = deps.db
    .select()
    .from(emailEvents)
    .where(eq(emailEvents.emailId, id))
    .orderBy(asc(emailEvents.id))
    .all()
    .map((e) => ({ recipient: e.recipient, status: e.status, dsn: e.dsn, detail: e.detail, occurredAt: iso(e.occurredAt) }));
  return { ...emailView(row), events };
}

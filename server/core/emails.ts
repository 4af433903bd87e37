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

export function listEmails({ deps, ctx, page, filter }: { deps: Deps; ctx: RequestContext; page: PageRequest; filter: z.output<typeof emailFilter> }): EmailView[] {
  return deps.db
    .select()
    .from(emails)
    .where(
      and(
        eq(emails.accountId, ctx.account.id),
        filter.status ? eq(emails.status, filter.status) : undefined,
        filter.since !== undefined ? gte(emails.createdAt, filter.since) : undefined,
        page.after ? lt(emails.id, page.after) : undefined,
      ),
    )
    .orderBy(desc(emails.id))
    .limit(page.limit + 1)
    .all()
    .map(emailView);
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

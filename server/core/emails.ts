import { and, asc, desc, eq, gte, lt } from 'drizzle-orm';
import { z } from 'zod';
import { EMAIL_SOURCES, EMAIL_STATUSES, type EmailRow, type EmailSource, type EventStatus, emailEvents, emails } from '../../db/schema/index.js';
import { readCapture } from './capture-store.js';
import { iso, isoOrNull } from '../shared/clock.js';
import type { Deps } from './deps.js';
import { ApiError } from '../shared/errors.js';
import type { PageRequest, RequestContext } from './context.js';
import { one } from '../../db/sql.js';

export interface EmailView {
  id: string;
  from: string;
  to: string[];
  subject: string;
  /** The template's name; null for a message submitted over SMTP (docs/api/decisions.md section 10). */
  template: string | null;
  /** How the send came in: `api` (POST /emails) or `smtp` (SMTP submission). */
  source: EmailSource;
  /** The version of the account's own template that was sent; null for a built-in (docs/api/decisions.md section 9). */
  templateVersion: number | null;
  status: EmailRow['status'];
  error: string | null;
  createdAt: string;
  deliveredAt: string | null;
  bouncedAt: string | null;
  complainedAt: string | null;
  sandbox: boolean;
  tags?: Record<string, string>;
  /** What was attached (never the bytes); an empty list when nothing was. */
  attachments: AttachmentView[];
}

export interface AttachmentView {
  filename: string;
  contentType: string;
  size: number;
  sha256: string;
  contentId: string | null;
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
  source: z.enum(EMAIL_SOURCES, { error: `must be one of ${EMAIL_SOURCES.join(', ')}` }).optional(),
  since: z.iso
    .datetime({ offset: true, error: 'must be a date-time with a zone offset or Z, such as 2026-01-31T12:00:00Z' })
    .transform((s) => Date.parse(s))
    .optional(),
  limit: z.string().optional(),
  cursor: z.string().optional(),
});

/** The Email resource (docs/api/contract.md, Email): the API and the dashboard present a send log row alike. */
export function emailView(row: EmailRow): EmailView {
  const view: EmailView = {
    id: row.id,
    from: row.fromAddress,
    to: row.to,
    subject: row.subject,
    template: row.source === 'smtp' ? null : row.template,
    source: row.source,
    templateVersion: row.templateVersion,
    status: row.status,
    error: row.error,
    createdAt: iso(row.createdAt),
    deliveredAt: isoOrNull(row.deliveredAt),
    bouncedAt: isoOrNull(row.bouncedAt),
    complainedAt: isoOrNull(row.complainedAt),
    sandbox: row.sandbox,
    attachments: row.attachments ?? [],
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
export async function* listEmails({
  deps,
  ctx,
  page,
  filter,
}: {
  deps: Pick<Deps, 'db'>;
  ctx: RequestContext;
  page: PageRequest;
  filter: z.output<typeof emailFilter>;
}): AsyncGenerator<EmailView> {
  let after = page.after;
  let left = page.limit + 1;
  while (left > 0) {
    const n = Math.min(LIST_CHUNK, left);
    const rows = await deps.db
      .select()
      .from(emails)
      .where(
        and(
          eq(emails.accountId, ctx.account.id),
          filter.status ? eq(emails.status, filter.status) : undefined,
          filter.source ? eq(emails.source, filter.source) : undefined,
          filter.since !== undefined ? gte(emails.createdAt, filter.since) : undefined,
          after ? lt(emails.id, after) : undefined,
        ),
      )
      .orderBy(desc(emails.id))
      .limit(n);
    for (const row of rows) yield emailView(row);
    if (rows.length < n) return;
    left -= n;
    after = rows[rows.length - 1]!.id;
  }
}

async function findEmail(deps: Pick<Deps, 'db'>, ctx: RequestContext, id: string): Promise<EmailRow> {
  const row = await one(
    deps.db
      .select()
      .from(emails)
      .where(and(eq(emails.id, id), eq(emails.accountId, ctx.account.id))),
  );
  if (!row) throw new ApiError('email_not_found', 'No email with that id on this account.');
  return row;
}

/** GET /emails/{id}: the entry and its recipients' events in the order they happened. */
export async function getEmail({ deps, ctx, id }: { deps: Pick<Deps, 'db'>; ctx: RequestContext; id: string }): Promise<EmailView & { events: EventView[] }> {
  const row = await findEmail(deps, ctx, id);
  const events = (await deps.db.select().from(emailEvents).where(eq(emailEvents.emailId, id)).orderBy(asc(emailEvents.id))).map((e) => ({
    recipient: e.recipient,
    status: e.status,
    dsn: e.dsn,
    detail: e.detail,
    occurredAt: iso(e.occurredAt),
  }));
  return { ...emailView(row), events };
}

export const capturedMessageQuery = z.strictObject({
  recipient: z.string().trim().min(1, "must be one of the email's recipients").max(320, 'must be at most 320 characters'),
});

/**
 * GET /emails/{id}/message: the raw signed message (RFC 5322) one recipient of the acting account's email received in
 * capture mode. `email_not_found` when there is none to show: no such email on this account, the server does not
 * capture (DELIVERY_MODE=direct), or nothing is kept for that recipient (sandboxed, not yet attempted, or dropped as
 * one of the oldest beyond the store's bound).
 */
export async function getCapturedMessage({
  deps,
  ctx,
  id,
  recipient,
}: {
  deps: Pick<Deps, 'config' | 'db' | 'secretKey'>;
  ctx: RequestContext;
  id: string;
  recipient: string;
}): Promise<Buffer> {
  await findEmail(deps, ctx, id);
  if (deps.config.deliveryMode !== 'capture') {
    throw new ApiError('email_not_found', 'Messages are kept only in capture mode (DELIVERY_MODE=capture); this server delivers them.');
  }
  const message = await readCapture(deps.db, deps.secretKey, { accountId: ctx.account.id, emailId: id, recipient });
  if (!message) throw new ApiError('email_not_found', `No captured message of ${recipient} for this email.`);
  return message;
}

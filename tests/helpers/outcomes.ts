import { eq } from 'drizzle-orm';
import { type EventStatus, emailEvents, emails, webhookEndpoints, type WebhookEventType } from '../../db/schema/index.js';
import { SEAL_CONTEXTS } from '../../server/shared/seal-contexts.js';
import { newId } from '../../server/shared/ids.js';
import { encryptSecret } from '../../server/shared/secrets.js';
import type { TestService } from './service.js';
import { one } from '../../db/sql.js';

/**
 * Recorded outcomes written straight to the tables the mail engine writes (emails, email_events), so the event feed
 * and replay can be tested on exact times and counts; and endpoints written as POST /webhooks stores them.
 */

export async function seedEmail(
  service: TestService,
  accountId: string,
  opts: { from?: string; tags?: Record<string, string> | null; at?: number } = {},
): Promise<string> {
  const at = opts.at ?? service.clock.now();
  const id = newId(at);
  await service.deps.db.insert(emails).values({
    id,
    accountId,
    fromAddress: opts.from ?? 'billing@example.com',
    to: ['a@example.net'],
    subject: 's',
    template: 'notification',
    status: 'sent',
    sandbox: false,
    tags: opts.tags ?? null,
    createdAt: at,
  });
  return id;
}

export interface SeededEvent {
  id: string;
  emailId: string;
  recipient: string;
  status: EventStatus;
  dsn: string;
  detail: string;
  occurredAt: number;
}

const DSN: Record<EventStatus, { dsn: string; detail: string }> = {
  delivered: { dsn: '2.0.0', detail: '250 2.0.0 OK queued' },
  bounced: { dsn: '5.1.1', detail: '550 5.1.1 No such user' },
  deferred: { dsn: '4.2.0', detail: '451 4.2.0 Try again later' },
  complained: { dsn: '', detail: 'The recipient reported the message as spam.' },
};

/** The account of a seeded email, which its events carry. */
async function accountOf(service: TestService, emailId: string): Promise<string> {
  const row = await one(service.deps.db.select({ accountId: emails.accountId }).from(emails).where(eq(emails.id, emailId)));
  if (!row) throw new Error(`no email ${emailId}`);
  return row.accountId;
}

/** One outcome, with an id made at `occurredAt` (ids stay in insertion order, so seed in time order). */
export async function seedEvent(
  service: TestService,
  emailId: string,
  status: EventStatus,
  occurredAt: number,
  recipient = 'a@example.net',
): Promise<SeededEvent> {
  const row = { id: newId(occurredAt), emailId, accountId: await accountOf(service, emailId), recipient, status, ...DSN[status], occurredAt };
  await service.deps.db.insert(emailEvents).values(row);
  return row;
}

/** Many outcomes of one email at once, `occurredAt` from `start` one millisecond apart (for the replay cap). */
export async function seedManyEvents(service: TestService, emailId: string, n: number, start: number): Promise<void> {
  const accountId = await accountOf(service, emailId);
  const rows = Array.from({ length: n }, (_, i) => ({
    id: newId(start + i),
    emailId,
    accountId,
    recipient: `r${i}@example.net`,
    status: 'delivered' as const,
    ...DSN.delivered,
    occurredAt: start + i,
  }));
  await service.deps.db.transaction(async (tx) => {
    for (let i = 0; i < rows.length; i += 500) await tx.insert(emailEvents).values(rows.slice(i, i + 500));
  });
}

/** An endpoint row as POST /webhooks writes it; its secret sealed as POST /webhooks seals it when `secret` is given. */
export async function seedEndpoint(
  service: TestService,
  accountId: string,
  events: WebhookEventType[],
  opts: { active?: boolean; secret?: string } = {},
): Promise<string> {
  const now = service.clock.now();
  const id = newId(now);
  const key = service.deps.secretKey;
  const secretSealed = opts.secret !== undefined && key ? encryptSecret(key, opts.secret, SEAL_CONTEXTS.webhookSecret(id)) : 'sealed';
  await service.deps.db.insert(webhookEndpoints).values({
    id,
    accountId,
    url: 'https://hooks.example.com/in',
    events,
    secretSealed,
    active: opts.active ?? true,
    disabledAt: opts.active === false ? now : null,
    failureCount: opts.active === false ? 10 : 0,
    createdAt: now,
  });
  return id;
}

import { and, asc, eq, gte, inArray, lt, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import {
  type AccountRow,
  type AttachmentRecord,
  type CustomerDatabaseRow,
  accounts,
  capturedMessages,
  customerDatabases,
  customerDbWrites,
  emails,
  outboundRecipients,
  webhookDeliveries,
  webhookEndpoints,
} from '../../db/schema/index.js';
import { type EmailView, type EventView, getEmail } from '../../server/core/emails.js';
import { type WebhookDeliveryView, deliveryView } from '../../server/core/webhooks.js';
import { WRITE_RETENTION_MS, databaseOwnerOf, openWrite } from '../../server/core/customer-db-outbox.js';
import type { Deps } from '../../server/core/deps.js';
import { ApiError } from '../../server/shared/errors.js';
import { isUuid } from '../../server/shared/ids.js';
import type { OutcomeEventData } from '../../server/core/webhook-fanout.js';
import { idFloor } from './id-time.js';
import { type DeliveryState, stateOf } from './webhooks.js';
import { operatorContext } from '../on-behalf.js';
import { jsonText, one } from '../../db/sql.js';

/**
 * Everything the dashboard shows about one email: the API's own answer (getEmail, as GET /emails/{id} gives it), what
 * the delivery engine still has to attempt, the webhook posts its outcomes caused, its copies in the customer
 * database, and its captured messages.
 */

export interface QueuedRecipient {
  recipient: string;
  attempts: number;
  nextAttemptAt: number;
  /** Leased to a worker until then (an attempt is under way). */
  lockedUntil: number | null;
}

export interface CausedDelivery {
  delivery: WebhookDeliveryView;
  endpointId: string;
  url: string;
  /** Where it stands (the webhooks pages' rule: delivered, sending, waiting, queued, retrying or failed). */
  state: DeliveryState;
  /** The outcome it posts. */
  recipient: string;
  status: string;
}

export type WriteState =
  | { state: 'pending'; attempts: number; lastError: string | null; nextAttemptAt: number }
  | { state: 'failed'; attempts: number; lastError: string | null }
  | { state: 'written' }
  | { state: 'written-or-dropped' }
  | { state: 'not-queued'; reason: string };

export interface WriteItem {
  /** What the write carries: the email's content, or one outcome. */
  label: string;
  recipient: string | null;
  at: number;
  write: WriteState;
}

export interface CustomerDbTrail {
  /** Why nothing is written, when nothing is. */
  none: string | null;
  database: Pick<CustomerDatabaseRow, 'host' | 'database' | 'state' | 'lastError'> | null;
  items: WriteItem[];
}

export interface EmailTrail {
  email: EmailView & { events: EventView[] };
  account: AccountRow;
  queued: QueuedRecipient[];
  deliveries: CausedDelivery[];
  customerDb: CustomerDbTrail;
  /** Recipients with a captured message to open (capture mode only). */
  captured: Set<string>;
  /** What the log keeps of the email's attachments (name, type, size, SHA-256; never the bytes). */
  attachments: AttachmentRecord[];
}

/** The email's account, or the 404 page: an id that is no email (or no id at all) reads like an unknown one. */
async function accountOfEmail(db: Db, id: string): Promise<AccountRow> {
  const row = isUuid(id)
    ? await one(db.select({ account: accounts }).from(emails).innerJoin(accounts, eq(accounts.id, emails.accountId)).where(eq(emails.id, id)))
    : undefined;
  if (!row) throw new ApiError('email_not_found', 'There is no email with that id in the send log.');
  return row.account;
}

export async function emailTrail(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'secretKey'>, id: string): Promise<EmailTrail> {
  const account = await accountOfEmail(deps.db, id);
  const email = await getEmail({ deps, ctx: operatorContext(account), id });
  const createdAt = Date.parse(email.createdAt);
  const eventTimes = [...new Set(email.events.map((e) => Date.parse(e.occurredAt)))];
  return {
    email,
    account,
    queued: await queuedRecipients(deps.db, id),
    deliveries: await causedDeliveries(deps.db, account.id, id, eventTimes, deps.clock.now()),
    customerDb: await customerDbTrail(deps, account.id, id, createdAt, email),
    captured: await capturedRecipients(deps, id),
    attachments: (await one(deps.db.select({ attachments: emails.attachments }).from(emails).where(eq(emails.id, id))))?.attachments ?? [],
  };
}

/** The recipients still in the outbound queue (gone once every recipient has its final outcome). */
async function queuedRecipients(db: Db, emailId: string): Promise<QueuedRecipient[]> {
  return await db
    .select({
      recipient: outboundRecipients.recipient,
      attempts: outboundRecipients.attempts,
      nextAttemptAt: outboundRecipients.nextAttemptAt,
      lockedUntil: outboundRecipients.lockedUntil,
    })
    .from(outboundRecipients)
    .where(and(eq(outboundRecipients.messageId, emailId), eq(outboundRecipients.status, 'queued')))
    .orderBy(asc(outboundRecipients.id));
}

/** How long after its outcome a fan-out delivery's id can sort (it is made from the outcome's time, server/shared/ids.ts). */
const FANOUT_WINDOW_MS = 60_000;

/**
 * The deliveries the fan-out wrote for this email's outcomes (server/core/webhook-fanout.ts: in the outcome's transaction,
 * with an id made from the outcome's time), found per outcome time in each endpoint's (endpoint, id) index and kept
 * when their post names this email. Replays queued later by an operator are listed with their endpoint.
 * Each delivery's full attempt history is on its own page (the webhooks section).
 */
async function causedDeliveries(db: Db, accountId: string, emailId: string, eventTimes: number[], now: number): Promise<CausedDelivery[]> {
  const endpoints = await db
    .select({ id: webhookEndpoints.id, url: webhookEndpoints.url, active: webhookEndpoints.active })
    .from(webhookEndpoints)
    .where(eq(webhookEndpoints.accountId, accountId));
  if (endpoints.length === 0) return [];
  const byId = new Map(endpoints.map((e) => [e.id, e]));
  const seen = new Set<string>();
  const out: CausedDelivery[] = [];
  for (const at of eventTimes) {
    const rows = await db
      .select()
      .from(webhookDeliveries)
      .where(
        and(
          inArray(webhookDeliveries.endpointId, [...byId.keys()]),
          gte(webhookDeliveries.id, idFloor(at)),
          lt(webhookDeliveries.id, idFloor(at + FANOUT_WINDOW_MS)),
          sql`${jsonText(db, webhookDeliveries.data, 'messageId')} = ${emailId}`,
        ),
      );
    for (const row of rows) {
      if (seen.has(row.id)) continue;
      seen.add(row.id);
      const data = JSON.parse(row.data) as OutcomeEventData;
      const endpoint = byId.get(row.endpointId)!;
      out.push({
        delivery: deliveryView(row),
        endpointId: row.endpointId,
        url: endpoint.url,
        state: stateOf(row, endpoint.active, now),
        recipient: data.recipient,
        status: data.status,
      });
    }
  }
  return out.sort((a, b) => (a.delivery.id < b.delivery.id ? -1 : 1));
}

async function capturedRecipients(deps: Pick<Deps, 'config' | 'db'>, emailId: string): Promise<Set<string>> {
  if (deps.config.deliveryMode !== 'capture') return new Set();
  const rows = await deps.db.select({ recipient: capturedMessages.recipient }).from(capturedMessages).where(eq(capturedMessages.emailId, emailId));
  return new Set(rows.map((r) => r.recipient));
}

/**
 * The email's writes to its customer database: the content write queued with the send and one write per outcome.
 * A write waits in the outbox (server/core/customer-db-outbox.ts) until the database has it, and is deleted then; one the
 * database refused for its data is set aside. So a write still there is pending or failed, and one no longer there
 * was written (or, past the retention window, possibly dropped unwritten). The outbox keeps no email id in the clear:
 * the writes made at this email's times are opened and matched by what they carry.
 */
async function customerDbTrail(
  deps: Pick<Deps, 'clock' | 'db' | 'secretKey'>,
  accountId: string,
  emailId: string,
  createdAt: number,
  email: EmailView & { events: EventView[] },
): Promise<CustomerDbTrail> {
  const empty = (none: string): CustomerDbTrail => ({ none, database: null, items: [] });
  if (email.status !== 'sent') return empty(`A ${email.status} send is not written to the customer database.`);
  if (!deps.secretKey) return empty('This server keeps no secret key (SECRET_KEY=off), so no customer database can be connected.');
  const owner = await databaseOwnerOf(deps.db, accountId);
  const database = owner === null ? undefined : await one(deps.db.select().from(customerDatabases).where(eq(customerDatabases.accountId, owner)));
  if (!database) return empty('Neither this account nor its parent has a customer database connected.');

  const items: WriteItem[] = [
    { label: 'Email content', recipient: null, at: createdAt, write: { state: 'written' } },
    ...email.events.map((e) => ({
      label: `Outcome: ${e.status}`,
      recipient: e.recipient,
      at: Date.parse(e.occurredAt),
      write: { state: 'written' } as WriteState,
    })),
  ];
  const times = [...new Set(items.map((i) => i.at))];
  const rows = await deps.db
    .select()
    .from(customerDbWrites)
    .where(and(eq(customerDbWrites.accountId, accountId), inArray(customerDbWrites.createdAt, times)))
    .orderBy(asc(customerDbWrites.id));
  const claimed = new Set<WriteItem>();
  for (const row of rows) {
    const opened = openWrite(deps.secretKey, row);
    if (!opened.write) continue;
    const w = opened.write;
    const item =
      w.kind === 'email' && w.id === emailId
        ? items[0]
        : w.kind === 'event' && w.emailId === emailId
          ? items.find((i) => !claimed.has(i) && i.recipient === w.recipient && i.label === `Outcome: ${w.status}` && i.at === w.occurredAt)
          : undefined;
    if (!item) continue;
    claimed.add(item);
    item.write =
      row.setAsideAt === null
        ? { state: 'pending', attempts: row.attempts, lastError: row.lastError, nextAttemptAt: row.nextAttemptAt }
        : { state: 'failed', attempts: row.attempts, lastError: row.lastError };
  }
  const now = deps.clock.now();
  for (const item of items) {
    if (claimed.has(item)) continue;
    if (item.at < database.createdAt) item.write = { state: 'not-queued', reason: 'the database was connected after this happened' };
    else if (item.at <= now - WRITE_RETENTION_MS) item.write = { state: 'written-or-dropped' };
  }
  return { none: null, database: { host: database.host, database: database.database, state: database.state, lastError: database.lastError }, items };
}

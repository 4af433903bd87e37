import type { ClientBase } from 'pg';
import type { AttachmentRecord } from '../schema/index.js';

/**
 * The writes the service makes to a customer's `service` schema (db/customer/schema.ts), as data, and how they are
 * applied: idempotent statements keyed by id, so a write applied twice (a retried batch, a crash between the commit
 * in Postgres and the outbox delete in SQLite) never duplicates a row or moves a timestamp backwards.
 */

/** A non-sandbox send: the rendered content the service itself never keeps. */
export interface EmailWrite {
  kind: 'email';
  id: string;
  accountId: string;
  fromAddress: string;
  to: string[];
  subject: string;
  /** The rendered parts of an API send; null for a submitted message, whose content is `raw`. */
  html: string | null;
  text: string | null;
  /** The template's name; null for a submitted message. */
  template: string | null;
  /** `api` or `smtp` (docs/api/decisions.md section 10); absent in writes queued before SMTP submission: `api`. */
  source?: 'api' | 'smtp';
  /** A submitted message as submitted (Bcc removed, before signing); sealed in its own column, never in the JSON. */
  raw?: Buffer | null;
  /** The own template's version (null: a built-in); absent in writes queued before own templates. */
  templateVersion?: number | null;
  /** Filename, type, size, SHA-256 and content id of each attachment; absent or null when none. */
  attachments?: AttachmentRecord[] | null;
  tags: Record<string, string> | null;
  status: string;
  /** Milliseconds since the epoch, as everywhere in the service. */
  createdAt: number;
}

export const EVENT_STATUSES = ['delivered', 'bounced', 'deferred', 'complained'] as const;

/** One delivery outcome of one recipient. */
export interface EventWrite {
  kind: 'event';
  id: string;
  emailId: string;
  recipient: string;
  status: (typeof EVENT_STATUSES)[number];
  dsn: string;
  detail: string;
  occurredAt: number;
}

export interface AttachmentWrite {
  id: string;
  filename: string | null;
  contentType: string;
  /** The bytes, base64 (the outbox holds writes as JSON). */
  contentBase64: string;
  size: number;
}

/** A received message and its attachments, for the inbound server. */
export interface InboundWrite {
  kind: 'inbound';
  id: string;
  accountId: string;
  fromAddress: string;
  toAddresses: string[];
  subject: string;
  headers: unknown;
  text: string | null;
  html: string | null;
  messageId: string | null;
  size: number;
  spf: string | null;
  dkim: string | null;
  dmarc: string | null;
  receivedAt: number;
  attachments: AttachmentWrite[];
}

export type CustomerWrite = EmailWrite | EventWrite | InboundWrite;

/** The channel every received message is announced on (docs/api/contract.md: "a Postgres notification on channel `service`"). */
export const INBOUND_CHANNEL = 'service';

const iso = (ms: number) => new Date(ms).toISOString();

/** The email timestamp each outcome keeps current; the earliest one wins, whatever order events arrive in. */
const TIMESTAMP_OF_STATUS: Readonly<Record<EventWrite['status'], 'delivered_at' | 'bounced_at' | 'complained_at' | null>> = {
  delivered: 'delivered_at',
  bounced: 'bounced_at',
  complained: 'complained_at',
  deferred: null,
};

/**
 * Each kind's statement, taking its rows as one jsonb array: one round trip for a whole batch of a kind. New rows only
 * (`on conflict do nothing`): a write's content never changes, so its second application has nothing to add.
 */
const STATEMENTS = {
  // An email written after some of its events (it was refused once and landed on a retry) takes their timestamps.
  email: `
    insert into service.emails (id, account_id, from_address, to_addresses, subject, html, text, template, template_version, attachments, tags,
      source, raw, status, created_at, delivered_at, bounced_at, complained_at)
    select x.id, x.account_id, x.from_address, x.to_addresses, x.subject, x.html, x.text, x.template, x.template_version, x.attachments, x.tags,
      x.source, decode(x.raw, 'base64'), x.status, x.created_at,
      (select min(e.occurred_at) from service.events e where e.email_id = x.id and e.status = 'delivered'),
      (select min(e.occurred_at) from service.events e where e.email_id = x.id and e.status = 'bounced'),
      (select min(e.occurred_at) from service.events e where e.email_id = x.id and e.status = 'complained')
    from jsonb_to_recordset($1::jsonb) as x(id uuid, account_id uuid, from_address text, to_addresses text[], subject text, html text,
      text text, template text, template_version integer, attachments jsonb, tags jsonb, source text, raw text, status text, created_at timestamptz)
    on conflict (id) do nothing`,
  event: `
    insert into service.events (id, email_id, recipient, status, dsn, detail, occurred_at)
    select id, email_id, recipient, status, dsn, detail, occurred_at
    from jsonb_to_recordset($1::jsonb) as x(id uuid, email_id uuid, recipient text, status text, dsn text, detail text, occurred_at timestamptz)
    on conflict (id) do nothing`,
  // least() ignores nulls: each timestamp becomes the earliest outcome of its kind, and never moves later.
  timestamps: `
    update service.emails m
    set delivered_at = least(m.delivered_at, u.delivered_at),
        bounced_at = least(m.bounced_at, u.bounced_at),
        complained_at = least(m.complained_at, u.complained_at)
    from (
      select email_id, min(at) filter (where col = 'delivered_at') as delivered_at, min(at) filter (where col = 'bounced_at') as bounced_at,
             min(at) filter (where col = 'complained_at') as complained_at
      from jsonb_to_recordset($1::jsonb) as x(email_id uuid, col text, at timestamptz)
      group by email_id
    ) u
    where m.id = u.email_id`,
  // The notification is sent by Postgres at commit, and only for a message this statement inserted. A rule the
  // customer put on service.inbound can make RETURNING answer any number of rows: at most one a message is read back.
  inbound: `
    with ins as (
      insert into service.inbound (id, account_id, from_address, to_addresses, subject, headers, text, html, message_id, size, spf, dkim, dmarc, received_at)
      select id, account_id, from_address, to_addresses, subject, headers, text, html, message_id, size, spf, dkim, dmarc, received_at
      from jsonb_to_recordset($1::jsonb) as x(id uuid, account_id uuid, from_address text, to_addresses text[], subject text, headers jsonb,
        text text, html text, message_id text, size integer, spf text, dkim text, dmarc text, received_at timestamptz)
      on conflict (id) do nothing
      returning id
    )
    select pg_catalog.pg_notify('${INBOUND_CHANNEL}', id::text) from ins order by id limit $2`,
  attachments: `
    insert into service.attachments (id, inbound_id, filename, content_type, size, content)
    select id, inbound_id, filename, content_type, size, decode(content, 'base64')
    from jsonb_to_recordset($1::jsonb) as x(id uuid, inbound_id uuid, filename text, content_type text, size integer, content text)
    on conflict (id) do nothing`,
} as const;

/** Runs the statements of some writes on an open transaction, kinds in dependency order (an email before its events). */
async function runWrites(client: ClientBase, writes: readonly CustomerWrite[]): Promise<void> {
  const emails = writes.filter((w): w is EmailWrite => w.kind === 'email');
  const events = writes.filter((w): w is EventWrite => w.kind === 'event');
  const inbound = writes.filter((w): w is InboundWrite => w.kind === 'inbound');
  if (emails.length > 0) {
    const rows = emails.map((e) => ({
      id: e.id,
      account_id: e.accountId,
      from_address: e.fromAddress,
      to_addresses: e.to,
      subject: e.subject,
      html: e.html,
      text: e.text,
      template: e.template,
      template_version: e.templateVersion ?? null,
      attachments: e.attachments && e.attachments.length > 0 ? e.attachments : null,
      tags: e.tags,
      source: e.source ?? 'api',
      raw: e.raw ? e.raw.toString('base64') : null,
      status: e.status,
      created_at: iso(e.createdAt),
    }));
    await client.query(STATEMENTS.email, [jsonbText(rows)]);
  }
  if (events.length > 0) {
    const rows = events.map((e) => ({
      id: e.id,
      email_id: e.emailId,
      recipient: e.recipient,
      status: e.status,
      dsn: e.dsn,
      detail: e.detail,
      occurred_at: iso(e.occurredAt),
    }));
    await client.query(STATEMENTS.event, [jsonbText(rows)]);
    const stamps = events.flatMap((e) => {
      const col = TIMESTAMP_OF_STATUS[e.status];
      return col ? [{ email_id: e.emailId, col, at: iso(e.occurredAt) }] : [];
    });
    if (stamps.length > 0) await client.query(STATEMENTS.timestamps, [jsonbText(stamps)]);
  }
  if (inbound.length > 0) {
    const rows = inbound.map((m) => ({
      id: m.id,
      account_id: m.accountId,
      from_address: m.fromAddress,
      to_addresses: m.toAddresses,
      subject: m.subject,
      headers: m.headers,
      text: m.text,
      html: m.html,
      message_id: m.messageId,
      size: m.size,
      spf: m.spf,
      dkim: m.dkim,
      dmarc: m.dmarc,
      received_at: iso(m.receivedAt),
    }));
    await client.query(STATEMENTS.inbound, [jsonbText(rows), rows.length]);
    const files = inbound.flatMap((m) =>
      m.attachments.map((a) => ({ id: a.id, inbound_id: m.id, filename: a.filename, content_type: a.contentType, size: a.size, content: a.contentBase64 })),
    );
    if (files.length > 0) await client.query(STATEMENTS.attachments, [jsonbText(files)]);
  }
}

/**
 * The rows as JSON text for a `jsonb` parameter. Postgres refuses a NUL (`\u0000`) and an unpaired UTF-16 surrogate
 * in jsonb, which JSON.stringify writes as escapes (a paired one stays a raw character): such a string would get its
 * write set aside as refused for its data, so each becomes U+FFFD instead. The second pass only runs when the text has
 * such an escape (or a backslash and `ud8`-`udf` that merely look like one).
 */
export function jsonbText(value: unknown): string {
  const text = JSON.stringify(value);
  if (!text.includes('\\u0000') && !/\\ud[89a-f]/i.test(text)) return text;
  return JSON.stringify(jsonbSafe(value));
}

/** `s` with every NUL and unpaired surrogate replaced by U+FFFD (toWellFormed: Node 20 has it, lib ES2024 types it). */
const jsonbString = (s: string): string => (s as string & { toWellFormed(): string }).toWellFormed().replace(/\0/g, '\ufffd');

/** A copy of a JSON value with its strings and its object keys (a header name can hold a NUL) made jsonb-safe. */
function jsonbSafe(value: unknown): unknown {
  if (typeof value === 'string') return jsonbString(value);
  if (Array.isArray(value)) return value.map(jsonbSafe);
  if (value === null || typeof value !== 'object') return value;
  const json = (value as { toJSON?: () => unknown }).toJSON;
  if (typeof json === 'function') return jsonbSafe(json.call(value));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[jsonbString(k)] = jsonbSafe(v);
  return out;
}

/** A write refused by the database for its own content: which one, and the database's message. */
export interface RefusedWrite {
  index: number;
  error: Error;
}

/** Whether an error is about a write's data (a constraint, a value Postgres rejects) rather than reaching the database. */
export function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return false;
  return DATA_ERROR_CLASSES.has(code.slice(0, 2));
}

/**
 * SQLSTATE classes that blame one write rather than the database: 22 data exception (a NUL byte, an invalid value),
 * 23 integrity constraint (a customer's own check or foreign key), 54 program limit (a row too large). Every other
 * error (connection, permissions, a dropped table, a timeout, shutdown) is the database's and is retried as a whole.
 */
export const DATA_ERROR_CLASSES: ReadonlySet<string> = new Set(['22', '23', '54']);

/**
 * The account's database was replaced by a new URL or deleted while a batch was on its way to the old one: the batch
 * is rolled back there, and its writes stay queued for whatever the account's database is now.
 */
export class TargetChangedError extends Error {
  override name = 'TargetChangedError';
  constructor() {
    super('the database was replaced or deleted while the batch was written');
  }
}

/**
 * Applies writes in one transaction. When the database refuses the batch for a data reason, each write is applied
 * alone under a savepoint, so only the writes at fault are refused and every other one still lands in this same
 * transaction. Resolves with the refused ones (none when all landed); any other error rejects (nothing committed).
 */
export async function applyWrites(
  client: ClientBase,
  writes: readonly CustomerWrite[],
  opts: { stillTarget?: () => Promise<boolean> } = {},
): Promise<RefusedWrite[]> {
  if (writes.length === 0) return [];
  /** Just before each commit: the writes go nowhere if their database was replaced or deleted meanwhile. */
  const commit = async () => {
    if (opts.stillTarget && !(await opts.stillTarget())) throw new TargetChangedError();
    await client.query('commit');
  };
  await client.query('begin');
  try {
    // A constraint the customer declared deferrable would otherwise be checked at COMMIT, where a refused write can no
    // longer be told from the others (the savepoints are gone with the transaction): checked at each statement, it is
    // isolated like any other refusal.
    await client.query('set constraints all immediate');
    await client.query('savepoint batch');
    try {
      await runWrites(client, writes);
      await client.query('release savepoint batch');
      await commit();
      return [];
    } catch (err) {
      if (!isDataError(err)) throw err;
      await client.query('rollback to savepoint batch');
    }
    const refused: RefusedWrite[] = [];
    for (const [index, write] of writes.entries()) {
      await client.query('savepoint one');
      try {
        await runWrites(client, [write]);
        await client.query('release savepoint one');
      } catch (err) {
        if (!isDataError(err)) throw err;
        await client.query('rollback to savepoint one');
        refused.push({ index, error: err as Error });
      }
    }
    await commit();
    return refused;
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  }
}

/**
 * The inbound helper: a received message and its attachments in one transaction, then `NOTIFY service, '<id>'` once it
 * commits (Postgres sends a notification raised in a transaction only at its commit; the payload is the id alone,
 * far under the 8000-byte cap). Idempotent: a message already there is neither written nor announced again. Throws the
 * database's error when refused.
 */
export async function writeInbound(client: ClientBase, message: InboundWrite): Promise<void> {
  const refused = await applyWrites(client, [message]);
  if (refused[0]) throw refused[0].error;
}

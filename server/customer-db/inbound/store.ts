import type { ClientBase } from 'pg';
import { INBOUND_CHANNEL, TargetChangedError } from '../../../db/customer/writes.js';
import type { SpooledInboundWrite } from '../../core/customer-db-outbox.js';
import type { Deps } from '../../core/deps.js';
import { createCollector } from '../../shared/memory.js';
import {
  ATTACHMENT_CHUNK,
  type ParsedMessage,
  SpoolError,
  type SpooledEvent,
  UNPARSABLE_ATTACHMENT,
  attachmentId,
  spooledSource,
  unparsedFields,
} from './parse-message.js';
import type { Verdicts } from './verdicts.js';

/**
 * A large received message, from the spool into the customer's Postgres: a parse thread
 * (parser.ts parseSpooled) checks and parses it and streams it here as events, each attachment in chunks written as
 * they come (memory stays at one chunk whatever its size); then the `service.inbound` row, its attachments and
 * `NOTIFY service, '<id>'` in one transaction. Applied twice, it writes nothing twice.
 */

interface ParsedAttachment {
  id: string;
  filename: string | null;
  contentType: string;
  size: number;
}

/** Streams one attachment into the transaction's chunk table, a chunk at a time; its size. */
async function spoolAttachment(client: ClientBase, id: string, content: NodeJS.ReadableStream): Promise<number> {
  let size = 0;
  let n = 0;
  let parts: Buffer[] = [];
  let partBytes = 0;
  const flush = async () => {
    if (partBytes === 0) return;
    await client.query('insert into mailstead_chunks (attachment_id, n, bytes) values ($1, $2, $3)', [id, n++, Buffer.concat(parts)]);
    parts = [];
    partBytes = 0;
  };
  for await (const chunk of content as AsyncIterable<Buffer>) {
    size += chunk.length;
    parts.push(chunk);
    partBytes += chunk.length;
    if (partBytes >= ATTACHMENT_CHUNK) await flush();
  }
  await flush();
  return size;
}

/** A large message's parse as parser.ts runs it: its events in order, each taken before the next is made. */
export type SpooledParse = AsyncIterator<SpooledEvent, void>;

/** The next event of a parse; a parse that ends without its last event failed in its thread. */
async function nextEvent(events: SpooledParse): Promise<SpooledEvent> {
  const next = await events.next();
  if (next.done) throw new SpoolError('the parse of the spooled message ended early');
  return next.value;
}

/**
 * Applies one spooled inbound write (a message past the inline size, in its spool file) on `client`, in its own
 * transaction, from the events of its parse (`parse`, started only when the message is not there yet). Throws
 * SpoolError when the spool cannot be read, the database's error when it refuses, ParserStoppedError when the parse
 * thread stops, and TargetChangedError (nothing committed) when `stillTarget` says, just before the commit, that
 * the database was replaced or deleted while the message was written.
 */
export async function applySpooledInbound(
  client: ClientBase,
  deps: Pick<Deps, 'config' | 'inboundSpool' | 'logger' | 'secretKey'>,
  parse: (w: SpooledInboundWrite) => SpooledParse,
  w: SpooledInboundWrite,
  opts: { stillTarget?: () => Promise<boolean> } = {},
): Promise<void> {
  const key = deps.secretKey;
  if (!key) throw new SpoolError('no secret key to open the spooled message');
  // Reads of the customer's tables are bounded (docs/api/decisions.md section 13): service.inbound may be a view of theirs.
  const done = await client.query('select 1 from service.inbound where id = $1 limit 1', [w.id]);
  if (done.rowCount !== 0) return;
  const events = parse(w);
  try {
    const first = await nextEvent(events);
    if ('spoolFailed' in first) throw new SpoolError(first.spoolFailed);
    if (!('verdicts' in first)) throw new SpoolError('the parse of the spooled message did not begin with its verdicts');
    await writeSpooled(client, deps, key, w, first.verdicts, events, opts);
  } finally {
    await events.return?.();
  }
}

async function writeSpooled(
  client: ClientBase,
  deps: Pick<Deps, 'config' | 'inboundSpool' | 'logger'>,
  key: Buffer,
  w: SpooledInboundWrite,
  verdicts: Verdicts,
  events: SpooledParse,
  opts: { stillTarget?: () => Promise<boolean> },
): Promise<void> {
  await client.query('begin');
  try {
    let attachments: ParsedAttachment[] = [];
    // The chunk table only for a message with attachments: creating it costs more than the rest of a small message.
    const chunkTable = () =>
      client.query('create temp table mailstead_chunks (attachment_id uuid not null, n integer not null, bytes bytea not null) on commit drop');
    let parsed: ParsedMessage | null = null;
    let current: { id: string; filename: string | null; contentType: string; n: number } | null = null;
    const collector = createCollector();
    while (parsed === null) {
      const event = await nextEvent(events);
      if ('attachment' in event) {
        if (attachments.length === 0) await chunkTable();
        current = { id: attachmentId(w.id, attachments.length), ...event.attachment, n: 0 };
        attachments.push({ id: current.id, filename: current.filename, contentType: current.contentType, size: 0 });
      } else if ('chunk' in event) {
        if (!current) throw new SpoolError('the parse sent bytes outside an attachment');
        const bytes = Buffer.from(event.chunk.buffer, event.chunk.byteOffset, event.chunk.byteLength);
        const collecting = collector.streamed(bytes.length);
        if (collecting) await collecting;
        await client.query('insert into mailstead_chunks (attachment_id, n, bytes) values ($1, $2, $3)', [current.id, current.n++, bytes]);
      } else if ('attachmentEnd' in event) {
        attachments[attachments.length - 1]!.size = event.attachmentEnd.size;
        current = null;
      } else if ('parsed' in event) {
        parsed = event.parsed;
      } else if ('unparsable' in event) {
        // What the parse wrote so far goes; the message goes in whole, streamed from the spool as one attachment.
        await client.query('rollback');
        await client.query('begin');
        await chunkTable();
        const id = attachmentId(w.id, 0);
        attachments = [
          { id, ...UNPARSABLE_ATTACHMENT, size: await spoolAttachment(client, id, spooledSource((id) => deps.inboundSpool.sealed(id), key, w)()) },
        ];
        parsed = unparsedFields(w.mailFrom);
      } else if ('spoolFailed' in event) {
        throw new SpoolError(event.spoolFailed);
      }
    }
    // A rule of the customer's can make RETURNING answer any number of rows: one is read back.
    const inserted = await client.query(
      `with ins as (
         insert into service.inbound (id, account_id, from_address, to_addresses, subject, headers, text, html, message_id, size, spf, dkim, dmarc, received_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) on conflict (id) do nothing returning id
       )
       select 1 from ins limit 1`,
      [
        w.id,
        w.accountId,
        parsed.fromAddress,
        w.toAddresses,
        parsed.subject,
        JSON.stringify(parsed.headers),
        parsed.text,
        parsed.html,
        parsed.messageId,
        w.size,
        verdicts.spf,
        verdicts.dkim,
        verdicts.dmarc,
        new Date(w.receivedAt).toISOString(),
      ],
    );
    if (inserted.rowCount !== 0) {
      for (const a of attachments) {
        await client.query(
          `insert into service.attachments (id, inbound_id, filename, content_type, size, content)
           select $1, $2, $3, $4, $5, coalesce((select string_agg(bytes, ''::bytea order by n) from mailstead_chunks where attachment_id = $1), ''::bytea)`,
          [a.id, w.id, a.filename, a.contentType, a.size],
        );
      }
      // Sent by Postgres at commit, the id alone (payloads are capped at 8000 bytes).
      await client.query('select pg_catalog.pg_notify($1, $2)', [INBOUND_CHANNEL, w.id]);
    }
    if (opts.stillTarget && !(await opts.stillTarget())) throw new TargetChangedError();
    await client.query('commit');
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    if (err instanceof SpoolError) throw err;
    if ((err as { code?: string }).code === undefined && /spool/.test((err as Error).message)) throw new SpoolError((err as Error).message);
    throw err;
  }
}

import { createHash } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import { MailParser, type AttachmentStream, type MessageText } from 'mailparser';
import { isIP } from 'node:net';
import { dkimVerify, dmarc, spf } from 'mailauth';
import { parseHeaders } from 'mailauth/lib/tools.js';
import addressparser from 'nodemailer/lib/addressparser';
import type { ClientBase } from 'pg';
import { type AttachmentWrite, INBOUND_CHANNEL, type InboundWrite, TargetChangedError } from '../../db/customer/writes.js';
import type { SpooledInboundWrite } from '../../server/customer-db/outbox.js';
import type { Config } from '../../server/config.js';
import type { Deps } from '../../server/deps.js';
import { type DnsResolver, mailauthResolver } from '../../server/dns/resolver.js';
import type { Logger } from '../../server/logger.js';
import { createCollector } from '../../server/memory.js';
import { readSpool, spoolPath } from './spool.js';

/**
 * A received message, from the spool into the customer's Postgres (issue 12, point 4): its SPF, DKIM and DMARC
 * verdicts from mailauth through the service's resolver, then one pass of mailparser's streaming MailParser, each
 * attachment written in chunks as it streams (memory stays at one chunk whatever its size), and the `service.inbound`
 * row, its attachments and `NOTIFY service, '<id>'` in one transaction. Applied twice, it writes nothing twice.
 */

/** Bytes of an attachment sent to Postgres in one statement. */
export const ATTACHMENT_CHUNK = 256 * 1024;

/** The spool file is gone or unreadable: no retry will help, the write is set aside (never a database failure). */
export class SpoolError extends Error {
  override name = 'SpoolError';
}

/**
 * mailparser cannot parse the message (mailsplit's limits: a header section over 1 MB, more than 1000 MIME parts).
 * It was accepted and is durable, so it is not refused now: it is stored as received (UNPARSABLE_ATTACHMENT).
 */
export class UnparsableMessage extends Error {
  override name = 'UnparsableMessage';
}

/** How a message mailparser cannot parse reaches the customer: its envelope, and its bytes whole as one attachment. */
export const UNPARSABLE_ATTACHMENT = { filename: 'message.eml', contentType: 'message/rfc822' } as const;

/** The parsed fields of a message that could not be parsed: the envelope sender, nothing read from its content. */
function unparsedFields(mailFrom: string): ParsedMessage {
  return { fromAddress: clean(mailFrom), subject: '', headers: {}, text: null, html: null, messageId: null };
}

/** Postgres text cannot hold NUL: a message is not refused for one, it is shown as U+FFFD. */
const clean = (s: string) => s.replace(/\u0000/g, '\ufffd');

/** What the checks and the parse read: the host name mailauth reports as, DNS, and where to warn. */
export interface ParseDeps {
  config: Pick<Config, 'mailHostname'>;
  resolver: DnsResolver;
  logger: Logger;
}

export interface Verdicts {
  spf: string | null;
  dkim: string | null;
  dmarc: string | null;
}

/** How much of a message is read for its header block before it counts as having no body (then all of it is header). */
const HEADER_BLOCK_LIMIT = 1024 * 1024;

/** A message whole in memory, or a way to read it from its start (a spooled one). */
export type MessageSource = Buffer | (() => Readable);

/** The header block of a message (up to and including the blank line that ends it). */
function headerBlock(source: MessageSource): Promise<Buffer> {
  if (Buffer.isBuffer(source)) {
    const end = source.indexOf('\r\n\r\n');
    return Promise.resolve(end >= 0 ? source.subarray(0, end + 4) : source.subarray(0, HEADER_BLOCK_LIMIT));
  }
  const message = source();
  return new Promise((resolve, reject) => {
    let held: Buffer = Buffer.alloc(0);
    const done = (block: Buffer) => {
      message.off('data', onData);
      message.destroy();
      resolve(block);
    };
    const onData = (chunk: Buffer) => {
      held = held.length === 0 ? chunk : Buffer.concat([held, chunk]);
      const end = held.indexOf('\r\n\r\n');
      if (end >= 0) done(held.subarray(0, end + 4));
      else if (held.length >= HEADER_BLOCK_LIMIT) done(held);
    };
    message.on('data', onData);
    message.once('end', () => resolve(held));
    message.once('error', reject);
  });
}

/**
 * DKIM keys looked up per received message, at most. Each lookup may take the resolver's whole timeout, mailauth makes
 * them one after another, and a message may carry hundreds of signatures: past this many, a signature's key lookup
 * fails at once (its result is temperror), so one message cannot hold its account's writes for minutes.
 */
export const MAX_DKIM_KEY_LOOKUPS = 5;

type MailauthResolver = ReturnType<typeof mailauthResolver>;

function withLookupLimit(resolve: MailauthResolver, limit: number): MailauthResolver {
  let made = 0;
  return (name, type) => {
    if (made >= limit) return Promise.reject(Object.assign(new Error(`not looked up: over ${limit} DKIM key lookups for one message`), { code: 'ESERVFAIL' }));
    made++;
    return resolve(name, type);
  };
}

/**
 * SPF, DKIM (the first signature's result, `none` when unsigned) and DMARC results, or nulls when they cannot be had:
 * what mailauth's `authenticate` answers without ARC and BIMI, composed from its parts so that a message without a
 * DKIM-Signature is not read through a DKIM verifier (most of authenticate's cost for a small message).
 * tests/inbound-verdicts.test.ts holds it to authenticate's answers.
 */
export async function verdictsOf(deps: ParseDeps, message: MessageSource, w: Pick<SpooledInboundWrite, 'remoteAddress' | 'helo' | 'mailFrom'>): Promise<Verdicts> {
  const lookup = mailauthResolver(deps.resolver);
  const resolver = lookup as never;
  try {
    const headers = parseHeaders(await headerBlock(message)).parsed;
    let dkim: Awaited<ReturnType<typeof dkimVerify>> | null = null;
    let headerFrom: string[];
    if (headers.some((h) => h.key === 'dkim-signature')) {
      dkim = await dkimVerify(Buffer.isBuffer(message) ? message : message(), { resolver: withLookupLimit(lookup, MAX_DKIM_KEY_LOOKUPS) as never, sender: w.mailFrom });
      headerFrom = dkim.headerFrom;
    } else {
      headerFrom = headers
        .filter((h) => h.key === 'from')
        .flatMap((h) => {
          const line = h.line.toString();
          return addressparser(line.slice(line.indexOf(':') + 1).trim(), { flatten: true }).map((a) => a.address);
        })
        .filter(Boolean);
    }
    // As authenticate does: the IP for a missing HELO, an address literal bracketed.
    const helo = w.helo || w.remoteAddress;
    const spfResult = await spf({ sender: w.mailFrom, ip: w.remoteAddress, helo: isIP(helo) ? `[${helo}]` : helo, mta: deps.config.mailHostname, resolver });
    const dkimResults = dkim?.results ?? [];
    const dmarcResult =
      headerFrom.length > 0
        ? await dmarc({
            headerFrom,
            spfDomains: spfResult?.status.result === 'pass' && spfResult.domain ? [spfResult.domain] : [],
            dkimDomains: dkimResults
              .filter((r) => r.status.result === 'pass')
              .map((r) => ({ id: r.id, domain: r.signingDomain, aligned: r.status.aligned, underSized: r.status.underSized })) as never,
            resolver,
          })
        : null;
    return {
      spf: spfResult ? String(spfResult.status?.result ?? 'none') : null,
      dkim: String(dkimResults[0]?.status?.result ?? 'none'),
      dmarc: dmarcResult ? String(dmarcResult.status?.result ?? 'none') : null,
    };
  } catch (err) {
    deps.logger.warn('inbound.authenticate_failed', { err });
    return { spf: null, dkim: null, dmarc: null };
  }
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A header line as sent: mailparser hands its bytes over one character each (latin1). UTF-8 (RFC 6532, which the
 * server's SMTPUTF8 invites) is read as UTF-8; bytes that are not UTF-8 (a legacy 8-bit charset) stay one character
 * each, as before.
 */
function headerText(line: string): string {
  if (!/[\u0080-\u00ff]/.test(line)) return line;
  try {
    return strictUtf8.decode(Buffer.from(line, 'latin1'));
  } catch {
    return line;
  }
}

/** The header lines as name (lower case) to the values in order, unfolded. */
function headersOf(lines: readonly { key: string; line: string }[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const { key, line: raw } of lines) {
    const line = headerText(raw);
    const value = clean(line.slice(line.indexOf(':') + 1).replace(/\r?\n[ \t]+/g, ' ').trim());
    (out[clean(key)] ??= []).push(value);
  }
  return out;
}

interface ParsedAttachment {
  id: string;
  filename: string | null;
  contentType: string;
  size: number;
}

/** Streams one attachment into the transaction's chunk table, a chunk at a time; its size. */
async function spoolAttachment(client: ClientBase, id: string, content: NodeJS.ReadableStream): Promise<number> {
  const collector = createCollector();
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
    collector.streamed(chunk.length);
    parts.push(chunk);
    partBytes += chunk.length;
    if (partBytes >= ATTACHMENT_CHUNK) await flush();
  }
  await flush();
  return size;
}

/** What the parse of a message gives besides its attachments. */
interface ParsedMessage {
  fromAddress: string;
  subject: string;
  headers: Record<string, string[]>;
  text: string | null;
  html: string | null;
  messageId: string | null;
}

/**
 * One pass of mailparser's streaming MailParser over `source`; each attachment is handed to `onAttachment` as a
 * stream, which must consume it before the parse goes on.
 */
async function parseMessage(
  source: Readable,
  mailFrom: string,
  onAttachment: (part: { filename: string | null; contentType: string; content: NodeJS.ReadableStream }) => Promise<void>,
): Promise<ParsedMessage> {
  const parser = new MailParser({ skipHtmlToText: true, skipTextToHtml: true, skipTextLinks: true, skipImageLinks: true });
  let sourceFailure: Error | null = null;
  source.on('error', (err) => {
    sourceFailure = err;
    parser.destroy(err);
  });
  let headers = new Map<string, unknown>();
  let headerLines: { key: string; line: string }[] = [];
  parser.on('headers', (h: Map<string, unknown>) => (headers = h));
  parser.on('headerLines', (lines: { key: string; line: string }[]) => (headerLines = lines));
  source.pipe(parser);
  let text: string | null = null;
  let html: string | null = null;
  /** An attachment's consumer failed (the customer's database): its own error, not the parser's. */
  let sinkFailure: { err: unknown } | null = null;
  // The parser can fail while an attachment is being read (past mailsplit's 1000 parts, say), leaving that stream
  // open forever: it is ended with the parser's error, and the message is unparsable, not the consumer at fault.
  let parserFailure: Error | null = null;
  let reading: Readable | null = null;
  parser.on('error', (err: Error) => {
    parserFailure ??= err;
    reading?.destroy(err);
  });
  try {
    for await (const part of parser as AsyncIterable<AttachmentStream | MessageText>) {
      if (part.type === 'attachment') {
        reading = part.content as unknown as Readable;
        try {
          await onAttachment({ filename: part.filename ? clean(part.filename) : null, contentType: part.contentType || 'application/octet-stream', content: part.content as unknown as NodeJS.ReadableStream });
        } catch (err) {
          if (!parserFailure) sinkFailure = { err };
          throw err;
        } finally {
          reading = null;
        }
        part.release();
      } else if (part.type === 'text') {
        text = typeof part.text === 'string' ? clean(part.text) : null;
        html = typeof part.html === 'string' ? clean(part.html) : null;
      }
    }
  } catch (err) {
    if (sourceFailure) throw new SpoolError(`the spooled message could not be read: ${(sourceFailure as Error).message}`);
    if (sinkFailure) throw (sinkFailure as { err: unknown }).err;
    const cause = parserFailure ?? err;
    throw new UnparsableMessage(cause instanceof Error ? cause.message : String(cause));
  }
  if (sourceFailure) throw new SpoolError(`the spooled message could not be read: ${(sourceFailure as Error).message}`);
  const from = headers.get('from') as { value?: { address?: string }[] } | undefined;
  const subject = headers.get('subject');
  const messageId = headers.get('message-id');
  return {
    fromAddress: clean(from?.value?.[0]?.address ?? mailFrom),
    subject: clean(typeof subject === 'string' ? subject : ''),
    headers: headersOf(headerLines),
    text,
    html,
    messageId: typeof messageId === 'string' ? clean(messageId) : null,
  };
}

/** An attachment's id from its message's id and its place in it: the same on every retry, so it is never written twice. */
function attachmentId(inboundId: string, index: number): string {
  const h = createHash('sha256').update(`${inboundId}:attachment:${index}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/**
 * A small message held in its write (`raw`), parsed whole into the row set the batch statements write
 * (db/customer/writes.ts): many of them then go to Postgres in one transaction, one statement per table.
 */
export async function parseInlineInbound(deps: ParseDeps, w: SpooledInboundWrite): Promise<InboundWrite> {
  if (w.raw === undefined) throw new SpoolError('the write does not hold its message');
  const raw = Buffer.from(w.raw.buffer, w.raw.byteOffset, w.raw.byteLength);
  const verdicts = await verdictsOf(deps, raw, w);
  let attachments: AttachmentWrite[] = [];
  let parsed: ParsedMessage;
  try {
    parsed = await parseMessage(Readable.from([raw]), w.mailFrom, async (part) => {
      const chunks: Buffer[] = [];
      for await (const chunk of part.content as AsyncIterable<Buffer>) chunks.push(chunk);
      const content = Buffer.concat(chunks);
      attachments.push({ id: attachmentId(w.id, attachments.length), filename: part.filename, contentType: part.contentType, contentBase64: content.toString('base64'), size: content.length });
    });
  } catch (err) {
    if (!(err instanceof UnparsableMessage)) throw err;
    deps.logger.warn('inbound.unparsable', { id: w.id, accountId: w.accountId, reason: err.message });
    parsed = unparsedFields(w.mailFrom);
    attachments = [{ id: attachmentId(w.id, 0), ...UNPARSABLE_ATTACHMENT, contentBase64: raw.toString('base64'), size: raw.length }];
  }
  return {
    kind: 'inbound',
    id: w.id,
    accountId: w.accountId,
    toAddresses: w.toAddresses,
    ...parsed,
    size: w.size,
    ...verdicts,
    receivedAt: w.receivedAt,
    attachments,
  };
}

/**
 * Applies one spooled inbound write (a message past the inline size, in its spool file) on `client`, in its own
 * transaction, the attachments streamed to Postgres a chunk at a time. Throws SpoolError when the spool cannot be
 * read, the database's error when it refuses, and TargetChangedError (nothing committed) when `stillTarget` says,
 * just before the commit, that the database was replaced or deleted while the message was written.
 */
export async function applySpooledInbound(
  client: ClientBase,
  deps: Pick<Deps, 'config' | 'resolver' | 'logger' | 'secretKey'>,
  w: SpooledInboundWrite,
  opts: { stillTarget?: () => boolean } = {},
): Promise<void> {
  const key = deps.secretKey;
  if (!key) throw new SpoolError('no secret key to open the spooled message');
  const raw = w.raw ?? null;
  const spoolId = w.spoolId;
  const open = (): Readable => {
    if (raw) return Readable.from([raw]);
    if (spoolId === null) throw new SpoolError('the write holds neither the message nor a spool file');
    // Each pass over a large message lets the copies it makes be collected as it goes.
    const collector = createCollector();
    const counted = new Transform({
      transform(chunk: Buffer, _enc, done) {
        collector.streamed(chunk.length);
        done(null, chunk);
      },
    });
    const source = readSpool(spoolPath(deps.config.dataDir, spoolId), key, spoolId);
    source.on('error', (err) => counted.destroy(err));
    // A pass that stops early (the header block of verdictsOf) destroys the stream: the file goes with it.
    counted.on('close', () => source.destroy());
    return source.pipe(counted);
  };
  // Reads of the customer's tables are bounded (decisions.md section 13): service.inbound may be a view of theirs.
  const done = await client.query('select 1 from service.inbound where id = $1 limit 1', [w.id]);
  if (done.rowCount !== 0) return;
  let verdicts: Verdicts;
  try {
    verdicts = await verdictsOf(deps, open, w);
  } catch (err) {
    throw new SpoolError(`the spooled message could not be read: ${(err as Error).message}`);
  }

  await client.query('begin');
  try {
    let attachments: ParsedAttachment[] = [];
    // The chunk table only for a message with attachments: creating it costs more than the rest of a small message.
    const chunkTable = () => client.query('create temp table mailstead_chunks (attachment_id uuid not null, n integer not null, bytes bytea not null) on commit drop');
    let parsed: ParsedMessage;
    try {
      parsed = await parseMessage(open(), w.mailFrom, async (part) => {
        if (attachments.length === 0) await chunkTable();
        const id = attachmentId(w.id, attachments.length);
        const size = await spoolAttachment(client, id, part.content);
        attachments.push({ id, filename: part.filename, contentType: part.contentType, size });
      });
    } catch (err) {
      if (!(err instanceof UnparsableMessage)) throw err;
      // What the parse wrote so far goes; the message goes in whole, streamed from the spool as one attachment.
      deps.logger.warn('inbound.unparsable', { id: w.id, accountId: w.accountId, reason: err.message });
      await client.query('rollback');
      await client.query('begin');
      await chunkTable();
      const id = attachmentId(w.id, 0);
      attachments = [{ id, ...UNPARSABLE_ATTACHMENT, size: await spoolAttachment(client, id, open()) }];
      parsed = unparsedFields(w.mailFrom);
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
    if (opts.stillTarget && !opts.stillTarget()) throw new TargetChangedError();
    await client.query('commit');
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    if (err instanceof SpoolError) throw err;
    if ((err as { code?: string }).code === undefined && /spool/.test((err as Error).message)) throw new SpoolError((err as Error).message);
    throw err;
  }
}

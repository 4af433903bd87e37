import { createHash } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import { MailParser, type AttachmentStream, type MessageText } from 'mailparser';
import type { AttachmentWrite, InboundWrite } from '../../../db/customer/writes.js';
import type { SpooledInboundWrite } from '../../core/customer-db-outbox.js';
import { createCollector } from '../../shared/memory.js';
import { openSpool } from '../../../db/inbound-spool.js';
import { NO_VERDICTS, type ParseDeps, type Verdicts, verdictsOf } from './verdicts.js';

/**
 * The parse of a received message for the customer's database: one pass of mailparser's streaming MailParser, after
 * its verdicts (verdicts.ts). Runs in the parse threads (parse-worker.ts): a small message is parsed whole into the
 * rows the batch statements write; a large one is streamed back to the writer as events (its attachments in chunks,
 * each acknowledged before the next), so memory stays at one chunk whatever its size.
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
export function unparsedFields(mailFrom: string): ParsedMessage {
  return { fromAddress: clean(mailFrom), subject: '', headers: {}, text: null, html: null, messageId: null };
}

/** Postgres text cannot hold NUL: a message is not refused for one, it is shown as U+FFFD. */
const clean = (s: string) => s.replace(/\u0000/g, '\ufffd');

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
    const value = clean(
      line
        .slice(line.indexOf(':') + 1)
        .replace(/\r?\n[ \t]+/g, ' ')
        .trim(),
    );
    (out[clean(key)] ??= []).push(value);
  }
  return out;
}

/** What the parse of a message gives besides its attachments. */
export interface ParsedMessage {
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
export async function parseMessage(
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
          await onAttachment({
            filename: part.filename ? clean(part.filename) : null,
            contentType: part.contentType || 'application/octet-stream',
            content: part.content as unknown as NodeJS.ReadableStream,
          });
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
export function attachmentId(inboundId: string, index: number): string {
  const h = createHash('sha256').update(`${inboundId}:attachment:${index}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** The row set of a message stored as received: its envelope, its bytes whole as one attachment, no verdicts. */
export function unparsableInbound(w: SpooledInboundWrite, raw: Buffer, verdicts: Verdicts = NO_VERDICTS): InboundWrite {
  return {
    kind: 'inbound',
    id: w.id,
    accountId: w.accountId,
    toAddresses: w.toAddresses,
    ...unparsedFields(w.mailFrom),
    size: w.size,
    ...verdicts,
    receivedAt: w.receivedAt,
    attachments: [{ id: attachmentId(w.id, 0), ...UNPARSABLE_ATTACHMENT, contentBase64: raw.toString('base64'), size: raw.length }],
  };
}

/** The bytes of a write's message as a Buffer of its own view (a write that crossed threads holds a Uint8Array). */
export function rawOf(w: SpooledInboundWrite): Buffer {
  if (w.raw === undefined) throw new SpoolError('the write does not hold its message');
  return Buffer.from(w.raw.buffer, w.raw.byteOffset, w.raw.byteLength);
}

/**
 * A small message held in its write (`raw`), parsed whole into the row set the batch statements write
 * (db/customer/writes.ts): many of them then go to Postgres in one transaction, one statement per table. Without
 * `withVerdicts` (a message whose checks went past their time budget once), it is parsed without them.
 */
export async function parseInlineInbound(deps: ParseDeps, w: SpooledInboundWrite, withVerdicts = true): Promise<InboundWrite> {
  const raw = rawOf(w);
  const verdicts = withVerdicts ? await verdictsOf(deps, raw, w) : NO_VERDICTS;
  const attachments: AttachmentWrite[] = [];
  let parsed: ParsedMessage;
  try {
    parsed = await parseMessage(Readable.from([raw]), w.mailFrom, async (part) => {
      const chunks: Buffer[] = [];
      for await (const chunk of part.content as AsyncIterable<Buffer>) chunks.push(chunk);
      const content = Buffer.concat(chunks);
      attachments.push({
        id: attachmentId(w.id, attachments.length),
        filename: part.filename,
        contentType: part.contentType,
        contentBase64: content.toString('base64'),
        size: content.length,
      });
    });
  } catch (err) {
    if (!(err instanceof UnparsableMessage)) throw err;
    deps.logger.warn('inbound.unparsable', { id: w.id, accountId: w.accountId, reason: err.message });
    return unparsableInbound(w, raw, verdicts);
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
 * A way to read a large message from its start: its sealed records (`sealed`: a spool file, or its rows on Postgres),
 * opened with the secret key (or its bytes, if held).
 */
export function spooledSource(sealed: (spoolId: string) => Readable, key: Buffer, w: SpooledInboundWrite): () => Readable {
  return () => {
    if (w.raw !== undefined) return Readable.from([rawOf(w)]);
    if (w.spoolId === null) throw new SpoolError('the write holds neither the message nor a spool file');
    const spoolId = w.spoolId;
    // Each pass over a large message lets the copies it makes be collected as it goes.
    const collector = createCollector();
    const counted = new Transform({
      transform(chunk: Buffer, _enc, done) {
        // The file is not read on while a collection this pass asked for waits its turn.
        const collecting = collector.streamed(chunk.length);
        if (collecting) collecting.then(() => done(null, chunk));
        else done(null, chunk);
      },
    });
    const source = openSpool(sealed(spoolId), key, spoolId);
    source.on('error', (err) => counted.destroy(err));
    // A pass that stops early (the header block of verdictsOf) destroys the stream: the file goes with it.
    counted.on('close', () => source.destroy());
    return source.pipe(counted);
  };
}

/**
 * What the parse of a large message sends the writer, in this order: its verdicts, then for each attachment its
 * start, its bytes in chunks of up to ATTACHMENT_CHUNK and its end, then the parsed fields, or word that it cannot be
 * parsed (the writer then stores it whole), or that its spool file cannot be read.
 */
export type SpooledEvent =
  | { verdicts: Verdicts }
  | { attachment: { filename: string | null; contentType: string } }
  | { chunk: Uint8Array }
  | { attachmentEnd: { size: number } }
  | { parsed: ParsedMessage }
  | { unparsable: string }
  | { spoolFailed: string };

/**
 * Parses a large message (thread side), handing each event to `emit`, which resolves once the writer has taken it
 * (for a chunk: written it to Postgres), so no more than one chunk is ever held.
 */
export async function parseSpooled(
  deps: ParseDeps,
  open: () => Readable,
  w: SpooledInboundWrite,
  withVerdicts: boolean,
  emit: (event: SpooledEvent) => Promise<void>,
): Promise<void> {
  let verdicts: Verdicts;
  try {
    verdicts = withVerdicts ? await verdictsOf(deps, open, w) : NO_VERDICTS;
  } catch (err) {
    return emit({ spoolFailed: `the spooled message could not be read: ${(err as Error).message}` });
  }
  await emit({ verdicts });
  let parsed: ParsedMessage;
  try {
    parsed = await parseMessage(open(), w.mailFrom, async (part) => {
      await emit({ attachment: { filename: part.filename, contentType: part.contentType } });
      let size = 0;
      let held: Buffer[] = [];
      let heldBytes = 0;
      const flush = async () => {
        if (heldBytes === 0) return;
        // Into memory of its own, which the thread hands over to the writer rather than copies (parse-worker.ts).
        const chunk = Buffer.allocUnsafeSlow(heldBytes);
        let at = 0;
        for (const part of held) at += part.copy(chunk, at);
        held = [];
        heldBytes = 0;
        await emit({ chunk });
      };
      for await (const chunk of part.content as AsyncIterable<Buffer>) {
        size += chunk.length;
        held.push(chunk);
        heldBytes += chunk.length;
        if (heldBytes >= ATTACHMENT_CHUNK) await flush();
      }
      await flush();
      await emit({ attachmentEnd: { size } });
    });
  } catch (err) {
    if (err instanceof SpoolError) return emit({ spoolFailed: err.message });
    if (!(err instanceof UnparsableMessage)) throw err;
    deps.logger.warn('inbound.unparsable', { id: w.id, accountId: w.accountId, reason: err.message });
    return emit({ unparsable: err.message });
  }
  await emit({ parsed });
}

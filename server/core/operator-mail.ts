import { eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { operatorMessages } from '../../db/schema/index.js';
import { openBytes, sealBytes } from '../shared/secrets.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';
import { one } from '../../db/sql.js';

/**
 * Mail for the operator (docs/api/decisions.md section 13): `postmaster@` and `abuse@` MAIL_HOSTNAME take mail from anyone
 * (RFC 5321 4.5.1, RFC 2142), so what is kept is bounded: the first OPERATOR_MESSAGE_BYTES of each message, sealed
 * with the secret key like every stored message, and the newest OPERATOR_MAIL_LIMIT messages, each new one dropping
 * what falls beyond. Written in the transaction that answers 250 for it. Nothing is verified or parsed beyond a
 * bounded read of From and Subject for the list: the dashboard shows the operator the message itself.
 */

/** Bytes of a message kept (and held in memory while it arrives); the rest is received and dropped. */
export const OPERATOR_MESSAGE_BYTES = 256 * 1024;

/** Messages kept: with OPERATOR_MESSAGE_BYTES, at most about 256 MB however much anyone sends. */
export const OPERATOR_MAIL_LIMIT = 1_000;

/** Of a message's first bytes, how many are searched for From and Subject. */
export const HEADER_SCAN_BYTES = 64 * 1024;

/** Characters kept of From and Subject for the list (the message holds them whole). */
export const HEADER_FIELD_CHARS = 500;

/** Holds the first OPERATOR_MESSAGE_BYTES of a message as it arrives. */
export function createOperatorHolder() {
  const chunks: Buffer[] = [];
  let kept = 0;
  let truncated = false;
  return {
    append(chunk: Buffer): void {
      const room = OPERATOR_MESSAGE_BYTES - kept;
      if (chunk.length > room) truncated = true;
      if (room <= 0) return;
      const part = chunk.length > room ? Buffer.from(chunk.subarray(0, room)) : chunk;
      chunks.push(part);
      kept += part.length;
    },
    /** What was kept, and whether that is less than the message. */
    take(): { raw: Buffer; truncated: boolean } {
      return { raw: Buffer.concat(chunks), truncated };
    },
  };
}

/** A message for the operator, sealed and summed up, ready to be written inside the receiving transaction. */
export interface OperatorMessage {
  id: string;
  recipients: string[];
  mailFrom: string;
  fromHeader: string;
  subject: string;
  remoteAddress: string;
  helo: string;
  size: number;
  truncated: boolean;
  sealed: Buffer;
  receivedAt: number;
}

/** Seals the kept bytes and reads From and Subject (outside any transaction: the cipher is the slow part). */
export function prepareOperatorMessage(
  secretKey: Buffer,
  m: {
    id: string;
    recipients: string[];
    mailFrom: string;
    remoteAddress: string;
    helo: string;
    size: number;
    raw: Buffer;
    truncated: boolean;
    receivedAt: number;
  },
): OperatorMessage {
  const { from, subject } = headerBasics(m.raw);
  return {
    id: m.id,
    recipients: m.recipients,
    mailFrom: m.mailFrom,
    fromHeader: from,
    subject,
    remoteAddress: m.remoteAddress,
    helo: m.helo,
    size: m.size,
    truncated: m.truncated,
    sealed: sealBytes(secretKey, m.raw, SEAL_CONTEXTS.operatorMessage(m.id)),
    receivedAt: m.receivedAt,
  };
}

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  insert: db
    .insert(operatorMessages)
    .values({
      id: p('id'),
      recipients: p('recipients'),
      mailFrom: p('mailFrom'),
      fromHeader: p('fromHeader'),
      subject: p('subject'),
      remoteAddress: p('remoteAddress'),
      helo: p('helo'),
      size: p('size'),
      truncated: p('truncated'),
      messageSealed: p('sealed'),
      receivedAt: p('receivedAt'),
    })
    .prepare(),
  prune: db
    .delete(operatorMessages)
    .where(sql`${operatorMessages.seq} <= (select max(${operatorMessages.seq}) from ${operatorMessages}) - ${p('limit')}`)
    .prepare(),
  read: db
    .select()
    .from(operatorMessages)
    .where(eq(operatorMessages.id, p('id')))
    .prepare(),
}));

/** Writes the message and drops the oldest beyond OPERATOR_MAIL_LIMIT; inside the caller's transaction. */
export async function storeOperatorMessage(db: Db, m: OperatorMessage): Promise<void> {
  const q = statements(db);
  await q.insert.execute({ ...m });
  await q.prune.execute({ limit: OPERATOR_MAIL_LIMIT });
}

/** What the list shows of a kept message: every column but its bytes. */
export type OperatorMessageSummary = Omit<typeof operatorMessages.$inferSelect, 'messageSealed'>;

/** A kept message and its bytes, or null when there is none by that id (or no key to open it). */
export async function readOperatorMessage(db: Db, secretKey: Buffer | null, id: string): Promise<{ entry: OperatorMessageSummary; raw: Buffer } | null> {
  const row = await one(statements(db).read.execute({ id }));
  if (!row || !secretKey) return null;
  const { messageSealed, ...entry } = row;
  return { entry, raw: openBytes(secretKey, messageSealed, SEAL_CONTEXTS.operatorMessage(row.id)) };
}

/**
 * The From and Subject of a message, read from its first HEADER_SCAN_BYTES in one pass: anyone can send here, so a
 * header folded over thousands of lines, or a header block with no end, costs a linear scan of at most that much and
 * yields at most HEADER_FIELD_CHARS characters each. Encoded words (RFC 2047) are decoded; control characters go.
 */
export function headerBasics(raw: Buffer): { from: string; subject: string } {
  const text = raw.subarray(0, HEADER_SCAN_BYTES).toString('utf8');
  const end = text.indexOf('\r\n\r\n');
  const block = end === -1 ? text : text.slice(0, end);
  const found: Record<'from' | 'subject', string[] | null> = { from: null, subject: null };
  let collecting: string[] | null = null;
  let length = 0;
  for (const line of block.split('\r\n')) {
    if (line.startsWith(' ') || line.startsWith('\t')) {
      if (collecting && length < HEADER_FIELD_CHARS * 2) {
        collecting.push(line);
        length += line.length;
      }
      continue;
    }
    collecting = null;
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    if ((name === 'from' || name === 'subject') && found[name] === null) {
      collecting = found[name] = [line.slice(colon + 1)];
      length = line.length;
    }
  }
  const value = (parts: string[] | null) =>
    parts === null
      ? ''
      : decodeEncodedWords(parts.join('').slice(0, HEADER_FIELD_CHARS * 2))
          .replace(/[\u0000-\u001f\u007f]+/g, ' ')
          .trim()
          .slice(0, HEADER_FIELD_CHARS);
  return { from: value(found.from), subject: value(found.subject) };
}

const ENCODED_WORD = /=\?([^?\s]+)\?([bBqQ])\?([^?\s]*)\?=/g;

/** Decodes RFC 2047 encoded words (B and Q, any charset TextDecoder knows); a word it cannot decode stays as sent. */
export function decodeEncodedWords(value: string): string {
  // Whitespace between two encoded words is not part of the text (RFC 2047 section 6.2).
  return value
    .replace(/(=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=)\s+(?==\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=)/g, '$1')
    .replace(ENCODED_WORD, (word, charset: string, encoding: string, data: string) => {
      try {
        const bytes =
          encoding.toLowerCase() === 'b'
            ? Buffer.from(data, 'base64')
            : Buffer.from(
                data.replace(/_/g, ' ').replace(/=([0-9a-fA-F]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))),
                'latin1',
              );
        // RFC 2231 allows a language after the charset: `utf-8*en`.
        return new TextDecoder(charset.replace(/\*.*$/, '')).decode(bytes);
      } catch {
        return word;
      }
    });
}

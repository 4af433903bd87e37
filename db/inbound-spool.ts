import { type CipherGCM, type DecipherGCM, createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { closeSync, createReadStream, mkdirSync, openSync, readdirSync, rmSync, statSync, writevSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { fsyncDir, fsyncDirOffLoop, fsyncOffLoop } from './data-dir.js';

/**
 * The inbound spool: a received message held on disk, sealed with the secret key, from the end of DATA until the
 * customer-database writer has parsed it into the customer's Postgres. Records of SPOOL_CHUNK bytes (the last data
 * record may be shorter), each sealed on its own (AES-256-GCM, a fresh nonce, its index and the file id as associated
 * data, so records cannot be reordered, swapped between files or cut short unnoticed); a last empty record marks the
 * end. Memory stays at one record whatever the message size.
 */

export const SPOOL_CHUNK = 64 * 1024;

export function spoolDir(dataDir: string): string {
  return join(dataDir, 'spool', 'inbound');
}

export function spoolPath(dataDir: string, id: string): string {
  return join(spoolDir(dataDir), `${id}.msg`);
}

/** A record's head: its length word (the top bit marks the last record), the nonce and the tag. */
const HEAD_BYTES = 4 + 12 + 16;

const aad = (id: string, index: number, last: boolean) => Buffer.from(`${id}:${index}:${last ? 'end' : 'more'}`);

/** A record being sealed: its cipher, fed each piece as it is appended, and the ciphertext so far. */
interface OpenRecord {
  cipher: CipherGCM;
  nonce: Buffer;
  body: Buffer[];
  bytes: number;
}

function openRecord(key: Buffer, id: string, index: number, last: boolean): OpenRecord {
  const nonce = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(aad(id, index, last));
  return { cipher, nonce, body: [], bytes: 0 };
}

/** The record's pieces as they are written: its head (length word, nonce, tag), then its body. */
function sealRecord(record: OpenRecord, last: boolean): Buffer[] {
  // AES-GCM is a stream cipher: final() gives no bytes, only the tag.
  if (record.cipher.final().length !== 0) throw new Error('spool: the cipher held bytes back');
  const head = Buffer.alloc(HEAD_BYTES);
  head.writeUInt32BE(record.bytes + (last ? 0x80000000 : 0));
  record.nonce.copy(head, 4);
  record.cipher.getAuthTag().copy(head, 16);
  return [head, ...record.body];
}

/** Writes the pieces in order with as few calls as the file takes (a write may take fewer bytes than given). */
function writeAll(fd: number, pieces: Buffer[]): void {
  let left = pieces;
  while (left.length > 0) {
    let written = writevSync(fd, left);
    while (left.length > 0 && written >= left[0]!.length) {
      written -= left[0]!.length;
      left = left.slice(1);
    }
    if (written > 0) left = [left[0]!.subarray(written), ...left.slice(1)];
  }
}

/**
 * A writer that seals what it is given into the spool file of `id`. `finish()` writes the end record and fsyncs:
 * once it resolves, the message is durable. `discard()` removes the file (a refused or interrupted message).
 */
export function createSpoolWriter(dataDir: string, key: Buffer, id: string) {
  const dir = spoolDir(dataDir);
  // Directories made now are entries of their parents: durable before any file in them is acknowledged.
  const made = mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (made !== undefined) for (let d = dir; d !== dirname(made); d = dirname(d)) fsyncDir(dirname(d));
  const path = spoolPath(dataDir, id);
  const fd = openSync(path, 'wx', 0o600);
  let index = 0;
  let closed = false;
  /** The record being filled: only the end record is the last, so each data record's associated data is known at its start. */
  let open: OpenRecord | null = null;
  return {
    path,
    /**
     * Seals what is given into records of SPOOL_CHUNK bytes (the last data record may be shorter), each piece
     * enciphered as it comes (no reference to `chunk` is kept) and each record written once full: synchronous, so the
     * disk write is the back-pressure. Full records let the reader hand the parser chunks of SPOOL_CHUNK bytes, which
     * mailparser's input stage copies once (smaller ones it gathers by copying them again and again).
     */
    append(chunk: Buffer): void {
      for (let at = 0; at < chunk.length; ) {
        open ??= openRecord(key, id, index++, false);
        const piece = chunk.subarray(at, at + SPOOL_CHUNK - open.bytes);
        at += piece.length;
        open.body.push(open.cipher.update(piece));
        open.bytes += piece.length;
        if (open.bytes === SPOOL_CHUNK) {
          writeAll(fd, sealRecord(open, false));
          open = null;
        }
      }
    },
    /**
     * Seals the record being filled and the end record, fsyncs and closes, then fsyncs the directory (the file's
     * name): once it resolves, the message is durable. Both fsyncs run on libuv's thread pool: flushing tens of
     * megabytes takes the disk a while, and the event loop serves every other session meanwhile.
     */
    async finish(): Promise<void> {
      const pieces = open ? sealRecord(open, false) : [];
      open = null;
      writeAll(fd, [...pieces, ...sealRecord(openRecord(key, id, index++, true), true)]);
      try {
        await fsyncOffLoop(fd);
      } finally {
        closeSync(fd);
        closed = true;
      }
      await fsyncDirOffLoop(dir);
    },
    discard(): void {
      if (!closed) {
        closeSync(fd);
        closed = true;
      }
      rmSync(path, { force: true });
    },
  };
}
/**
 * The plaintext of a spool file as a stream; it errors if any record was altered, reordered or the end is missing,
 * or if anything follows the end. Each record's body goes to its decipher as it is read, in whatever pieces the file
 * gives, and its plaintext is handed on once the record's tag is checked: no record is copied whole first. A record
 * longer than SPOOL_CHUNK (no writer makes one) is refused before it is read, so memory stays at one record.
 * `readSize` is the size of the file's reads (the tests' way to cut records across them).
 */
export function readSpool(path: string, key: Buffer, id: string, readSize?: number): Readable {
  let head: Buffer[] = [];
  let headBytes = 0;
  let record: { decipher: DecipherGCM; left: number; last: boolean; plain: Buffer[] } | null = null;
  let index = 0;
  let ended = false;
  const opener = new Transform({
    transform(chunk: Buffer, _enc, done) {
      try {
        let at = 0;
        while (at < chunk.length) {
          if (ended) throw new Error('spool: data after the end record');
          if (record === null) {
            const piece = chunk.subarray(at, at + HEAD_BYTES - headBytes);
            at += piece.length;
            head.push(piece);
            headBytes += piece.length;
            if (headBytes < HEAD_BYTES) break;
            const whole = head.length === 1 ? head[0]! : Buffer.concat(head);
            head = [];
            headBytes = 0;
            const word = whole.readUInt32BE(0);
            const last = (word & 0x80000000) !== 0;
            if ((word & 0x7fffffff) > SPOOL_CHUNK) throw new Error('spool: a record longer than SPOOL_CHUNK');
            const decipher = createDecipheriv('aes-256-gcm', key, whole.subarray(4, 16));
            decipher.setAAD(aad(id, index++, last));
            decipher.setAuthTag(whole.subarray(16, 32));
            record = { decipher, left: word & 0x7fffffff, last, plain: [] };
          }
          const body = chunk.subarray(at, at + record.left);
          at += body.length;
          record.left -= body.length;
          if (body.length > 0) record.plain.push(record.decipher.update(body));
          if (record.left > 0) break;
          const rest = record.decipher.final();
          for (const plain of record.plain) if (plain.length > 0) this.push(plain);
          if (rest.length > 0) this.push(rest);
          ended = record.last;
          record = null;
        }
        done();
      } catch (err) {
        done(err as Error);
      }
    },
    flush(done) {
      done(ended ? null : new Error('spool: the file is cut short'));
    },
  });
  // Full records are read one per read: each deciphered in one piece, handed on as one chunk.
  const source = createReadStream(path, { highWaterMark: readSize ?? HEAD_BYTES + SPOOL_CHUNK });
  source.on('error', (err) => opener.destroy(err));
  return source.pipe(opener);
}

/** Removes spool files older than `olderThanMs` that `isReferenced` does not claim (a crash between file and commit). */
export async function sweepSpool(dataDir: string, now: number, olderThanMs: number, isReferenced: (id: string) => Promise<boolean>): Promise<number> {
  let removed = 0;
  let names: string[];
  try {
    names = readdirSync(spoolDir(dataDir));
  } catch {
    return 0;
  }
  for (const name of names) {
    const id = name.replace(/\.msg$/, '');
    const path = join(spoolDir(dataDir), name);
    try {
      if (now - statSync(path).mtimeMs < olderThanMs || (await isReferenced(id))) continue;
      rmSync(path, { force: true });
      removed++;
    } catch {
      // gone meanwhile
    }
  }
  return removed;
}

/** A readable of a whole buffer (tests, small messages). */
export const fromBuffer = (b: Buffer) => Readable.from([b]);

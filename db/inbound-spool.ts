import { type CipherGCM, type DecipherGCM, createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { closeSync, createReadStream, mkdirSync, openSync, readSync, readdirSync, rmSync, statSync, writevSync } from 'node:fs';
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
 * Seals what it is given into records of SPOOL_CHUNK bytes (the last data record may be shorter), each piece
 * enciphered as it comes (no reference to a chunk is kept), and hands each record to `emit` once full, as the pieces
 * to write in order (its head, then its body). Full records let the reader hand the parser chunks of SPOOL_CHUNK
 * bytes, which mailparser's input stage copies once (smaller ones it gathers by copying them again and again).
 */
function createSealer(key: Buffer, id: string, emit: (pieces: Buffer[]) => void) {
  let index = 0;
  /** The record being filled: only the end record is the last, so each data record's associated data is known at its start. */
  let open: OpenRecord | null = null;
  return {
    append(chunk: Buffer): void {
      for (let at = 0; at < chunk.length; ) {
        open ??= openRecord(key, id, index++, false);
        const piece = chunk.subarray(at, at + SPOOL_CHUNK - open.bytes);
        at += piece.length;
        open.body.push(open.cipher.update(piece));
        open.bytes += piece.length;
        if (open.bytes === SPOOL_CHUNK) {
          emit(sealRecord(open, false));
          open = null;
        }
      }
    },
    /** The record being filled (if any) and the end record, as the pieces of each. */
    end(): Buffer[][] {
      const records = open ? [sealRecord(open, false)] : [];
      open = null;
      records.push(sealRecord(openRecord(key, id, index++, true), true));
      return records;
    },
  };
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
  let closed = false;
  // Each record written once full: synchronous, so the disk write is the back-pressure.
  const sealer = createSealer(key, id, (pieces) => writeAll(fd, pieces));
  return {
    path,
    append(chunk: Buffer): void {
      sealer.append(chunk);
    },
    /**
     * Seals the record being filled and the end record, fsyncs and closes, then fsyncs the directory (the file's
     * name): once it resolves, the message is durable. Both fsyncs run on libuv's thread pool: flushing tens of
     * megabytes takes the disk a while, and the event loop serves every other session meanwhile.
     */
    async finish(): Promise<void> {
      writeAll(fd, sealer.end().flat());
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
 * The sealer of the row spool (db/inbound-spool-rows.ts): each record whole, as one Buffer (a row's bytes), handed
 * to `emit` as it is full; `end()` gives the rest.
 */
export function createRecordSealer(key: Buffer, id: string, emit: (record: Buffer) => void) {
  const sealer = createSealer(key, id, (pieces) => emit(Buffer.concat(pieces)));
  return { append: (chunk: Buffer) => sealer.append(chunk), end: () => sealer.end().map((pieces) => Buffer.concat(pieces)) };
}

/**
 * The plaintext of a spooled message from its sealed records (a file, or rows in order: the same bytes) as a stream;
 * it errors if any record was altered, reordered or the end is missing, or if anything follows the end. Each record's body goes to its decipher as it is read, in whatever pieces the file
 * gives, and its plaintext is handed on once the record's tag is checked: no record is copied whole first. A record
 * longer than SPOOL_CHUNK (no writer makes one) is refused before it is read, so memory stays at one record.
 * `readSize` is the size of the file's reads (the tests' way to cut records across them).
 */
export function readSpool(path: string, key: Buffer, id: string, readSize?: number): Readable {
  return openSpool(sealedFile(path, readSize), key, id);
}

/** The sealed records of a spool file; full records are read one per read (each deciphered in one piece, handed on as one chunk). */
export function sealedFile(path: string, readSize?: number): Readable {
  return createReadStream(path, { highWaterMark: readSize ?? HEAD_BYTES + SPOOL_CHUNK });
}

/** The plaintext of sealed records, read from `source` in whatever pieces it gives (openSpool's rules). */
export function openSpool(source: Readable, key: Buffer, id: string): Readable {
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
  source.on('error', (err) => opener.destroy(err));
  // A reader that stops early (the header block of verdictsOf) destroys the plaintext: the source goes with it.
  opener.on('close', () => source.destroy());
  return source.pipe(opener);
}

/** Removes spool files untouched for longer than `olderThanMs` that `isReferenced` does not claim (a crash between file and commit). */
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

/** Records read in one statement by a reader: memory stays at a few records whatever the message's size. */
export const SPOOL_PAGE_RECORDS = 4;

/**
 * The sealed records of `id` read page by page through `page` (a statement on the state, or a parse thread's request
 * to the event loop that has the state: parse-worker.ts): the next page only once the reader took the last.
 */
export function sealedFromPages(page: (id: string, from: number) => Promise<{ seq: number; record: Buffer }[]>, id: string): Readable {
  async function* records(): AsyncGenerator<Buffer> {
    let next = 0;
    for (;;) {
      const rows = await page(id, next);
      if (rows.length === 0) return;
      for (const row of rows) yield row.record;
      next = rows[rows.length - 1]!.seq + 1;
      if (rows.length < SPOOL_PAGE_RECORDS) return;
    }
  }
  return Readable.from(records(), { objectMode: false, highWaterMark: 1 });
}

/**
 * The sealed records of a spool file as they are stored, one Buffer each (head and ciphertext), unopened: what
 * `mailstead state copy` puts in `inbound_spool_records`, a row per record. A tail shorter than its head says is given
 * as it is (the reader refuses it, as it refuses the file). Memory stays at one record.
 */
export function* spoolFileRecords(path: string): Generator<Buffer> {
  const fd = openSync(path, 'r');
  try {
    for (let at = 0; ; ) {
      const head = Buffer.alloc(HEAD_BYTES);
      const got = readSync(fd, head, 0, HEAD_BYTES, at);
      if (got === 0) return;
      const length = got < HEAD_BYTES ? 0 : Math.min(head.readUInt32BE(0) & 0x7fffffff, SPOOL_CHUNK + 1);
      const record = Buffer.alloc(HEAD_BYTES + length);
      head.copy(record, 0, 0, got);
      const body = got < HEAD_BYTES ? 0 : readSync(fd, record, HEAD_BYTES, length, at + HEAD_BYTES);
      yield record.subarray(0, got + body);
      if (got < HEAD_BYTES || body < length) return;
      at += HEAD_BYTES + length;
    }
  } finally {
    closeSync(fd);
  }
}

/** A readable of a whole buffer (tests, small messages). */
export const fromBuffer = (b: Buffer) => Readable.from([b]);

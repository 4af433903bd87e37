import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { closeSync, createReadStream, mkdirSync, openSync, readdirSync, rmSync, statSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { fsyncDir, fsyncDirOffLoop, fsyncOffLoop } from './data-dir.js';

/**
 * The inbound spool: a received message held on disk, sealed with the secret key, from the end of DATA until the
 * customer-database writer has parsed it into the customer's Postgres. Records of at most CHUNK bytes, each sealed
 * on its own (AES-256-GCM, a fresh nonce, its index and the file id as associated data, so records cannot be
 * reordered, swapped between files or cut short unnoticed); a last empty record marks the end. Memory stays at one
 * record whatever the message size.
 */

export const SPOOL_CHUNK = 64 * 1024;

export function spoolDir(dataDir: string): string {
  return join(dataDir, 'spool', 'inbound');
}

export function spoolPath(dataDir: string, id: string): string {
  return join(spoolDir(dataDir), `${id}.msg`);
}

const aad = (id: string, index: number, last: boolean) => Buffer.from(`${id}:${index}:${last ? 'end' : 'more'}`);

function seal(key: Buffer, id: string, index: number, plain: Buffer, last: boolean): Buffer {
  const nonce = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(aad(id, index, last));
  const body = Buffer.concat([cipher.update(plain), cipher.final()]);
  const head = Buffer.alloc(4);
  head.writeUInt32BE(body.length + (last ? 0x80000000 : 0));
  return Buffer.concat([head, nonce, cipher.getAuthTag(), body]);
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
  return {
    path,
    /**
     * Seals what is given, in records of at most SPOOL_CHUNK bytes, straight from the chunk (no copy of it is kept):
     * synchronous, so the disk write is the back-pressure.
     */
    append(chunk: Buffer): void {
      for (let at = 0; at < chunk.length; at += SPOOL_CHUNK) writeSync(fd, seal(key, id, index++, chunk.subarray(at, at + SPOOL_CHUNK), false));
    },
    /**
     * Seals the end record, fsyncs and closes, then fsyncs the directory (the file's name): once it resolves, the
     * message is durable. Both fsyncs run on libuv's thread pool: flushing tens of megabytes takes the disk a while,
     * and the event loop serves every other session meanwhile.
     */
    async finish(): Promise<void> {
      writeSync(fd, seal(key, id, index++, Buffer.alloc(0), true));
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
/** The plaintext of a spool file as a stream; it errors if any record was altered, reordered or the end is missing. */
export function readSpool(path: string, key: Buffer, id: string): Readable {
  let buffered: Buffer = Buffer.alloc(0);
  let index = 0;
  let ended = false;
  const opener = new Transform({
    transform(chunk: Buffer, _enc, done) {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      try {
        while (buffered.length >= 4) {
          const word = buffered.readUInt32BE(0);
          const last = (word & 0x80000000) !== 0;
          const length = word & 0x7fffffff;
          const total = 4 + 12 + 16 + length;
          if (buffered.length < total) break;
          if (ended) throw new Error('spool: data after the end record');
          const decipher = createDecipheriv('aes-256-gcm', key, buffered.subarray(4, 16));
          decipher.setAAD(aad(id, index++, last));
          decipher.setAuthTag(buffered.subarray(16, 32));
          const plain = Buffer.concat([decipher.update(buffered.subarray(32, total)), decipher.final()]);
          if (plain.length > 0) this.push(plain);
          if (last) ended = true;
          buffered = buffered.subarray(total);
        }
        done();
      } catch (err) {
        done(err as Error);
      }
    },
    flush(done) {
      done(ended && buffered.length === 0 ? null : new Error('spool: the file is cut short'));
    },
  });
  const source = createReadStream(path);
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

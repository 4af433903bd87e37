import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { SPOOL_CHUNK, createSpoolWriter, readSpool, spoolPath } from '../db/inbound-spool.js';

/**
 * The spool of a large inbound message (db/inbound-spool.ts): sealed in records of at most SPOOL_CHUNK bytes, each
 * bound to the message and its place; read back whatever the read sizes, and refused when altered, reordered, cut
 * short or followed by anything.
 */

const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-spool-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));
const key = randomBytes(32);
let n = 0;

async function spooled(appends: Buffer[]): Promise<{ id: string; path: string }> {
  const id = `msg-${++n}`;
  const writer = createSpoolWriter(dataDir, key, id);
  for (const chunk of appends) writer.append(chunk);
  await writer.finish();
  return { id, path: spoolPath(dataDir, id) };
}

async function readAll(stream: Readable): Promise<{ bytes: Buffer }> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return { bytes: Buffer.concat(chunks) };
}

/** The records of a spool file: a 4-byte length word (its top bit marks the last), 12 bytes of nonce, 16 of tag, the body. */
function records(file: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < file.length; ) {
    const total = 32 + (file.readUInt32BE(at) & 0x7fffffff);
    out.push(file.subarray(at, at + total));
    at += total;
  }
  return out;
}

describe('readSpool', () => {
  const message = randomBytes(3 * SPOOL_CHUNK + 12_345);

  it.each([
    ['as written', undefined],
    ['read in 7-byte pieces (a record header across reads)', 7],
    ['read in pieces of a record and a half', Math.floor(SPOOL_CHUNK * 1.5)],
  ])('gives back what was written: %s', async (_label, highWaterMark) => {
    const { id, path } = await spooled([message.subarray(0, 100), message.subarray(100)]);
    const { bytes } = await readAll(readSpool(path, key, id, highWaterMark));
    expect(bytes.equals(message)).toBe(true);
  });

  it('fills each record to SPOOL_CHUNK bytes whatever the sizes appended; the end record is an empty one of its own', async () => {
    const pieces: Buffer[] = [];
    for (let at = 0, size = 1; at < message.length; at += size, size = (size * 7 + 3) % 20_000) pieces.push(message.subarray(at, at + size));
    const { id, path } = await spooled(pieces);
    const sizes = records(readFileSync(path)).map((r) => r.length - 32);
    expect(sizes).toEqual([SPOOL_CHUNK, SPOOL_CHUNK, SPOOL_CHUNK, 12_345, 0]);
    expect((await readAll(readSpool(path, key, id))).bytes.equals(message)).toBe(true);
  });

  it('an empty message is its end record alone', async () => {
    const { id, path } = await spooled([]);
    expect(records(readFileSync(path))).toHaveLength(1);
    expect((await readAll(readSpool(path, key, id))).bytes.length).toBe(0);
  });

  it('hands on no byte of a record before its tag is checked', async () => {
    const { id, path } = await spooled([message]);
    const file = Buffer.from(readFileSync(path));
    // The last byte of the second record's body: its first bytes decipher before that is read.
    const second = records(file)[1]!;
    file[records(file)[0]!.length + second.length - 1]! ^= 1;
    writeFileSync(path, file);
    let handedOn = 0;
    const stream = readSpool(path, key, id, 1000);
    const failed = new Promise<Error>((resolve) => stream.on('error', resolve));
    stream.on('data', (chunk: Buffer) => (handedOn += chunk.length));
    expect((await failed).message).toMatch(/unable to authenticate|unsupported state/i);
    expect(handedOn).toBe(SPOOL_CHUNK);
  });

  const refusals: [string, (file: Buffer) => Buffer, RegExp][] = [
    [
      'a byte of a body altered',
      (file) => {
        const copy = Buffer.from(file);
        copy[SPOOL_CHUNK + 64 + 40]! ^= 1;
        return copy;
      },
      /unable to authenticate|unsupported state/i,
    ],
    [
      'two records swapped',
      (file) => {
        const r = records(file);
        return Buffer.concat([r[1]!, r[0]!, ...r.slice(2)]);
      },
      /unable to authenticate|unsupported state/i,
    ],
    [
      'a length word past SPOOL_CHUNK (refused before its record is read)',
      (file) => {
        const copy = Buffer.from(file);
        copy.writeUInt32BE(0x7fffffff, 0);
        return copy;
      },
      /longer than SPOOL_CHUNK/,
    ],
    ['cut short within a record', (file) => file.subarray(0, file.length - 100), /cut short/],
    ['the end record missing', (file) => Buffer.concat(records(file).slice(0, -1)), /cut short/],
    ['bytes after the end record', (file) => Buffer.concat([file, Buffer.from('x')]), /after the end record/],
    ['a whole record after the end record', (file) => Buffer.concat([file, records(file)[0]!]), /after the end record/],
  ];
  it.each(refusals)('refuses a file with %s', async (_label, alter, error) => {
    const { id, path } = await spooled([message]);
    writeFileSync(path, alter(readFileSync(path)));
    await expect(readAll(readSpool(path, key, id))).rejects.toThrow(error);
  });

  it("refuses another message's file, and another key", async () => {
    const { path } = await spooled([message]);
    await expect(readAll(readSpool(path, key, 'msg-other'))).rejects.toThrow(/unable to authenticate|unsupported state/i);
    const { id, path: second } = await spooled([message]);
    await expect(readAll(readSpool(second, randomBytes(32), id))).rejects.toThrow(/unable to authenticate|unsupported state/i);
  });
});

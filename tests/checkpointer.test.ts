import { closeSync, mkdtempSync, openSync, readSync, rmSync, statSync } from 'node:fs';
import { endianness } from 'node:os';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { type SqliteStore, openDatabase } from '../db/client.js';
import { DEFAULT_AUTOCHECKPOINT_PAGES, FALLBACK_AUTOCHECKPOINT_PAGES, startCheckpointer } from '../db/checkpointer.js';
import { createMemoryLogger } from '../server/shared/logger.js';

/**
 * The checkpoint thread copies the write-ahead log into the database file while the event loop's connection writes
 * on without checkpointing (its own threshold raised to FALLBACK_AUTOCHECKPOINT_PAGES); stopped, or dead, the
 * connection checkpoints itself at SQLite's default again.
 */

let dir: string;
let store: SqliteStore;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'mailstead-checkpoint-'));
  store = openDatabase(dir);
  store.sqlite.exec('create table filler (id integer primary key, body blob not null)');
});

afterEach(() => {
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Commits `pages` pages of new rows (~3.5 KB each), in one transaction or one commit a row. */
function write(pages: number, oneTransaction = false): void {
  const insert = store.sqlite.prepare('insert into filler (body) values (?)');
  const rows = () => {
    for (let i = 0; i < pages; i++) insert.run(Buffer.alloc(3500, i));
  };
  if (oneTransaction) store.sqlite.transaction(rows)();
  else rows();
}

const autocheckpoint = () => store.sqlite.pragma('wal_autocheckpoint', { simple: true }) as number;
/**
 * Frames of the log already copied into the database file: nBackfill, the first field of the checkpoint information
 * that follows the two copies of the WAL-index header in the -shm file (offset 96, native byte order; SQLite's file
 * format, "The WAL-Index Format"). Read without a checkpoint, which asking SQLite would run.
 */
function backfilled(): number {
  const fd = openSync(`${store.sqlite.name}-shm`, 'r');
  try {
    const b = Buffer.alloc(4);
    readSync(fd, b, 0, 4, 96);
    return endianness() === 'LE' ? b.readUInt32LE(0) : b.readUInt32BE(0);
  } finally {
    closeSync(fd);
  }
}

/** The size of the -wal file (SQLite reuses it from its start once every frame is copied; it never shrinks here). */
const walBytes = () => statSync(`${store.sqlite.name}-wal`).size;

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 25));
  expect(condition(), what).toBe(true);
}

it('the connection leaves the checkpoints to the thread, which copies every frame; the log is then reused, not grown', async () => {
  const logger = createMemoryLogger();
  const checkpointer = startCheckpointer(store.sqlite, logger, { everyMs: 1500 });
  try {
    expect(autocheckpoint()).toBe(FALLBACK_AUTOCHECKPOINT_PAGES);
    // One commit of three times SQLite's threshold, before the thread's first turn: a connection checkpointing itself
    // would have copied it all inside that COMMIT.
    write(DEFAULT_AUTOCHECKPOINT_PAGES * 3, true);
    expect(backfilled()).toBe(0);
    await until(() => backfilled() >= DEFAULT_AUTOCHECKPOINT_PAGES * 3, 'the thread copied every frame');
    // Everything copied: the next commits restart the log from its beginning rather than growing it.
    const size = walBytes();
    write(DEFAULT_AUTOCHECKPOINT_PAGES);
    expect(walBytes()).toBeLessThanOrEqual(size);
    expect(store.sqlite.prepare('select count(*) from filler').pluck().get()).toBe(DEFAULT_AUTOCHECKPOINT_PAGES * 4);
  } finally {
    await checkpointer.stop();
  }
  expect(checkpointer.running).toBe(false);
  expect(autocheckpoint()).toBe(DEFAULT_AUTOCHECKPOINT_PAGES);
  expect(logger.entries.filter((r) => r.level === 'error' || r.level === 'warn')).toEqual([]);
});

it('without the thread the connection checkpoints itself, inside its COMMIT (what the thread takes off the event loop)', () => {
  expect(autocheckpoint()).toBe(DEFAULT_AUTOCHECKPOINT_PAGES);
  write(DEFAULT_AUTOCHECKPOINT_PAGES * 3, true);
  expect(backfilled()).toBeGreaterThanOrEqual(DEFAULT_AUTOCHECKPOINT_PAGES * 3);
});

it('a thread that dies hands the checkpoints back to the connection, and says so', async () => {
  const logger = createMemoryLogger();
  const checkpointer = startCheckpointer(store.sqlite, logger, { workerUrl: new URL('data:text/javascript,process.exit(3)') });
  await until(() => !checkpointer.running, 'the thread is gone');
  expect(autocheckpoint()).toBe(DEFAULT_AUTOCHECKPOINT_PAGES);
  expect(logger.entries.map((r) => r.event)).toContain('db.checkpoint_thread_exited');
});

it('reads on its own connection: the committed rows, read-only statements only, and nothing once stopped or dead', async () => {
  const checkpointer = startCheckpointer(store.sqlite, createMemoryLogger(), { everyMs: 60_000 });
  try {
    write(3);
    expect(await checkpointer.read<{ n: number }>('select count(*) as n from filler where id > @after', { after: 1 })).toEqual({ n: 2 });
    // A transaction the event loop's connection has not committed is not seen.
    store.sqlite.exec('begin immediate');
    store.sqlite.prepare('insert into filler (body) values (?)').run(Buffer.alloc(10));
    expect(await checkpointer.read<{ n: number }>('select count(*) as n from filler')).toEqual({ n: 3 });
    store.sqlite.exec('commit');
    expect(await checkpointer.read<{ n: number }>('select count(*) as n from filler')).toEqual({ n: 4 });
    expect(await checkpointer.read('select body from filler where id = -1')).toBeUndefined();
    expect(await checkpointer.readAll<{ id: number }>('select id from filler where id > @after order by id', { after: 2 })).toEqual([{ id: 3 }, { id: 4 }]);
    expect(await checkpointer.readAll('select id from filler where id < 0')).toEqual([]);
    await expect(checkpointer.readAll('delete from filler returning id')).rejects.toThrow(/read-only|readonly/);
    await expect(checkpointer.read('delete from filler')).rejects.toThrow(/read-only|readonly/);
    await expect(checkpointer.read('delete from filler returning id')).rejects.toThrow(/read-only|readonly/);
    await expect(checkpointer.read('select * from no_such_table')).rejects.toThrow(/no such table/);
    expect(store.sqlite.prepare('select count(*) as n from filler').get()).toEqual({ n: 4 });
  } finally {
    await checkpointer.stop();
  }
  await expect(checkpointer.read('select 1')).rejects.toThrow(/not running/);

  const dying = startCheckpointer(store.sqlite, createMemoryLogger(), { workerUrl: new URL('data:text/javascript,setTimeout(() => process.exit(3), 50)') });
  await expect(dying.read('select 1')).rejects.toThrow(/stopped/);
});

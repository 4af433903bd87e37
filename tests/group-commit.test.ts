import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { type SqliteStore, openDatabase } from '../db/client.js';
import { FlushFailedError, createDurabilityBarrier, createGroupCommit } from '../db/group-commit.js';
import { execute, queryRows } from '../db/sql.js';

/**
 * The group commit (db/group-commit.ts): batches commit with synchronous=NORMAL and every write waits for an
 * fdatasync of the WAL that started after its commit; nothing resolves before that, a failed flush fails the batch,
 * a write that throws rolls back alone, and every other transaction still commits with synchronous=FULL.
 */

/** A WAL sync the test finishes by hand, recording when each one started. */
function manualSync() {
  const calls: { resolve: () => void; reject: (err: Error) => void }[] = [];
  return {
    calls,
    sync: () => new Promise<void>((resolve, reject) => calls.push({ resolve, reject })),
  };
}

const settled = async <T>(p: Promise<T>) => {
  let state: 'pending' | 'resolved' | 'rejected' = 'pending';
  p.then(
    () => (state = 'resolved'),
    () => (state = 'rejected'),
  );
  // Lets every queued reaction run.
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  return state;
};

let dataDir: string;
let store: SqliteStore;

beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'mailstead-group-commit-'));
  store = openDatabase(dataDir);
  store.sqlite.exec('create table probe (n integer primary key)');
});

afterEach(() => {
  store.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const rows = () => store.sqlite.prepare('select n from probe order by n').pluck().all();
const synchronous = () => store.sqlite.pragma('synchronous', { simple: true });

describe('a write resolves only once the WAL is flushed after its commit', () => {
  it('waits for the flush, and one flush acknowledges every write committed before it', async () => {
    const wal = manualSync();
    const commits = createGroupCommit(store, wal.sync);
    const a = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (1)`));
    const b = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (2)`));
    await expect.poll(() => wal.calls.length).toBe(1);
    // Committed (readable on the connection), not yet acknowledged.
    expect(rows()).toEqual([1, 2]);
    expect(await settled(a)).toBe('pending');
    expect(await settled(b)).toBe('pending');
    wal.calls[0]!.resolve();
    expect(await settled(a)).toBe('resolved');
    expect(await settled(b)).toBe('resolved');
    expect(wal.calls).toHaveLength(1);
  });

  it('a write that comes during a flush commits when it ends, with every other such write, and waits for the next flush', async () => {
    const wal = manualSync();
    const commits = createGroupCommit(store, wal.sync);
    const first = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (1)`));
    await expect.poll(() => wal.calls.length).toBe(1);
    const second = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (2)`));
    await new Promise((r) => setImmediate(r));
    const third = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (3)`));
    // Held, not committed, while the flush runs: it could not count for them.
    expect(await settled(second)).toBe('pending');
    expect(rows()).toEqual([1]);
    // The flush ends: only the write committed before it started is durable; the two held ones commit together
    // and the next flush starts at once.
    wal.calls[0]!.resolve();
    expect(await settled(first)).toBe('resolved');
    await expect.poll(() => wal.calls.length).toBe(2);
    expect(rows()).toEqual([1, 2, 3]);
    expect(await settled(second)).toBe('pending');
    expect(await settled(third)).toBe('pending');
    wal.calls[1]!.resolve();
    expect(await settled(second)).toBe('resolved');
    expect(await settled(third)).toBe('resolved');
    expect(wal.calls).toHaveLength(2);
  });

  it('a lone write commits and flushes at once: no timer holds it', async () => {
    const wal = manualSync();
    const commits = createGroupCommit(store, wal.sync);
    void commits.run(async (db) => await execute(db, sql`insert into probe (n) values (1)`));
    await new Promise((r) => setImmediate(r));
    expect(rows()).toEqual([1]);
    expect(wal.calls).toHaveLength(1);
  });

  it('a failed flush rejects the writes waiting on it (never acknowledged)', async () => {
    const wal = manualSync();
    const commits = createGroupCommit(store, wal.sync);
    const a = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (1)`));
    await expect.poll(() => wal.calls.length).toBe(1);
    wal.calls[0]!.reject(new Error('EIO'));
    await expect(a).rejects.toThrow('EIO');
  });

  it('the real flush: fdatasync of the -wal file on the thread pool', async () => {
    const commits = createGroupCommit(store, store.syncWal);
    const values = await Promise.all([1, 2, 3].map((n) => commits.run(async (db) => await execute(db, sql`insert into probe (n) values (${n})`))));
    expect(values).toEqual([1, 1, 1]);
    expect(rows()).toEqual([1, 2, 3]);
  });
});

describe('the batch', () => {
  it('a write that throws rolls back alone, at once; the others commit', async () => {
    const wal = manualSync();
    const commits = createGroupCommit(store, wal.sync);
    const ok = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (1)`));
    const bad = commits.run(async (db) => {
      await execute(db, sql`insert into probe (n) values (2)`);
      throw new Error('refused');
    });
    const after = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (3)`));
    await expect(bad).rejects.toThrow('refused');
    await expect.poll(() => wal.calls.length).toBe(1);
    wal.calls[0]!.resolve();
    await Promise.all([ok, after]);
    expect(rows()).toEqual([1, 3]);
  });

  it('a write that fills the disk (SQLite then rolls back the whole transaction) fails every write of the batch with SQLITE_FULL', async () => {
    const wal = manualSync();
    const heard: unknown[] = [];
    const commits = createGroupCommit(store, wal.sync, { onFailure: (err) => heard.push(err) });
    store.sqlite.exec('create table blobs (b blob)');
    // The disk is full: no page beyond the database's present size.
    const pages = store.sqlite.pragma('page_count', { simple: true }) as number;
    store.sqlite.pragma(`max_page_count = ${pages}`);
    const insert = (query: string) => () => store.sqlite.prepare(query).run();
    const writes = [
      insert('insert into probe (n) values (1)'),
      insert('insert into blobs (b) values (zeroblob(100000))'),
      insert('insert into probe (n) values (2)'),
    ].map((fn) => commits.run(fn));
    const outcomes = await Promise.allSettled(writes);
    // Not "no such savepoint" from the ROLLBACK TO that SQLite's own rollback left nothing for.
    expect(outcomes.map((o) => o.status === 'rejected' && (o.reason as { code?: string }).code)).toEqual(['SQLITE_FULL', 'SQLITE_FULL', 'SQLITE_FULL']);
    expect(heard.length).toBeGreaterThan(0);
    expect(heard.every((e) => (e as { code?: string }).code === 'SQLITE_FULL')).toBe(true);
    expect(store.sqlite.inTransaction).toBe(false);
    expect(rows()).toEqual([]);
    // Once there is room again, writes commit as before.
    store.sqlite.pragma('max_page_count = 4294967294');
    const later = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (3)`));
    await expect.poll(() => wal.calls.length).toBe(1);
    wal.calls[0]!.resolve();
    await later;
    expect(rows()).toEqual([3]);
  });

  it('commits with synchronous=NORMAL and puts FULL back for every other transaction', async () => {
    expect(synchronous()).toBe(2);
    let during: unknown;
    const commits = createGroupCommit(store, async () => undefined);
    await commits.run(() => {
      during = synchronous();
    });
    expect(during).toBe(1);
    expect(synchronous()).toBe(2);
    // Also after a batch whose commit failed.
    await expect(
      commits.run(() => {
        store.sqlite.exec('commit');
      }),
    ).rejects.toThrow();
    expect(synchronous()).toBe(2);
  });
});

describe('onFailure', () => {
  it('hears a write that threw, and a flush that failed once per batch; not the writes that succeeded', async () => {
    const wal = manualSync();
    const heard: unknown[] = [];
    const commits = createGroupCommit(store, wal.sync, { onFailure: (err) => heard.push(err) });
    const refused = new Error('refused');
    const ok = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (1)`));
    const bad = commits.run(() => {
      throw refused;
    });
    const also = commits.run(async (db) => await execute(db, sql`insert into probe (n) values (2)`));
    await expect(bad).rejects.toBe(refused);
    expect(heard).toEqual([refused]);
    await expect.poll(() => wal.calls.length).toBe(1);
    const eio = Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
    wal.calls[0]!.reject(eio);
    // Committed, not known durable: told apart from a write that failed, with the flush's error and its code.
    for (const write of [ok, also]) {
      const err = await write.catch((e: unknown) => e);
      expect(err).toBeInstanceOf(FlushFailedError);
      expect(err).toMatchObject({ cause: eio, code: 'EIO' });
    }
    expect(heard).toEqual([refused, eio]);
  });
});

describe('a write after the store closed', () => {
  it('is refused through its promise, never thrown out of the event loop', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mailstead-group-commit-'));
    try {
      const other = openDatabase(dir);
      const commits = createGroupCommit(other, async () => undefined);
      other.sqlite.close();
      await expect(commits.run(() => undefined)).rejects.toThrow(/not open/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the durability barrier', () => {
  it('runs one flush at a time and starts the next for the calls made meanwhile', async () => {
    const wal = manualSync();
    const barrier = createDurabilityBarrier(wal.sync);
    const a = barrier.durable();
    const b = barrier.durable();
    const c = barrier.durable();
    expect(wal.calls).toHaveLength(1);
    wal.calls[0]!.resolve();
    // a was before the flush started; b and c came while it ran, so they wait for the second.
    expect(await settled(a)).toBe('resolved');
    expect(await settled(b)).toBe('pending');
    expect(wal.calls).toHaveLength(2);
    wal.calls[1]!.resolve();
    expect(await settled(b)).toBe('resolved');
    expect(await settled(c)).toBe('resolved');
  });
});

describe('a transaction beside another connection (the CLI, run while the server works)', () => {
  it('takes the write lock when it begins, so a write committed elsewhere between its read and its write never fails it', async () => {
    const Database = (await import('better-sqlite3')).default;
    const cli = new Database(join(dataDir, 'mailstead.db'));
    // The other connection does not wait here: in one thread, a wait could only time out.
    cli.pragma('busy_timeout = 0');
    try {
      let cliWrite: unknown = null;
      const n = await store.db.transaction(async (tx) => {
        const before = (await queryRows<{ n: number }>(tx, sql`select count(*) as n from probe`))[0]!.n;
        try {
          cli.prepare('insert into probe (n) values (100)').run();
        } catch (err) {
          cliWrite = err;
        }
        await execute(tx, sql`insert into probe (n) values (${before + 1})`);
        return before + 1;
      });
      // The server's transaction committed; the other connection was the one kept out (it retries in its own time).
      expect(n).toBe(1);
      expect(cliWrite).toMatchObject({ code: 'SQLITE_BUSY' });
      expect(rows()).toEqual([1]);
    } finally {
      cli.close();
    }
  });
});

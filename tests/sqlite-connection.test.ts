import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { AsyncResource } from 'node:async_hooks';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type SqliteStore, openDatabase, unsynced } from '../db/client.js';
import { createGroupCommit } from '../db/group-commit.js';
import { markQueued, onQueueMarked } from '../db/queue-wake.js';
import { execute, queryRows } from '../db/sql.js';

/**
 * The async Db over SQLite's one connection (db/sqlite-connection.ts): the statements of a unit of work (a
 * transaction, a batch of the group commit, an unsynced run) are bound to it by the async work they run in, and a
 * statement or a unit from elsewhere waits until it ends, instead of landing inside it.
 */

let dataDir: string;
let store: SqliteStore;

beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'mailstead-connection-'));
  store = openDatabase(dataDir);
  store.sqlite.exec('create table probe (n integer primary key)');
});

afterEach(() => {
  store.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const rows = () => store.sqlite.prepare('select n from probe order by n').pluck().all();
const insert = (n: number) => execute(store.db, sql`insert into probe (n) values (${n})`);
/**
 * Runs `fn` as async work of its own, outside the unit the caller is in: as another request, whose work began in
 * a callback of the event loop, not inside this unit.
 */
const elsewhere = AsyncResource.bind(<T>(fn: () => T): T => fn());
/** A turn of the event loop: every queued reaction of the work under way runs. */
const turn = () => new Promise((r) => setImmediate(r));

describe('a transaction holds the connection', () => {
  it('a statement from outside waits for its commit instead of joining it', async () => {
    let outside: Promise<number> | null = null;
    await store.db.transaction(async (tx) => {
      await execute(tx, sql`insert into probe (n) values (1)`);
      outside = elsewhere(() => insert(2));
      await turn();
      // Still inside the transaction: the outside write has not run.
      expect(await queryRows(tx, sql`select n from probe order by n`)).toEqual([{ n: 1 }]);
      await execute(tx, sql`insert into probe (n) values (3)`);
    });
    expect(await outside).toBe(1);
    expect(rows()).toEqual([1, 2, 3]);
  });

  it('a write from outside is not lost when the transaction rolls back', async () => {
    let outside: Promise<number> | null = null;
    await expect(
      store.db.transaction(async (tx) => {
        await execute(tx, sql`insert into probe (n) values (1)`);
        outside = elsewhere(() => insert(2));
        await turn();
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    expect(await outside).toBe(1);
    expect(rows()).toEqual([2]);
  });

  it('the root handle inside the transaction is the transaction', async () => {
    await expect(
      store.db.transaction(async () => {
        await insert(1);
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    expect(rows()).toEqual([]);
  });

  it('two transactions run one after the other, never interleaved', async () => {
    const order: string[] = [];
    const unit = (name: string, n: number) =>
      store.db.transaction(async (tx) => {
        order.push(`${name} begins`);
        await execute(tx, sql`insert into probe (n) values (${n})`);
        await turn();
        order.push(`${name} ends`);
      });
    await Promise.all([unit('a', 1), unit('b', 2)]);
    expect(order).toEqual(['a begins', 'a ends', 'b begins', 'b ends']);
    expect(rows()).toEqual([1, 2]);
  });

  it('a transaction inside a transaction is a savepoint: its failure rolls back only its own writes', async () => {
    await store.db.transaction(async (tx) => {
      await execute(tx, sql`insert into probe (n) values (1)`);
      await expect(
        tx.transaction(async (inner) => {
          await execute(inner, sql`insert into probe (n) values (2)`);
          throw new Error('inner refused');
        }),
      ).rejects.toThrow('inner refused');
      await execute(tx, sql`insert into probe (n) values (3)`);
    });
    expect(rows()).toEqual([1, 3]);
  });
});

describe('the wake of a queue marked inside a transaction', () => {
  it('comes once the transaction has committed, and not at all when it rolls back', async () => {
    let woken = 0;
    onQueueMarked(store.db, 'webhooks', () => woken++);
    await store.db.transaction(async (tx) => {
      await execute(tx, sql`insert into probe (n) values (1)`);
      markQueued(tx, 'webhooks');
      await turn();
      expect(woken).toBe(0);
    });
    expect(woken).toBe(1);
    await expect(
      store.db.transaction(async (tx) => {
        markQueued(tx, 'webhooks');
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    await turn();
    expect(woken).toBe(1);
  });
});

describe('a batch of the group commit holds the connection', () => {
  it('an async job runs in the batch; a statement from outside waits for its commit', async () => {
    const commits = createGroupCommit(store, async () => undefined);
    let outside: Promise<number> | null = null;
    const job = commits.run(async (db) => {
      await execute(db, sql`insert into probe (n) values (1)`);
      outside = elsewhere(() => insert(2));
      await turn();
      expect(rows()).toEqual([1]);
      return 'done';
    });
    expect(await job).toBe('done');
    expect(await outside).toBe(1);
    expect(rows()).toEqual([1, 2]);
  });

  it('an async job that throws rolls back alone', async () => {
    const commits = createGroupCommit(store, async () => undefined);
    const bad = commits.run(async (db) => {
      await execute(db, sql`insert into probe (n) values (1)`);
      await turn();
      throw new Error('refused');
    });
    const good = commits.run(async (db) => execute(db, sql`insert into probe (n) values (2)`));
    await expect(bad).rejects.toThrow('refused');
    expect(await good).toBe(1);
    expect(rows()).toEqual([2]);
  });
});

describe('unsynced', () => {
  it('holds the connection: a statement from outside waits, and never runs with synchronous=NORMAL', async () => {
    const synchronous = () => store.sqlite.pragma('synchronous', { simple: true });
    let outside: Promise<number> | null = null;
    await unsynced(store.db, async () => {
      expect(synchronous()).toBe(1);
      await insert(1);
      outside = elsewhere(() => insert(2));
      await turn();
      expect(rows()).toEqual([1]);
    });
    expect(synchronous()).toBe(2);
    expect(await outside).toBe(1);
    expect(rows()).toEqual([1, 2]);
  });
});

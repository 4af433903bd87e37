import { AsyncResource } from 'node:async_hooks';
import net from 'node:net';
import { count, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPgGroupCommit } from '../db/group-commit.js';
import { type PgStore, StateTooNewError, openPostgres, pgPointReads, runPgBatch, runPgSql } from '../db/pg/state.js';
import { statementNamer } from '../db/pg/statement-names.js';
import { markQueued, onQueueMarked } from '../db/queue-wake.js';
import { type AccountRow, accounts } from '../db/schema/accounts.js';
import { afterSend, recordSend } from '../server/core/sending-policy.js';
import { capturedMessages } from '../db/schema/captured-messages.js';
import { emails } from '../db/schema/emails.js';
import { changes, execute, forUpdate, issue, one, queryRows, together } from '../db/sql.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';

/**
 * The state's Db on Postgres (db/pg/state.ts): the SQLite schema's tables drive drizzle's node-postgres, values come
 * back as on SQLite (numbers, JSON, booleans, bytes), a transaction binds the async work under it to one connection,
 * and the migrations refuse a database a newer version migrated.
 */

let server: TestPostgres;
let store: PgStore;

const target = (database: string) => ({
  host: '127.0.0.1',
  port: server.port,
  database,
  user: server.user,
  password: server.password,
  ssl: { rejectUnauthorized: false },
});

/** Runs `fn` as async work of its own (another request), outside the caller's transaction. */
const elsewhere = AsyncResource.bind(<T>(fn: () => T): T => fn());

beforeAll(async () => {
  server = await startPostgres({ certificate: 'trusted' });
  await server.admin('create database state_a');
  store = await openPostgres(target('state_a'));
}, 120_000);

afterAll(async () => {
  await store?.close();
  await server?.stop();
});

const account = (id: string) => ({ id, name: id, createdAt: 1_700_000_000_000, dailyQuota: 100, creditsBalance: 5 });

describe('rows written and read with the SQLite schema', () => {
  it('numbers, JSON, booleans and bytes come back as on SQLite', async () => {
    const { db } = store;
    await db.insert(accounts).values(account('acc-1'));
    await db.insert(emails).values({
      id: 'em-1',
      accountId: 'acc-1',
      fromAddress: 'a@example.com',
      to: ['b@example.com', 'c@example.com'],
      subject: 's',
      template: 't',
      status: 'sent',
      sandbox: true,
      tags: { b: '2', a: '1' },
      createdAt: 1_700_000_000_123,
    });
    const row = await one(db.select().from(emails).where(eq(emails.id, 'em-1')));
    expect(row).toMatchObject({ to: ['b@example.com', 'c@example.com'], sandbox: true, createdAt: 1_700_000_000_123, tags: { b: '2', a: '1' } });
    // JSON comes back as written, key order kept.
    expect(Object.keys(row!.tags!)).toEqual(['b', 'a']);
    const [{ n }] = (await db.select({ n: count() }).from(emails)) as [{ n: number }];
    expect(n).toBe(1);
    const sealed = Buffer.from([0, 1, 2, 255]);
    await db.insert(capturedMessages).values({
      accountId: 'acc-1',
      emailId: 'em-1',
      recipient: 'b@example.com',
      messageSealed: sealed,
      createdAt: 1,
    });
    const cap = await one(db.select().from(capturedMessages).where(eq(capturedMessages.emailId, 'em-1')));
    expect(Buffer.isBuffer(cap!.messageSealed)).toBe(true);
    expect(cap!.messageSealed.equals(sealed)).toBe(true);
    expect(typeof cap!.seq).toBe('number');
  });

  it('a write gives how many rows it touched; plain SQL gives rows as objects', async () => {
    const { db } = store;
    await db.insert(accounts).values(account('acc-2'));
    expect(
      changes(
        await db
          .update(accounts)
          .set({ creditsBalance: sql`${accounts.creditsBalance} - 1` })
          .where(eq(accounts.id, 'acc-2')),
      ),
    ).toBe(1);
    expect(changes(await db.update(accounts).set({ name: 'x' }).where(eq(accounts.id, 'nobody')))).toBe(0);
    expect(await queryRows(db, sql`select credits_balance as "creditsBalance" from accounts where id = ${'acc-2'}`)).toEqual([{ creditsBalance: 4 }]);
    expect(await execute(db, sql`update accounts set name = 'y' where id in ('acc-1', 'acc-2')`)).toBe(2);
  });
});

describe('a transaction', () => {
  it('binds the async work under it to its connection: the root handle inside it is the transaction', async () => {
    const { db } = store;
    await expect(
      db.transaction(async () => {
        await db.insert(accounts).values(account('acc-rolled-back'));
        expect(await one(db.select().from(accounts).where(eq(accounts.id, 'acc-rolled-back')))).toBeDefined();
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    expect(await one(db.select().from(accounts).where(eq(accounts.id, 'acc-rolled-back')))).toBeUndefined();
  });

  it('work from elsewhere runs on another connection and does not see it before its commit', async () => {
    const { db } = store;
    await db.transaction(async (tx) => {
      await tx.insert(accounts).values(account('acc-3'));
      const seen = await elsewhere(() => one(db.select().from(accounts).where(eq(accounts.id, 'acc-3'))));
      expect(seen).toBeUndefined();
    });
    expect(await one(db.select().from(accounts).where(eq(accounts.id, 'acc-3')))).toBeDefined();
  });

  it('inside a transaction is a savepoint: its failure rolls back only its own writes', async () => {
    const { db } = store;
    await db.transaction(async (tx) => {
      await tx.insert(accounts).values(account('acc-4'));
      await expect(
        tx.transaction(async (inner) => {
          await inner.insert(accounts).values(account('acc-5'));
          throw new Error('inner refused');
        }),
      ).rejects.toThrow('inner refused');
    });
    const ids = (await db.select({ id: accounts.id }).from(accounts)).map((r) => r.id);
    expect(ids).toContain('acc-4');
    expect(ids).not.toContain('acc-5');
  });

  it('wakes a queue marked inside it once it has committed, not when it rolls back', async () => {
    const { db } = store;
    let woken = 0;
    const stop = onQueueMarked(db, 'recipients', () => woken++);
    await db.transaction(async (tx) => {
      markQueued(tx, 'recipients');
      await new Promise((r) => setImmediate(r));
      expect(woken).toBe(0);
    });
    expect(woken).toBe(1);
    await expect(
      db.transaction(async (tx) => {
        markQueued(tx, 'recipients');
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    await new Promise((r) => setImmediate(r));
    expect(woken).toBe(1);
    stop();
  });
});

/**
 * What leaves for Postgres while `work` runs: the writes (each one send on the socket, however many statements it
 * carries) and the Syncs among them (each a 5-byte message of its own: 'S' and its length, 4); counted at net.Socket's
 * one door for both write paths, on connections to the test server only.
 */
async function wireDuring(work: () => Promise<void>): Promise<{ writes: number; syncs: number }> {
  const proto = net.Socket.prototype as unknown as { _writeGeneric: (writev: boolean, data: unknown, ...rest: unknown[]) => unknown };
  const original = proto._writeGeneric;
  const seen = { writes: 0, syncs: 0 };
  const isSync = (b: unknown) => Buffer.isBuffer(b) && b.length === 5 && b[0] === 0x53 && b.readInt32BE(1) === 4;
  proto._writeGeneric = function (this: net.Socket, writev: boolean, data: unknown, ...rest: unknown[]) {
    if (this.remotePort === server.port) {
      seen.writes++;
      seen.syncs += (writev ? (data as { chunk: unknown }[]).map((c) => c.chunk) : [data]).filter(isSync).length;
    }
    return original.call(this, writev, data, ...rest);
  };
  try {
    await work();
  } finally {
    proto._writeGeneric = original;
  }
  return seen;
}

const writesDuring = async (work: () => Promise<void>) => (await wireDuring(work)).writes;

describe('statements issued together (db/sql.ts together)', () => {
  it('leave in one write with the others issued in the same tick, BEGIN with the first of them, and are answered at one Sync', async () => {
    const { db } = store;
    // A connection left idle in the pool, so the transactions below open none (its start-up has writes of its own).
    await db.transaction(async (tx) => void (await tx.select().from(accounts)));
    const byOne = await wireDuring(() =>
      db.transaction(async (tx) => {
        await tx.insert(accounts).values(account('acc-pipe-1'));
        await tx.update(accounts).set({ creditsBalance: 7 }).where(eq(accounts.id, 'acc-pipe-1'));
        await tx.select().from(accounts).where(eq(accounts.id, 'acc-pipe-1'));
      }),
    );
    const issuedTogether = await wireDuring(() =>
      db.transaction(async (tx) => {
        await together(tx, [
          () => tx.insert(accounts).values(account('acc-pipe-2')),
          () => tx.update(accounts).set({ creditsBalance: 7 }).where(eq(accounts.id, 'acc-pipe-2')),
          () => tx.select().from(accounts).where(eq(accounts.id, 'acc-pipe-2')),
        ]);
      }),
    );
    // BEGIN with the insert, the update, the select, COMMIT; against BEGIN with all three, COMMIT.
    expect(byOne.writes).toBe(4);
    expect(issuedTogether.writes).toBe(2);
    // And answered at one Sync (db/pg/pipeline.ts: Postgres flushes its answers once), where one statement a tick
    // takes a Sync each; COMMIT, a simple query, needs none.
    expect(byOne.syncs).toBe(3);
    expect(issuedTogether.syncs).toBe(1);
  });

  it('run in the order issued, and give each its own answer', async () => {
    const { db } = store;
    const [, updated, rows] = await db.transaction(
      async (tx) =>
        await together(tx, [
          () => tx.insert(accounts).values(account('acc-pipe-3')),
          () => tx.update(accounts).set({ creditsBalance: 9 }).where(eq(accounts.id, 'acc-pipe-3')),
          () => tx.select({ credits: accounts.creditsBalance }).from(accounts).where(eq(accounts.id, 'acc-pipe-3')),
        ]),
    );
    expect(changes(updated)).toBe(1);
    expect(rows).toEqual([{ credits: 9 }]);
  });

  it('throw the first failure in issue order, and the transaction rolls back what the others did', async () => {
    const { db } = store;
    await db.insert(accounts).values(account('acc-pipe-taken'));
    const failed = db.transaction(async (tx) => {
      await together(tx, [
        () => tx.insert(accounts).values(account('acc-pipe-4')),
        () => tx.insert(accounts).values(account('acc-pipe-taken')),
        () => tx.insert(accounts).values(account('acc-pipe-5')),
      ]);
    });
    // The duplicate key, not the aborted transaction the third statement met after it.
    await expect(failed).rejects.toMatchObject({ cause: { code: '23505' } });
    const ids = (await db.select({ id: accounts.id }).from(accounts)).map((r) => r.id);
    expect(ids).not.toContain('acc-pipe-4');
    expect(ids).not.toContain('acc-pipe-5');
    // The connection serves the next transaction as usual.
    await db.transaction(async (tx) => void (await tx.insert(accounts).values(account('acc-pipe-6'))));
    expect(await one(db.select().from(accounts).where(eq(accounts.id, 'acc-pipe-6')))).toBeDefined();
  });

  it("a sub-account's send counts its parent in the same round trip as itself (core/sending-policy.ts recordSend)", async () => {
    const { db } = store;
    await db.insert(accounts).values([account('acc-rs-own'), account('acc-rs-parent'), { ...account('acc-rs-sub'), parentId: 'acc-rs-parent' }]);
    const row = async (id: string) => (await one(db.select().from(accounts).where(eq(accounts.id, id))))!;
    const send = { recipients: 3, reputed: 3, charge: 'credit' as const, now: 1_700_000_000_000 };
    // A connection left idle in the pool, so the transactions below open none.
    await db.transaction(async (tx) => void (await tx.select().from(accounts)));
    const own = { acting: await row('acc-rs-own'), parent: null };
    const sub = { acting: await row('acc-rs-sub'), parent: await row('acc-rs-parent') };
    const forOwn = await writesDuring(() => db.transaction(async (tx) => void (await recordSend(tx, own, afterSend(own, send), send))));
    const forSub = await writesDuring(() => db.transaction(async (tx) => void (await recordSend(tx, sub, afterSend(sub, send), send))));
    const acting: AccountRow = await row('acc-rs-sub');
    // BEGIN with the update(s), COMMIT: the parent's update leaves with the sub-account's.
    expect(forOwn).toBe(2);
    expect(forSub).toBe(forOwn);
    // The sub-account's row is counted, not charged; the parent's is counted and charged.
    expect(acting).toMatchObject({ id: 'acc-rs-sub', sentTodayCount: 3, totalSent: 3, creditsBalance: 5 });
    expect(await row('acc-rs-parent')).toMatchObject({ sentTodayCount: 3, totalSent: 0, creditsBalance: 4, creditsTotalUsed: 1 });
  });
});

/** The SQLSTATE of a failed statement (drizzle wraps the driver's error: its code in the cause). */
const sqlState = (e: PromiseSettledResult<unknown>) =>
  e.status === 'fulfilled' ? 'ok' : ((e.reason as { cause?: { code?: string }; code?: string }).cause?.code ?? (e.reason as { code?: string }).code);

describe('the statements a transaction issues in one tick (db/pg/pipeline.ts): one Sync for them all', () => {
  it("one that fails ends the group: it gets its own error, those after it the aborted transaction's, those before it their answers", async () => {
    const { db } = store;
    await db.insert(accounts).values(account('acc-sync-taken'));
    let settled: PromiseSettledResult<unknown>[] = [];
    await expect(
      db.transaction(async (tx) => {
        settled = await Promise.allSettled([
          issue(tx.insert(accounts).values(account('acc-sync-2'))),
          issue(tx.insert(accounts).values(account('acc-sync-taken'))),
          issue(tx.select().from(accounts).where(eq(accounts.id, 'acc-sync-2'))),
        ]);
        throw new Error('roll it back');
      }),
    ).rejects.toThrow('roll it back');
    expect(settled.map(sqlState)).toEqual(['ok', '23505', '25P02']);
    expect(await ids()).not.toContain('acc-sync-2');
  });

  it('a named statement the failure skipped is parsed again when it next runs on that connection', async () => {
    const { db } = store;
    // Seen once (unnamed), so its next run is under a name, with its Parse: in the group the failure ends.
    const probe = (tx: typeof db) => tx.select({ id: accounts.id, probe: sql<number>`41 + 1` }).from(accounts).where(eq(accounts.id, 'acc-sync-taken'));
    await db.transaction(async (tx) => void (await probe(tx)));
    let settled: PromiseSettledResult<unknown>[] = [];
    await db
      .transaction(async (tx) => {
        settled = await Promise.allSettled([issue(tx.insert(accounts).values(account('acc-sync-taken'))), issue(probe(tx))]);
        throw new Error('roll it back');
      })
      .catch(() => undefined);
    expect(settled.map(sqlState)).toEqual(['23505', '25P02']);
    // The pool hands out the connection it took back last: the same one, whose Parse of the name never ran.
    expect(await db.transaction(async (tx) => await probe(tx))).toEqual([{ id: 'acc-sync-taken', probe: 42 }]);
    expect(await db.transaction(async (tx) => await probe(tx))).toEqual([{ id: 'acc-sync-taken', probe: 42 }]);
  });

  it('a value that cannot be sent fails its statement alone, before it reaches the server', async () => {
    const { db } = store;
    const unsendable = {
      toPostgres() {
        throw new Error('no text for this value');
      },
    };
    let settled: PromiseSettledResult<unknown>[] = [];
    await db.transaction(async (tx) => {
      settled = await Promise.allSettled([
        issue(tx.insert(accounts).values(account('acc-sync-3'))),
        issue(runPgSql(tx, sql`select ${unsendable}::text as v`)),
        issue(tx.update(accounts).set({ creditsBalance: 4 }).where(eq(accounts.id, 'acc-sync-3'))),
      ]);
    });
    expect(settled.map((e) => e.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    const reason = (settled[1] as PromiseRejectedResult).reason as { cause?: unknown };
    expect(String(reason.cause ?? reason)).toMatch(/no text for this value/);
    expect(await creditsOf('acc-sync-3')).toBe(4);
  });
});

const creditsOf = async (id: string) => (await one(store.db.select({ c: accounts.creditsBalance }).from(accounts).where(eq(accounts.id, id))))?.c;
const ids = async () => (await store.db.select({ id: accounts.id }).from(accounts)).map((r) => r.id);

describe('a batch: units of work in savepoints of one transaction (PgUnits.batch, the group commit on Postgres)', () => {
  it('commits them together, one after the other, each leaving in one write with the release of the one before', async () => {
    const { db } = store;
    await db.transaction(async (tx) => void (await tx.select().from(accounts)));
    let settled: unknown;
    const writes = await writesDuring(async () => {
      settled = await runPgBatch(
        db,
        ['acc-batch-1', 'acc-batch-2', 'acc-batch-3'].map((id) => async () => {
          await db.insert(accounts).values(account(id));
          return id;
        }),
      );
    });
    expect(settled).toEqual([
      { ok: true, value: 'acc-batch-1' },
      { ok: true, value: 'acc-batch-2' },
      { ok: true, value: 'acc-batch-3' },
    ]);
    expect(await ids()).toEqual(expect.arrayContaining(['acc-batch-1', 'acc-batch-2', 'acc-batch-3']));
    // BEGIN, SAVEPOINT and the first insert; each release with the next savepoint and insert; the last with COMMIT.
    // The same three writes as transactions of their own take two writes each.
    expect(writes).toBe(4);
    const alone = await writesDuring(async () => {
      for (const id of ['acc-batch-4', 'acc-batch-5', 'acc-batch-6']) await db.transaction(async (tx) => void (await tx.insert(accounts).values(account(id))));
    });
    expect(alone).toBe(6);
  });

  it('rolls back a unit that throws alone: it settles with its error, the others commit', async () => {
    const { db } = store;
    await db.insert(accounts).values(account('acc-batch-taken'));
    const settled = await runPgBatch(db, [
      async () => void (await db.insert(accounts).values(account('acc-batch-7'))),
      async () => {
        await db.insert(accounts).values(account('acc-batch-8'));
        throw new Error('refused');
      },
      // A failing statement aborts only its own unit, not the transaction.
      async () => void (await db.insert(accounts).values(account('acc-batch-taken'))),
      async () => void (await db.insert(accounts).values(account('acc-batch-9'))),
    ]);
    expect(settled.map((s) => s.ok)).toEqual([true, false, false, true]);
    expect(settled[1]).toMatchObject({ err: { message: 'refused' } });
    expect(settled[2]).toMatchObject({ err: { cause: { code: '23505' } } });
    const after = await ids();
    expect(after).toEqual(expect.arrayContaining(['acc-batch-7', 'acc-batch-9']));
    expect(after).not.toContain('acc-batch-8');
  });

  it('runs a unit that lost a deadlock to another transaction again on its own, after the commit', async () => {
    const { db } = store;
    await db.insert(accounts).values([account('acc-dl-x'), account('acc-dl-y')]);
    const other = await server.connect('state_a');
    await other.query('begin');
    await other.query(`update accounts set credits_balance = 1 where id = 'acc-dl-y'`);
    let runsOfSecond = 0;
    const batch = runPgBatch(db, [
      async () => void (await db.update(accounts).set({ creditsBalance: 2 }).where(eq(accounts.id, 'acc-dl-x'))),
      async () => {
        runsOfSecond++;
        await db.update(accounts).set({ creditsBalance: 3 }).where(eq(accounts.id, 'acc-dl-y'));
      },
    ]);
    // The batch holds x and waits for y; the other transaction then waits for x: a deadlock, which Postgres breaks
    // (after deadlock_timeout) by failing the statement that waited first, the batch's second unit.
    const waiting = async () => (await server.admin('select count(*)::int as n from pg_locks where not granted')).rows[0].n;
    await expect.poll(waiting, { timeout: 10_000 }).toBe(1);
    const otherDone = other.query(`update accounts set credits_balance = 4 where id = 'acc-dl-x'`).then(() => other.query('commit'));
    const settled = await batch;
    await otherDone;
    await other.end();
    expect(settled).toEqual([
      { ok: true, value: undefined },
      { ok: true, value: undefined },
    ]);
    expect(runsOfSecond).toBe(2);
    // x: the batch's 2, then the other's 4; y: the other's 1, then the unit's 3 on its own.
    expect(await creditsOf('acc-dl-x')).toBe(4);
    expect(await creditsOf('acc-dl-y')).toBe(3);
  }, 20_000);

  it('runs such a unit on its own up to three times while it keeps losing lock conflicts; then the conflict is its answer', async () => {
    const deadlock = () => Object.assign(new Error('deadlock detected'), { code: '40P01' });
    let runsOfFlaky = 0;
    let runsOfStuck = 0;
    const settled = await runPgBatch(store.db, [
      async () => {
        if (++runsOfFlaky < 3) throw deadlock();
        return 'the third time';
      },
      async () => {
        runsOfStuck++;
        throw deadlock();
      },
    ]);
    expect(settled).toEqual([
      { ok: true, value: 'the third time' },
      { ok: false, err: expect.objectContaining({ code: '40P01' }) },
    ]);
    // Once in the batch, then on its own: twice for the first, three times (the most) for the second.
    expect([runsOfFlaky, runsOfStuck]).toEqual([3, 4]);
  });

  it('rejects every unit when the transaction itself fails, and commits none of them', async () => {
    const { db } = store;
    const batch = runPgBatch(db, [
      async () => void (await db.insert(accounts).values(account('acc-batch-lost'))),
      // The connection goes: the unit's savepoint cannot be rolled back, so the transaction cannot go on.
      async () => void (await execute(db, sql`select pg_terminate_backend(pg_backend_pid())`)),
      async () => void (await db.insert(accounts).values(account('acc-batch-never'))),
    ]);
    await expect(batch).rejects.toThrow();
    const after = await ids();
    expect(after).not.toContain('acc-batch-lost');
    expect(after).not.toContain('acc-batch-never');
    // The pool replaced the connection.
    await db.transaction(async (tx) => void (await tx.insert(accounts).values(account('acc-batch-after'))));
    expect(await ids()).toContain('acc-batch-after');
  });
});

describe("readings issued ahead (PgUnits.batch with the units' readings: a send's, db/group-commit.ts ReadAhead)", () => {
  /** A unit that reads the account's credits (locked, as a send reads its account) and spends one. */
  const spend = (id: string, seen: number[]) => ({
    ahead: { read: () => creditsLocked(id), keys: () => [id] },
    unit: async (ahead?: Promise<unknown>) => {
      const credits = (await (ahead ?? creditsLocked(id))) as number;
      seen.push(credits);
      await store.db
        .update(accounts)
        .set({ creditsBalance: credits - 1 })
        .where(eq(accounts.id, id));
    },
  });
  const creditsLocked = async (id: string) =>
    (await one(forUpdate(store.db, store.db.select({ c: accounts.creditsBalance }).from(accounts).where(eq(accounts.id, id)))))!.c;

  it("leave together at the batch's start: one write for the readings, one for the units run at once", async () => {
    const { db } = store;
    await db.insert(accounts).values(['acc-ahead-1', 'acc-ahead-2', 'acc-ahead-3', 'acc-ahead-4', 'acc-ahead-5', 'acc-ahead-6'].map(account));
    await db.transaction(async (tx) => void (await tx.select().from(accounts)));
    const seen: number[] = [];
    const withAhead = ['acc-ahead-1', 'acc-ahead-2', 'acc-ahead-3'].map((id) => spend(id, seen));
    const ahead = await writesDuring(async () => {
      await runPgBatch(
        db,
        withAhead.map((u) => u.unit),
        withAhead.map((u) => u.ahead),
      );
    });
    const without = ['acc-ahead-4', 'acc-ahead-5', 'acc-ahead-6'].map((id) => spend(id, seen));
    const inTurn = await writesDuring(async () => {
      await runPgBatch(
        db,
        without.map((u) => u.unit),
      );
    });
    // BEGIN with the three readings; the three units' updates at once (their accounts differ), after their savepoint;
    // COMMIT.
    expect(ahead).toBe(3);
    // Each unit reading in its turn: a write more a unit.
    expect(inTurn).toBe(7);
    expect(seen).toEqual([5, 5, 5, 5, 5, 5]);
    for (const id of ['acc-ahead-1', 'acc-ahead-3', 'acc-ahead-6']) expect(await creditsOf(id)).toBe(4);
  });

  it('units that read nothing ahead (their keys alone) run at once with no write for readings before them', async () => {
    const { db } = store;
    await db.insert(accounts).values(['acc-keys-1', 'acc-keys-2', 'acc-keys-3'].map(account));
    await db.transaction(async (tx) => void (await tx.select().from(accounts)));
    const units = ['acc-keys-1', 'acc-keys-2', 'acc-keys-3'].map((id) => ({
      ahead: { keys: () => [id] },
      unit: async () => void (await db.update(accounts).set({ creditsBalance: 1 }).where(eq(accounts.id, id))),
    }));
    const writes = await writesDuring(async () => {
      const settled = await runPgBatch(
        db,
        units.map((u) => u.unit),
        units.map((u) => u.ahead),
      );
      expect(settled.every((s) => s.ok)).toBe(true);
    });
    // BEGIN with the savepoint and the three updates; COMMIT.
    expect(writes).toBe(2);
    for (const id of ['acc-keys-1', 'acc-keys-2', 'acc-keys-3']) expect(await creditsOf(id)).toBe(1);
  });

  it('are given only to a unit before which no unit wrote under its keys', async () => {
    const { db } = store;
    await db.insert(accounts).values(['acc-ahead-same', 'acc-ahead-other'].map(account));
    const seen: number[] = [];
    const first = spend('acc-ahead-same', seen);
    const again = spend('acc-ahead-same', seen);
    const other = spend('acc-ahead-other', seen);
    const settled = await runPgBatch(db, [first.unit, again.unit, other.unit], [first.ahead, again.ahead, other.ahead]);
    expect(settled.every((s) => s.ok)).toBe(true);
    // The other account's unit ran at once with the first (on its reading ahead); the second unit of the same account
    // ran after them, read in its turn and saw the first's spend.
    expect(seen).toEqual([5, 5, 4]);
    expect(await creditsOf('acc-ahead-same')).toBe(3);
    expect(await creditsOf('acc-ahead-other')).toBe(4);
  });

  it('run their units first, whatever order the units came in; each unit settles in its own place', async () => {
    const { db } = store;
    await db.insert(accounts).values(account('acc-ahead-late'));
    const seen: number[] = [];
    const late = spend('acc-ahead-late', seen);
    const early = spend('acc-ahead-early-other', seen);
    await db.insert(accounts).values(account('acc-ahead-early-other'));
    // A unit with no reading ahead, which came first and writes the row the last unit reads.
    const opaque = async () => {
      await db.update(accounts).set({ creditsBalance: 50 }).where(eq(accounts.id, 'acc-ahead-late'));
      return 'opaque';
    };
    const settled = await runPgBatch(db, [opaque, early.unit, late.unit], [undefined, early.ahead, late.ahead]);
    expect(settled).toEqual([
      { ok: true, value: 'opaque' },
      { ok: true, value: undefined },
      { ok: true, value: undefined },
    ]);
    // The last unit ran on its reading ahead, before the opaque unit's write, which came last.
    expect(seen).toEqual([5, 5]);
    expect(await creditsOf('acc-ahead-late')).toBe(50);
  });

  it('all rolled back when one fails: each unit then reads in its turn, the failing one fails alone', async () => {
    const { db } = store;
    await db.insert(accounts).values(['acc-ahead-f1', 'acc-ahead-f2'].map(account));
    const seen: number[] = [];
    const a = spend('acc-ahead-f1', seen);
    const b = spend('acc-ahead-f2', seen);
    const failing = () => runPgSql(db, sql`select * from no_such_table`);
    const settled = await runPgBatch(
      db,
      [a.unit, async (ahead?: Promise<unknown>) => await (ahead ?? failing()), b.unit],
      [a.ahead, { read: failing, keys: () => ['acc-ahead-x'] }, b.ahead],
    );
    expect(settled[0]).toEqual({ ok: true, value: undefined });
    expect(settled[1]).toMatchObject({ ok: false, err: { code: '42P01' } });
    expect(settled[2]).toEqual({ ok: true, value: undefined });
    expect(seen).toEqual([5, 5]);
    expect(await creditsOf('acc-ahead-f1')).toBe(4);
    expect(await creditsOf('acc-ahead-f2')).toBe(4);
  });
});
describe('units run at once (PgUnits.batch: the units given a reading ahead under keys of their own)', () => {
  /** A unit spending one of the account's credits on its reading ahead, counting its runs; `then` runs after its write. */
  const spender = (id: string, then?: (db: PgStore['db']) => Promise<unknown>) => {
    const unit = {
      runs: 0,
      ahead: { read: () => creditsLockedOf(id), keys: () => [id] },
      fn: async (ahead?: Promise<unknown>) => {
        unit.runs++;
        const credits = (await (ahead ?? creditsLockedOf(id))) as number;
        await store.db
          .update(accounts)
          .set({ creditsBalance: credits - 1 })
          .where(eq(accounts.id, id));
        return then ? then(store.db) : credits;
      },
    };
    return unit;
  };
  const creditsLockedOf = async (id: string) =>
    (await one(forUpdate(store.db, store.db.select({ c: accounts.creditsBalance }).from(accounts).where(eq(accounts.id, id)))))!.c;
  const batchOf = (units: ReturnType<typeof spender>[]) =>
    runPgBatch(
      store.db,
      units.map((u) => u.fn),
      units.map((u) => u.ahead),
    );
  const fresh = async (...ids: string[]) => {
    await store.db.insert(accounts).values(ids.map(account));
    return ids;
  };

  it('a statement that fails rolls them all back; run again one by one, it fails alone and the others commit once', async () => {
    const [a, b, c] = await fresh('acc-once-a', 'acc-once-b', 'acc-once-c');
    // The second unit inserts an account that exists: a unique violation, which aborts the transaction.
    const units = [spender(a!), spender(b!, (db) => db.insert(accounts).values(account(a!))), spender(c!)];
    const settled = await batchOf(units);
    expect(settled[0]).toEqual({ ok: true, value: 5 });
    expect(settled[1]).toMatchObject({ ok: false });
    expect(settled[2]).toEqual({ ok: true, value: 5 });
    expect(units.map((u) => u.runs)).toEqual([2, 2, 2]);
    expect([await creditsOf(a!), await creditsOf(b!), await creditsOf(c!)]).toEqual([4, 5, 4]);
  });

  it('one refused having only read is refused alone: the others are not run again', async () => {
    const [a, b, c] = await fresh('acc-read-a', 'acc-read-b', 'acc-read-c');
    const refusing = {
      runs: 0,
      ahead: { read: () => creditsLockedOf(b!), keys: () => [b!] },
      fn: async (ahead?: Promise<unknown>) => {
        refusing.runs++;
        await ahead;
        await store.db.select().from(accounts).where(eq(accounts.id, b!));
        throw new Error('refused');
      },
    };
    const units = [spender(a!), refusing as unknown as ReturnType<typeof spender>, spender(c!)];
    const settled = await batchOf(units);
    expect(settled[1]).toMatchObject({ ok: false, err: { message: 'refused' } });
    expect([settled[0], settled[2]]).toEqual([
      { ok: true, value: 5 },
      { ok: true, value: 5 },
    ]);
    expect(units.map((u) => u.runs)).toEqual([1, 1, 1]);
    expect([await creditsOf(a!), await creditsOf(b!), await creditsOf(c!)]).toEqual([4, 5, 4]);
  });

  it('one whose read fails (the transaction aborted) rolls them all back: run again one by one, it fails alone', async () => {
    const [a, b] = await fresh('acc-badread-a', 'acc-badread-b');
    const failing = {
      runs: 0,
      ahead: { read: () => creditsLockedOf(b!), keys: () => [b!] },
      fn: async (ahead?: Promise<unknown>) => {
        failing.runs++;
        await ahead;
        // After the other's update has been answered: its own statements all succeeded.
        await new Promise((resolve) => setTimeout(resolve, 20));
        return runPgSql(store.db, sql`select * from no_such_table`);
      },
    };
    const units = [spender(a!), failing as unknown as ReturnType<typeof spender>];
    const settled = await batchOf(units);
    expect(settled[0]).toEqual({ ok: true, value: 5 });
    expect(settled[1]).toMatchObject({ ok: false, err: { code: '42P01' } });
    expect(units.map((u) => u.runs)).toEqual([2, 2]);
    expect([await creditsOf(a!), await creditsOf(b!)]).toEqual([4, 5]);
  });

  it('one refused after a write rolls them all back: run again one by one, its write is undone and the others commit once', async () => {
    const [a, b, c] = await fresh('acc-wrote-a', 'acc-wrote-b', 'acc-wrote-c');
    const units = [
      spender(a!),
      spender(b!, async () => {
        throw new Error('refused after its write');
      }),
      spender(c!),
    ];
    const settled = await batchOf(units);
    expect(settled[1]).toMatchObject({ ok: false, err: { message: 'refused after its write' } });
    expect(units.map((u) => u.runs)).toEqual([2, 2, 2]);
    expect([await creditsOf(a!), await creditsOf(b!), await creditsOf(c!)]).toEqual([4, 5, 4]);
  });

  it('one that opens a transaction of its own runs again one by one, where it has its savepoint', async () => {
    const [a, b] = await fresh('acc-nest-a', 'acc-nest-b');
    const units = [spender(a!), spender(b!, (db) => db.transaction(async (tx) => (await tx.select().from(accounts).where(eq(accounts.id, b!))).length))];
    const settled = await batchOf(units);
    expect(settled).toEqual([
      { ok: true, value: 5 },
      { ok: true, value: 1 },
    ]);
    expect(units.map((u) => u.runs)).toEqual([2, 2]);
    expect([await creditsOf(a!), await creditsOf(b!)]).toEqual([4, 4]);
  });

  it('what runs after the commit (queue wakes) runs once a unit, run at once or again', async () => {
    const woken: string[] = [];
    const stop = onQueueMarked(store.db, 'recipients', () => woken.push('recipients'));
    try {
      for (const failing of [false, true]) {
        woken.length = 0;
        const [a, b] = await fresh(`acc-wake-a-${failing}`, `acc-wake-b-${failing}`);
        const mark = async (db: PgStore['db']) => markQueued(db, 'recipients');
        const units = [spender(a!, mark), spender(b!, failing ? async () => Promise.reject(new Error('after its write')) : mark)];
        await batchOf(units);
        expect(woken, `with ${failing ? 'a unit refused after its write' : 'every unit committed'}`).toEqual(
          failing ? ['recipients'] : ['recipients', 'recipients'],
        );
      }
    } finally {
      stop();
    }
  });
});

describe('readings carried (ReadAhead.carry: units under the same keys, each on what the one before handed on)', () => {
  /** Reads the account's credits (locked, as a send reads its account). */
  const creditsLockedOf = async (id: string) =>
    (await one(forUpdate(store.db, store.db.select({ c: accounts.creditsBalance }).from(accounts).where(eq(accounts.id, id)))))!.c;
  /** The credits as the unit before left them: what it handed on. */
  const carryCredits = (_reading: unknown, handed: unknown) => handed;
  /**
   * A unit spending one of the account's credits on its reading (given, or read in its turn: `reads` counts those),
   * handing on the credits it leaves once its update is issued. `refuse` at a balance: refused before any write.
   */
  const spender = (
    id: string,
    opts: {
      refuse?: number;
      carry?: (reading: unknown, handed: unknown) => unknown;
      keys?: string[];
      handOn?: boolean;
      handFirst?: boolean;
      then?: () => Promise<unknown>;
    } = {},
  ) => {
    const unit = {
      runs: 0,
      reads: 0,
      seen: [] as number[],
      ahead: { read: () => creditsLockedOf(id), keys: () => opts.keys ?? [id], carry: 'carry' in opts ? opts.carry : carryCredits },
      fn: async (ahead?: Promise<unknown>, handOn?: (handed: unknown) => void) => {
        unit.runs++;
        if (!ahead) unit.reads++;
        const credits = (await (ahead ?? creditsLockedOf(id))) as number;
        unit.seen.push(credits);
        if (opts.handFirst) handOn?.(credits - 1);
        if (credits === opts.refuse) throw new Error(`refused at ${credits}`);
        const update = issue(
          store.db
            .update(accounts)
            .set({ creditsBalance: credits - 1 })
            .where(eq(accounts.id, id)),
        );
        if (opts.handOn !== false) handOn?.(credits - 1);
        await update;
        if (opts.then) await opts.then();
        return credits;
      },
    };
    return unit;
  };
  const batchOf = (units: ReturnType<typeof spender>[]) =>
    runPgBatch(
      store.db,
      units.map((u) => u.fn),
      units.map((u) => u.ahead),
    );
  const fresh = async (id: string) => {
    await store.db.insert(accounts).values(account(id));
    return id;
  };

  it('run at once: each on what the one before handed on, their writes together, none read again', async () => {
    const id = await fresh('acc-carry-1');
    // A connection left idle in the pool, so the batches below open none.
    await store.db.transaction(async (tx) => void (await tx.select().from(accounts)));
    const units = [spender(id), spender(id), spender(id)];
    const writes = await writesDuring(async () => {
      const settled = await batchOf(units);
      expect(settled).toEqual([5, 4, 3].map((value) => ({ ok: true, value })));
    });
    // BEGIN with the three readings; the savepoint and the three updates; COMMIT.
    expect(writes).toBe(3);
    expect(units.map((u) => u.seen)).toEqual([[5], [4], [3]]);
    expect(units.map((u) => u.reads)).toEqual([0, 0, 0]);
    expect(await creditsOf(id)).toBe(2);
  });

  it('without a carry each unit after the first reads in its turn, one after the other', async () => {
    const id = await fresh('acc-carry-none');
    await store.db.transaction(async (tx) => void (await tx.select().from(accounts)));
    const units = [spender(id, { carry: undefined }), spender(id, { carry: undefined }), spender(id, { carry: undefined })];
    const writes = await writesDuring(async () => void (await batchOf(units)));
    expect(writes).toBeGreaterThan(3);
    expect(units.map((u) => u.seen)).toEqual([[5], [4], [3]]);
    expect(units.map((u) => u.reads)).toEqual([0, 1, 1]);
    expect(await creditsOf(id)).toBe(2);
  });

  it('one refused before handing on passes on what it was given: the next sees the unit before it', async () => {
    const id = await fresh('acc-carry-refused');
    const units = [spender(id), spender(id, { refuse: 4 }), spender(id)];
    const settled = await batchOf(units);
    expect(settled[0]).toEqual({ ok: true, value: 5 });
    expect(settled[1]).toMatchObject({ ok: false, err: { message: 'refused at 4' } });
    expect(settled[2]).toEqual({ ok: true, value: 4 });
    // Run once each: a unit refused having only read leaves the others committed.
    expect(units.map((u) => u.runs)).toEqual([1, 1, 1]);
    expect(await creditsOf(id)).toBe(3);
  });

  it('a carry that cannot tell, or a unit that ends without handing on, has them all run again one by one', async () => {
    // The same carry for all three, which cannot tell past a balance of 4; then, a second unit that never hands on.
    const unlessFour = (_reading: unknown, handed: unknown) => (handed === 4 ? undefined : handed);
    for (const [name, opts] of [
      ['a carry that cannot tell', [{ carry: unlessFour }, { carry: unlessFour }, { carry: unlessFour }]],
      ['no hand-on', [{}, { handOn: false }, {}]],
    ] as const) {
      const id = await fresh(`acc-carry-${name.replaceAll(' ', '-')}`);
      const units = opts.map((o) => spender(id, o));
      const settled = await batchOf(units);
      expect(settled, name).toEqual([5, 4, 3].map((value) => ({ ok: true, value })));
      expect(await creditsOf(id), name).toBe(2);
      expect(
        units.map((u) => u.runs),
        name,
      ).toEqual(name === 'a carry that cannot tell' ? [2, 1, 1] : [2, 2, 1]);
      // Run again one by one, where the unit it cannot be carried to reads in its turn.
      expect(
        units.map((u) => u.reads),
        name,
      ).toEqual(name === 'a carry that cannot tell' ? [0, 1, 0] : [0, 0, 1]);
    }
  });

  it('one that fails after handing on rolls them all back: run again one by one, it fails alone', async () => {
    const id = await fresh('acc-carry-fails');
    const units = [spender(id), spender(id, { then: () => Promise.reject(new Error('after its write')) }), spender(id)];
    const settled = await batchOf(units);
    expect(settled[0]).toEqual({ ok: true, value: 5 });
    expect(settled[1]).toMatchObject({ ok: false, err: { message: 'after its write' } });
    // Run again after it, on what the first handed on: its write undone with it.
    expect(settled[2]).toEqual({ ok: true, value: 4 });
    expect(units.map((u) => u.runs)).toEqual([2, 2, 2]);
    expect(units[2]!.reads).toBe(0);
    expect(await creditsOf(id)).toBe(3);
  });

  it('one refused after handing on, even before its writes, has them all run again: the next sees what was written', async () => {
    const id = await fresh('acc-carry-handed-refused');
    const units = [spender(id), spender(id, { refuse: 4, handFirst: true }), spender(id)];
    const settled = await batchOf(units);
    expect(settled[1]).toMatchObject({ ok: false, err: { message: 'refused at 4' } });
    expect(settled[2]).toEqual({ ok: true, value: 4 });
    expect(await creditsOf(id)).toBe(3);
  });

  it('keys that differ are no chain: the unit reads in its turn and sees the writes before it', async () => {
    const id = await fresh('acc-carry-keys');
    await fresh('acc-carry-keys-other');
    const units = [spender(id), spender(id, { keys: [id, 'acc-carry-keys-other'] })];
    const settled = await batchOf(units);
    expect(settled).toEqual([5, 4].map((value) => ({ ok: true, value })));
    expect(units[1]!.reads).toBe(1);
    expect(await creditsOf(id)).toBe(3);
  });
});

describe('a transaction that a unit left aborted', () => {
  it('fails at its commit, which Postgres answers with a rollback: nothing of it is committed', async () => {
    const { db } = store;
    const batch = runPgBatch(db, [
      async () => void (await db.insert(accounts).values(account('acc-aborted-1'))),
      async () => {
        // A failing statement the unit does not wait for: its savepoint is released after it, in a failed transaction.
        execute(db, sql`select 1/0`).catch(() => undefined);
      },
    ]);
    await expect(batch).rejects.toThrow();
    expect(await ids()).not.toContain('acc-aborted-1');
  });
});

describe('the group commit on Postgres (db/group-commit.ts createPgGroupCommit)', () => {
  it('writes submitted in the same turn share one transaction', async () => {
    const { db } = store;
    await db.transaction(async (tx) => void (await tx.select().from(accounts)));
    // The contract as transactions of their own: each write one transaction.
    const ownTransactions = { run: <T>(fn: (tx: typeof db) => Promise<T>) => db.transaction(async () => fn(db)) };
    const grouped = createPgGroupCommit(db);
    const three = (commits: typeof grouped, prefix: string) =>
      Promise.all([1, 2, 3].map((i) => commits.run(async (tx) => void (await tx.insert(accounts).values(account(`${prefix}-${i}`))))));
    expect(await writesDuring(() => three(ownTransactions, 'acc-own').then(() => undefined))).toBeGreaterThanOrEqual(6);
    expect(await writesDuring(() => three(grouped, 'acc-grouped').then(() => undefined))).toBe(4);
    expect(await ids()).toEqual(expect.arrayContaining(['acc-grouped-1', 'acc-grouped-2', 'acc-grouped-3']));
  });

  it('resolves each write with its own value once committed, rejects a refused one alone, and a write that comes meanwhile joins the next batch', async () => {
    const { db } = store;
    const commits = createPgGroupCommit(db);
    const seen: string[] = [];
    const first = commits.run(async (tx) => {
      await tx.insert(accounts).values(account('acc-gc-1'));
      // Not yet visible from elsewhere: the batch has not committed.
      seen.push(String(await elsewhere(() => one(db.select().from(accounts).where(eq(accounts.id, 'acc-gc-1'))))));
      return 'one';
    });
    const refused = commits.run(async (tx) => {
      await tx.insert(accounts).values(account('acc-gc-2'));
      throw new Error('refused');
    });
    await new Promise((r) => setImmediate(r));
    const later = commits.run(async (tx) => {
      // The batch before it has committed.
      seen.push(String((await one(db.select().from(accounts).where(eq(accounts.id, 'acc-gc-1'))))?.id));
      await tx.insert(accounts).values(account('acc-gc-3'));
      return 'three';
    });
    await expect(first).resolves.toBe('one');
    await expect(refused).rejects.toThrow('refused');
    await expect(later).resolves.toBe('three');
    expect(seen).toEqual(['undefined', 'acc-gc-1']);
    const after = await ids();
    expect(after).toEqual(expect.arrayContaining(['acc-gc-1', 'acc-gc-3']));
    expect(after).not.toContain('acc-gc-2');
  });

  it('wakes a queue marked in a write once its batch committed, never for a write rolled back', async () => {
    const { db } = store;
    const commits = createPgGroupCommit(db);
    const heard: string[] = [];
    const offs = [onQueueMarked(db, 'webhooks', () => heard.push('webhooks')), onQueueMarked(db, 'recipients', () => heard.push('recipients'))];
    const order: string[] = [];
    const ok = commits.run(async (tx) => {
      markQueued(tx, 'webhooks');
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
      order.push(`marked, ${heard.length} wake(s) before the commit`);
    });
    // In the same batch, after the first: its mark goes with its savepoint.
    const failed = commits.run(async (tx) => {
      markQueued(tx, 'recipients');
      throw new Error('refused');
    });
    await expect(failed).rejects.toThrow('refused');
    await ok;
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(heard).toEqual(['webhooks']);
    expect(order).toEqual(['marked, 0 wake(s) before the commit']);
    for (const off of offs) off();
  });
});

describe('point reads (pgPointReads: a request key check, a stamp, a lease still held)', () => {
  const pidOf = (db: PgStore['db']) => queryRows<{ pid: number }>(db, sql`select pg_backend_pid() as pid`).then((rows) => rows[0]!.pid);
  const fiveReads = (db: PgStore['db'], point: boolean) =>
    Promise.all(
      Array.from({ length: 5 }, () =>
        point
          ? pgPointReads(db, () => one(db.select().from(accounts).where(eq(accounts.id, 'acc-1'))))
          : one(db.select().from(accounts).where(eq(accounts.id, 'acc-1'))),
      ),
    ).then(() => undefined);

  it('issued in the same turn by concurrent work, leave in one write on a connection of their own', async () => {
    const { db } = store;
    // The first point read finds the connection not yet there (the pool serves it) and has it made.
    await expect.poll(() => writesDuring(() => fiveReads(db, true)), { timeout: 5_000 }).toBe(1);
    // The same five reads on the pool: a connection each, a write each.
    expect(await writesDuring(() => fiveReads(db, false))).toBeGreaterThanOrEqual(5);
    // All on one connection, not the pool's others.
    const pids = await Promise.all(Array.from({ length: 4 }, () => pgPointReads(db, () => pidOf(db))));
    expect(new Set(pids).size).toBe(1);
  });

  it('inside a transaction stay on its connection, and see what it wrote', async () => {
    const { db } = store;
    await db.transaction(async (tx) => {
      await tx.insert(accounts).values(account('acc-point-1'));
      const seen = await pgPointReads(db, () => one(db.select().from(accounts).where(eq(accounts.id, 'acc-point-1'))));
      expect(seen?.id).toBe('acc-point-1');
    });
  });

  it('fail with their connection when it drops, and the next ones run on a new one', async () => {
    const { db } = store;
    await expect.poll(() => writesDuring(() => fiveReads(db, true)), { timeout: 5_000 }).toBe(1);
    const before = await pgPointReads(db, () => pidOf(db));
    await server.admin(`select pg_terminate_backend(${before})`);
    // No uncaught error from the dropped connection; the reads go on, on another connection.
    await expect.poll(async () => await pgPointReads(db, () => pidOf(db)).catch(() => before), { timeout: 5_000 }).not.toBe(before);
    await expect.poll(() => writesDuring(() => fiveReads(db, true)), { timeout: 5_000 }).toBe(1);
  });
});

describe('statementNamer: a text named from its second run, the same name each time, at most `limit` names', () => {
  it('names a text on its second run and keeps the name', () => {
    const nameOf = statementNamer({ limit: 2, watch: 10 });
    expect(nameOf('select 1')).toBeUndefined();
    const first = nameOf('select 1');
    expect(first).toBe('mailstead_1');
    expect(nameOf('select 1')).toBe(first);
    expect(nameOf('select 2')).toBeUndefined();
    expect(nameOf('select 2')).toBe('mailstead_2');
  });

  it('names no more than `limit` texts; the named keep their names', () => {
    const nameOf = statementNamer({ limit: 1, watch: 10 });
    nameOf('select 1');
    expect(nameOf('select 1')).toBe('mailstead_1');
    nameOf('select 2');
    expect(nameOf('select 2')).toBeUndefined();
    expect(nameOf('select 1')).toBe('mailstead_1');
  });

  it('forgets the texts seen once, all together, past `watch` of them', () => {
    const nameOf = statementNamer({ limit: 10, watch: 2 });
    nameOf('a');
    nameOf('b');
    nameOf('c');
    expect(nameOf('a')).toBeUndefined();
    expect(nameOf('c')).toBe('mailstead_1');
  });
});

describe('repeated statements', () => {
  it('run under a name from their second run, so the connection parses and plans them once', async () => {
    const { db } = store;
    const text = "select count(*)::int as n from accounts where name = 'named-statement-probe'";
    const named = await db.transaction(async () => {
      const once = await queryRows<{ name: string }>(db, sql`select name from pg_prepared_statements where statement = ${text}`);
      expect(once).toEqual([]);
      for (let i = 0; i < 3; i++) expect(await queryRows(db, sql.raw(text))).toEqual([{ n: 0 }]);
      return queryRows<{ name: string }>(db, sql`select name from pg_prepared_statements where statement = ${text}`);
    });
    expect(named).toHaveLength(1);
    expect(named[0]!.name).toMatch(/^mailstead_\d+$/);
  });

  it('a drizzle query too, its values bound anew on each run', async () => {
    const { db } = store;
    await db.insert(accounts).values([account('acc-named-1'), account('acc-named-2')]);
    const found = await db.transaction(async () => {
      const ids: string[] = [];
      for (const id of ['acc-named-1', 'acc-named-2', 'acc-named-1']) {
        ids.push(...(await db.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, id))).map((r) => r.id));
      }
      const prepared = await queryRows<{ statement: string }>(db, sql`select statement from pg_prepared_statements where name like 'mailstead_%'`);
      return { ids, prepared: prepared.map((p) => p.statement) };
    });
    expect(found.ids).toEqual(['acc-named-1', 'acc-named-2', 'acc-named-1']);
    expect(found.prepared).toContain('select "id" from "accounts" where "accounts"."id" = $1');
  });
});

describe('the migrations', () => {
  it('run once under their lock when two starts race, and a second start finds nothing to do', async () => {
    await server.admin('create database state_b');
    const [a, b] = await Promise.all([openPostgres(target('state_b')), openPostgres(target('state_b'))]);
    await a.close();
    await b.close();
    const again = await openPostgres(target('state_b'));
    const applied = await again.pool.query('select count(*)::int as n from drizzle.__drizzle_migrations');
    expect(applied.rows[0].n).toBeGreaterThan(0);
    await again.close();
  });

  it('refuse a database migrated by a newer version', async () => {
    await server.admin('create database state_c');
    const s = await openPostgres(target('state_c'));
    await s.pool.query(`insert into drizzle.__drizzle_migrations (hash, created_at) values ('future', ${Date.now() + 365 * 86_400_000})`);
    await s.close();
    await expect(openPostgres(target('state_c'))).rejects.toBeInstanceOf(StateTooNewError);
  });
});

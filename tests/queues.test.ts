import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import type { Store } from '../db/client.js';
import { forwardWakes, keepWakes, markQueued, onQueueMarked, tellOtherNodes } from '../db/queue-wake.js';
import { execute } from '../db/sql.js';
import { sqliteLeases } from '../server/queues/lease-table.js';
import { createQueueWorker, createRunner } from '../server/queues/runner.js';
import { takeInTurns } from '../server/queues/turns.js';
import { openTestStore } from './helpers/test-state.js';

/**
 * The durable-queue mechanism (server/queues/): accounts in turn, the lease operations written once over a table
 * description, the wake after a durable commit (db/queue-wake.ts) and the runner's stop, on the run's engine (SQLite in
 * DATA_DIR, or a state database of its own on a Postgres run). The wake after the group commit's flush, SQLite's own,
 * is in queues.sqlite.test.ts.
 */

describe('takeInTurns: every list’s first, then every list’s second..., up to the limit', () => {
  const cases: { lists: string[][]; limit: number; taken: string[] }[] = [
    { lists: [], limit: 5, taken: [] },
    { lists: [[], []], limit: 5, taken: [] },
    { lists: [['a1', 'a2', 'a3']], limit: 2, taken: ['a1', 'a2'] },
    { lists: [['a1', 'a2', 'a3'], ['b1']], limit: 10, taken: ['a1', 'b1', 'a2', 'a3'] },
    { lists: [['a1', 'a2', 'a3', 'a4'], ['b1', 'b2'], ['c1']], limit: 5, taken: ['a1', 'b1', 'c1', 'a2', 'b2'] },
    // A backlog first in line never keeps the others out: the limit falls within a turn.
    {
      lists: [
        ['a1', 'a2', 'a3', 'a4'],
        ['b1', 'b2'],
      ],
      limit: 3,
      taken: ['a1', 'b1', 'a2'],
    },
    { lists: [['a1'], ['b1']], limit: 0, taken: [] },
  ];
  it.each(cases)('$lists, limit $limit', ({ lists, limit, taken }) => {
    expect(takeInTurns(lists, limit)).toEqual(taken);
  });
});

const probe = sqliteTable('probe', {
  id: text('id').primaryKey(),
  status: text('status').notNull(),
  lockedBy: text('locked_by'),
  lockedUntil: integer('locked_until'),
});
const leases = sqliteLeases({
  table: probe,
  id: probe.id,
  lockedBy: probe.lockedBy,
  lockedUntil: probe.lockedUntil,
  leasable: sql`${probe.status} = ${sql.placeholder('status')}`,
});

let dataDir: string;
let store: Store;

beforeEach(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'mailstead-queues-'));
  store = await openTestStore(dataDir);
  // The probe as a migration would make it on each engine (a time in ms is a bigint on Postgres).
  const integer = store.engine === 'postgres' ? 'bigint' : 'integer';
  await execute(store.db, sql.raw(`create table probe (id text primary key, status text not null, locked_by text, locked_until ${integer})`));
});

afterEach(async () => {
  await store.close();
  rmSync(dataDir, { recursive: true, force: true });
});

type ProbeRow = typeof probe.$inferSelect;
const put = async (...rows: ProbeRow[]) => await store.db.insert(probe).values(rows);
const row = async (id: string) => (await store.db.select().from(probe)).find((r) => r.id === id);
const free = (id: string, status = 'queued'): ProbeRow => ({ id, status, lockedBy: null, lockedUntil: null });
const held = (id: string, by: string, until: number, status = 'queued'): ProbeRow => ({ id, status, lockedBy: by, lockedUntil: until });

describe('the lease operations over a table', () => {
  const NOW = 1_000_000;
  const cases: { name: string; row: ProbeRow; leased: boolean }[] = [
    { name: 'a free row', row: free('r'), leased: true },
    { name: 'a row whose lease ran out', row: held('r', 'other', NOW - 1), leased: true },
    { name: 'a row whose lease runs out right now', row: held('r', 'other', NOW), leased: true },
    { name: 'a row under a live lease', row: held('r', 'other', NOW + 1), leased: false },
    { name: 'a row the queue’s condition leaves out', row: free('r', 'sent'), leased: false },
  ];
  it.each(cases)('lease: $name is leased: $leased', async ({ row: r, leased }) => {
    await put(r);
    const got = await leases.lease(store.db, 'me', ['r'], NOW + 500, NOW, { status: 'queued' });
    expect(got.map((g) => g.id)).toEqual(leased ? ['r'] : []);
    expect(await row('r')).toEqual(leased ? { ...r, lockedBy: 'me', lockedUntil: NOW + 500 } : r);
  });

  it('leases only the ids asked for, and returns the rows as the table maps them', async () => {
    await put(free('a'), free('b'), free('c'));
    expect((await leases.lease(store.db, 'me', ['a', 'c', 'missing'], 10, 0, { status: 'queued' })).sort((x, y) => (x.id < y.id ? -1 : 1))).toEqual([
      held('a', 'me', 10),
      held('c', 'me', 10),
    ]);
    expect(await row('b')).toEqual(free('b'));
    expect(await leases.lease(store.db, 'me', [], 10, 0, { status: 'queued' })).toEqual([]);
  });

  it('renews, checks and releases only what the worker holds', async () => {
    await put(held('a', 'me', 10), held('b', 'me', 10), held('c', 'other', 10));
    await leases.renew(store.db, 'me', ['a', 'c'], 99);
    expect([(await row('a'))!.lockedUntil, (await row('b'))!.lockedUntil, (await row('c'))!.lockedUntil]).toEqual([99, 10, 10]);
    expect(await Promise.all(['a', 'c', 'missing'].map((id) => leases.stillHeld(store.db, 'me', id)))).toEqual([true, false, false]);
    expect(await leases.release(store.db, 'me', ['a', 'c'])).toBe(1);
    expect([await row('a'), await row('c')]).toEqual([free('a'), held('c', 'other', 10)]);
    expect(await leases.release(store.db, 'me', [])).toBe(0);
    expect(await leases.release(store.db, 'me')).toBe(1);
    expect(await row('b')).toEqual(free('b'));
    expect(await row('c')).toEqual(held('c', 'other', 10));
  });

  it('at start, releases the leases of dead holders on this host and caps the others', async () => {
    const me = `${hostname()}:${process.pid}:self`;
    const holders = {
      earlierRun: `${hostname()}:${process.pid}:earlier`, // an earlier run under this very pid: dead
      live: `${hostname()}:${process.ppid}:alive`, // a process that still runs
      elsewhere: 'another-host:1:x', // another host's process may still run
    };
    await put(held('a', holders.earlierRun, 50), held('b', holders.live, 50), held('c', holders.elsewhere, 5_000), held('d', me, 5_000));
    expect(await leases.releaseDead(store.db, me)).toBe(1);
    expect(await row('a')).toEqual(free('a'));
    expect(await row('b')).toEqual(held('b', holders.live, 50));
    // A foreign lease past one term from now is cut to it; this worker's own and one within the term are left alone.
    expect(await leases.capForeign(store.db, me, 1_000, 1_000)).toBe(1);
    expect([(await row('b'))!.lockedUntil, (await row('c'))!.lockedUntil, (await row('d'))!.lockedUntil]).toEqual([50, 2_000, 5_000]);
  });
});

describe('the wake after a durable commit', () => {
  const ticks = () => new Promise((r) => setImmediate(r));

  it('wakes after a plain transaction once it committed, each marked queue once, only its subscribers', async () => {
    const heard: string[] = [];
    const off = onQueueMarked(store.db, 'webhooks', () => heard.push('webhooks'));
    onQueueMarked(store.db, 'recipients', () => heard.push('recipients'));
    await store.db.transaction(async () => {
      markQueued(store.db, 'webhooks');
      markQueued(store.db, 'webhooks');
      markQueued(store.db, 'recipients');
      await ticks();
      // Not while the transaction is open, whatever runs meanwhile.
      expect(heard).toEqual([]);
    });
    await ticks();
    expect(heard.sort()).toEqual(['recipients', 'webhooks']);
    off();
    markQueued(store.db, 'webhooks');
    markQueued(store.db, 'customer-db'); // nobody listens
    await ticks();
    expect(heard.sort()).toEqual(['recipients', 'webhooks']);
  });
});

describe('wakes told to the other nodes', () => {
  const ticks = () => new Promise((r) => setImmediate(r));

  it("are told unless this node's worker keeps them (it claims at once); the worker tells them itself", async () => {
    const told: string[] = [];
    forwardWakes(store.db, (queue) => told.push(queue));
    let keeps = true;
    const undo = keepWakes(store.db, 'recipients', () => keeps);
    try {
      let woken = 0;
      const off = onQueueMarked(store.db, 'recipients', () => woken++);
      markQueued(store.db, 'recipients');
      markQueued(store.db, 'webhooks');
      await ticks();
      // The worker here is woken either way; only the queue nobody keeps is told.
      expect(woken).toBe(1);
      expect(told).toEqual(['webhooks']);
      keeps = false;
      markQueued(store.db, 'recipients');
      await ticks();
      expect(told).toEqual(['webhooks', 'recipients']);
      tellOtherNodes(store.db, 'recipients');
      expect(told).toEqual(['webhooks', 'recipients', 'recipients']);
      // Undone (the worker stopped): told again, kept or not.
      keeps = true;
      undo();
      markQueued(store.db, 'recipients');
      await ticks();
      expect(told).toEqual(['webhooks', 'recipients', 'recipients', 'recipients']);
      off();
    } finally {
      undo();
      forwardWakes(store.db, null);
    }
  });
});

describe('the runner', () => {
  it('wakes on its queue’s marks only while it runs, and its stop waits for the work in flight within its grace', async () => {
    let passes = 0;
    let finish: () => void = () => undefined;
    const runner = createRunner({
      intervalMs: 60_000,
      tick: async () => {
        passes++;
        return false;
      },
      onError: (err) => {
        throw err;
      },
      wake: { db: store.db, queue: 'recipients' },
      stopGraceMs: 50,
    });
    await runner.start();
    await expect.poll(() => passes).toBe(1);
    markQueued(store.db, 'recipients');
    await expect.poll(() => passes).toBe(2);
    markQueued(store.db, 'webhooks');
    await new Promise((r) => setTimeout(r, 20));
    expect(passes).toBe(2);
    void runner.track(new Promise<void>((resolve) => (finish = resolve)), { wakeAfter: false });
    expect(runner.inFlight).toBe(1);
    expect(await runner.stop()).toEqual({ abandoned: true });
    markQueued(store.db, 'recipients');
    await new Promise((r) => setTimeout(r, 20));
    expect(passes).toBe(2);
    finish();
    await expect.poll(() => runner.inFlight).toBe(0);
  });
});

describe('a queue worker: what it claims and what one attempt is', () => {
  it('claims within its room (maxInFlight less the attempts in flight) and runs until nothing is due', async () => {
    const due = ['a', 'b', 'c', 'd', 'e'];
    const rooms: number[] = [];
    const attempted: string[] = [];
    let inFlight = 0;
    let most = 0;
    const worker = createQueueWorker<string>({
      intervalMs: 60_000,
      maxInFlight: 2,
      onError: (err) => {
        throw err;
      },
      claim: async (room) => {
        rooms.push(room);
        return room <= 0 ? [] : due.splice(0, room);
      },
      attempt: async (job) => {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise((r) => setTimeout(r, job === 'a' ? 30 : 5));
        attempted.push(job);
        inFlight--;
      },
    });
    expect(await worker.runOnce()).toBe(5);
    expect(attempted.sort()).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(most).toBe(2);
    expect(rooms[0]).toBe(2);
    expect(Math.max(...rooms)).toBe(2);
    expect(worker.inFlight).toBe(0);
  });

  it('runOnce looks again when an attempt settled while a pass was claiming (the pass read the queue before it)', async () => {
    // 'b' is claimable only once 'a' has settled (the next delivery of an endpoint behind the one before it). The pass
    // that finds nothing reads the queue while 'a' is still in flight, and 'a' settles before that claim answers.
    let aSettled = false;
    let releaseA: () => void = () => {};
    const attempted: string[] = [];
    let claims = 0;
    const worker = createQueueWorker<string>({
      intervalMs: 60_000,
      maxInFlight: 2,
      onError: (err) => {
        throw err;
      },
      claim: async () => {
        claims++;
        if (claims === 1) return ['a', 'c'];
        const snapshot = aSettled;
        if (claims === 2) {
          // This pass starts when 'c' settles; 'a' settles while it claims, after its read.
          releaseA();
          await new Promise((r) => setTimeout(r, 5));
        }
        return snapshot && !attempted.includes('b') ? ['b'] : [];
      },
      attempt: async (job) => {
        if (job === 'a') {
          await new Promise<void>((r) => (releaseA = r));
          aSettled = true;
        }
        attempted.push(job);
      },
    });
    expect(await worker.runOnce()).toBe(3);
    expect(attempted).toEqual(['c', 'a', 'b']);
    expect(worker.inFlight).toBe(0);
  });
});

import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { execute, queryRow, queryRows } from '../db/sql.js';
import type { PgStore } from '../db/pg/state.js';
import { dashboardSessions } from '../db/schema/index.js';
import { NodeNameTakenError, openNodeLink } from '../db/pg/node-link.js';
import { markQueued, onQueueMarked } from '../db/queue-wake.js';
import { claimDueRecipients } from '../mta/delivery-queue.js';
import { recordOutcome } from '../server/core/outcomes.js';
import type { Claimed } from '../mta/delivery-queue.js';
import { FORWARD_GAP_MS, startLiveness, type Liveness } from '../server/app/liveness.js';
import { skipped } from '../server/core/nodes.js';
import { claimIdempotencyKey, forgetExpiredKeys } from '../server/core/idempotency.js';
import { commitSubmission, pruneSubmittedMessageIds } from '../server/core/submission.js';
import { authenticateSubmission } from '../server/core/submission-auth.js';
import { connectionConfig, openPostgres } from '../db/pg/state.js';
import {
  accountRow,
  DAY,
  emailRows,
  expectError,
  gateCommits,
  newSender,
  newSubSender,
  type Sender,
  queued,
  receipt,
  recipients,
  idempotencyRow,
  sendEmail,
  updateAccount,
} from './helpers/sending.js';
import { type ApiResponse, startService, type TestService } from './helpers/service.js';
import { dashboardClient, postSignIn } from './helpers/dashboard.js';
import { SIGN_IN_LIMIT } from '../dashboard/security.js';
import { postgresWindows, sharedWhenSeveral } from '../server/core/rate-limit.js';
import { rateCounts, rateHits } from '../db/schema/index.js';
import { eq } from 'drizzle-orm';
import { FakeClock } from './helpers/clock.js';
import { createMetrics } from '../server/shared/metrics.js';
import { stateOnPostgres } from './helpers/test-state.js';
import { plainSubmission, type SubmissionRig, startSubmission } from './helpers/submission.js';
import nodemailer from 'nodemailer';
import type { InboundServer } from '../mta/inbound/server.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { verpAddress } from '../mta/verp.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { RawSmtp } from './helpers/raw-smtp.js';

/**
 * Several nodes over one Postgres (docs/api/decisions.md section 12; server/app/liveness.ts, db/pg/node-link.ts):
 * each node's liveness lock, the live nodes read by name, a node gone giving its leases and idempotency claims back at
 * once, the wakes told across nodes, one holder at a time of a customer database's batches. Postgres only (its
 * advisory locks, LISTEN/NOTIFY): `npm run test:postgres` runs this file; `npm test` leaves it out
 * (tests/vitest.config.ts).
 */

let service: TestService;
let other: PgStore;
const started: Liveness[] = [];

beforeAll(async () => {
  if (!stateOnPostgres()) throw new Error('several-nodes.postgres.test.ts runs on a Postgres run only (npm run test:postgres)');
  service = await startService();
  other = await openPostgres((service.deps.store as PgStore).target, { poolSize: 2 });
});

afterEach(async () => {
  while (started.length > 0) await started.pop()!.stop();
});

afterAll(async () => {
  await other?.close();
  await service?.close();
});

const store = () => service.deps.store as PgStore;

async function nodeOn(db: PgStore, node: string): Promise<Liveness> {
  const liveness = await startLiveness({ target: db.target, db: db.db, node, logger: service.logger, pollMs: 60_000, nameWaitMs: 300 });
  started.push(liveness);
  return liveness;
}

/** A liveness whose connection is cut as a killed node's would be: Postgres drops its locks at once. */
async function killLink(node: string): Promise<void> {
  const client = new (await import('pg')).default.Client({ ...(await import('../db/pg/state.js')).connectionConfig(store().target) });
  await client.connect();
  try {
    const { rows } = await client.query('select pg_terminate_backend(pid) as ok from pg_stat_activity where application_name = $1', [`mailstead:${node}`]);
    expect(rows.length).toBe(1);
    // It ends a moment later, and its locks with it.
    await expect
      .poll(async () => (await client.query('select 1 from pg_stat_activity where application_name = $1', [`mailstead:${node}`])).rows.length, {
        timeout: 5_000,
      })
      .toBe(0);
  } finally {
    await client.end();
  }
}

describe('the liveness lock', () => {
  it('lists the live nodes by name, and refuses a second node of the same name until the first is gone', async () => {
    const a = await nodeOn(store(), 'node-a');
    await nodeOn(other, 'node-b');
    await a.sweep();
    expect(a.nodes.liveCount()).toBe(2);

    await expect(nodeOn(other, 'node-a')).rejects.toThrow(NodeNameTakenError);
    await expect(nodeOn(other, 'node-a')).rejects.toThrow(/another node named "node-a" is running on this state database/);

    await started.splice(started.indexOf(a), 1)[0]!.stop();
    const again = await nodeOn(other, 'node-a');
    await again.sweep();
    expect(again.nodes.liveCount()).toBe(2);
  });

  it('/metrics names this node and counts the live ones', async () => {
    const a = await nodeOn(store(), 'metrics-a');
    await nodeOn(other, 'metrics-b');
    await a.sweep();
    const metrics = createMetrics(new FakeClock(), () => ({ first: async () => undefined }), { node: { name: a.nodes.name, live: () => a.nodes.liveCount() } });
    const text = await metrics.registry.metrics();
    expect(text).toContain('mailstead_node_info{node="metrics-a"} 1');
    expect(text).toMatch(/^mailstead_nodes_live 2$/m);
  });

  it('is free again the moment a node is killed (its connection cut), for its restart under the same name', async () => {
    await nodeOn(store(), 'node-k');
    await killLink('node-k');
    const link = await openNodeLink(store().target, 'node-k', { onQueued: () => undefined, waitMs: 2_000 });
    try {
      expect(await link.liveNodes()).toContain('node-k');
    } finally {
      await link.close();
    }
  });
});

describe('a node gone', () => {
  const LEASE = 60_000;

  it("has its leases and running idempotency claims given back by the others at once; a live node's are left", async () => {
    const s = await newSender(service);
    const res = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, recipients(4, 'gone.example')) });
    expect(res.status).toBe(200);
    const ids = (await queued(service, res.body.id)).recipients.map((r) => r.id);
    const now = service.clock.now();
    const watcher = await nodeOn(store(), 'watcher');
    await nodeOn(other, 'doomed');
    await nodeOn(other, 'survivor');
    await watcher.sweep();
    expect(watcher.nodes.liveCount()).toBe(3);
    // A destination's 20 connections: 7 + 7 + 6 between the three (the remainder to the first by name), 10 + 10 once
    // one is gone.
    expect(watcher.nodes.share(20)).toBe(6);

    const doomed = await claimDueRecipients(service.deps.db, `doomed:${process.pid}:aaaa`, now, LEASE, 2);
    const kept = await claimDueRecipients(service.deps.db, `survivor:${process.pid}:bbbb`, now, LEASE, 2);
    expect(doomed).toHaveLength(2);
    expect(kept).toHaveLength(2);
    for (const [key, node] of [
      ['k-doomed', 'doomed'],
      ['k-survivor', 'survivor'],
    ] as const) {
      const claim = await claimIdempotencyKey(service.deps.db, s.account.id, key, Buffer.from(key), now, now, node);
      expect(claim.kind).toBe('claimed');
    }

    let woken = 0;
    const unsubscribe = onQueueMarked(service.deps.db, 'recipients', () => woken++);
    await killLink('doomed');
    await watcher.sweep();
    // The workers look at once at what was given back.
    await expect.poll(() => woken).toBeGreaterThan(0);
    unsubscribe();

    const rows = (await queued(service, res.body.id)).recipients;
    const holder = new Map(rows.map((r) => [r.id, r.lockedBy]));
    for (const c of doomed) expect(holder.get(c.recipient.id)).toBeNull();
    for (const c of kept) expect(holder.get(c.recipient.id)).toBe(`survivor:${process.pid}:bbbb`);
    expect(await idempotencyRow(service, s.account.id, 'k-doomed')).toBeUndefined();
    expect(await idempotencyRow(service, s.account.id, 'k-survivor')).toMatchObject({ state: 'running', heldBy: 'survivor' });
    expect(service.logger.entries).toContainEqual(expect.objectContaining({ event: 'node.gone', node: 'doomed', leasesReleased: 2, claimsReleased: 1 }));
    expect(watcher.nodes.liveCount()).toBe(2);
    expect(watcher.nodes.share(20)).toBe(10);
    // What it gave back is due again at once.
    const retaken = await claimDueRecipients(service.deps.db, `watcher:${process.pid}:cccc`, now, LEASE, 10);
    expect(retaken.map((c) => c.recipient.id).sort()).toEqual(doomed.map((c) => c.recipient.id).sort());
    expect(ids).toHaveLength(4);
  });

  it("at a node's start: frees its own earlier run's claims and those of nodes not live, and judges leases the same way", async () => {
    const s = await newSender(service);
    const now = service.clock.now();
    await nodeOn(other, 'alive');
    for (const [key, node] of [
      ['s-earlier', 'restarting'],
      ['s-dead', 'long-gone'],
      ['s-alive', 'alive'],
    ] as const) {
      expect((await claimIdempotencyKey(service.deps.db, s.account.id, key, Buffer.from(key), now, now, node)).kind).toBe('claimed');
    }
    const restarting = await nodeOn(store(), 'restarting');
    expect(await idempotencyRow(service, s.account.id, 's-earlier')).toBeUndefined();
    expect(await idempotencyRow(service, s.account.id, 's-dead')).toBeUndefined();
    expect(await idempotencyRow(service, s.account.id, 's-alive')).toMatchObject({ state: 'running' });

    const me = `restarting:${process.pid}:new`;
    const isDead = await restarting.nodes.deadHolders(me);
    expect(isDead(me)).toBe(false);
    expect(isDead(`restarting:${process.pid}:old`)).toBe(true);
    expect(isDead('long-gone:1:x')).toBe(true);
    expect(isDead('alive:1:x')).toBe(false);
  });
});

describe('across nodes', () => {
  it('forgetting expired idempotency keys passes over a row another node is deleting, never waits for it', async () => {
    const s = await newSender(service);
    const BASE = 2_000_000;
    for (const key of ['x1', 'x2', 'x3'])
      await execute(
        service.deps.db,
        sql`insert into idempotency_keys (account_id, key, fingerprint, claim_token, state, response, claimed_at, completed_at)
            values (${s.account.id}, ${key}, 'f', 't', 'done', null, ${BASE}, ${BASE})`,
      );
    const left = await other.db.transaction(async (tx) => {
      // Another node's forgetting holds x2 (its row locked, its transaction still open).
      await execute(tx, sql`select 1 from idempotency_keys where account_id = ${s.account.id} and key = 'x2' for update`);
      const forgotten = await forgetExpiredKeys(service.deps.db, BASE + DAY, 10);
      return { forgotten };
    });
    expect(left.forgotten).toBe(2);
    expect(await idempotencyRow(service, s.account.id, 'x1')).toBeUndefined();
    expect(await idempotencyRow(service, s.account.id, 'x2')).toMatchObject({ state: 'done' });
    expect(await idempotencyRow(service, s.account.id, 'x3')).toBeUndefined();
    expect(await forgetExpiredKeys(service.deps.db, BASE + DAY, 10)).toBe(1);
  });

  it('forgetting submitted Message-IDs past the window passes over a row another node is deleting, never waits for it', async () => {
    const s = await newSender(service);
    const sent = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from) });
    expect(sent.status).toBe(200);
    const BASE = 2_000_000;
    for (const id of ['<m1@x>', '<m2@x>', '<m3@x>'])
      await execute(
        service.deps.db,
        sql`insert into submitted_messages (account_id, message_id, email_id, created_at) values (${s.account.id}, ${id}, ${sent.body.id}, ${BASE})`,
      );
    const kept = async () =>
      (
        await queryRows<{ id: string }>(service.deps.db, sql`select message_id as id from submitted_messages where account_id = ${s.account.id} order by 1`)
      ).map((r) => r.id);
    const forgotten = await other.db.transaction(async (tx) => {
      // Another node's prune holds <m2@x> (its row locked, its transaction still open).
      await execute(tx, sql`select 1 from submitted_messages where account_id = ${s.account.id} and message_id = '<m2@x>' for update`);
      return await pruneSubmittedMessageIds({ db: service.deps.db }, BASE + DAY + 1, 10);
    });
    expect(forgotten).toBe(2);
    expect(await kept()).toEqual(['<m2@x>']);
    expect(await pruneSubmittedMessageIds({ db: service.deps.db }, BASE + DAY + 1, 10)).toBe(1);
  });

  it("wakes another node's workers when a queue is marked on this one (NOTIFY), while there is another", async () => {
    const a = await nodeOn(store(), 'wake-a');
    await nodeOn(other, 'wake-b');
    await a.sweep();
    let woken = 0;
    const unsubscribe = onQueueMarked(other.db, 'webhooks', () => woken++);
    try {
      markQueued(service.deps.db, 'webhooks');
      await expect.poll(() => woken, { timeout: 5_000 }).toBe(1);
      // Wakes in a burst are told at most once per gap, and once more after it: the other node claims about twice, not
      // ten times. The bound follows the burst's own length (about one gap; a loaded machine stretches its timers).
      const start = performance.now();
      for (let i = 0; i < 10; i++) {
        markQueued(service.deps.db, 'webhooks');
        await new Promise((r) => setTimeout(r, 4));
      }
      const gaps = Math.ceil((performance.now() - start) / FORWARD_GAP_MS);
      await expect.poll(() => woken, { timeout: 5_000 }).toBeGreaterThanOrEqual(2);
      await new Promise((r) => setTimeout(r, 300));
      // The first wake, one per gap the burst spanned, and one after it.
      expect(woken).toBeLessThanOrEqual(1 + gaps + 1);
      // Still a bound below one wake per mark (ten, and the first).
      expect(1 + gaps + 1).toBeLessThan(11);
    } finally {
      unsubscribe();
    }
  });

  it('holds a customer database for one node at a time; the other is told it is held, and takes it after', async () => {
    const a = await nodeOn(store(), 'db-a');
    const b = await nodeOn(other, 'db-b');
    let release: () => void = () => undefined;
    let aHolds = false;
    const holding = a.nodes.exclusive('customer-db', 'acct-1', () => {
      aHolds = true;
      return new Promise<string>((r) => (release = () => r('a wrote')));
    });
    await expect.poll(() => aHolds).toBe(true);
    expect(await b.nodes.exclusive('customer-db', 'acct-1', async () => 'b wrote')).toBe(skipped);
    // Another database is not held.
    expect(await b.nodes.exclusive('customer-db', 'acct-2', async () => 'b wrote')).toBe('b wrote');
    release();
    expect(await holding).toBe('a wrote');
    expect(await b.nodes.exclusive('customer-db', 'acct-1', async () => 'b wrote')).toBe('b wrote');
  });

  it("a killed holder's customer database is free at once", async () => {
    const a = await nodeOn(store(), 'db-killed');
    const b = await nodeOn(other, 'db-taker');
    let aHolds = false;
    void a.nodes.exclusive('customer-db', 'acct-3', () => {
      aHolds = true;
      return new Promise(() => undefined);
    });
    await expect.poll(() => aHolds).toBe(true);
    expect(await b.nodes.exclusive('customer-db', 'acct-3', async () => 'b')).toBe(skipped);
    await killLink('db-killed');
    // pg_terminate_backend asks the backend to end; its locks go as it exits, a moment later.
    await expect.poll(async () => await b.nodes.exclusive('customer-db', 'acct-3', async () => 'b'), { timeout: 2_000 }).toBe('b');
  });
});

let nodeCount = 0;
/**
 * Further nodes of `service`: services of their own over its state database (its STATE_URL and secret key), each
 * holding its liveness lock under a name of its own, as serve.ts runs them; once all are up, each has seen the others.
 */
async function moreNodes(n: number, env: Record<string, string> = {}): Promise<TestService[]> {
  const nodes: TestService[] = [];
  for (let i = 0; i < n; i++) {
    nodes.push(
      await startService(
        { STATE_URL: service.stateUrl!, SECRET_KEY: service.deps.secretKey!.toString('hex'), NODE_NAME: `more-${++nodeCount}`, ...env },
        { liveness: true },
      ),
    );
  }
  for (const node of nodes) await node.liveness!.sweep();
  return nodes;
}

describe('limits counted across nodes', () => {
  it('61 requests from one key spread over three nodes in a minute: the 61st is 429', async () => {
    const nodes = await moreNodes(3, { RATE_LIMIT_PER_KEY: '60', RATE_LIMIT_PER_ACCOUNT: '600' });
    try {
      const { key } = await nodes[0]!.newAccount();
      for (let i = 0; i < 60; i++) expect((await nodes[i % 3]!.api('GET', '/account', { key })).status).toBe(200);
      for (const node of nodes) {
        const refused = await node.api('GET', '/account', { key });
        expect(refused.status).toBe(429);
        expect(refused.body.error.code).toBe('rate_limited');
      }
      // A minute after the first of them, on every node's timeline, the window has room again.
      for (const node of nodes) node.clock.advance(60_000);
      expect((await nodes[2]!.api('GET', '/account', { key })).status).toBe(200);
    } finally {
      for (const node of nodes) await node.close();
    }
  });

  it("the dashboard's sign-in limit: wrong tokens on one node count on the others", async () => {
    const nodes = await moreNodes(2);
    try {
      for (let i = 0; i < SIGN_IN_LIMIT.attempts; i++) expect((await postSignIn(nodes[i % 2]!.url, 'wrong')).status).toBe(401);
      expect((await postSignIn(nodes[0]!.url, 'wrong')).status).toBe(429);
      expect((await postSignIn(nodes[1]!.url, 'wrong')).status).toBe(429);
    } finally {
      for (const node of nodes) await node.close();
    }
  });

  it('alone, a node counts in memory (no statement); with others, in the state database, its hits carried over each way', async () => {
    const clock = new FakeClock();
    let several = false;
    const windows = sharedWhenSeveral(service.deps.db, clock, () => several);
    const one = [{ scope: 'k:moving', limit: 5, windowMs: 60_000 }];
    const stored = async () => (await service.deps.db.select().from(rateHits).where(eq(rateHits.scope, 'k:moving'))).length;
    for (let i = 0; i < 3; i++) expect(windows.take(one)).toEqual({ ok: true });
    expect(await stored()).toBe(0);
    // Another node is live: the three hits go to the database first, and the limit holds across the move.
    several = true;
    expect(await windows.take(one)).toEqual({ ok: true });
    expect(await windows.take(one)).toEqual({ ok: true });
    expect(await windows.take(one)).toMatchObject({ ok: false, refused: 0 });
    expect(await stored()).toBe(5);
    // Alone again: the database's hits are read back into memory.
    several = false;
    expect(await windows.take(one)).toMatchObject({ ok: false, refused: 0 });
    clock.advance(60_000);
    expect(await windows.take(one)).toEqual({ ok: true });
  });

  it("the windows on Postgres keep each scope's count with its rows, through the takes and the periodic sweep", async () => {
    const clock = new FakeClock();
    const windows = postgresWindows(service.deps.db, clock);
    const counted = async (scope: string) => ({
      rows: (await service.deps.db.select().from(rateHits).where(eq(rateHits.scope, scope))).length,
      n: (await service.deps.db.select().from(rateCounts).where(eq(rateCounts.scope, scope)))[0]?.n ?? 0,
    });
    for (let i = 0; i < 400; i++) expect(await windows.take([{ scope: 'k:old', limit: 1_000_000, windowMs: 60_000 }])).toEqual({ ok: true });
    clock.advance(61_000);
    // The 1,000th take sweeps what no window holds: k:old's 400 rows and its count row go.
    for (let i = 0; i < 600; i++) expect(await windows.take([{ scope: 'k:new', limit: 1_000_000, windowMs: 60_000 }])).toEqual({ ok: true });
    expect(await counted('k:old')).toEqual({ rows: 0, n: 0 });
    expect(await counted('k:new')).toEqual({ rows: 600, n: 600 });
    expect(await windows.take([{ scope: 'k:new', limit: 601, windowMs: 60_000 }])).toEqual({ ok: true });
    expect(await windows.take([{ scope: 'k:new', limit: 601, windowMs: 60_000 }])).toMatchObject({ ok: false, refused: 0 });
  });

  it("the sweep drops each kind of scope's hits past its own window: a node counting only API keys leaves the sign-ins another counts", async () => {
    const clock = new FakeClock();
    // Two nodes' windows on one state database: one counts a sign-in's failed attempts (15 minutes), the other API keys.
    const signIns = postgresWindows(service.deps.db, clock);
    const api = postgresWindows(other.db, clock);
    const signIn = [{ scope: 'signin:198.51.100.9', limit: 3, windowMs: 15 * 60_000 }];
    for (let i = 0; i < 3; i++) expect(await signIns.take(signIn)).toEqual({ ok: true });
    clock.advance(61_000);
    // The API node's 1,000th take sweeps: its own keys' hits past the minute go, the sign-ins' stay.
    for (let i = 0; i < 400; i++) expect(await api.take([{ scope: 'k:sweeper', limit: 1_000_000, windowMs: 60_000 }])).toEqual({ ok: true });
    clock.advance(61_000);
    for (let i = 0; i < 600; i++) expect(await api.take([{ scope: 'k:sweeper-2', limit: 1_000_000, windowMs: 60_000 }])).toEqual({ ok: true });
    const rows = async (scope: string) => (await service.deps.db.select().from(rateHits).where(eq(rateHits.scope, scope))).length;
    expect(await rows('k:sweeper')).toBe(0);
    expect(await rows('signin:198.51.100.9')).toBe(3);
    expect(await signIns.take(signIn)).toMatchObject({ ok: false, refused: 0 });
  });

  it('a batch with room in every scope is counted without dropping the hits past its window; one that may meet a limit drops them and counts exactly', async () => {
    const clock = new FakeClock();
    const windows = postgresWindows(service.deps.db, clock);
    const room = [{ scope: 'k:room', limit: 3, windowMs: 60_000 }];
    const counted = async () => ({
      rows: (await service.deps.db.select().from(rateHits).where(eq(rateHits.scope, 'k:room'))).length,
      n: (await service.deps.db.select().from(rateCounts).where(eq(rateCounts.scope, 'k:room')))[0]?.n ?? 0,
    });
    expect(await windows.take(room)).toEqual({ ok: true });
    expect(await windows.take(room)).toEqual({ ok: true });
    clock.advance(61_000);
    // Two stored and one more make three, within the limit whatever the window holds: the two past it stay for now.
    expect(await windows.take(room)).toEqual({ ok: true });
    expect(await counted()).toEqual({ rows: 3, n: 3 });
    // Three stored and one more may pass the limit: the take drops the two past the window, then counts the one left.
    expect(await windows.take(room)).toEqual({ ok: true });
    expect(await counted()).toEqual({ rows: 2, n: 2 });
    expect(await windows.take(room)).toEqual({ ok: true });
    expect(await windows.take(room)).toEqual({ ok: false, refused: 0, retryAfterMs: 60_000 });
    expect(await counted()).toEqual({ rows: 3, n: 3 });
  });

  it('a take that is a transaction of its own commits without waiting for the WAL flush; inside a transaction, it leaves that commit durable', async () => {
    const db = service.deps.db;
    const setting = async () => (await queryRow<{ s: string }>(db, sql`select current_setting('synchronous_commit') as s`))!.s;
    // rate_take(…, durable): false turns synchronous_commit off for its transaction alone; true leaves it as it was.
    for (const durable of [false, true]) {
      const seen = await db.transaction(async () => {
        await queryRow(
          db,
          sql`select * from rate_take(array[0], array['k:flush-${sql.raw(String(durable))}'], array[5]::bigint[], array[60000]::bigint[], 1, ${durable})`,
        );
        return await setting();
      });
      expect(seen, `durable ${durable}`).toBe(durable ? 'on' : 'off');
    }
    expect(await setting()).toBe('on');
    // The windows ask for the asynchronous commit on a take of its own, and not inside a transaction (a sign-in's, say).
    const windows = postgresWindows(db, new FakeClock());
    // (Statements outside a transaction go through the pool's query; a transaction's, through its pipeline.)
    const spy = vi.spyOn(pg.Pool.prototype, 'query');
    try {
      expect(await windows.take([{ scope: 'k:alone', limit: 5, windowMs: 60_000 }])).toEqual({ ok: true });
      const inside = await db.transaction(async () => {
        expect(await windows.take([{ scope: 'k:inside', limit: 5, windowMs: 60_000 }])).toEqual({ ok: true });
        return await setting();
      });
      expect(inside).toBe('on');
      const takes = spy.mock.calls.map((c) => c[0] as unknown as { text?: string; values?: unknown[] }).filter((c) => c?.text?.includes('rate_take'));
      expect(takes.map((c) => c.values?.at(-1))).toEqual([false]);
    } finally {
      spy.mockRestore();
    }
  });

  it('the windows on Postgres: sliding, a refusal names its scope and does not count, exactly under concurrency', async () => {
    const clock = new FakeClock();
    const windows = postgresWindows(service.deps.db, clock);
    const scopes = (k: string) => [
      { scope: `k:${k}`, limit: 3, windowMs: 60_000 },
      { scope: `a:acct-${k}`, limit: 4, windowMs: 60_000 },
    ];
    expect(await windows.take(scopes('w1'))).toEqual({ ok: true });
    clock.advance(10_000);
    expect(await windows.take(scopes('w1'))).toEqual({ ok: true });
    expect(await windows.take(scopes('w1'))).toEqual({ ok: true });
    expect(await windows.take(scopes('w1'))).toEqual({ ok: false, refused: 0, retryAfterMs: 50_000 });
    // The account's fourth slot was not eaten by the refusals: another key of the account takes it.
    expect(await windows.take([{ scope: 'k:other', limit: 3, windowMs: 60_000 }, scopes('w1')[1]!])).toEqual({ ok: true });
    expect(await windows.take([{ scope: 'k:other', limit: 3, windowMs: 60_000 }, scopes('w1')[1]!])).toMatchObject({ ok: false, refused: 1 });
    // The first request leaves the window exactly 60 s after it was made.
    clock.advance(50_000);
    expect(await windows.take(scopes('w1'))).toEqual({ ok: true });
    expect(await windows.take(scopes('w1'))).toEqual({ ok: false, refused: 0, retryAfterMs: 10_000 });

    // Forty requests at once against a limit of 25: exactly 25 counted, the first 25 taken. The first went alone, the
    // 39 that came while it was in flight in one statement after it, in the order they came.
    const spy = vi.spyOn(pg.Pool.prototype, 'query');
    try {
      const race = await Promise.all(Array.from({ length: 40 }, () => windows.take([{ scope: 'k:race', limit: 25, windowMs: 60_000 }])));
      expect(race.map((d) => d.ok)).toEqual(Array.from({ length: 40 }, (_, i) => i < 25));
      const statements = spy.mock.calls.filter((c) => (c[0] as unknown as { text?: string })?.text?.includes('rate_take'));
      expect(statements).toHaveLength(2);
    } finally {
      spy.mockRestore();
    }
  });

  it("two nodes' batches naming the same scopes in different orders take their locks in one order: no deadlock", async () => {
    // A holds a:x and waits for k:x2 (held by a third session); B, with k:x1 first, comes next. In the order given, B would
    // hold k:x1 and wait for a:x while A, given k:x2, waits for k:x1: a deadlock, which Postgres ends by failing one.
    const holder = new pg.Client(connectionConfig(store().target));
    await holder.connect();
    const list = (values: (string | number)[]) => `{${values.join(',')}}`;
    const take = (db: typeof service.deps.db, reqs: number[], scopes: string[]) =>
      queryRow(
        db,
        sql`select count(*) filter (where refused = 0)::int as ok from rate_take(${list(reqs)}::int[], ${list(scopes)}::text[], ${list(scopes.map(() => 100))}::bigint[], ${list(scopes.map(() => 60_000))}::bigint[], 1, false)`,
      );
    const waiting = async (n: number) => {
      for (let i = 0; i < 200; i++) {
        const row = await queryRow<{ n: number }>(
          service.deps.db,
          sql`select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted and classid = hashtext('rate_hits')::oid`,
        );
        if (row!.n >= n) return;
        await new Promise((r) => setTimeout(r, 10));
      }
      throw new Error(`${n} takes never waited`);
    };
    try {
      await holder.query('begin');
      await holder.query("select pg_advisory_xact_lock(hashtext('rate_hits'), hashtext('k:dl2'))");
      const a = take(service.deps.db, [0, 0, 1, 1], ['a:dl', 'k:dl2', 'k:dl1', 'a:dl']);
      await waiting(1);
      const b = take(other.db, [0, 0], ['k:dl1', 'a:dl']);
      await waiting(2);
      await holder.query('commit');
      expect(await Promise.all([a, b])).toEqual([{ ok: 2 }, { ok: 1 }]);
    } finally {
      await holder.end();
    }
  });
});

describe('credits and quota across nodes', () => {
  /** No trial and no grace: a send costs a credit from the first, and none is allowed without one; limits out of the way. */
  const RACE = {
    TRIAL_DAYS: '0',
    GRACE_EMAILS: '0',
    GRACE_DAYS: '0',
    DEFAULT_DAILY_QUOTA: '1000',
    RATE_LIMIT_PER_KEY: '10000',
    RATE_LIMIT_PER_ACCOUNT: '10000',
  };
  /** Sends at once, the i-th to nodes[i % 3]: each node's group commit runs its share as a batch of its own. */
  const atOnce = (nodes: TestService[], n: number, send: (node: TestService, i: number) => Promise<ApiResponse>) =>
    Promise.all(Array.from({ length: n }, (_, i) => send(nodes[i % nodes.length]!, i)));
  /** `sent` of the answers are 200, every other is `status` `code`. */
  const expectSent = (answers: ApiResponse[], sent: number, status: number, code: string) => {
    expect(
      answers.filter((a) => a.status === 200),
      JSON.stringify(answers.map((a) => a.body)),
    ).toHaveLength(sent);
    for (const refused of answers.filter((a) => a.status !== 200)) expectError(refused, status, code);
  };
  /**
   * A parent (100 credits) with two sub-accounts, its daily quota 4 recipients: their sends together may use 4. `send`
   * sends the i-th (one recipient) from sub-account i % 2 on `node`.
   */
  const parentOfTwo = async (node: TestService) => {
    const parent = await newSender(node, { credits: 100 });
    const subs = [await newSubSender(node, parent.key, 'Shop A'), await newSubSender(node, parent.key, 'Shop B')];
    await updateAccount(node, parent.account.id, { dailyQuota: 4 });
    const send = (on: TestService, i: number) => {
      const sub = subs[i % 2]!;
      return sendEmail(on, parent.key, receipt(sub.from, `buyer${i}@example.net`), { account: sub.id });
    };
    return { parent, subs, send };
  };

  it('the last credits are spent exactly: sends at once on three nodes, three sent and every other 402 no_credits', async () => {
    const nodes = await moreNodes(3, RACE);
    try {
      for (let round = 0; round < 3; round++) {
        const s = await newSender(nodes[0]!, { credits: 3 });
        const answers = await atOnce(nodes, 18, (node, i) => sendEmail(node, s.key, receipt(s.from, `buyer${i}@example.net`)));
        expectSent(answers, 3, 402, 'no_credits');
        const row = await accountRow(nodes[0]!, s.account.id);
        expect([row.creditsBalance, row.creditsTotalUsed, row.totalSent]).toEqual([0, 3, 3]);
        expect(await emailRows(nodes[0]!, s.account.id)).toHaveLength(3);
      }
    } finally {
      for (const node of nodes) await node.close();
    }
  });

  it("a parent's credits and quota spent by its sub-accounts' sends at once on three nodes: exactly", async () => {
    const nodes = await moreNodes(3, RACE);
    try {
      for (let round = 0; round < 2; round++) {
        const { parent, subs, send } = await parentOfTwo(nodes[0]!);
        expectSent(await atOnce(nodes, 18, send), 4, 429, 'quota_exceeded');
        const row = await accountRow(nodes[0]!, parent.account.id);
        expect([row.sentTodayCount, row.creditsBalance, row.creditsTotalUsed]).toEqual([4, 96, 4]);
        const sent = await Promise.all(subs.map(async (sub) => (await accountRow(nodes[0]!, sub.id)).sentTodayCount));
        expect(sent[0]! + sent[1]!).toBe(4);
        expect((await emailRows(nodes[0]!, subs[0]!.id)).length + (await emailRows(nodes[0]!, subs[1]!.id)).length).toBe(4);
      }
    } finally {
      for (const node of nodes) await node.close();
    }
  });

  it("one Message-ID submitted in two nodes' batches at once, three in each: one email, counted once, every answer its id", async () => {
    const nodes = await moreNodes(2, RACE);
    try {
      const s = await newSender(nodes[0]!, { credits: 100 });
      const messageId = `<race-${randomUUID()}@app.example.org>`;
      const auths = await Promise.all(nodes.map((node) => authenticateSubmission(node.deps, 'app', s.key)));
      // Each node holds its three commits, then lets them go as one batch; both batches start together, and each
      // reads ahead (its lock, then its readings) while the other may hold the account.
      const gates = nodes.map((node) => gateCommits(node, 3));
      const answers = Promise.all(
        [0, 1, 2, 3, 4, 5].map((i) => {
          const node = nodes[i % 2]!;
          return commitSubmission(node.deps, auths[i % 2]!, plainSubmission(node.deps, s.from, messageId, `buyer${i}@example.net`));
        }),
      );
      await Promise.all(gates.map((gate) => gate.arrived(3)));
      for (const gate of gates) gate.release();
      const submitted = await answers;
      const emails = await emailRows(nodes[0]!, s.account.id);
      expect(emails).toHaveLength(1);
      expect(submitted.map((a) => a.id)).toEqual(Array(6).fill(emails[0]!.id));
      expect(submitted.filter((a) => !a.duplicate)).toHaveLength(1);
      const row = await accountRow(nodes[0]!, s.account.id);
      expect([row.totalSent, row.creditsBalance, row.sentTodayCount]).toEqual([1, 99, 1]);
    } finally {
      for (const node of nodes) await node.close();
    }
  });

  it("two nodes' batches at once, each of three sends, both checked on the same rows: the later one is checked again on what the first left", async () => {
    const nodes = await moreNodes(2, RACE);
    try {
      // Each node holds its three sends' commits, then lets them go as one batch; both batches start together.
      const twoBatches = async (send: (node: TestService, i: number) => Promise<ApiResponse>) => {
        const gates = nodes.map((node) => gateCommits(node, 3));
        const answers = Promise.all([0, 1, 2, 3, 4, 5].map((i) => send(nodes[i % 2]!, i)));
        await Promise.all(gates.map((gate) => gate.arrived(3)));
        for (const gate of gates) gate.release();
        return await answers;
      };
      const s = await newSender(nodes[0]!, { credits: 3 });
      expectSent(await twoBatches((node, i) => sendEmail(node, s.key, receipt(s.from, `buyer${i}@example.net`))), 3, 402, 'no_credits');
      expect((await accountRow(nodes[0]!, s.account.id)).creditsBalance).toBe(0);

      const { parent, send } = await parentOfTwo(nodes[0]!);
      expectSent(await twoBatches(send), 4, 429, 'quota_exceeded');
      const row = await accountRow(nodes[0]!, parent.account.id);
      expect([row.sentTodayCount, row.creditsBalance]).toEqual([4, 96]);
    } finally {
      for (const node of nodes) await node.close();
    }
  });
});

describe("send batches' account locks across nodes", () => {
  /** Deadlocks Postgres has counted in this state database (a backend's count is in once it has flushed its stats). */
  const deadlocks = async (client: pg.Client) =>
    Number((await client.query('select deadlocks from pg_stat_database where datname = current_database()')).rows[0].deadlocks);
  /** Backends of this state database waiting on a lock. */
  const lockWaiters = async (client: pg.Client) =>
    Number(
      (
        await client.query(
          'select count(distinct l.pid)::int as n from pg_locks l join pg_stat_activity a on a.pid = l.pid where not l.granted and a.datname = current_database()',
        )
      ).rows[0].n,
    );

  /**
   * Two sessions of the test's own, `watch` (lock waiters, deadlocks) and `holder` (holds rows), opened before the
   * nodes start. `mark()` notes Postgres's deadlock count; `noDeadlock()`, once the nodes are closed, waits for every
   * backend they used to end (each flushes its counts as it ends) and finds no deadlock counted since the mark.
   */
  async function lockObservers() {
    const watch = new pg.Client(connectionConfig(store().target));
    const holder = new pg.Client(connectionConfig(store().target));
    await watch.connect();
    await holder.connect();
    const backends = async () =>
      new Set((await watch.query('select pid from pg_stat_activity where datname = current_database()')).rows.map((r) => r.pid as number));
    const before = await backends();
    let marked = 0;
    return {
      watch,
      holder,
      async mark() {
        marked = await deadlocks(watch);
      },
      async noDeadlock() {
        await expect.poll(async () => [...(await backends())].filter((pid) => !before.has(pid)).length, { timeout: 10_000 }).toBe(0);
        expect(await deadlocks(watch)).toBe(marked);
      },
      async end() {
        await holder.end();
        await watch.end();
      },
    };
  }

  /**
   * Two nodes, each with one batch of two writes: node 1's `writes(node 1, a, b)`, node 2's `writes(node 2, b, a)`,
   * each write held at the group commit until both of its node's have come, in that order. A third session holds a's
   * row, so that node 1's batch waits for it first and node 2's comes next: had the writes locked their accounts in
   * the order they came, node 2 would hold b and wait for a, and node 1, given a, would wait for b (a deadlock).
   * `check` sees the answers while the nodes run; then, every backend the nodes used ended (each flushes its counts
   * as it ends), Postgres has counted no deadlock.
   */
  async function opposedBatches(opts: {
    prepare?: (nodes: TestService[], a: Sender, b: Sender) => Promise<void>;
    writes: (node: TestService, first: Sender, second: Sender) => [() => Promise<unknown>, () => Promise<unknown>];
    check: (answers: unknown[], nodes: TestService[], a: Sender, b: Sender) => Promise<void>;
    /** Run before the nodes close (what `prepare` started on them). */
    cleanup?: () => Promise<void>;
  }): Promise<void> {
    const observers = await lockObservers();
    const { watch, holder } = observers;
    const nodes = await moreNodes(2);
    let cleaned = false;
    const cleanup = async () => {
      if (cleaned) return;
      cleaned = true;
      await opts.cleanup?.();
    };
    try {
      const a = await newSender(nodes[0]!, { credits: 100 });
      const b = await newSender(nodes[0]!, { credits: 100 });
      await opts.prepare?.(nodes, a, b);
      await observers.mark();
      await holder.query('begin');
      await holder.query('select id from accounts where id = $1 for update', [a.account.id]);
      const batch = async (node: TestService, first: Sender, second: Sender) => {
        const gate = gateCommits(node, 2);
        const started: Promise<unknown>[] = [];
        for (const [i, write] of opts.writes(node, first, second).entries()) {
          started.push(write());
          await gate.arrived(i + 1);
        }
        gate.release();
        return started;
      };
      const first = await batch(nodes[0]!, a, b);
      await expect.poll(() => lockWaiters(watch), { timeout: 10_000 }).toBeGreaterThanOrEqual(1);
      const second = await batch(nodes[1]!, b, a);
      await expect.poll(() => lockWaiters(watch), { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
      await holder.query('commit');
      await opts.check(await Promise.all([...first, ...second]), nodes, a, b);
      await cleanup();
      for (const node of nodes.splice(0)) await node.close();
      await observers.noDeadlock();
    } finally {
      await observers.end();
      await cleanup();
      for (const node of nodes) await node.close();
    }
  }

  it("two nodes' batches sending for the same two accounts in opposite orders lock them in one order: no deadlock", async () => {
    await opposedBatches({
      writes: (node, first, second) =>
        [first, second].map((s, i) => () => sendEmail(node, s.key, receipt(s.from, `order${i}@example.net`))) as [
          () => Promise<ApiResponse>,
          () => Promise<ApiResponse>,
        ],
      async check(answers, nodes, a, b) {
        expect((answers as ApiResponse[]).map((r) => r.status)).toEqual([200, 200, 200, 200]);
        expect((await accountRow(nodes[0]!, a.account.id)).totalSent).toBe(2);
        expect((await accountRow(nodes[0]!, b.account.id)).totalSent).toBe(2);
      },
    });
  });

  it("an SMTP submission in a batch locks its account with the batch's API sends, in one order: no deadlock with another node's batch", async () => {
    const rigs = new Map<TestService, SubmissionRig>();
    const submit = (node: TestService, s: Sender, to: string) => {
      const transport = nodemailer.createTransport({
        host: '127.0.0.1',
        port: rigs.get(node)!.port,
        auth: { user: 'app', pass: s.key },
        tls: { rejectUnauthorized: false },
      });
      return transport.sendMail({ from: s.from, to, subject: 'Submitted', text: 'Over SMTP.' }).finally(() => transport.close());
    };
    // Each node's batch: an API send for its first account, then a submission for its second.
    await opposedBatches({
      async prepare(nodes) {
        for (const node of nodes) rigs.set(node, await startSubmission(node));
      },
      writes: (node, first, second) => [
        () => sendEmail(node, first.key, receipt(first.from, 'api@example.net')).then((r) => r.status),
        () => submit(node, second, 'smtp@example.net').then((info) => info.response.slice(0, 3)),
      ],
      async check(answers) {
        expect(answers).toEqual([200, '250', 200, '250']);
      },
      async cleanup() {
        for (const rig of rigs.values()) await rig.close();
      },
    });
  });

  it("a bounce counted on its account in a batch locks that account with the batch's sends, in one order: no deadlock with another node's batch", async () => {
    // A message of each account, claimed for delivery: its bounce is what a node's engine records (5.1.1: suppressed,
    // counted on the account).
    const jobs = new Map<string, Claimed>();
    // Each node's batch: a send for its first account, then the bounce of its second's message.
    await opposedBatches({
      async prepare(nodes, a, b) {
        const ids = new Map<string, string>();
        for (const s of [a, b]) ids.set((await sendEmail(nodes[0]!, s.key, receipt(s.from, 'gone@example.net'))).body.id as string, s.account.id);
        const claimed = await claimDueRecipients(nodes[0]!.deps.db, `bounces:${process.pid}:dddd`, nodes[0]!.clock.now(), 60_000, 1000);
        for (const job of claimed) if (ids.has(job.message.id)) jobs.set(ids.get(job.message.id)!, job);
        expect(jobs.size).toBe(2);
      },
      writes: (node, first, second) => [
        () => sendEmail(node, first.key, receipt(first.from, 'api@example.net')).then((r) => r.status),
        () =>
          recordOutcome(node.deps, jobs.get(second.account.id)!, { status: 'bounced', dsn: '5.1.1', detail: '550 5.1.1 no such user' }).then((r) => r?.status),
      ],
      async check(answers, nodes, a, b) {
        expect(answers).toEqual([200, 'bounced', 200, 'bounced']);
        for (const s of [a, b]) expect((await accountRow(nodes[0]!, s.account.id)).totalBounced).toBe(1);
      },
    });
  });

  it("a batch that locks an account from its start (bounces counted) writes none late: no deadlock with another node's batch that holds the other account", async () => {
    // Node 1's batch: two bounces of b (b locked at its start), and a send of a that waits at its settlement (a third
    // session holds its idempotency claim). Node 2's batch: two bounces of a (a locked at its start) and a send of b.
    // Had node 1's send written a's counters late, at its commit, node 1 would hold b and wait for a while node 2
    // held a and waited for b: a deadlock. A batch that locks from its start locks every account of its sends then
    // too, in one sorted statement, and writes nothing late (db/group-commit.ts).
    const observers = await lockObservers();
    const { watch, holder } = observers;
    const nodes = await moreNodes(2);
    try {
      const a = await newSender(nodes[0]!, { credits: 100 });
      const b = await newSender(nodes[0]!, { credits: 100 });
      const ids = new Map<string, string>();
      for (const s of [a, a, b, b]) ids.set((await sendEmail(nodes[0]!, s.key, receipt(s.from, 'gone@example.net'))).body.id as string, s.account.id);
      const claimed = await claimDueRecipients(nodes[0]!.deps.db, `late:${process.pid}:eeee`, nodes[0]!.clock.now(), 60_000, 1000);
      const jobs = (account: Sender) => claimed.filter((job) => ids.get(job.message.id) === account.account.id);
      expect([jobs(a).length, jobs(b).length]).toEqual([2, 2]);
      await observers.mark();
      const bounce = (node: TestService, job: Claimed) =>
        recordOutcome(node.deps, job, { status: 'bounced', dsn: '5.1.1', detail: '550 5.1.1 no such user' }).then((r) => r?.status);
      // Node 1's send is claimed first, its row held by the holder; then its batch of three is let go.
      const gate1 = gateCommits(nodes[0]!, 3);
      const send1 = sendEmail(nodes[0]!, a.key, receipt(a.from, 'held@example.net'), { headers: { 'idempotency-key': 'late-held' } }).then((r) => r.status);
      await gate1.arrived(1);
      await holder.query('begin');
      await holder.query("select 1 from idempotency_keys where account_id = $1 and key = 'late-held' for update", [a.account.id]);
      const first = [send1, ...jobs(b).map((job) => bounce(nodes[0]!, job))];
      await gate1.arrived(3);
      gate1.release();
      await expect.poll(() => lockWaiters(watch), { timeout: 10_000 }).toBeGreaterThanOrEqual(1);
      const gate2 = gateCommits(nodes[1]!, 3);
      const second = [...jobs(a).map((job) => bounce(nodes[1]!, job)), sendEmail(nodes[1]!, b.key, receipt(b.from, 'other@example.net')).then((r) => r.status)];
      await gate2.arrived(3);
      gate2.release();
      await expect.poll(() => lockWaiters(watch), { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
      await holder.query('commit');
      expect(await Promise.all([...first, ...second])).toEqual([200, 'bounced', 'bounced', 'bounced', 'bounced', 200]);
      for (const s of [a, b]) expect((await accountRow(nodes[0]!, s.account.id)).totalBounced).toBe(2);
      for (const node of nodes.splice(0)) await node.close();
      await observers.noDeadlock();
    } finally {
      await observers.end();
      for (const node of nodes) await node.close();
    }
  });

  it("an inbound bounce report counted on its account in a batch locks that account with the batch's sends, in one order: no deadlock with another node's batch", async () => {
    // A message of each account, sent; a DSN at its VERP address (5.1.1: suppressed, counted on the account) is what
    // a node's inbound server takes and records in its batch.
    const inbounds = new Map<TestService, InboundServer>();
    const ports = new Map<TestService, number>();
    const sent = new Map<string, string>();
    const dsnFor = (node: TestService, emailId: string) => `Return-Path: <>
From: MAILER-DAEMON@mail.example.net (Mail Delivery System)
To: ${verpAddress(emailId, 0, node.deps.config.mailHostname, node.deps.secretKey)}
Subject: Undelivered Mail Returned to Sender
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="B1"

--B1
Content-Type: text/plain; charset=us-ascii

Your message could not be delivered.

--B1
Content-Type: message/delivery-status

Reporting-MTA: dns; mail.example.net

Final-Recipient: rfc822; gone@example.net
Action: failed
Status: 5.1.1
Diagnostic-Code: smtp; 550 5.1.1 User unknown

--B1--`;
    const deliverDsn = async (node: TestService, emailId: string) => {
      const { client } = await RawSmtp.connect(ports.get(node)!);
      try {
        const replies = await client.envelope('', [verpAddress(emailId, 0, node.deps.config.mailHostname, node.deps.secretKey)]);
        expect(replies.at(-1)).toMatch(/^250 /);
        expect(await client.command('DATA')).toMatch(/^354 /);
        client.write(`${dsnFor(node, emailId).replace(/\r?\n/g, '\r\n')}\r\n.\r\n`);
        return await client.reply();
      } finally {
        client.close();
      }
    };
    // Each node's batch: a send for its first account, then the bounce report of its second's message.
    await opposedBatches({
      async prepare(nodes, a, b) {
        for (const node of nodes) {
          const inbound = inboundServerFor(node.deps, loadOrCreateSmtpTls(node.deps.config));
          inbounds.set(node, inbound);
          ports.set(node, await inbound.listen('127.0.0.1', 0));
        }
        for (const s of [a, b]) sent.set(s.account.id, (await sendEmail(nodes[0]!, s.key, receipt(s.from, 'gone@example.net'))).body.id as string);
      },
      writes: (node, first, second) => [
        () => sendEmail(node, first.key, receipt(first.from, 'api@example.net')).then((r) => r.status),
        () => deliverDsn(node, sent.get(second.account.id)!).then((reply) => reply.slice(0, 3)),
      ],
      async check(answers, nodes, a, b) {
        expect(answers).toEqual([200, '250', 200, '250']);
        for (const s of [a, b]) expect((await accountRow(nodes[0]!, s.account.id)).totalBounced).toBe(1);
      },
      async cleanup() {
        for (const inbound of inbounds.values()) await inbound.close();
      },
    });
  });

  it("a send batch holds no lock on its account while it works, and its late write at the commit leaves other transactions' references to the account free (a webhook delivery's insert)", async () => {
    const watch = new pg.Client(connectionConfig(store().target));
    const holder = new pg.Client(connectionConfig(store().target));
    await watch.connect();
    await holder.connect();
    const [node] = await moreNodes(1);
    try {
      const s = await newSender(node!, { credits: 100 });
      // Two sends held at the group commit (one batch), their idempotency claims taken; a third session holds the
      // first claim's row, so the batch, its account read, waits at its settlement.
      const gate = gateCommits(node!, 2);
      const answers = [1, 2].map((i) => sendEmail(node!, s.key, receipt(s.from, `lock${i}@example.net`), { headers: { 'idempotency-key': `lock-${i}` } }));
      await gate.arrived(2);
      await holder.query('begin');
      await holder.query("select 1 from idempotency_keys where account_id = $1 and key = 'lock-1' for update", [s.account.id]);
      gate.release();
      await expect.poll(() => lockWaiters(watch), { timeout: 10_000 }).toBeGreaterThanOrEqual(1);
      // The account row is free meanwhile: another send's lock is not kept waiting (db/late-writes.ts).
      await watch.query('begin');
      await expect(watch.query('select 1 from accounts where id = $1 for no key update nowait', [s.account.id])).resolves.toMatchObject({ rowCount: 1 });
      await watch.query('rollback');
      await holder.query('commit');
      expect((await Promise.all(answers)).map((r) => r.status)).toEqual([200, 200]);
      // A foreign key's check (a webhook delivery, a customer database's write queued by another node's outcome)
      // takes KEY SHARE on the account row: the counters' late write, an update of no key, is not kept waiting by it.
      await holder.query('begin');
      await holder.query('select 1 from accounts where id = $1 for key share', [s.account.id]);
      expect((await sendEmail(node!, s.key, receipt(s.from, 'lock3@example.net'))).status).toBe(200);
      await holder.query('commit');
      expect((await accountRow(node!, s.account.id)).totalSent).toBe(3);
    } finally {
      await holder.end();
      await watch.end();
      await node!.close();
    }
  });
});

describe('keys and dashboard sessions across nodes', () => {
  it('a key revoked on one node is refused on the others at once, a send included (a key the node knew)', async () => {
    const [a, b] = await moreNodes(2);
    try {
      const s = await newSender(a!);
      const send = (node: TestService) => node.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'known@example.net') });
      // Node b knows the key (it took a send with it), then node a revokes it.
      expect((await send(b!)).status).toBe(200);
      expect((await b!.api('GET', '/account', { key: s.key })).status).toBe(200);
      const keys = await a!.api('GET', '/keys', { key: s.key });
      const id = (keys.body.data as { id: string; name: string }[]).find((k) => k.name === 'operator')!.id;
      expect((await a!.api('DELETE', `/keys/${id}`, { key: s.key })).status).toBe(204);
      for (const res of [await send(b!), await b!.api('GET', '/account', { key: s.key })]) {
        expect(res.status).toBe(401);
        expect(res.body.error.code).toBe('invalid_key');
      }
    } finally {
      await a!.close();
      await b!.close();
    }
  });

  it("a dashboard session signed in on one node works on another, and a new key's secret is shown there once", async () => {
    const [a, b] = await moreNodes(2);
    try {
      const { account } = await a!.newAccount({ name: 'Shared dashboard' });
      const onA = await dashboardClient(a!);
      const onB = { get: (path: string) => fetch(`${b!.url}${path}`, { redirect: 'manual', headers: { cookie: onA.cookie } }) };
      expect((await onB.get('/dashboard')).status).toBe(200);

      const made = await onA.post(`/dashboard/accounts/${account.id}/keys`, { name: 'from a', 'scope.emails:send': 'on' });
      expect(made.status).toBe(303);
      // The next page, served by the other node, shows the secret; a reload does not.
      const page = await (await onB.get(made.headers.get('location')!)).text();
      const secret = /ms_[A-Za-z0-9]{32,}/.exec(page)?.[0];
      expect(secret, page.slice(0, 400)).toBeDefined();
      // The key works (a key holding only emails:send is refused /account for its scope, not as unknown).
      expect((await b!.api('GET', '/account', { key: secret! })).body.error.code).toBe('insufficient_scope');
      expect(await (await onB.get(made.headers.get('location')!)).text()).not.toContain(secret!);
      // It was sealed in the session's row, and is gone from it once shown.
      const rows = await service.deps.db.select().from(dashboardSessions);
      expect(rows.every((r) => r.flashSecretSealed === null && r.flashSecretUntil === null)).toBe(true);
    } finally {
      await a!.close();
      await b!.close();
    }
  });

  it("a new key's secret not shown within a minute is gone, and never stored in plain", async () => {
    const [a] = await moreNodes(1);
    try {
      const { account } = await a!.newAccount({ name: 'Late page' });
      const client = await dashboardClient(a!);
      const made = await client.post(`/dashboard/accounts/${account.id}/keys`, { name: 'late', 'scope.emails:send': 'on' });
      expect(made.status).toBe(303);
      const stored = (await service.deps.db.select().from(dashboardSessions)).filter((r) => r.flashSecretSealed !== null);
      expect(stored).toHaveLength(1);
      expect(stored[0]!.flashSecretSealed!.toString('latin1')).not.toMatch(/ms_[A-Za-z0-9]{32}/);
      a!.clock.advance(60_000);
      const page = await client.follow(made);
      expect(page).toContain('Key late created.');
      expect(page).not.toMatch(/ms_[A-Za-z0-9]{32,}/);
    } finally {
      await a!.close();
    }
  });
});

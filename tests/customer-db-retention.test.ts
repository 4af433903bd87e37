import { eq } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { customerDatabases, customerDbWrites } from '../db/schema/index.js';
import { DATA_RETRY_GAPS_MS, WRITE_RETENTION_MS } from '../server/core/customer-db-outbox.js';
import { type CustomerDbWriter, createCustomerDbWriter } from '../server/customer-db/writer.js';
import { freePort } from '../scripts/lib/free-port.js';
import { scratchDatabases, storeDatabaseRow } from './helpers/customer-db.js';
import { type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { DAY, type Sender, newSender, receipt } from './helpers/sending.js';
import { one } from '../db/sql.js';

/**
 * The outbox's seven-day drop (docs/api/decisions.md section 8: "retried with growing gaps for 7 days"),
 * against a real Postgres and the fake clock: a write is dropped seven days after it was queued, also when its next
 * attempt moved later (refused and retried, or set aside and put back in line by POST /database/test); and the count
 * logged and shown in `lastError` is the number of rows removed, logged once.
 */

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

let rig: DeliveryRig;
let pgServer: TestPostgres;
let scratch: ReturnType<typeof scratchDatabases>;
let writer: CustomerDbWriter;

beforeAll(async () => {
  [rig, pgServer] = await Promise.all([startDeliveryRig(), startPostgres({ certificate: 'trusted' })]);
  scratch = scratchDatabases(pgServer, 'retention');
}, 120_000);

afterAll(async () => {
  await stopDeliveryRig(rig);
  await pgServer?.stop();
});

beforeEach(async () => {
  await rig.service.deps.db.delete(customerDbWrites);
  resetDeliveryRig(rig);
  rig.service.logger.entries.length = 0;
  writer = createCustomerDbWriter(rig.service.deps);
});

afterEach(async () => {
  await writer.stop();
});

/** A sender whose database refuses every email whose text holds POISON (a constraint of the customer's). */
async function refusingSender(name: string): Promise<Sender> {
  const s = await newSender(rig.service, { name });
  const database = await scratch.fresh();
  const res = await rig.service.api('POST', '/database', { key: s.key, body: { url: database.url } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await scratch.query(database.name, `alter table service.emails add constraint no_poison check (text not like '%POISON%')`);
  return s;
}

async function send(s: Sender, receiptNumber: string): Promise<string> {
  const body = receipt(s.from, 'ann@example.net', { template: { name: 'receipt', receiptNumber, paidOn: '2026-03-10', paymentMethod: 'Visa', total: '$1' } });
  const res = await rig.service.api('POST', '/emails', { key: s.key, body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

const outboxOf = async (s: Sender) => await rig.service.deps.db.select().from(customerDbWrites).where(eq(customerDbWrites.databaseAccountId, s.account.id));
const lastErrorOf = async (s: Sender) =>
  (await one(rig.service.deps.db.select().from(customerDatabases).where(eq(customerDatabases.accountId, s.account.id))))!.lastError;
const dropLogs = (s: Sender) => rig.service.logger.entries.filter((e) => e.event === 'customer_db.writes_dropped' && e.accountId === s.account.id);

/** Runs the writer at each gap of the data-refusal schedule, from now: the refused write is set aside at the end. */
async function refuseUntilSetAside(): Promise<void> {
  for (const gap of [0, ...DATA_RETRY_GAPS_MS]) {
    rig.service.clock.advance(gap);
    await writer.runOnce();
  }
}

describe('the seven days count from when a write was queued', () => {
  it('a write refused and retried late keeps its queued time: dropped at seven days although its next attempt is still ahead', async () => {
    const s = await refusingSender('RetriedLate');
    const queuedAt = rig.service.clock.now();
    await send(s, 'POISON-1');
    // The database is first answered just before the seven days are up: refused, tried again after 30 s, refused again.
    rig.service.clock.advance(WRITE_RETENTION_MS - HOUR);
    await writer.runOnce();
    rig.service.clock.advance(HOUR - MINUTE);
    await writer.runOnce();
    const [waiting] = await outboxOf(s);
    expect(waiting).toMatchObject({ createdAt: queuedAt, attempts: 2, setAsideAt: null });
    expect(waiting!.nextAttemptAt).toBeGreaterThan(queuedAt + WRITE_RETENTION_MS);
    expect(dropLogs(s)).toEqual([]);

    rig.service.clock.advance(MINUTE);
    await writer.runOnce();
    expect(await outboxOf(s)).toEqual([]);
    expect(dropLogs(s)).toEqual([expect.objectContaining({ count: 1 })]);
    expect(await lastErrorOf(s)).toBe('1 queued write was dropped after waiting seven days for the database.');
  });

  it('a write set aside and put back in line by POST /database/test keeps its queued time: dropped at seven days, set aside again or not', async () => {
    const s = await refusingSender('Requeued');
    const queuedAt = rig.service.clock.now();
    await send(s, 'POISON-2');
    await refuseUntilSetAside();
    expect(await outboxOf(s)).toEqual([expect.objectContaining({ setAsideAt: expect.any(Number) })]);

    // Six days on the customer tests the database: the write is back in line, due now, and refused again until set aside.
    rig.service.clock.set(queuedAt + 6 * DAY);
    expect((await rig.service.api('POST', '/database/test', { key: s.key })).status).toBe(200);
    expect(await outboxOf(s)).toEqual([expect.objectContaining({ setAsideAt: null, attempts: 0, nextAttemptAt: queuedAt + 6 * DAY })]);
    await refuseUntilSetAside();
    const setAsideAt = rig.service.clock.now();
    expect(await outboxOf(s)).toEqual([expect.objectContaining({ createdAt: queuedAt, setAsideAt })]);

    rig.service.clock.set(queuedAt + WRITE_RETENTION_MS - MINUTE);
    await writer.runOnce();
    expect(await outboxOf(s)).toHaveLength(1);
    expect(dropLogs(s)).toEqual([]);

    rig.service.clock.set(queuedAt + WRITE_RETENTION_MS);
    await writer.runOnce();
    expect(await outboxOf(s)).toEqual([]);
    expect(dropLogs(s)).toEqual([expect.objectContaining({ count: 1 })]);
  });
});

describe('the dropped count', () => {
  it('is the number of rows removed, per database, set-aside and waiting writes alike, logged once and shown in lastError', async () => {
    // P's database answers and refuses the poisoned emails (set aside); Q's cannot be reached (its writes wait).
    const p = await refusingSender('CountP');
    const q = await newSender(rig.service, { name: 'CountQ' });
    await storeDatabaseRow(rig.service, q.account.id, `postgresql://app:secret@127.0.0.1:${await freePort()}/app?sslmode=no-verify`);
    const queuedAt = rig.service.clock.now();
    await send(p, 'POISON-3');
    await send(p, 'POISON-4');
    await send(p, 'R-5');
    await send(q, 'R-6');
    await send(q, 'R-7');
    await refuseUntilSetAside();
    // Three days on, each gets a write too young to go (P's set aside again, so that nothing of P's is due at the drop).
    rig.service.clock.set(queuedAt + 3 * DAY);
    await send(p, 'POISON-8');
    await send(q, 'R-9');
    await refuseUntilSetAside();
    // Q was last tried just before the drop: its next attempt comes after it, so nothing overwrites the count shown.
    rig.service.clock.set(queuedAt + WRITE_RETENTION_MS - 1000);
    await writer.runOnce();
    const before = { p: await outboxOf(p), q: await outboxOf(q) };
    expect(before.p.map((w) => w.setAsideAt === null)).toEqual([false, false, false]);
    expect(before.q.map((w) => w.setAsideAt === null)).toEqual([true, true, true]);
    expect(await lastErrorOf(q)).toMatch(/could not connect/);

    rig.service.clock.set(queuedAt + WRITE_RETENTION_MS);
    await writer.runOnce();
    const after = { p: await outboxOf(p), q: await outboxOf(q) };
    // What stays is exactly the young writes.
    expect(after.p.map((w) => w.createdAt)).toEqual([queuedAt + 3 * DAY]);
    expect(after.q.map((w) => w.createdAt)).toEqual([queuedAt + 3 * DAY]);
    const removed = { p: before.p.length - after.p.length, q: before.q.length - after.q.length };
    expect(removed).toEqual({ p: 2, q: 2 });
    expect(dropLogs(p)).toEqual([expect.objectContaining({ level: 'error', count: removed.p })]);
    expect(dropLogs(q)).toEqual([expect.objectContaining({ level: 'error', count: removed.q })]);
    expect(await lastErrorOf(p)).toBe('2 queued writes were dropped after waiting seven days for the database.');
    expect(await lastErrorOf(q)).toBe('2 queued writes were dropped after waiting seven days for the database.');
    expect((await rig.service.api('GET', '/database', { key: p.key })).body).toMatchObject({ lastError: await lastErrorOf(p), pending: 0 });
    expect((await rig.service.api('GET', '/database', { key: q.key })).body).toMatchObject({ lastError: await lastErrorOf(q), pending: 1 });

    // Later runs find nothing more to drop, and log nothing more.
    for (let i = 0; i < 3; i++) {
      rig.service.clock.advance(MINUTE);
      await writer.runOnce();
    }
    expect({ p: dropLogs(p).length, q: dropLogs(q).length }).toEqual({ p: 1, q: 1 });
    expect({ p: (await outboxOf(p)).length, q: (await outboxOf(q)).length }).toEqual({ p: 1, q: 1 });
  });

  it('is logged once when the seven days are up to the millisecond', async () => {
    const s = await refusingSender('Boundary');
    const queuedAt = rig.service.clock.now();
    await send(s, 'POISON-10');
    await refuseUntilSetAside();
    rig.service.clock.set(queuedAt + WRITE_RETENTION_MS);
    await writer.runOnce();
    const leftByFirstRun = (await outboxOf(s)).length;
    rig.service.clock.advance(MINUTE);
    await writer.runOnce();
    // Counted and removed by the same run: a count that ran ahead of the delete would be logged again by the next.
    expect({ counts: dropLogs(s).map((e) => e.count), leftByFirstRun }).toEqual({ counts: [1], leftByFirstRun: 0 });
  });
});

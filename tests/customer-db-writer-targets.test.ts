import { eq } from 'drizzle-orm';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { customerDbWrites, outboundRecipients } from '../db/schema/index.js';
import { DATA_RETRY_GAPS_MS } from '../server/core/customer-db-outbox.js';
import { RECONNECT_GAPS_MS } from '../server/core/customer-db-status.js';
import { type CustomerDbWriter, createCustomerDbWriter } from '../server/customer-db/writer.js';
import { type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { scratchDatabases } from './helpers/customer-db.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { type Sender, newSender, receipt } from './helpers/sending.js';

/**
 * Where the customer-database writer sends a write, against a real Postgres: to the account's database as it is when
 * the write commits there (a URL replaced or deleted while a batch is on its way to the old one leaves nothing there
 * and the rest goes to the new one); through each of the host's addresses in turn, as POST /database connects; and in
 * smaller batches after one timed out, so a slow database still drains its backlog.
 */

let rig: DeliveryRig;
let pgServer: TestPostgres;
let writer: CustomerDbWriter;
let scratch: ReturnType<typeof scratchDatabases>;

beforeAll(async () => {
  [rig, pgServer] = await Promise.all([startDeliveryRig(), startPostgres({ certificate: 'trusted' })]);
  scratch = scratchDatabases(pgServer, 'target');
}, 120_000);
afterAll(async () => {
  await stopDeliveryRig(rig);
  await pgServer?.stop();
});
beforeEach(async () => {
  await rig.service.deps.db.delete(outboundRecipients);
  await rig.service.deps.db.delete(customerDbWrites);
  resetDeliveryRig(rig);
});
afterEach(async () => {
  await writer?.stop();
});

const landed = async (database: string, ids: string[]) =>
  (await scratch.query(database, 'select id from service.emails where id = any($1) order by id', [ids])).rows.map((r: { id: string }) => r.id);

async function send(s: Sender): Promise<string> {
  const res = await rig.service.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'ann@example.net') });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

async function connect(s: Sender, url: string): Promise<void> {
  const res = await rig.service.api('POST', '/database', { key: s.key, body: { url } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

/**
 * The customer holds a lock on service.emails in `database`, then `start` runs the writer; resolves with the locking
 * session and the writer's run once its first insert waits on the lock. Taken before the writer starts, so no batch
 * can commit there before the test changes the target (one did, now and then, when the writer started first).
 */
async function holdEmailsLock(database: string, start: () => Promise<unknown>): Promise<{ locker: pg.Client; running: Promise<unknown> }> {
  const locker = await pgServer.connect(database);
  await locker.query('begin');
  await locker.query('lock table service.emails in access exclusive mode');
  const running = start();
  for (let i = 0; i < 200; i++) {
    const waiting = await scratch.query(database, `select 1 from pg_stat_activity where datname = $1 and wait_event_type = 'Lock' and pid <> $2`, [
      database,
      (locker as unknown as { processID: number }).processID,
    ]);
    if (waiting.rowCount) return { locker, running };
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the writer never waited on the lock');
}

describe('a database replaced or deleted while a batch is on its way to it', () => {
  it('a new URL: the batch in flight is not committed in the old database; it and everything after go to the new one', async () => {
    writer = createCustomerDbWriter(rig.service.deps, { batchSize: 1 });
    const s = await newSender(rig.service, { name: 'Replaced' });
    const [before, after] = [await scratch.fresh(), await scratch.fresh()];
    await connect(s, before.url);
    const queued = [await send(s), await send(s), await send(s)];
    const { locker, running } = await holdEmailsLock(before.name, () => writer.runOnce());
    await connect(s, after.url);
    const later = await send(s);
    await locker.query('commit');
    await locker.end();
    await running;
    await writer.runOnce();
    expect(await landed(before.name, [...queued, later])).toEqual([]);
    expect(await landed(after.name, [...queued, later])).toEqual([...queued, later].sort());
    expect(rig.service.logger.entries).toContainEqual(expect.objectContaining({ event: 'customer_db.target_changed' }));
  });

  it('DELETE /database: the batch in flight is not committed there, and mail after a new POST goes to the new database', async () => {
    writer = createCustomerDbWriter(rig.service.deps, { batchSize: 1 });
    const s = await newSender(rig.service, { name: 'Deleted' });
    const [forgotten, next] = [await scratch.fresh(), await scratch.fresh()];
    await connect(s, forgotten.url);
    const queued = [await send(s), await send(s)];
    const { locker, running } = await holdEmailsLock(forgotten.name, () => writer.runOnce());
    expect((await rig.service.api('DELETE', '/database', { key: s.key })).status).toBe(204);
    await connect(s, next.url);
    const later = await send(s);
    await locker.query('commit');
    await locker.end();
    await running;
    await writer.runOnce();
    expect(await landed(forgotten.name, [...queued, later])).toEqual([]);
    // The writes queued before DELETE were dropped with it (docs/api/behaviour.md); the later one is the new database's.
    expect(await landed(next.name, [...queued, later])).toEqual([later]);
  });
});

describe('the host’s addresses', () => {
  it('the first address down: the writer reaches the database through the next, as POST /database did', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    // db.pg.test: 127.0.0.2 first (nothing listens there), then 127.0.0.1 (the Postgres).
    rig.dns.add('db.pg.test', { type: 'A', address: '127.0.0.2' });
    rig.dns.add('db.pg.test', { type: 'A', address: '127.0.0.1' });
    const s = await newSender(rig.service, { name: 'TwoAddresses' });
    const database = await scratch.fresh('db.pg.test');
    await connect(s, database.url);
    const id = await send(s);
    await writer.runOnce();
    const status = (await rig.service.api('GET', '/database', { key: s.key })).body;
    expect({ state: status.state, lastError: status.lastError, landed: await landed(database.name, [id]) }).toEqual({
      state: 'connected',
      lastError: null,
      landed: [id],
    });
  });
});

describe('a batch that timed out', () => {
  it('is tried again in halves until it lands: the backlog drains', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    const s = await newSender(rig.service, { name: 'Slow' });
    const database = await scratch.fresh();
    await connect(s, database.url);
    // The customer's database takes at most 10 rows a statement in time: more are cancelled as its statement_timeout does.
    await scratch.query(
      database.name,
      `create function slow() returns trigger language plpgsql as $$ begin
         if (select count(*) from new_rows) > 10 then raise exception 'canceling statement due to statement timeout' using errcode = 'query_canceled'; end if;
         return null; end $$;
       create trigger slow after insert on service.emails referencing new table as new_rows for each statement execute function slow();`,
    );
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) ids.push(await send(s));
    for (let attempt = 0; attempt < 20 && (await landed(database.name, ids)).length < ids.length; attempt++) {
      await writer.runOnce();
      rig.service.clock.advance(RECONNECT_GAPS_MS.at(-1)!);
    }
    expect(await landed(database.name, ids)).toEqual([...ids].sort());
    expect((await rig.service.api('GET', '/database', { key: s.key })).body).toMatchObject({ state: 'connected', pending: 0 });
  });
});

describe('writes set aside for their data', () => {
  it('are tried again after a successful POST /database/test, once the customer fixed the schema', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    const s = await newSender(rig.service, { name: 'SetAside' });
    const database = await scratch.fresh();
    await connect(s, database.url);
    // The customer adds a column no write fills: every email is refused for its data.
    await scratch.query(database.name, 'alter table service.emails add column note text not null');
    const id = await send(s);
    for (const gap of [0, ...DATA_RETRY_GAPS_MS]) {
      rig.service.clock.advance(gap);
      await writer.runOnce();
    }
    const outbox = async () => await rig.service.deps.db.select().from(customerDbWrites).where(eq(customerDbWrites.accountId, s.account.id));
    expect((await outbox()).filter((w) => w.kind === 'email')).toEqual([expect.objectContaining({ setAsideAt: expect.any(Number) })]);
    expect((await rig.service.api('GET', '/database', { key: s.key })).body).toMatchObject({ pending: 0, lastError: expect.stringMatching(/set aside/) });
    expect(await landed(database.name, [id])).toEqual([]);

    await scratch.query(database.name, 'alter table service.emails drop column note');
    expect((await rig.service.api('POST', '/database/test', { key: s.key })).status).toBe(200);
    expect(rig.service.logger.entries).toContainEqual(expect.objectContaining({ event: 'customer_db.set_aside_requeued', count: 1 }));
    await writer.runOnce();
    expect(await landed(database.name, [id])).toEqual([id]);
    expect((await outbox()).filter((w) => w.kind === 'email')).toEqual([]);
  });
});

import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { customerDbWrites, outboundRecipients } from '../db/schema/index.js';
import { parseCustomerDbUrl } from '../server/customer-db/url.js';
import { MAX_DB_ADDRESSES, configsFor } from '../server/customer-db/connection.js';
import { DATA_RETRY_GAPS_MS, queueCustomerDbWrite } from '../server/core/customer-db-outbox.js';
import { RECONNECT_GAPS_MS } from '../server/core/customer-db-status.js';
import { type CustomerDbWriter, createCustomerDbWriter } from '../server/customer-db/writer.js';
import { newId } from '../server/shared/ids.js';
import { type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { scratchDatabases } from './helpers/customer-db.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { type Sender, newSender, receipt } from './helpers/sending.js';

/**
 * The customer database at its edges (found by an audit, each watched failing before its fix): a refusal raised at
 * COMMIT (a deferrable constraint), a spooled message whose database is replaced or deleted while it is written, a
 * password the URL's error message must never echo, and when `updatedAt` and `lastOkAt` move.
 */

let rig: DeliveryRig;
let pgServer: TestPostgres;
let writer: CustomerDbWriter | undefined;
let scratch: ReturnType<typeof scratchDatabases>;

beforeAll(async () => {
  [rig, pgServer] = await Promise.all([startDeliveryRig(), startPostgres({ certificate: 'trusted' })]);
  scratch = scratchDatabases(pgServer, 'audit');
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
  writer = undefined;
});

async function send(s: Sender): Promise<string> {
  const res = await rig.service.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'ann@example.net') });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}
async function connect(s: Sender, url: string) {
  const res = await rig.service.api('POST', '/database', { key: s.key, body: { url } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}
const status = async (s: Sender) => (await rig.service.api('GET', '/database', { key: s.key })).body;

/** A received message spooled (as one over 256 KB is: a file, or rows on Postgres) and queued for the account's database. */
async function queueSpooledInbound(s: Sender): Promise<string> {
  const now = rig.service.clock.now();
  const spoolId = newId(now);
  const spool = rig.service.deps.inboundSpool.create(rig.service.deps.secretKey!, spoolId);
  const raw = Buffer.from(`From: ann@example.net\r\nTo: support@${s.domain}\r\nSubject: big\r\n\r\n${'x'.repeat(1000)}\r\n`);
  await spool.append(raw);
  await spool.finish();
  const id = newId(now);
  await rig.service.deps.db.transaction(async () => {
    await queueCustomerDbWrite(
      rig.service.deps,
      s.account.id,
      {
        kind: 'inbound',
        id,
        spoolId,
        accountId: s.account.id,
        toAddresses: [`support@${s.domain}`],
        mailFrom: 'ann@example.net',
        remoteAddress: '127.0.0.1',
        helo: 'client.example',
        receivedAt: now,
        size: raw.length,
      },
      now,
    );
  });
  return id;
}

/** The customer locks service.inbound in `database`, then `start` runs the writer; resolves once the writer waits on that lock. */
async function underInboundLock(database: string, start: () => Promise<unknown>): Promise<{ locker: pg.Client; running: Promise<unknown> }> {
  const locker = await pgServer.connect(database);
  await locker.query('begin');
  await locker.query('lock table service.inbound in access exclusive mode');
  const running = start();
  const pid = (locker as unknown as { processID: number }).processID;
  for (let i = 0; i < 200; i++) {
    if (
      (await scratch.query(database, `select 1 from pg_stat_activity where datname = $1 and wait_event_type = 'Lock' and pid <> $2`, [database, pid])).rowCount
    )
      return { locker, running };
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the writer never waited on the lock');
}

describe('a write refused by a constraint checked at COMMIT (deferrable, class 23)', () => {
  it('is isolated like any data refusal: the writes behind it land and the database stays connected', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    const s = await newSender(rig.service, { name: 'Deferred' });
    const db = await scratch.fresh();
    await connect(s, db.url);
    await scratch.query(
      db.name,
      'alter table service.events add constraint events_email_fk foreign key (email_id) references service.emails (id) deferrable initially deferred',
    );
    const now = rig.service.clock.now();
    // An outcome of an email this database never got (sent before it was connected), then an ordinary send.
    await rig.service.deps.db.transaction(async () => {
      await queueCustomerDbWrite(
        rig.service.deps,
        s.account.id,
        {
          kind: 'event',
          id: newId(now),
          emailId: newId(now),
          recipient: 'ann@example.net',
          status: 'delivered',
          dsn: '2.0.0',
          detail: '250 ok',
          occurredAt: now,
        },
        now,
      );
    });
    const id = await send(s);
    for (let i = 0; i < 4; i++) {
      await writer.runOnce();
      rig.service.clock.advance(RECONNECT_GAPS_MS.at(-1)!);
    }
    const st = await status(s);
    const landed = (await scratch.query(db.name, 'select id from service.emails where id = $1', [id])).rows.map((r) => r.id);
    // Before: landed [], state 'unreachable', lastError 'ROLLBACK TO SAVEPOINT can only be used in transaction blocks
    // (25P01)', at every retry: nothing behind it landed until the 7-day drop.
    expect({ landed, state: st.state, lastError: st.lastError }).toMatchObject({ landed: [id], state: 'connected' });
  });
});

describe('a spooled received message on its way to a database replaced or deleted meanwhile', () => {
  it('replaced: not committed in the old database; it goes to the new one', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    const s = await newSender(rig.service, { name: 'SpoolReplaced' });
    const [before, after] = [await scratch.fresh(), await scratch.fresh()];
    await connect(s, before.url);
    const inboundId = await queueSpooledInbound(s);
    const w = writer;
    const { locker: held, running } = await underInboundLock(before.name, () => w.runOnce());
    await connect(s, after.url);
    await held.query('commit');
    await held.end();
    await running;
    await writer.runOnce();
    const inOld = (await scratch.query(before.name, 'select 1 from service.inbound where id = $1', [inboundId])).rowCount;
    const inNew = (await scratch.query(after.name, 'select 1 from service.inbound where id = $1', [inboundId])).rowCount;
    // Before: { inOld: 1, inNew: 0 } and the outbox row gone: the new database never got the message.
    expect({ inOld, inNew }).toEqual({ inOld: 0, inNew: 1 });
  });

  it('deleted: nothing is written to the forgotten database', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    const s = await newSender(rig.service, { name: 'SpoolDeleted' });
    const forgotten = await scratch.fresh();
    await connect(s, forgotten.url);
    const inboundId = await queueSpooledInbound(s);
    const w = writer;
    const { locker: held, running } = await underInboundLock(forgotten.name, () => w.runOnce());
    expect((await rig.service.api('DELETE', '/database', { key: s.key })).status).toBe(204);
    await held.query('commit');
    await held.end();
    await running;
    // Before: 1 (the message landed in the database the account had deleted).
    expect((await scratch.query(forgotten.name, 'select 1 from service.inbound where id = $1', [inboundId])).rowCount).toBe(0);
  });
});

describe('POST /database with an invalid URL', () => {
  it('never echoes a part of the password in the error message', async () => {
    const s = await newSender(rig.service, { name: 'Echo' });
    // A password with an unencoded "?" and "=" (as base64 padding has), pasted as is.
    const res = await rig.service.api('POST', '/database', { key: s.key, body: { url: 'postgresql://app:Zx9?Tr0ub4dor3=@db.example.com/app' } });
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe('invalid_url');
    // It answered 'The URL parameter `Tr0ub4dor3` is not allowed. Only sslmode is accepted.'
    expect(res.body.error.message).not.toContain('Tr0ub4dor3');
    expect(res.body.error.message).toMatch(/percent-encode/);
  });
});

describe('updatedAt (docs/api/behaviour.md: moves when the URL, the state or the last error changes)', () => {
  it('does not move on a successful POST /database/test that changes none of them', async () => {
    const s = await newSender(rig.service, { name: 'UpdTest' });
    const db = await scratch.fresh();
    const connected = await connect(s, db.url);
    rig.service.clock.advance(60_000);
    const tested = await rig.service.api('POST', '/database/test', { key: s.key });
    expect(tested.status).toBe(200);
    expect({ state: tested.body.state, lastError: tested.body.lastError }).toEqual({ state: 'connected', lastError: null });
    expect(tested.body.updatedAt).toBe(connected.updatedAt);
  });

  it('does not move at each failed writer attempt when the state and the error stay the same', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    const s = await newSender(rig.service, { name: 'UpdWriter' });
    const db = await scratch.fresh();
    await connect(s, db.url);
    await pgServer.admin(`alter database ${db.name} with allow_connections false`);
    try {
      await send(s);
      await writer.runOnce();
      const first = await status(s);
      rig.service.clock.advance(RECONNECT_GAPS_MS[0]!);
      await writer.runOnce();
      const second = await status(s);
      expect({ state: second.state, lastError: second.lastError }).toEqual({ state: 'unreachable', lastError: first.lastError });
      expect(second.updatedAt).toBe(first.updatedAt);
    } finally {
      await pgServer.admin(`alter database ${db.name} with allow_connections true`);
    }
  });
});

describe('updatedAt when writes are set aside', () => {
  it('moves when a set-aside write brings a new error, not when the next one brings the same', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    const s = await newSender(rig.service, { name: 'UpdAside' });
    const db = await scratch.fresh();
    await connect(s, db.url);
    await scratch.query(db.name, 'alter table service.emails add column note text not null');
    /** One send, refused at each try until set aside (DATA_RETRY_GAPS_MS), a minute later. */
    const setAside = async () => {
      rig.service.clock.advance(60_000);
      await send(s);
      await writer!.runOnce();
      for (const gap of DATA_RETRY_GAPS_MS) {
        rig.service.clock.advance(gap);
        await writer!.runOnce();
      }
      return status(s);
    };
    const first = await setAside();
    expect(first.lastError).toMatch(/set aside.*note/);
    const second = await setAside();
    expect(second.lastError).toBe(first.lastError);
    expect(second.updatedAt).toBe(first.updatedAt);
  });
});

describe('lastOkAt (docs/api/behaviour.md: moves at each write that lands or successful test)', () => {
  it('does not move when the only write of a batch is refused for its data', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    const s = await newSender(rig.service, { name: 'OkAt' });
    const db = await scratch.fresh();
    const connected = await connect(s, db.url);
    await scratch.query(db.name, 'alter table service.emails add column note text not null');
    rig.service.clock.advance(60_000);
    await send(s);
    await writer.runOnce();
    expect((await scratch.query(db.name, 'select count(*)::int as n from service.emails')).rows[0].n).toBe(0);
    expect((await status(s)).lastOkAt).toBe(connected.lastOkAt);
  });
});

describe('a least-privilege role', () => {
  it('whose DBA made the schema and its tables and granted it only USAGE and the rows connects, and its writes land', async () => {
    writer = createCustomerDbWriter(rig.service.deps);
    const db = await scratch.fresh();
    // The DBA: schema and tables made by a role with every right (the first connect), then a role for the app.
    await connect(await newSender(rig.service, { name: 'Dba' }), db.url);
    const role = `app_${db.name}`;
    await scratch.query(db.name, `create role ${role} login password 'least-${db.name}'`);
    await scratch.query(db.name, `grant usage on schema service to ${role}`);
    await scratch.query(db.name, `grant select, insert, update, delete on all tables in schema service to ${role}`);
    const url = new URL(db.url);
    url.username = role;
    url.password = `least-${db.name}`;
    const s = await newSender(rig.service, { name: 'LeastPrivilege' });
    const res = await rig.service.api('POST', '/database', { key: s.key, body: { url: url.toString() } });
    // It answered 422 database_unreachable: `create table if not exists` asks for CREATE on the schema even when the
    // table is there.
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const id = await send(s);
    await writer.runOnce();
    expect((await scratch.query(db.name, 'select id from service.emails where id = $1', [id])).rowCount).toBe(1);
  });
});

describe('a database host with several addresses', () => {
  it('falls back to the next address when one refuses the connection', async () => {
    // 127.0.0.2 has nothing on Postgres's port (ECONNREFUSED); 127.0.0.1 is the server, whose certificate names db.pg.test.
    rig.dns.add('db.pg.test', { type: 'A', address: '127.0.0.2' });
    rig.dns.add('db.pg.test', { type: 'A', address: '127.0.0.1' });
    const s = await newSender(rig.service, { name: 'Fallback' });
    const db = await scratch.fresh();
    const res = await rig.service.api('POST', '/database', { key: s.key, body: { url: db.url.replace('@localhost:', '@db.pg.test:') } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  });

  it('is tried at its first 3 addresses only: a connect waits at most 3 connect timeouts, not one per address', async () => {
    expect(MAX_DB_ADDRESSES).toBe(3);
    for (let i = 11; i <= 18; i++) rig.dns.add('many.pg.test', { type: 'A', address: `127.0.0.${i}` });
    const reached = await configsFor(rig.service.deps, parseCustomerDbUrl('postgresql://app:pw@many.pg.test/app'));
    expect(reached.ok && reached.configs.map((c) => c.host)).toEqual(['127.0.0.11', '127.0.0.12', '127.0.0.13']);
  });
});

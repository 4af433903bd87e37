import { readFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MAX_ERROR_TEXT, cutErrorText } from '../db/customer/error-text.js';
import { CUSTOMER_SCHEMA_VERSION } from '../db/customer/schema.js';
import { customerDbWrites } from '../db/schema/index.js';
import { queueCustomerDbWrite } from '../server/core/customer-db-outbox.js';
import { type CustomerDbWriter, createCustomerDbWriter } from '../server/customer-db/writer.js';
import { newId } from '../server/shared/ids.js';
import { scratchDatabases } from './helpers/customer-db.js';
import { type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { type Sender, newSender, receipt } from './helpers/sending.js';
import { createAccountWithCli, processApi, processEnv, runningProcesses, startServiceProcess } from './helpers/service-process.js';

/**
 * A customer's database is an untrusted peer (docs/api/decisions.md section 13), against a real Postgres:
 * its `service.schema_migrations` made a view over eight million rows leaves the service's memory where it was and
 * `schemaVersion` at the version the service knows; a trigger raising a 2 MB message leaves at most 1,000 characters
 * of it in `lastError` and in each log line; a statement the customer makes slow is cut by statement_timeout, which
 * the customer's own settings cannot lift.
 */

let rig: DeliveryRig;
let pgServer: TestPostgres;
let scratch: ReturnType<typeof scratchDatabases>;
let writer: CustomerDbWriter | undefined;
const dataDirs: string[] = [];

beforeAll(async () => {
  [rig, pgServer] = await Promise.all([startDeliveryRig(), startPostgres({ certificate: 'trusted' })]);
  scratch = scratchDatabases(pgServer, 'hostile');
}, 120_000);

afterAll(async () => {
  for (const child of runningProcesses) child.kill('SIGKILL');
  await stopDeliveryRig(rig);
  await pgServer?.stop();
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  await rig.service.deps.db.delete(customerDbWrites);
  resetDeliveryRig(rig);
  rig.service.logger.entries.length = 0;
});

afterEach(async () => {
  await writer?.stop();
  writer = undefined;
});

/** The customer's schema_migrations replaced by a view of eight million rows (the versions 1 to 8,000,000). */
const HOSTILE_MIGRATIONS = `
  drop table service.schema_migrations;
  create view service.schema_migrations as select generate_series(1, 8000000) as version, 'hostile'::text as name, now() as applied_at;`;

/** A character no log field of the service holds: the customer's text is counted by it. */
const FILL = '~';
/** A 2 MB message of FILL characters, raised with `errcode` from a trigger function named `name`. */
const raising = (name: string, errcode: string) => `
  create function ${name}() returns trigger language plpgsql as $$ begin
    raise exception using message = repeat('${FILL}', 2000000), errcode = '${errcode}', detail = repeat('${FILL}', 100000), hint = repeat('${FILL}', 100000);
  end $$;`;

const fills = (text: string) => text.split(FILL).length - 1;

/** Every log entry as the line the logger writes, and the most of the customer's text any one line holds. */
function logLines(): string[] {
  return rig.service.logger.entries.map((e) => JSON.stringify(e));
}

async function connect(s: Sender, url: string) {
  return rig.service.api('POST', '/database', { key: s.key, body: { url } });
}

async function status(s: Sender) {
  return (await rig.service.api('GET', '/database', { key: s.key })).body;
}

async function send(s: Sender): Promise<string> {
  const res = await rig.service.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'ann@example.net') });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

async function queueEvent(s: Sender, emailId: string): Promise<void> {
  const now = rig.service.clock.now();
  await rig.service.deps.db.transaction(async () =>
    queueCustomerDbWrite(
      rig.service.deps,
      s.account.id,
      { kind: 'event', id: newId(now), emailId, recipient: 'ann@example.net', status: 'delivered', dsn: '2.0.0', detail: '250 ok', occurredAt: now },
      now,
    ),
  );
}

async function queueInbound(s: Sender): Promise<string> {
  const now = rig.service.clock.now();
  const id = newId(now);
  const raw = Buffer.from('From: ann@example.net\r\nSubject: Order 7\r\n\r\nHello\r\n');
  await rig.service.deps.db.transaction(async () =>
    queueCustomerDbWrite(
      rig.service.deps,
      s.account.id,
      {
        kind: 'inbound',
        id,
        spoolId: null,
        raw,
        accountId: s.account.id,
        toAddresses: [`support@${s.domain}`],
        mailFrom: 'ann@example.net',
        remoteAddress: '127.0.0.1',
        helo: 'client.example',
        receivedAt: now,
        size: raw.length,
      },
      now,
    ),
  );
  return id;
}

describe('the error text helper', () => {
  it('keeps text up to 1,000 characters as it is and cuts longer text to 1,000, marked, never splitting a surrogate pair', () => {
    expect(cutErrorText('x'.repeat(MAX_ERROR_TEXT))).toBe('x'.repeat(MAX_ERROR_TEXT));
    const cut = cutErrorText('x'.repeat(MAX_ERROR_TEXT + 1));
    expect(cut).toHaveLength(MAX_ERROR_TEXT);
    expect(cut.endsWith('…')).toBe(true);
    const emoji = cutErrorText(`${'x'.repeat(MAX_ERROR_TEXT - 2)}😀😀`);
    expect(emoji.length).toBeLessThanOrEqual(MAX_ERROR_TEXT);
    // A lone surrogate would not survive a round trip through UTF-8.
    expect(Buffer.from(emoji, 'utf8').toString('utf8')).toBe(emoji);
  });
});

describe('schema_migrations made a view over eight million rows', () => {
  it('connect, test and the writer report the version the service knows, reading none of the rows', async () => {
    const s = await newSender(rig.service, { name: 'ManyVersions' });
    const database = await scratch.fresh();
    expect((await connect(s, database.url)).status).toBe(200);
    await scratch.query(database.name, HOSTILE_MIGRATIONS);

    const started = Date.now();
    const again = await connect(s, database.url);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body.schemaVersion).toBe(CUSTOMER_SCHEMA_VERSION);
    const tested = await rig.service.api('POST', '/database/test', { key: s.key });
    expect(tested.status, JSON.stringify(tested.body)).toBe(200);
    expect(tested.body.schemaVersion).toBe(CUSTOMER_SCHEMA_VERSION);
    // The writer migrates on its first use of a pool, and records the version it gets.
    writer = createCustomerDbWriter(rig.service.deps);
    const id = await send(s);
    await writer.runOnce();
    expect(await status(s)).toMatchObject({ state: 'connected', schemaVersion: CUSTOMER_SCHEMA_VERSION, pending: 0 });
    expect((await scratch.query(database.name, 'select id from service.emails')).rows).toEqual([{ id }]);
    // Reading eight million rows took seconds here (and 640 MB); three migrations reading none take far less.
    expect(Date.now() - started).toBeLessThan(5_000);
  }, 60_000);

  it('leaves the RSS of the real process within 50 MB of where it was, and /healthz answering', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-hostile-'));
    dataDirs.push(dataDir);
    const env = processEnv(dataDir);
    const proc = await startServiceProcess(env);
    try {
      const { key } = await createAccountWithCli(env, 'Hostile database');
      const database = await scratch.fresh();
      const connected = await processApi(proc, key, 'POST', '/database', { url: database.url });
      expect(connected.status, JSON.stringify(connected.body)).toBe(200);
      // Once more before measuring: the first test loads what any test needs (modules, TLS), not what this one reads.
      expect((await processApi(proc, key, 'POST', '/database/test')).status).toBe(200);
      await scratch.query(database.name, HOSTILE_MIGRATIONS);

      const statusFile = `/proc/${proc.child.pid}/status`;
      const kb = (field: 'VmRSS' | 'VmHWM') => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(statusFile, 'utf8'))![1]);
      const before = kb('VmRSS');
      // The peak RSS starts again from now (Linux: clear_refs 5 resets VmHWM to the current RSS).
      writeFileSync(`/proc/${proc.child.pid}/clear_refs`, '5');
      let slowest = 0;
      let unanswered = 0;
      let probing = true;
      const probes = (async () => {
        while (probing) {
          const t = Date.now();
          const ok = await fetch(`http://127.0.0.1:${proc.port}/healthz`).then(
            (r) => r.status === 200,
            () => false,
          );
          if (!ok) unanswered += 1;
          slowest = Math.max(slowest, Date.now() - t);
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
      const started = Date.now();
      const tested = await processApi(proc, key, 'POST', '/database/test').catch((err: unknown) => ({ status: 0, body: String(err) }));
      const took = Date.now() - started;
      probing = false;
      await probes;
      const grewMb = proc.child.exitCode === null && proc.child.signalCode === null ? (kb('VmHWM') - before) / 1024 : Number.POSITIVE_INFINITY;
      // With the table read row by row: 8.6 s of stalled /healthz and +640 MB in the report.
      expect({ grewMb: grewMb < 50, took: took < 5_000, slowestHealthz: slowest < 1_000, unanswered }).toEqual({
        grewMb: true,
        took: true,
        slowestHealthz: true,
        unanswered: 0,
      });
      expect(tested.status, JSON.stringify(tested.body)).toBe(200);
      expect(tested.body.schemaVersion).toBe(CUSTOMER_SCHEMA_VERSION);
    } finally {
      proc.child.kill('SIGTERM');
      await proc.exited;
    }
  }, 120_000);
});

describe('a trigger raising a 2 MB message', () => {
  it('on service.emails (not a data error: the database counts as failing): lastError and every log line keep at most 1,000 characters of it', async () => {
    const s = await newSender(rig.service, { name: 'LoudEmails' });
    const database = await scratch.fresh();
    expect((await connect(s, database.url)).status).toBe(200);
    await scratch.query(database.name, `${raising('loud', 'P0001')} create trigger loud before insert on service.emails for each row execute function loud();`);
    writer = createCustomerDbWriter(rig.service.deps);
    await send(s);
    await writer.runOnce();
    const now = await status(s);
    expect(now.state).toBe('unreachable');
    expect(now.lastError.length).toBeLessThanOrEqual(MAX_ERROR_TEXT);
    // Cut, and still saying which error it was.
    expect(now.lastError).toMatch(/^~+… \(P0001\)$/);
    expect(rig.service.logger.entries.filter((e) => e.event === 'customer_db.unreachable')).toHaveLength(1);
    const lines = logLines();
    expect(Math.max(...lines.map(fills))).toBeGreaterThan(100);
    expect(lines.filter((l) => fills(l) > MAX_ERROR_TEXT)).toEqual([]);
  });

  it('on service.events and service.inbound (data errors): each write’s error, the set-aside lastError and every log line keep at most 1,000 characters', async () => {
    const s = await newSender(rig.service, { name: 'LoudEvents' });
    const database = await scratch.fresh();
    expect((await connect(s, database.url)).status).toBe(200);
    await scratch.query(
      database.name,
      `${raising('loud', '22023')}
       create trigger loud before insert on service.events for each row execute function loud();
       create trigger loud before insert on service.inbound for each row execute function loud();`,
    );
    writer = createCustomerDbWriter(rig.service.deps);
    const emailId = await send(s);
    await queueEvent(s, emailId);
    await queueInbound(s);
    // Tried, then tried again after each gap, then set aside.
    for (const gap of [0, 30_000, 120_000]) {
      rig.service.clock.advance(gap);
      await writer.runOnce();
    }
    const kept = await rig.service.deps.db.select().from(customerDbWrites);
    expect(kept.map((w) => w.kind).sort()).toEqual(['event', 'inbound']);
    for (const w of kept) {
      expect(w.setAsideAt).not.toBeNull();
      expect(w.lastError!.length).toBeLessThanOrEqual(MAX_ERROR_TEXT);
      expect(w.lastError).toMatch(/^~+…$/);
    }
    const now = await status(s);
    expect(now.lastError).toMatch(/^A queued (event|inbound) write was set aside after the database refused it: ~+…$/);
    expect(now.lastError.length).toBeLessThanOrEqual(MAX_ERROR_TEXT);
    const refusals = rig.service.logger.entries.filter((e) => e.event === 'customer_db.write_refused' || e.event === 'customer_db.write_set_aside');
    expect(refusals).toHaveLength(6);
    const lines = logLines();
    expect(lines.filter((l) => fills(l) > MAX_ERROR_TEXT)).toEqual([]);
  });

  it('on service.schema_migrations: POST /database answers, and POST /database/test stores, at most 1,000 characters of it', async () => {
    const s = await newSender(rig.service, { name: 'LoudSchema' });
    const fresh = await scratch.fresh();
    await scratch.query(
      fresh.name,
      `create schema service;
       create table service.schema_migrations (version integer primary key, name text not null, applied_at timestamptz not null default now());
       ${raising('loud', 'P0001')}
       create trigger loud before insert on service.schema_migrations for each row execute function loud();`,
    );
    const refused = await connect(s, fresh.url);
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe('database_unreachable');
    expect(refused.body.error.message).toMatch(/^The database could not be used: creating the schema failed: ~+…\.$/);
    expect(fills(refused.body.error.message)).toBeLessThanOrEqual(MAX_ERROR_TEXT);

    // Connected once while the schema could be made, then the migrations' record emptied under the same trigger.
    const database = await scratch.fresh();
    expect((await connect(s, database.url)).status).toBe(200);
    await scratch.query(
      database.name,
      `delete from service.schema_migrations; ${raising('loud', 'P0001')} create trigger loud before insert on service.schema_migrations for each row execute function loud();`,
    );
    const tested = await rig.service.api('POST', '/database/test', { key: s.key });
    expect(tested.status).toBe(422);
    const now = await status(s);
    expect(now).toMatchObject({ state: 'unreachable', lastError: expect.stringMatching(/^creating the schema failed: ~+…$/) });
    expect(now.lastError.length).toBeLessThanOrEqual(MAX_ERROR_TEXT);
    expect(logLines().filter((l) => fills(l) > MAX_ERROR_TEXT)).toEqual([]);
  });
});

describe('a statement the customer makes slow', () => {
  it('is cancelled by the statement_timeout the service sets, which the customer’s database settings do not lift: the writer and POST /database/test both come back', async () => {
    const s = await newSender(rig.service, { name: 'SlowWrites' });
    const slowWrites = await scratch.fresh();
    expect((await connect(s, slowWrites.url)).status).toBe(200);
    await scratch.query(
      slowWrites.name,
      `alter database ${slowWrites.name} set statement_timeout = 0;
       create function slow() returns trigger language plpgsql as $$ begin perform pg_sleep(600); return new; end $$;
       create trigger slow before insert on service.emails for each row execute function slow();`,
    );
    const t = await newSender(rig.service, { name: 'SlowSchema' });
    const slowSchema = await scratch.fresh();
    expect((await connect(t, slowSchema.url)).status).toBe(200);
    await scratch.query(
      slowSchema.name,
      `alter database ${slowSchema.name} set statement_timeout = 0;
       drop table service.schema_migrations;
       create view service.schema_migrations as select 1 as version, 'slow'::text as name, now() as applied_at from pg_sleep(600);`,
    );

    writer = createCustomerDbWriter(rig.service.deps);
    await send(s);
    const started = Date.now();
    const [, tested] = await Promise.all([writer.runOnce(), rig.service.api('POST', '/database/test', { key: t.key })]);
    const took = Date.now() - started;
    // 30 s, the statement_timeout; the client's own query timeout (40 s) answers with another message.
    expect(took).toBeGreaterThanOrEqual(29_000);
    expect(took).toBeLessThan(39_000);
    expect(tested.status).toBe(422);
    expect(tested.body.error.message).toMatch(/creating the schema failed: canceling statement due to statement timeout/);
    expect(await status(s)).toMatchObject({ state: 'unreachable', lastError: 'canceling statement due to statement timeout (57014)', pending: 1 });
  }, 90_000);
});

import { createHash } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { customerDatabases, customerDbWrites, outboundRecipients } from '../db/schema/index.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { pendingWrites, queueCustomerDbWrite } from '../server/core/customer-db-outbox.js';
import { newId } from '../server/shared/ids.js';
import { RECONNECT_GAPS_MS } from '../server/core/customer-db-status.js';
import { type CustomerDbWriter, createCustomerDbWriter } from '../server/customer-db/writer.js';
import { decryptSecret } from '../server/shared/secrets.js';
import { FAST_TIMEOUTS, type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { DAY, type Sender, newSender, newSubSender, receipt } from './helpers/sending.js';
import { NOT_CONNECTED } from './helpers/customer-db.js';
import { one } from '../db/sql.js';

/**
 * The customer-database writer in the service, against a real Postgres with TLS verified through
 * the test CA: every non-sandbox send's content and every outcome reach the customer's `service` schema through the
 * outbox, written in the send's or the outcome's own transaction and sealed; an outage turns the state unreachable
 * and `pending` grows, then everything arrives once and in order; a write refused for its data is set aside after its
 * tries without holding up the rest; writes older than seven days are dropped with a logged count; a server killed
 * under the writer's pool does not take the process down.
 */

let rig: DeliveryRig;
let pgServer: TestPostgres;
let customer: pg.Client | null = null;
let writer: CustomerDbWriter;
const uncaught = vi.fn();

beforeAll(async () => {
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);
  [rig, pgServer] = await Promise.all([startDeliveryRig(), startPostgres({ certificate: 'trusted' })]);
}, 120_000);

afterAll(async () => {
  process.off('uncaughtException', uncaught);
  process.off('unhandledRejection', uncaught);
  await customer?.end().catch(() => undefined);
  await stopDeliveryRig(rig);
  await pgServer?.stop();
});

beforeEach(async () => {
  await rig.service.deps.db.delete(outboundRecipients);
  await rig.service.deps.db.delete(customerDbWrites);
  resetDeliveryRig(rig);
  writer = createCustomerDbWriter(rig.service.deps);
});

afterEach(async () => {
  await writer.stop();
  const calls = uncaught.mock.calls.length;
  uncaught.mockClear();
  expect(calls, 'uncaught exceptions or unhandled rejections').toBe(0);
});

/** A plain superuser-free client on the customer database, to read what the writer wrote. */
async function customerClient(): Promise<pg.Client> {
  if (customer) return customer;
  customer = await pgServer.connect();
  return customer;
}

async function reconnectCustomer(): Promise<pg.Client> {
  await customer?.end().catch(() => undefined);
  customer = null;
  return customerClient();
}

async function connect(key: string, account?: string): Promise<void> {
  const res = await rig.service.api('POST', '/database', { key, body: { url: pgServer.url('localhost') }, ...(account ? { account } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

async function send(key: string, from: string, to: string | string[], extra: Record<string, unknown> = {}, account?: string): Promise<string> {
  const res = await rig.service.api('POST', '/emails', { key, body: receipt(from, to, extra), ...(account ? { account } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

const deliver = () => createDeliveryEngine(rig.service.deps, { timeouts: FAST_TIMEOUTS }).runOnce();

async function emailRow(id: string) {
  return (await (await customerClient()).query('select * from service.emails where id = $1', [id])).rows[0];
}

async function eventsOf(id: string) {
  return (await (await customerClient()).query('select * from service.events where email_id = $1 order by id', [id])).rows;
}

const status = async (key: string, account?: string) => (await rig.service.api('GET', '/database', { key, ...(account ? { account } : {}) })).body;

let sender: Sender;

describe('writing sends and outcomes', () => {
  beforeAll(async () => {
    sender = await newSender(rig.service);
    await connect(sender.key);
  });

  it('a send writes its rendered content, sealed in the outbox until written; its outcome writes an event and delivered_at', async () => {
    const id = await send(sender.key, sender.from, ['ann@example.net', 'bob@example.net'], { tags: { order: 'A-1' } });
    const [queued] = await rig.service.deps.db.select().from(customerDbWrites);
    expect(queued).toMatchObject({ databaseAccountId: sender.account.id, accountId: sender.account.id, kind: 'email' });
    // The content is sealed with the secret key: the outbox row holds none of it in clear.
    expect(queued!.payloadSealed).not.toContain('R-1001');
    expect(JSON.parse(decryptSecret(rig.service.deps.secretKey!, queued!.payloadSealed, `customer-db-write:${queued!.id}`).toString()).text).toContain(
      'R-1001',
    );
    expect((await status(sender.key)).pending).toBe(1);

    await writer.runOnce();
    const row = await emailRow(id);
    expect(row).toMatchObject({
      account_id: sender.account.id,
      from_address: sender.from,
      to_addresses: ['ann@example.net', 'bob@example.net'],
      template: 'receipt',
      tags: { order: 'A-1' },
      status: 'sent',
    });
    expect(row.text).toContain('R-1001');
    expect(row.html).toContain('R-1001');
    expect(row.subject).toEqual(expect.any(String));
    expect(row.delivered_at).toBeNull();
    expect(await rig.service.deps.db.select().from(customerDbWrites)).toEqual([]);

    await deliver();
    expect((await status(sender.key)).pending).toBe(2);
    await writer.runOnce();
    const events = await eventsOf(id);
    expect(events.map((e) => [e.recipient, e.status, e.dsn])).toEqual([
      ['ann@example.net', 'delivered', '2.0.0'],
      ['bob@example.net', 'delivered', '2.0.0'],
    ]);
    expect((await emailRow(id)).delivered_at).not.toBeNull();
    expect(await status(sender.key)).toMatchObject({ state: 'connected', pending: 0, lastError: null });
  });

  it("an own template's send writes its name and version with the rendered content, and each attachment's record, never its bytes", async () => {
    const made = await rig.service.api('POST', '/templates', {
      key: sender.key,
      body: { name: 'invoice', subject: 'Invoice {{ number }}', html: '<p>Invoice {{ number }} attached.</p>', variables: { number: { required: true } } },
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const pdf = Buffer.from('%PDF-1.4 an invoice');
    const res = await rig.service.api('POST', '/emails', {
      key: sender.key,
      body: {
        from: sender.from,
        to: 'ann@example.net',
        template: { name: 'invoice', number: 'INV-7' },
        attachments: [{ filename: 'INV-7.pdf', content: pdf.toString('base64') }],
      },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await writer.runOnce();
    const row = await emailRow(res.body.id as string);
    expect(row).toMatchObject({ template: 'invoice', template_version: 1, subject: 'Invoice INV-7' });
    expect(row.html).toContain('Invoice INV-7 attached.');
    expect(row.attachments).toEqual([
      { filename: 'INV-7.pdf', contentType: 'application/pdf', size: pdf.length, sha256: createHash('sha256').update(pdf).digest('hex'), contentId: null },
    ]);
    expect(JSON.stringify(row)).not.toContain(pdf.toString('base64'));
  });

  it('a bounce writes its event and bounced_at; a sandbox send writes nothing', async () => {
    rig.sink.rcpt = (to) => (to.startsWith('gone') ? { code: 550, message: '5.1.1 No such user' } : 'accept');
    const id = await send(sender.key, sender.from, 'gone@example.net');
    const sandboxed = await send(sender.key, sender.from, 'ann@example.net', { sandbox: true });
    await deliver();
    await writer.runOnce();
    expect((await eventsOf(id)).map((e) => [e.status, e.dsn.slice(0, 1)])).toEqual([['bounced', '5']]);
    expect((await emailRow(id)).bounced_at).not.toBeNull();
    expect(await emailRow(sandboxed)).toBeUndefined();
  });

  it('a sub-account writes to its parent’s database, and to its own once it has one', async () => {
    const sub = await newSubSender(rig.service, sender.key);
    const viaParent = await send(sender.key, sub.from, 'ann@example.net', {}, sub.id);
    expect((await rig.service.deps.db.select().from(customerDbWrites)).map((w) => [w.databaseAccountId, w.accountId])).toEqual([[sender.account.id, sub.id]]);
    expect(await status(sender.key, sub.id)).toMatchObject({ connected: true, host: 'localhost' });
    await writer.runOnce();
    expect((await emailRow(viaParent)).account_id).toBe(sub.id);

    // Its own database (here another database on the same server) takes its writes from now on.
    await pgServer.admin('create database sub_own');
    const res = await rig.service.api('POST', '/database', {
      key: sender.key,
      account: sub.id,
      body: { url: pgServer.url('localhost').replace(/\/customer$/, '/sub_own') },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const own = await send(sender.key, sub.from, 'ann@example.net', {}, sub.id);
    await writer.runOnce();
    expect(await emailRow(own)).toBeUndefined();
    const subClient = await pgServer.connect('sub_own');
    try {
      expect((await subClient.query('select account_id from service.emails where id = $1', [own])).rows).toEqual([{ account_id: sub.id }]);
    } finally {
      await subClient.end();
    }
  });

  it('an account with no database (nor a parent with one) queues nothing', async () => {
    const other = await newSender(rig.service, { name: 'No database' });
    await send(other.key, other.from, 'ann@example.net');
    await deliver();
    expect(await rig.service.deps.db.select().from(customerDbWrites)).toEqual([]);
    expect(await status(other.key)).toEqual(NOT_CONNECTED);
  });
});

describe('outage and recovery', () => {
  beforeAll(async () => {
    sender = await newSender(rig.service, { name: 'Outage' });
    await connect(sender.key);
  });

  it('while the database is down writes wait and the state is unreachable; once it is back every row arrives once, in order', async () => {
    // The writer has a pool open on the database when it goes away.
    await send(sender.key, sender.from, 'warmup@example.net');
    await deliver();
    await writer.runOnce();
    await pgServer.kill();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await send(sender.key, sender.from, [`r${i}@example.net`, `s${i}@example.net`]));
    await deliver();
    await writer.runOnce();
    let s = await status(sender.key);
    expect(s).toMatchObject({ state: 'unreachable', pending: 15 });
    expect(s.lastError).toMatch(/^could not connect|connection/i);
    const failedAt = rig.service.clock.now();
    // Growing gaps: not tried again before the first gap has passed.
    const row = async () => (await one(rig.service.deps.db.select().from(customerDatabases).where(eq(customerDatabases.accountId, sender.account.id))))!;
    expect((await row()).nextAttemptAt).toBe(failedAt + RECONNECT_GAPS_MS[0]!);
    rig.service.clock.advance(RECONNECT_GAPS_MS[0]!);
    await writer.runOnce();
    expect(await row()).toMatchObject({ failures: 2, nextAttemptAt: rig.service.clock.now() + RECONNECT_GAPS_MS[1]! });
    expect(rig.service.logger.entries.filter((e) => e.event === 'customer_db.unreachable' && e.accountId === sender.account.id)).toHaveLength(1);

    await pgServer.restart();
    await reconnectCustomer();
    await writer.runOnce();
    expect((await status(sender.key)).state).toBe('unreachable'); // the gap has not passed yet
    rig.service.clock.advance(RECONNECT_GAPS_MS[1]!);
    await writer.runOnce();
    s = await status(sender.key);
    expect(s).toMatchObject({ state: 'connected', pending: 0, lastError: null });
    const c = await customerClient();
    const emails = (await c.query('select id from service.emails where id = any($1) order by id', [ids])).rows.map((r) => r.id);
    expect(emails).toEqual(ids);
    const events = (await c.query('select email_id, count(*)::int as n from service.events where email_id = any($1) group by email_id', [ids])).rows;
    expect(events).toHaveLength(5);
    expect(events.every((e) => e.n === 2)).toBe(true);
  });

  it('writes that waited seven days are dropped with a logged count', async () => {
    await pgServer.kill();
    try {
      await send(sender.key, sender.from, 'late@example.net');
      await deliver();
      await writer.runOnce();
      expect((await status(sender.key)).pending).toBe(2);
      rig.service.clock.advance(7 * DAY - 60_000);
      await writer.runOnce();
      expect((await status(sender.key)).pending).toBe(2);
      rig.service.clock.advance(60_000);
      await writer.runOnce();
      const s = await status(sender.key);
      expect(s.pending).toBe(0);
      expect(s.lastError).toMatch(/2 queued writes were dropped after waiting seven days/);
      expect(rig.service.logger.entries.filter((e) => e.event === 'customer_db.writes_dropped')).toContainEqual(
        expect.objectContaining({ accountId: sender.account.id, count: 2 }),
      );
    } finally {
      await pgServer.restart();
      await reconnectCustomer();
    }
  });
});

describe('a write refused for its data', () => {
  beforeAll(async () => {
    sender = await newSender(rig.service, { name: 'Poison' });
    await connect(sender.key);
    await (await customerClient()).query(`alter table service.emails add constraint no_poison check (text not like '%POISON%')`);
  });

  afterAll(async () => {
    await (await customerClient()).query('alter table service.emails drop constraint no_poison');
  });

  it('is tried a few times and set aside with its error in lastError, while the writes behind it arrive', async () => {
    const poison = await send(sender.key, sender.from, 'ann@example.net', {
      template: { name: 'receipt', receiptNumber: 'POISON-1', paidOn: '2026-03-10', paymentMethod: 'Visa', total: '$1' },
    });
    const after = await send(sender.key, sender.from, 'bob@example.net');
    await writer.runOnce();
    expect(await emailRow(poison)).toBeUndefined();
    expect(await emailRow(after)).toBeDefined();
    expect((await status(sender.key)).pending).toBe(1);
    await deliver();
    // Tried again after each gap; the events of both sends go through meanwhile.
    rig.service.clock.advance(30_000);
    await writer.runOnce();
    expect((await eventsOf(poison)).map((e) => e.recipient)).toEqual(['ann@example.net']);
    expect((await status(sender.key)).pending).toBe(1);
    rig.service.clock.advance(120_000);
    await writer.runOnce();
    const s = await status(sender.key);
    expect(s).toMatchObject({ state: 'connected', pending: 0 });
    expect(s.lastError).toMatch(/set aside.*no_poison/);
    const [kept] = await rig.service.deps.db.select().from(customerDbWrites);
    expect(kept).toMatchObject({ kind: 'email', attempts: 3, setAsideAt: expect.any(Number), lastError: expect.stringMatching(/no_poison/) });
    expect(await pendingWrites(rig.service.deps.db, sender.account.id)).toBe(0);
    // Later writes still flow.
    const later = await send(sender.key, sender.from, 'cy@example.net');
    await writer.runOnce();
    expect(await emailRow(later)).toBeDefined();
  });
});

describe('a parse thread that dies with a batch of received messages', () => {
  beforeAll(async () => {
    sender = await newSender(rig.service, { name: 'Crash' });
    await connect(sender.key);
  });

  it('leaves the messages queued to be tried again after the gap (never set aside at once); the writes behind them land', async () => {
    await writer.stop();
    writer = createCustomerDbWriter(rig.service.deps, { parserWorkerUrl: new URL('./fixtures/workers/crashing-parser.mjs', import.meta.url) });
    const now = rig.service.clock.now();
    const inboundId = newId(now);
    const raw = Buffer.from('From: ann@example.net\r\nSubject: Where is order 7?\r\n\r\nHello\r\n');
    await rig.service.deps.db.transaction(async () =>
      queueCustomerDbWrite(
        rig.service.deps,
        sender.account.id,
        {
          kind: 'inbound',
          id: inboundId,
          spoolId: null,
          raw,
          accountId: sender.account.id,
          toAddresses: [`support@${sender.domain}`],
          mailFrom: 'ann@example.net',
          remoteAddress: '127.0.0.1',
          helo: 'client.example',
          receivedAt: now,
          size: raw.length,
        },
        now,
      ),
    );
    const after = await send(sender.key, sender.from, 'bob@example.net');
    await writer.runOnce();
    expect(await emailRow(after)).toBeDefined();
    const [waiting] = await rig.service.deps.db.select().from(customerDbWrites);
    expect(waiting).toMatchObject({ kind: 'inbound', attempts: 1, setAsideAt: null, lastError: expect.stringMatching(/inbound parser stopped/) });
    expect((await status(sender.key)).pending).toBe(1);

    // A parse thread that works, once the gap has passed: the message lands.
    await writer.stop();
    writer = createCustomerDbWriter(rig.service.deps);
    rig.service.clock.advance(30_000);
    await writer.runOnce();
    const { rows } = await (await customerClient()).query('select subject from service.inbound where id = $1', [inboundId]);
    expect(rows).toEqual([{ subject: 'Where is order 7?' }]);
    expect((await status(sender.key)).pending).toBe(0);
  });
});

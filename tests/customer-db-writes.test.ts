import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenCustomerDb } from '../db/customer/connect.js';
import { migrateCustomerDb } from '../db/customer/schema.js';
import { type EmailWrite, type EventWrite, type InboundWrite, applyWrites, isDataError, writeInbound } from '../db/customer/writes.js';
import { newId } from '../server/shared/ids.js';
import { createMemoryLogger } from '../server/shared/logger.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';

/**
 * The writes to a customer's `service` schema against a real Postgres: batches applied in
 * one transaction with idempotent statements (applied twice, nothing duplicates; events in any order, the email's
 * timestamps are the earliest and never move back), a write refused for its data isolated from the rest of its
 * batch, and the inbound helper's message, attachments and notification.
 */

let server: TestPostgres;
let client: pg.Client;

beforeAll(async () => {
  server = await startPostgres({ certificate: 'self-signed' });
  client = new pg.Client({
    host: '127.0.0.1',
    port: server.port,
    user: server.user,
    password: server.password,
    database: server.database,
    ssl: { rejectUnauthorized: false },
  });
  await client.connect();
  await migrateCustomerDb(client);
}, 120_000);

afterAll(async () => {
  await client?.end();
  await server?.stop();
});

const ACCOUNT = newId(Date.now());
const T0 = Date.parse('2026-11-22T10:00:00.000Z');

function email(over: Partial<EmailWrite> = {}): EmailWrite {
  return {
    kind: 'email',
    id: newId(T0),
    accountId: ACCOUNT,
    fromAddress: 'shop@example.com',
    to: ['a@example.net', 'b@example.net'],
    subject: 'Your receipt',
    html: '<p>Thanks</p>',
    text: 'Thanks',
    template: 'receipt',
    tags: { order: '42' },
    status: 'sent',
    createdAt: T0,
    ...over,
  };
}

function event(emailId: string, status: EventWrite['status'], at: number, recipient = 'a@example.net'): EventWrite {
  return { kind: 'event', id: newId(at), emailId, recipient, status, dsn: status === 'delivered' ? '2.0.0' : '5.1.1', detail: '250 ok', occurredAt: at };
}

const emailRow = async (id: string) => (await client.query('select * from service.emails where id = $1', [id])).rows[0];
const eventCount = async (emailId: string) => Number((await client.query('select count(*) as n from service.events where email_id = $1', [emailId])).rows[0].n);

describe('applyWrites', () => {
  it('writes an email with its rendered content and its events, and keeps the email timestamps current', async () => {
    const e = email();
    const delivered = event(e.id, 'delivered', T0 + 1000);
    const bounced = event(e.id, 'bounced', T0 + 2000, 'b@example.net');
    expect(await applyWrites(client, [e, delivered, bounced])).toEqual([]);
    const row = await emailRow(e.id);
    expect(row).toMatchObject({
      account_id: ACCOUNT,
      from_address: 'shop@example.com',
      to_addresses: ['a@example.net', 'b@example.net'],
      subject: 'Your receipt',
    });
    expect(row).toMatchObject({ html: '<p>Thanks</p>', text: 'Thanks', template: 'receipt', tags: { order: '42' }, status: 'sent', complained_at: null });
    expect(row.created_at.toISOString()).toBe(new Date(T0).toISOString());
    expect(row.delivered_at.toISOString()).toBe(new Date(T0 + 1000).toISOString());
    expect(row.bounced_at.toISOString()).toBe(new Date(T0 + 2000).toISOString());
    const events = (await client.query('select * from service.events where email_id = $1 order by occurred_at', [e.id])).rows;
    expect(events.map((r) => [r.recipient, r.status, r.dsn, r.detail])).toEqual([
      ['a@example.net', 'delivered', '2.0.0', '250 ok'],
      ['b@example.net', 'bounced', '5.1.1', '250 ok'],
    ]);
  });

  it('applied again, and with events in another order, nothing duplicates and no timestamp moves back', async () => {
    const e = email();
    const first = event(e.id, 'delivered', T0 + 1000);
    const later = event(e.id, 'delivered', T0 + 5000, 'b@example.net');
    await applyWrites(client, [e, later]);
    expect((await emailRow(e.id)).delivered_at.toISOString()).toBe(new Date(T0 + 5000).toISOString());
    // The earlier outcome arrives after the later one (a retried write): the timestamp becomes the earliest.
    await applyWrites(client, [first]);
    expect((await emailRow(e.id)).delivered_at.toISOString()).toBe(new Date(T0 + 1000).toISOString());
    // Everything once more: same rows, same timestamp.
    await applyWrites(client, [e, later, first]);
    await applyWrites(client, [later]);
    expect(await eventCount(e.id)).toBe(2);
    expect((await emailRow(e.id)).delivered_at.toISOString()).toBe(new Date(T0 + 1000).toISOString());
    expect(Number((await client.query('select count(*) as n from service.emails where id = $1', [e.id])).rows[0].n)).toBe(1);
  });

  it('an email that lands after its events (refused once, written on a retry) takes their timestamps', async () => {
    const e = email();
    await applyWrites(client, [
      event(e.id, 'delivered', T0 + 3000),
      event(e.id, 'delivered', T0 + 1000, 'b@example.net'),
      event(e.id, 'complained', T0 + 9000),
    ]);
    expect(await emailRow(e.id)).toBeUndefined();
    await applyWrites(client, [e]);
    const row = await emailRow(e.id);
    expect(row.delivered_at.toISOString()).toBe(new Date(T0 + 1000).toISOString());
    expect(row.complained_at.toISOString()).toBe(new Date(T0 + 9000).toISOString());
    expect(row.bounced_at).toBeNull();
  });

  it('a deferral keeps no timestamp; a complaint sets complained_at', async () => {
    const e = email();
    await applyWrites(client, [e, event(e.id, 'deferred', T0 + 10), event(e.id, 'complained', T0 + 20)]);
    const row = await emailRow(e.id);
    expect(row.delivered_at).toBeNull();
    expect(row.bounced_at).toBeNull();
    expect(row.complained_at.toISOString()).toBe(new Date(T0 + 20).toISOString());
  });

  it('a write refused for its data is isolated: the writes around it land in the same commit', async () => {
    await client.query(`alter table service.emails add constraint no_poison check (subject <> 'poison')`);
    try {
      const before = email({ subject: 'before' });
      const poison = email({ subject: 'poison' });
      const after = email({ subject: 'after' });
      const afterEvent = event(after.id, 'delivered', T0 + 1);
      const refused = await applyWrites(client, [before, poison, after, afterEvent]);
      expect(refused.map((r) => r.index)).toEqual([1]);
      expect(refused.every((r) => isDataError(r.error))).toBe(true);
      expect(refused[0]!.error.message).toMatch(/no_poison/);
      expect(await emailRow(before.id)).toBeDefined();
      expect(await emailRow(poison.id)).toBeUndefined();
      expect((await emailRow(after.id)).delivered_at).not.toBeNull();
    } finally {
      await client.query('alter table service.emails drop constraint no_poison');
    }
  });

  it('a NUL or an unpaired surrogate, which jsonb cannot hold, lands as U+FFFD instead of getting its write refused', async () => {
    const e = email({ subject: 'has a NUL \u0000 byte', text: 'half a pair \ud83e', tags: { k: 'v\udc00' } });
    const ev = { ...event(e.id, 'bounced', T0 + 1), detail: '550 \u0000 no' };
    expect(await applyWrites(client, [e, ev])).toEqual([]);
    expect(await emailRow(e.id)).toMatchObject({ subject: 'has a NUL \ufffd byte', text: 'half a pair \ufffd', tags: { k: 'v\ufffd' } });
    expect((await client.query('select detail from service.events where email_id = $1', [e.id])).rows).toEqual([{ detail: '550 \ufffd no' }]);
  });

  it('an error that is not about the data rejects the whole batch and commits nothing', async () => {
    const e = email();
    await client.query('alter table service.events rename to events_moved');
    try {
      const err = await applyWrites(client, [e, event(e.id, 'delivered', T0)]).catch((x: unknown) => x);
      expect(err).toBeInstanceOf(Error);
      expect(isDataError(err)).toBe(false);
      expect(await emailRow(e.id)).toBeUndefined();
    } finally {
      await client.query('alter table service.events_moved rename to events');
    }
    // The connection is usable again (the failed transaction was rolled back).
    expect(await applyWrites(client, [e])).toEqual([]);
  });
});

describe('writeInbound', () => {
  it('writes the message and its attachments, and announces its id on channel service after the commit, once', async () => {
    const logger = createMemoryLogger();
    const seen: string[] = [];
    const listener = await listenCustomerDb(
      { host: '127.0.0.1', port: server.port, user: server.user, password: server.password, database: server.database, ssl: { rejectUnauthorized: false } },
      'service',
      (n) => seen.push(n.payload ?? ''),
      logger,
    );
    try {
      const bytes = Buffer.from([0, 1, 2, 250, 255]);
      const message: InboundWrite = {
        kind: 'inbound',
        id: newId(Date.now()),
        accountId: ACCOUNT,
        fromAddress: 'someone@example.org',
        toAddresses: ['support@example.com'],
        subject: 'Help',
        headers: { subject: 'Help', 'x-spam': ['no'] },
        text: 'Hello',
        html: null,
        messageId: '<abc@example.org>',
        size: 1234,
        spf: 'pass',
        dkim: 'none',
        dmarc: 'fail',
        receivedAt: T0,
        attachments: [
          { id: newId(Date.now()), filename: 'a.bin', contentType: 'application/octet-stream', contentBase64: bytes.toString('base64'), size: bytes.length },
        ],
      };
      await writeInbound(client, message);
      await writeInbound(client, message);
      const row = (await client.query('select * from service.inbound where id = $1', [message.id])).rows[0];
      expect(row).toMatchObject({
        from_address: 'someone@example.org',
        to_addresses: ['support@example.com'],
        subject: 'Help',
        headers: { subject: 'Help', 'x-spam': ['no'] },
      });
      expect(row).toMatchObject({ text: 'Hello', html: null, message_id: '<abc@example.org>', size: 1234, spf: 'pass', dkim: 'none', dmarc: 'fail' });
      const files = (await client.query('select * from service.attachments where inbound_id = $1', [message.id])).rows;
      expect(files).toHaveLength(1);
      expect(Buffer.compare(files[0].content, bytes)).toBe(0);
      expect(files[0]).toMatchObject({ filename: 'a.bin', content_type: 'application/octet-stream', size: 5 });
      await expect.poll(() => seen, { timeout: 5000 }).toEqual([message.id]);
      // The second write added nothing and announced nothing.
      await new Promise((r) => setTimeout(r, 200));
      expect(seen).toEqual([message.id]);
    } finally {
      await listener.close();
    }
  });

  it('a message refused by the database is not announced', async () => {
    const seen: string[] = [];
    const listener = await listenCustomerDb(
      { host: '127.0.0.1', port: server.port, user: server.user, password: server.password, database: server.database, ssl: { rejectUnauthorized: false } },
      'service',
      (n) => seen.push(n.payload ?? ''),
      createMemoryLogger(),
    );
    try {
      const bad: InboundWrite = {
        kind: 'inbound',
        id: newId(Date.now()),
        accountId: ACCOUNT,
        fromAddress: 'x@example.org',
        toAddresses: ['support@example.com'],
        subject: 'poison',
        headers: {},
        text: null,
        html: null,
        messageId: null,
        size: 1,
        spf: null,
        dkim: null,
        dmarc: null,
        receivedAt: T0,
        attachments: [],
      };
      await client.query(`alter table service.inbound add constraint no_poison check (subject <> 'poison')`);
      try {
        await expect(writeInbound(client, bad)).rejects.toThrow(/no_poison/);
      } finally {
        await client.query('alter table service.inbound drop constraint no_poison');
      }
      await new Promise((r) => setTimeout(r, 200));
      expect(seen).toEqual([]);
    } finally {
      await listener.close();
    }
  });
});

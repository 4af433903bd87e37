import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import nodemailer from 'nodemailer';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SPOOL_CHUNK, openSpool } from '../db/inbound-spool.js';
import { customerDbWrites } from '../db/schema/index.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { queueCustomerDbWrite } from '../server/core/customer-db-outbox.js';
import { createHousekeeping } from '../server/customer-db/housekeeping.js';
import { createCustomerDbWriter } from '../server/customer-db/writer.js';
import { newId } from '../server/shared/ids.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { PG_TEST_CA_FILE, type TestPostgres, startPostgres } from './helpers/postgres.js';
import { ROOT } from './helpers/service-process.js';
import { type Sender, newSender } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';

/**
 * The inbound spool on Postgres (db/inbound-spool-rows.ts), on either run: two nodes (two services over one
 * STATE_URL, each with a DATA_DIR of its own). A large message received by one leaves nothing in its DATA_DIR, its
 * records sealed in `inbound_spool_records`; the other's writer parses it from there into the customer's database,
 * and the rows go. Records altered, reordered or cut short are refused, as a file's are; orphans are swept.
 */

const KEY = 'ab'.repeat(32);
const MAX_BYTES = 2_000_000;
const PAIR = { SMTP_TLS_CERT: join(ROOT, 'tests/fixtures/webhook-tls/server.pem'), SMTP_TLS_KEY: join(ROOT, 'tests/fixtures/webhook-tls/server.key') };

let dns: TestDnsServer;
let pgServer: TestPostgres;
/** The node that receives, and the node whose writer writes. */
let receiving: TestService;
let writing: TestService;
let inbound: InboundServer;
let port: number;
let sender: Sender;
let state: pg.Client;
let customer: pg.Client;

beforeAll(async () => {
  [dns, pgServer] = await Promise.all([TestDnsServer.start(), startPostgres({ certificate: 'trusted' })]);
  await pgServer.admin('create database spool_state');
  const env = {
    STATE_URL: `postgresql://${pgServer.user}:${pgServer.password}@localhost:${pgServer.port}/spool_state?sslmode=verify-full&sslrootcert=${encodeURIComponent(PG_TEST_CA_FILE)}`,
    SECRET_KEY: KEY,
    DNS_SERVERS: dns.address,
    ALLOW_PRIVATE_TARGETS: 'true',
    SMTP_MAX_MESSAGE_BYTES: String(MAX_BYTES),
    ...PAIR,
  };
  receiving = await startService(env);
  writing = await startService(env);
  inbound = inboundServerFor(receiving.deps, loadOrCreateSmtpTls(receiving.deps.config));
  port = await inbound.listen('127.0.0.1', 0);
  sender = await newSender(receiving);
  const connected = await receiving.api('POST', '/database', { key: sender.key, body: { url: pgServer.url('localhost') } });
  expect(connected.status, JSON.stringify(connected.body)).toBe(200);
  state = await pgServer.connect('spool_state');
  customer = await pgServer.connect();
}, 120_000);

afterAll(async () => {
  await state?.end().catch(() => undefined);
  await customer?.end().catch(() => undefined);
  await inbound?.close();
  await receiving?.close();
  await writing?.close();
  await dns?.stop();
  await pgServer?.stop();
});

afterEach(async () => {
  await receiving.deps.db.delete(customerDbWrites);
  await state.query('delete from inbound_spool_records');
});

const records = async (id?: string) =>
  (
    await state.query<{ spool_id: string; seq: string; record: Buffer }>(
      `select spool_id, seq, record from inbound_spool_records ${id ? 'where spool_id = $1' : ''} order by spool_id, seq`,
      id ? [id] : [],
    )
  ).rows.map((r) => ({ spoolId: r.spool_id, seq: Number(r.seq), record: r.record }));

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** A message spooled by the receiving node under a new id, its bytes. */
async function spool(message: Buffer): Promise<string> {
  const id = newId(receiving.clock.now());
  const writer = receiving.deps.inboundSpool.create(receiving.deps.secretKey!, id);
  await writer.append(message);
  await writer.finish();
  return id;
}

describe('a large received message on Postgres', () => {
  it('is sealed into inbound_spool_records, nothing in DATA_DIR, and written by another node, which removes its rows', async () => {
    expect(receiving.deps.inboundSpool.kind).toBe('rows');
    const marker = `spooled-${randomBytes(6).toString('hex')}`;
    const attachment = Buffer.from(`${marker} `.repeat(Math.ceil((700 * 1024) / (marker.length + 1))));
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, tls: { rejectUnauthorized: false } });
    const info = await transport.sendMail({
      from: 'ann@customer.example.org',
      to: `support@${sender.domain}`,
      subject: marker,
      text: `${marker}\r\n`,
      attachments: [{ filename: 'big.txt', content: attachment, contentType: 'text/plain' }],
    });
    expect(info.response).toMatch(/^250 /);

    // Durable before the 250: the write names its spool, whose records are rows, in order, sealed.
    const [queued] = await receiving.deps.db.select().from(customerDbWrites).where(eq(customerDbWrites.kind, 'inbound'));
    expect(queued?.spoolId).toEqual(expect.any(String));
    const rows = await records();
    expect(new Set(rows.map((r) => r.spoolId))).toEqual(new Set([queued!.spoolId]));
    expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i));
    expect(rows.length).toBeGreaterThan(Math.floor((700 * 1024) / SPOOL_CHUNK));
    for (const r of rows) expect(r.record.includes(marker)).toBe(false);
    // Nothing of it in the receiving node's DATA_DIR (nor in the other's).
    expect(readdirSync(receiving.dataDir)).toEqual([]);
    expect(existsSync(join(writing.dataDir, 'spool'))).toBe(false);

    const writer = createCustomerDbWriter(writing.deps);
    try {
      await writer.runOnce();
    } finally {
      await writer.stop();
    }
    const [row] = (await customer.query('select id, subject from service.inbound where subject = $1', [marker])).rows;
    expect(row).toBeDefined();
    const files = (await customer.query('select filename, content from service.attachments where inbound_id = $1', [row.id])).rows;
    expect(files.map((f) => f.filename)).toEqual(['big.txt']);
    expect(Buffer.compare(files[0].content, attachment)).toBe(0);
    expect(await receiving.deps.db.select().from(customerDbWrites)).toEqual([]);
    expect(await records()).toEqual([]);
    expect(existsSync(join(writing.dataDir, 'spool'))).toBe(false);
  });

  it('a message refused after it went to the spool (past SMTP_MAX_MESSAGE_BYTES) leaves no rows', async () => {
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, tls: { rejectUnauthorized: false } });
    const big = { from: 'ann@customer.example.org', to: `support@${sender.domain}`, subject: 'too big', text: 'x'.repeat(MAX_BYTES + SPOOL_CHUNK) };
    await expect(transport.sendMail(big)).rejects.toThrow(/552/);
    expect(await records()).toEqual([]);
    expect(await receiving.deps.db.select().from(customerDbWrites)).toEqual([]);
  });
});

describe('records read back by another node', () => {
  const message = randomBytes(SPOOL_CHUNK * 3 + 500);
  const open = (id: string) => readAll(openSpool(writing.deps.inboundSpool.sealed(id), receiving.deps.secretKey!, id));

  it('give back the message, a page of records at a time', async () => {
    const id = await spool(message);
    expect((await records(id)).length).toBe(5);
    expect((await open(id)).equals(message)).toBe(true);
  });

  it.each([
    [
      'a byte of a record altered',
      async (id: string) =>
        state.query(`update inbound_spool_records set record = overlay(record placing '\\xff'::bytea from 100 for 1) where spool_id = $1 and seq = 1`, [id]),
    ],
    [
      'two records swapped',
      async (id: string) => {
        await state.query('update inbound_spool_records set seq = -1 where spool_id = $1 and seq = 1', [id]);
        await state.query('update inbound_spool_records set seq = 1 where spool_id = $1 and seq = 2', [id]);
        await state.query('update inbound_spool_records set seq = 2 where spool_id = $1 and seq = -1', [id]);
      },
    ],
    ['the end record gone', async (id: string) => state.query('delete from inbound_spool_records where spool_id = $1 and seq = 4', [id])],
    ['a middle record gone', async (id: string) => state.query('delete from inbound_spool_records where spool_id = $1 and seq = 2', [id])],
    ['no record at all', async (id: string) => state.query('delete from inbound_spool_records where spool_id = $1', [id])],
  ])('%s: refused', async (_name, tamper) => {
    const id = await spool(message);
    await tamper(id);
    await expect(open(id)).rejects.toThrow(/unable to authenticate|unsupported state|cut short/i);
  });

  it("another message's records: refused (the id is in each record's associated data)", async () => {
    const id = await spool(message);
    const other = await spool(message);
    await state.query('delete from inbound_spool_records where spool_id = $1', [other]);
    await state.query('update inbound_spool_records set spool_id = $2 where spool_id = $1', [id, other]);
    await expect(open(other)).rejects.toThrow(/unable to authenticate|unsupported state/i);
  });
});

describe('the housekeeping sweep', () => {
  it('removes a message untouched for 15 minutes that no queued write reads; keeps a newer one and a queued one', async () => {
    await spool(randomBytes(100)); // the orphan
    const queued = await spool(randomBytes(100));
    const now = receiving.clock.now();
    await receiving.deps.db.transaction(async () => {
      await queueCustomerDbWrite(
        receiving.deps,
        sender.account.id,
        {
          kind: 'inbound',
          id: newId(now),
          spoolId: queued,
          accountId: sender.account.id,
          toAddresses: [`support@${sender.domain}`],
          mailFrom: 'ann@example.net',
          remoteAddress: '127.0.0.1',
          helo: 'client.example',
          receivedAt: now,
          size: 100,
        },
        now,
      );
    });
    receiving.clock.advance(15 * 60_000 + 1);
    const recent = await spool(randomBytes(100));
    const removed = await receiving.deps.inboundSpool.sweep(15 * 60_000);
    expect(removed).toBe(1);
    expect(new Set((await records()).map((r) => r.spoolId))).toEqual(new Set([queued, recent]));
    // The housekeeping of the writer runs the same sweep.
    receiving.clock.advance(15 * 60_000 + 1);
    await createHousekeeping(receiving.deps).sweep();
    expect(new Set((await records()).map((r) => r.spoolId))).toEqual(new Set([queued]));
  });
});

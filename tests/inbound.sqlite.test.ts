import { existsSync, readdirSync } from 'node:fs';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { customerDbWrites } from '../db/schema/index.js';
import { type GroupCommit, createGroupCommit } from '../db/group-commit.js';
import { INLINE_BYTES } from '../mta/inbound/receive.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { spoolDir } from '../db/inbound-spool.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { type CustomerDbWriter, createCustomerDbWriter } from '../server/customer-db/writer.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { type Sender, newSender } from './helpers/sending.js';
import { sqliteStoreOf, type TestService, startService } from './helpers/service.js';

/**
 * The inbound test of inbound.test.ts where SQLite's group commit decides the answer: a commit whose flush of the
 * WAL failed. SQLite's own machinery, so `npm test` only (tests/vitest.postgres.config.ts).
 */

const MAX_BYTES = 200_000;

let dns: TestDnsServer;
let pgServer: TestPostgres;
let service: TestService;
let inbound: InboundServer;
let writer: CustomerDbWriter;
let customer: pg.Client;
let sender: Sender;
const uncaught = vi.fn();

beforeAll(async () => {
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);
  [dns, pgServer] = await Promise.all([TestDnsServer.start(), startPostgres({ certificate: 'trusted' })]);
  service = await startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true', SMTP_MAX_MESSAGE_BYTES: String(MAX_BYTES) });
  inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
  await inbound.listen('127.0.0.1', 0);
  sender = await newSender(service);
  const connected = await service.api('POST', '/database', { key: sender.key, body: { url: pgServer.url('localhost') } });
  expect(connected.status, JSON.stringify(connected.body)).toBe(200);
  customer = await pgServer.connect();
}, 120_000);

afterAll(async () => {
  process.off('uncaughtException', uncaught);
  process.off('unhandledRejection', uncaught);
  await customer?.end().catch(() => undefined);
  await inbound?.close();
  await service?.close();
  await dns?.stop();
  await pgServer?.stop();
});

beforeEach(async () => {
  await service.deps.db.delete(customerDbWrites);
  writer = createCustomerDbWriter(service.deps);
});

afterEach(async () => {
  await writer.stop();
  const calls = uncaught.mock.calls.length;
  uncaught.mockClear();
  expect(calls, 'uncaught exceptions or unhandled rejections').toBe(0);
});

const spoolFiles = () => (existsSync(spoolDir(service.dataDir)) ? readdirSync(spoolDir(service.dataDir)) : []);

describe('a failure to store answers 451, never 250', () => {
  /** A second server on the same service, its messages up to 1 MB (so one can go to the spool), committing through `commits`. */
  async function serverCommittingThrough(commits: GroupCommit) {
    const deps = { ...service.deps, commits, config: { ...service.deps.config, smtpMaxMessageBytes: 1_000_000 } };
    const server = inboundServerFor(deps, loadOrCreateSmtpTls(service.deps.config));
    return { server, port: await server.listen('127.0.0.1', 0) };
  }
  async function send(toPort: number, body: string): Promise<string> {
    const { client } = await RawSmtp.connect(toPort);
    try {
      await client.envelope('someone@example.org', [`support@${sender.domain}`]);
      expect(await client.command('DATA')).toMatch(/^354 /);
      client.write(`Subject: stored?\r\n\r\n${body}\r\n.\r\n`);
      return await client.reply();
    } finally {
      client.close();
    }
  }
  const large = `${'y'.repeat(998)}\r\n`.repeat(Math.ceil((INLINE_BYTES + 10_000) / 1000));

  it('a commit whose flush fails is 451 too; what it committed stays whole, a spooled message with its file', async () => {
    const eio = Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
    const { server, port: failing } = await serverCommittingThrough(createGroupCommit(sqliteStoreOf(service.deps), () => Promise.reject(eio)));
    try {
      expect(await send(failing, large)).toMatch(/^451 4\.3\.0 /);
      // The row is committed (the sender's retry may bring a second copy: never none), and the file it names is there.
      const rows = await service.deps.db.select().from(customerDbWrites);
      expect(rows).toHaveLength(1);
      expect(rows[0]!.spoolId).not.toBeNull();
      expect(spoolFiles()).toHaveLength(1);
      await writer.runOnce();
      const stored = await customer.query("select count(*)::int as n from service.inbound where subject = 'stored?'");
      expect(stored.rows[0].n).toBe(1);
    } finally {
      await server.close();
      await customer.query("delete from service.inbound where subject = 'stored?'");
    }
  });
});

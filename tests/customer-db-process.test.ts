import { CUSTOMER_SCHEMA_VERSION } from '../db/customer/schema.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDnsServer } from './helpers/dns-server.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import {
  type ServiceProcess,
  connectSendingDomain,
  createAccountWithCli,
  processApi,
  processEnv,
  runningProcesses,
  startServiceProcess,
} from './helpers/service-process.js';
import { SmtpSink } from './helpers/smtp-sink.js';

/**
 * The customer database with the real process: `node dist/server/app/main.js` writes to a real Postgres
 * with TLS, verified by name (`db.pg.test` through the test DNS server, the test CA trusted through
 * NODE_EXTRA_CA_CERTS). The Postgres is killed under the writer's idle pool: the service stays up and answers
 * /healthz; mail sent and delivered meanwhile waits (`pending` grows, `state` unreachable); the service is killed -9
 * while the writes wait; both restart, and every row arrives once, each email's events no earlier than the email.
 */

const DB_HOST = 'db.pg.test';
const SENDS = 10;

let dns: TestDnsServer;
let sink: SmtpSink;
let pgServer: TestPostgres;
const dataDirs: string[] = [];

beforeAll(async () => {
  [dns, sink, pgServer] = await Promise.all([TestDnsServer.start(), SmtpSink.start(), startPostgres({ certificate: 'trusted' })]);
  dns.add('example.net', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
  dns.add('mx.example.net', { type: 'A', address: '127.0.0.1' });
  dns.add(DB_HOST, { type: 'A', address: '127.0.0.1' });
}, 120_000);

afterAll(async () => {
  for (const child of runningProcesses) child.kill('SIGKILL');
  await sink?.stop();
  await dns?.stop();
  await pgServer?.stop();
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
});

const envFor = (dataDir: string) => processEnv(dataDir, { DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port) });

async function until<T>(what: string, read: () => Promise<T>, done: (v: T) => boolean, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function healthz(proc: ServiceProcess): Promise<number> {
  return (await fetch(`http://127.0.0.1:${proc.port}/healthz`)).status;
}

async function customerRows<T extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<T[]> {
  const client = await pgServer.connect();
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

describe('outage, kill -9 and recovery with the real process', () => {
  it('loses no write: a vanished Postgres leaves the service up, writes wait through a kill -9, and arrive once after both restart', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-custdb-'));
    dataDirs.push(dataDir);
    const env = envFor(dataDir);
    const first = await startServiceProcess(env);
    const { key } = await createAccountWithCli(env, 'Customer database');
    await connectSendingDomain(first, dataDir, key, 'custdb-shop.example.com');
    const connected = await processApi(first, key, 'POST', '/database', { url: pgServer.url(DB_HOST) });
    expect(connected.status, JSON.stringify(connected.body)).toBe(200);
    expect(connected.body).toMatchObject({
      connected: true,
      host: DB_HOST,
      sslMode: 'verify',
      state: 'connected',
      schemaVersion: CUSTOMER_SCHEMA_VERSION,
      pending: 0,
    });

    const send = async (i: number) => {
      const res = await processApi(first, key, 'POST', '/emails', {
        from: 'shop@custdb-shop.example.com',
        to: [`a${i}@example.net`, `b${i}@example.net`],
        template: { name: 'receipt', receiptNumber: `R-${i}`, total: '$10.00' },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.id as string;
    };
    const status = async (proc: ServiceProcess) => (await processApi(proc, key, 'GET', '/database')).body;

    // A first send written and delivered: the writer's pool is open, then idle.
    const ids = [await send(0)];
    await until('the first send and its events written', status.bind(null, first), (s) => s.pending === 0 && sink.received.length === 2);
    await until(
      'the first send in the customer database',
      () => customerRows('select id from service.events'),
      (rows) => rows.length === 2,
    );

    // The Postgres vanishes under the idle pool: the process stays up.
    await pgServer.kill();
    await new Promise((r) => setTimeout(r, 500));
    expect(await healthz(first)).toBe(200);

    for (let i = 1; i <= SENDS; i++) ids.push(await send(i));
    await until(
      'every recipient delivered',
      async () => sink.received.length,
      (n) => n === 2 * (SENDS + 1),
    );
    const waiting = await until(
      'the writes waiting, the database unreachable',
      status.bind(null, first),
      (s) => s.state === 'unreachable' && s.pending === 3 * SENDS,
    );
    expect(waiting.lastError).toMatch(/could not connect/);
    expect(await healthz(first)).toBe(200);
    expect(first.logs.some((l) => l.includes('"customer_db.unreachable"'))).toBe(true);

    // kill -9 while the writes wait; then both come back.
    first.child.kill('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');
    await pgServer.restart();
    const second = await startServiceProcess(env);
    try {
      const done = await until('every waiting write arrived', status.bind(null, second), (s) => s.pending === 0 && s.state === 'connected');
      expect(done.lastError).toBeNull();
      const emails = await customerRows<{ id: string }>('select id from service.emails order by id');
      expect(emails.map((e) => e.id)).toEqual(ids);
      const events = await customerRows<{ email_id: string; recipient: string }>('select email_id, recipient from service.events order by email_id, recipient');
      expect(events.map((e) => [e.email_id, e.recipient])).toEqual(
        ids.flatMap((id, i) => [
          [id, `a${i}@example.net`],
          [id, `b${i}@example.net`],
        ]),
      );
      // In order: an event applied before its email would have found no row to stamp, and the email, written after,
      // would have no delivered_at. Every email has it.
      const delivered = await customerRows<{ n: number }>('select count(*)::int as n from service.emails where delivered_at is not null');
      expect(delivered[0]!.n).toBe(SENDS + 1);
    } finally {
      second.child.kill('SIGTERM');
      expect((await second.exited).code).toBe(0);
    }
  }, 120_000);
});

import { CUSTOMER_MIGRATIONS, CUSTOMER_SCHEMA_VERSION } from '../db/customer/schema.js';
import { connect as connectTcp, createServer, type Server, type Socket } from 'node:net';
import { eq } from 'drizzle-orm';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { accounts, customerDatabases } from '../db/schema/index.js';
import { findAccount } from '../server/core/accounts.js';
import type { RequestContext } from '../server/core/context.js';
import { connectDatabase } from '../server/customer-db/operations.js';
import { SCOPES } from '../server/core/scopes.js';
import { SEAL_CONTEXTS } from '../server/shared/seal-contexts.js';
import { decryptSecret } from '../server/shared/secrets.js';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { expectDocumented } from './helpers/openapi.js';
import { NOT_CONNECTED, storeDatabaseRow } from './helpers/customer-db.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { startPostgres, type TestPostgres } from './helpers/postgres.js';
import { expectError, newSender, newSubSender, receipt } from './helpers/sending.js';
import { startService, type ApiResponse, type TestService } from './helpers/service.js';
import { one } from '../db/sql.js';
import { freePort } from '../scripts/lib/free-port.js';

/**
 * The Database endpoints of docs/api/contract.md (GET/POST/DELETE /database, POST /database/test) against a real Postgres with TLS:
 * the status with and without a database, a sub-account seeing its parent's, the URL rules and the host check refusing
 * before any connection is made, the step a failed connection names (connect, TLS, login, schema), the URL stored
 * sealed and replaced on a second connect, a test of a vanished server, and every error the spec names, status and code.
 */

let dns: TestDnsServer;
let pgServer: TestPostgres;
/** Reaches the test Postgres on loopback (ALLOW_PRIVATE_TARGETS), so only the URL rules and Postgres stand in the way. */
let service: TestService;
/** The production host rules: loopback, private and reserved addresses are refused. */
let strict: TestService;
let counter: ConnectionCounter;
const uncaught = vi.fn();

/** Something listening on ::1 and 127.0.0.1 that counts each connection and closes it at once. */
interface ConnectionCounter {
  port: number;
  count: number;
  close(): Promise<void>;
}

async function startCounter(): Promise<ConnectionCounter> {
  const sockets = new Set<Socket>();
  const counter: ConnectionCounter = { port: 0, count: 0, close: async () => undefined };
  const server: Server = createServer((socket) => {
    counter.count++;
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.destroy();
  });
  // '::' is dual-stack: one port for 127.0.0.1 and ::1 alike.
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '::', () => resolve());
  });
  const address = server.address();
  if (typeof address !== 'object' || !address) throw new Error('no port');
  counter.port = address.port;
  counter.close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return counter;
}

beforeAll(async () => {
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);
  [dns, pgServer, counter] = await Promise.all([TestDnsServer.start(), startPostgres({ certificate: 'trusted' }), startCounter()]);
  [service, strict] = await Promise.all([
    startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true' }),
    startService({ DNS_SERVERS: dns.address }),
  ]);
  await pgServer.admin('create database second');
}, 120_000);

afterAll(async () => {
  process.off('uncaughtException', uncaught);
  process.off('unhandledRejection', uncaught);
  await service?.close();
  await strict?.close();
  await counter?.close();
  await dns?.stop();
  await pgServer?.stop();
});

beforeEach(() => {
  dns.clear();
  // The trusted certificate names db.pg.test; other.pg.test reaches the same server under a name it does not carry.
  dns.add('db.pg.test', { type: 'A', address: '127.0.0.1' });
  dns.add('other.pg.test', { type: 'A', address: '127.0.0.1' });
  dns.add('mixed.pg.test', { type: 'A', address: '93.184.216.34' });
  dns.add('mixed.pg.test', { type: 'AAAA', address: 'fd00::1' });
  counter.count = 0;
});

afterEach(() => {
  const calls = uncaught.mock.calls.length;
  uncaught.mockClear();
  expect(calls, 'uncaught exceptions or unhandled rejections').toBe(0);
});

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const isoNow = (s: TestService) => new Date(s.clock.now()).toISOString();

/** The test database's URL under `host`, for `database` and with the query as given. */
const urlOf = (host: string, opts: { database?: string; query?: string; password?: string; user?: string } = {}) => {
  const base = pgServer.url(host, opts.query ?? '').replace(`/${pgServer.database}`, `/${opts.database ?? pgServer.database}`);
  const withPassword = opts.password === undefined ? base : base.replace(`:${pgServer.password}@`, `:${opts.password}@`);
  return opts.user === undefined ? withPassword : withPassword.replace(`//${pgServer.user}:`, `//${opts.user}:`);
};

const connect = (s: TestService, key: string, url: string, account?: string) =>
  s.api('POST', '/database', { key, body: { url }, ...(account ? { account } : {}) });
const status = async (s: TestService, key: string, account?: string) => {
  const res = await s.api('GET', '/database', { key, ...(account ? { account } : {}) });
  expect(res.status).toBe(200);
  expectDocumented(res);
  return res.body;
};

/** The status a fresh connect of the test database answers. */
function connectedStatus(s: TestService, over: Record<string, unknown> = {}) {
  return {
    connected: true,
    host: 'db.pg.test',
    port: pgServer.port,
    database: pgServer.database,
    user: pgServer.user,
    sslMode: 'verify',
    state: 'connected',
    schemaVersion: CUSTOMER_SCHEMA_VERSION,
    lastOkAt: isoNow(s),
    lastError: null,
    updatedAt: isoNow(s),
    pending: 0,
    ...over,
  };
}

/** No response and no log line carries the password. */
function expectNoPassword(s: TestService, ...responses: ApiResponse[]): void {
  for (const res of responses) expect(JSON.stringify(res.body)).not.toContain(pgServer.password);
  expect(JSON.stringify(s.logger.entries)).not.toContain(pgServer.password);
}

async function newSub(s: TestService, key: string, name = 'Shop'): Promise<string> {
  const res = await s.api('POST', '/accounts', { key, body: { name } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.id as string;
}

/** A query on one of the test server's databases, as its owner (a client of the test, not of the service). */
async function onCustomer<R extends pg.QueryResultRow = pg.QueryResultRow>(database: string, sql: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({
    host: '127.0.0.1',
    port: pgServer.port,
    user: pgServer.user,
    password: pgServer.password,
    database,
    ssl: { rejectUnauthorized: false },
  });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query<R>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

const serviceTables = async (database: string) =>
  (await onCustomer<{ table_name: string }>(database, "select table_name from information_schema.tables where table_schema = 'service' order by 1")).map(
    (r) => r.table_name,
  );

const storedRow = async (s: TestService, accountId: string) =>
  await one(s.deps.db.select().from(customerDatabases).where(eq(customerDatabases.accountId, accountId)));

describe('GET /database', () => {
  it('answers 200 with connected false and every other field empty when no database is set', async () => {
    const { key } = await service.newAccount();
    const res = await service.api('GET', '/database', { key });
    expect(res.status).toBe(200);
    expect(res.body).toEqual(NOT_CONNECTED);
  });

  it('answers the status of the connected database, the same as POST answered', async () => {
    const { key } = await service.newAccount();
    const posted = await connect(service, key, urlOf('db.pg.test'));
    expect(posted.status, JSON.stringify(posted.body)).toBe(200);
    expect(await status(service, key)).toEqual(posted.body);
  });

  it('counts the writes waiting for the database in pending, for the parent and its sub-accounts alike', async () => {
    const sender = await newSender(service);
    expect((await connect(service, sender.key, urlOf('db.pg.test'))).status).toBe(200);
    // The test service runs no writer: a non-sandbox send's write waits in the outbox.
    const sent = await service.api('POST', '/emails', { key: sender.key, body: receipt(sender.from) });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    expect((await status(service, sender.key)).pending).toBe(1);
    const sub = await newSub(service, sender.key);
    expect((await status(service, sender.key, sub)).pending).toBe(1);
  });
});

describe('POST /database: connected', () => {
  it('connects, creates schema service with its tables, stores the URL sealed, and answers the status (never the password or the URL)', async () => {
    const { key, account } = await service.newAccount();
    const url = urlOf('db.pg.test');
    const res = await connect(service, key, url);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectDocumented(res);
    expect(res.body).toEqual(connectedStatus(service));
    expect(res.body.lastOkAt).toMatch(ISO);
    expect(JSON.stringify(res.body)).not.toContain(url);
    expectNoPassword(service, res);

    expect(await serviceTables(pgServer.database)).toEqual(expect.arrayContaining(['attachments', 'emails', 'events', 'inbound', 'schema_migrations']));
    const row = (await storedRow(service, account.id))!;
    expect(row.urlSealed).not.toContain(pgServer.password);
    expect(row.urlSealed).not.toContain(pgServer.user);
    expect(decryptSecret(service.deps.secretKey!, row.urlSealed, SEAL_CONTEXTS.customerDbUrl(account.id)).toString('utf8')).toBe(url);
  });

  it.each([
    ['no sslmode', '', 'verify'],
    ['sslmode=verify', 'sslmode=verify', 'verify'],
    ['sslmode=require', 'sslmode=require', 'verify'],
    ['sslmode=verify-ca', 'sslmode=verify-ca', 'verify'],
    ['sslmode=verify-full', 'sslmode=verify-full', 'verify'],
    ['sslmode=no-verify', 'sslmode=no-verify', 'no-verify'],
  ])('%s connects with sslMode %s', async (_, query, sslMode) => {
    const { key } = await service.newAccount();
    const res = await connect(service, key, urlOf('db.pg.test', { query }));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual(connectedStatus(service, { sslMode }));
  });

  it('refuses postgres:// (docs/api/contract.md: not postgresql:// is 422 invalid_url) and accepts an IP-literal host (verified against the address the certificate carries) and localhost', async () => {
    const { key } = await service.newAccount();
    const viaScheme = await connect(service, key, urlOf('db.pg.test').replace(/^postgresql:/, 'postgres:'));
    expectError(viaScheme, 422, 'invalid_url');
    expect(viaScheme.body.error.message).toContain('write it as postgresql://');
    for (const host of ['127.0.0.1', 'localhost']) {
      const res = await connect(service, key, urlOf(host));
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toEqual(connectedStatus(service, { host }));
    }
  });

  it('connecting again replaces the stored URL; the old database keeps its schema and rows', async () => {
    const { key, account } = await service.newAccount();
    expect((await connect(service, key, urlOf('db.pg.test'))).status).toBe(200);
    const first = (await storedRow(service, account.id))!;
    const marker = '01950000-0000-7000-8000-0000000000aa';
    await onCustomer(
      pgServer.database,
      "insert into service.events (id, email_id, recipient, status, dsn, detail, occurred_at) values ($1, $1, 'a@example.net', 'delivered', '2.0.0', 'ok', now()) on conflict do nothing",
      [marker],
    );

    service.clock.advance(60_000);
    const secondUrl = urlOf('db.pg.test', { database: 'second', query: 'sslmode=no-verify' });
    const res = await connect(service, key, secondUrl);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual(connectedStatus(service, { database: 'second', sslMode: 'no-verify' }));
    expect(await status(service, key)).toEqual(res.body);

    const second = (await storedRow(service, account.id))!;
    expect(second.connectionId).not.toBe(first.connectionId);
    expect(decryptSecret(service.deps.secretKey!, second.urlSealed, SEAL_CONTEXTS.customerDbUrl(account.id)).toString('utf8')).toBe(secondUrl);
    expect(await serviceTables('second')).toEqual(expect.arrayContaining(['attachments', 'emails', 'events', 'inbound']));
    // The first database is left as it is.
    expect(await serviceTables(pgServer.database)).toEqual(expect.arrayContaining(['attachments', 'emails', 'events', 'inbound', 'schema_migrations']));
    expect(await onCustomer(pgServer.database, 'select id from service.events where id = $1', [marker])).toHaveLength(1);
    expect(await onCustomer(pgServer.database, 'select version from service.schema_migrations order by version')).toEqual(
      CUSTOMER_MIGRATIONS.map((m) => ({ version: m.version })),
    );
  });
});

describe('POST /database: database_unreachable names the step that failed; nothing is stored', () => {
  /** A failed connect: 422 database_unreachable with the step in the message, no password anywhere, nothing stored. */
  async function expectUnreachable(url: string, step: RegExp) {
    const { key, account } = await service.newAccount();
    const res = await connect(service, key, url);
    expectError(res, 422, 'database_unreachable', step);
    expectDocumented(res);
    expectNoPassword(service, res);
    expect(await status(service, key)).toEqual(NOT_CONNECTED);
    expect(await storedRow(service, account.id)).toBeUndefined();
    return res;
  }

  it('a closed port: could not connect', async () => {
    const port = await freePort();
    await expectUnreachable(`postgresql://${pgServer.user}:${pgServer.password}@127.0.0.1:${port}/customer`, /could not connect/);
  });

  it('a host name that does not resolve: could not connect', async () => {
    await expectUnreachable(urlOf('nowhere.pg.test'), /could not connect/);
  });

  it('a certificate for another name: TLS failed', async () => {
    const res = await expectUnreachable(urlOf('other.pg.test'), /TLS failed/);
    expect(res.body.error.message).toContain('other.pg.test');
  });

  it('an IP-literal host the certificate does not carry: TLS failed (checked against the address); no-verify connects', async () => {
    // 127.0.0.2 forwards to the server, whose certificate names 127.0.0.1 but not 127.0.0.2.
    const sockets = new Set<Socket>();
    const proxy = createServer((socket) => {
      const upstream = connectTcp(pgServer.port, '127.0.0.1');
      for (const s of [socket, upstream]) {
        sockets.add(s);
        s.on('error', () => undefined);
      }
      socket.pipe(upstream).pipe(socket);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.2', r));
    const port = (proxy.address() as { port: number }).port;
    try {
      const url = (query = '') => `postgresql://${pgServer.user}:${pgServer.password}@127.0.0.2:${port}/${pgServer.database}${query}`;
      const res = await expectUnreachable(url(), /TLS failed/);
      expect(res.body.error.message).toContain('127.0.0.2');
      const { key } = await service.newAccount();
      const ok = await connect(service, key, url('?sslmode=no-verify'));
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
      expect(ok.body).toEqual(connectedStatus(service, { host: '127.0.0.2', port, sslMode: 'no-verify' }));
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => proxy.close(() => r()));
    }
  });

  it('a wrong password: login failed', async () => {
    await expectUnreachable(urlOf('db.pg.test', { password: 'not-the-password' }), /login failed/);
  });

  it('a database that does not exist: login failed', async () => {
    await expectUnreachable(urlOf('db.pg.test', { database: 'missing_db' }), /login failed/);
  });

  it('a server that refuses the login for a reason of its own (too many connections): could not connect', async () => {
    await pgServer.admin("create role limited login password 'limited-pw' connection limit 0");
    await expectUnreachable(
      `postgresql://limited:limited-pw@db.pg.test:${pgServer.port}/${pgServer.database}`,
      /^The database could not be used: could not connect: too many connections/,
    );
  });

  it('a user without CREATE on the database: creating the schema failed', async () => {
    await pgServer.admin("create role nocreate login password 'nocreate-pw'");
    await pgServer.admin('create database nocreate_db');
    await pgServer.admin('revoke create on database nocreate_db from public');
    const url = `postgresql://nocreate:nocreate-pw@db.pg.test:${pgServer.port}/nocreate_db`;
    const { key } = await service.newAccount();
    const res = await connect(service, key, url);
    expectError(res, 422, 'database_unreachable', /creating the schema failed/);
    expect(res.body.error.message).not.toContain('nocreate-pw');
    expect(await status(service, key)).toEqual(NOT_CONNECTED);
    expect(await serviceTables('nocreate_db')).toEqual([]);
  });

  it('the same user, once its DBA has created schema service for it: connects, the migrations run inside that schema', async () => {
    // Continues the test above: nocreate still has no CREATE on its database.
    await onCustomer('nocreate_db', 'create schema service authorization nocreate');
    const url = `postgresql://nocreate:nocreate-pw@db.pg.test:${pgServer.port}/nocreate_db`;
    const { key } = await service.newAccount();
    const res = await connect(service, key, url);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ connected: true, user: 'nocreate', database: 'nocreate_db', state: 'connected', schemaVersion: CUSTOMER_SCHEMA_VERSION });
    expect(await serviceTables('nocreate_db')).toEqual(['attachments', 'emails', 'events', 'inbound', 'schema_migrations']);
  });

  describe('a self-signed certificate', () => {
    beforeAll(() => pgServer.useCertificate('self-signed'), 30_000);
    afterAll(() => pgServer.useCertificate('trusted'), 30_000);

    it('fails verify (the default) with TLS failed', async () => {
      await expectUnreachable(urlOf('db.pg.test'), /TLS failed/);
      await expectUnreachable(urlOf('db.pg.test', { query: 'sslmode=verify-full' }), /TLS failed/);
      await expectUnreachable(urlOf('db.pg.test', { query: 'sslmode=require' }), /TLS failed/);
    });

    it('connects with sslmode=no-verify', async () => {
      const { key } = await service.newAccount();
      const res = await connect(service, key, urlOf('db.pg.test', { query: 'sslmode=no-verify' }));
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toEqual(connectedStatus(service, { sslMode: 'no-verify' }));
    });
  });

  describe('a server without TLS', () => {
    beforeAll(() => pgServer.setSsl(false), 30_000);
    afterAll(() => pgServer.setSsl(true), 30_000);

    it('fails with TLS failed in both modes (never plain text)', async () => {
      await expectUnreachable(urlOf('db.pg.test'), /TLS failed/);
      await expectUnreachable(urlOf('db.pg.test', { query: 'sslmode=no-verify' }), /TLS failed/);
    });
  });
});

describe('POST /database: refused before any connection', () => {
  const SECRET = 'S3cr3t-pa55';
  const at = (query: string) => `postgresql://u:${SECRET}@127.0.0.1:${counter.port}/db?${query}`;

  /** [why, url, what the message says]. Each would reach the counting listener if the rule were missing. */
  const INVALID: [string, () => string, RegExp][] = [
    ['another scheme', () => `mysql://u:${SECRET}@127.0.0.1:${counter.port}/db`, /postgresql:\/\//],
    ['https', () => `https://u:${SECRET}@127.0.0.1:${counter.port}/db`, /postgresql:\/\//],
    ['no host', () => `postgresql://u:${SECRET}@/db`, /no host/],
    ['a port but no host', () => `postgresql://u:${SECRET}@:${counter.port}/db`, /not a valid postgresql:\/\/ URL/],
    ['no authority at all', () => 'postgresql:///db', /no host/],
    ['no user', () => `postgresql://127.0.0.1:${counter.port}/db`, /no user/],
    ['a password but no user', () => `postgresql://:${SECRET}@127.0.0.1:${counter.port}/db`, /no user/],
    ['several hosts', () => `postgresql://u:${SECRET}@127.0.0.1,127.0.0.2/db`, /several hosts/],
    ['several hosts with ports', () => `postgresql://u:${SECRET}@127.0.0.1:${counter.port},127.0.0.1:${counter.port}/db`, /several hosts|one host/],
    ['a Unix socket as the host', () => 'postgresql://u@%2Ftmp/db', /Unix socket/],
    ['a Unix socket in the query', () => at('host=/tmp'), /`host`/],
    ['a port outside 1 to 65535', () => `postgresql://u:${SECRET}@127.0.0.1:70000/db`, /port|valid/],
    ['sslmode=disable', () => at('sslmode=disable'), /`disable`/],
    ['sslmode=allow', () => at('sslmode=allow'), /`allow`/],
    ['sslmode=prefer', () => at('sslmode=prefer'), /`prefer`/],
    ['an unknown sslmode', () => at('sslmode=sometimes'), /sslmode/],
    ...[
      'sslrootcert=/etc/ssl/ca.pem',
      'sslcert=/etc/ssl/client.pem',
      'sslkey=/etc/ssl/client.key',
      'sslcrl=/etc/ssl/crl.pem',
      'passfile=/root/.pgpass',
      'service=prod',
      'options=-c%20search_path%3Devil',
      'replication=database',
      'host=127.0.0.1',
      'hostaddr=127.0.0.1',
      `port=${5432}`,
      'application_name=x',
      'connect_timeout=1',
      'target_session_attrs=any',
      'gssencmode=disable',
      'user=postgres',
      'password=other',
      'dbname=postgres',
    ].map((q): [string, () => string, RegExp] => {
      const name = q.slice(0, q.indexOf('='));
      return [`the ${name} parameter`, () => at(q), new RegExp(`\`${name}\``)];
    }),
    ['a parameter beside an accepted sslmode', () => at('sslmode=verify-full&sslrootcert=/etc/ssl/ca.pem'), /`sslrootcert`/],
  ];

  it.each(INVALID)('%s: 422 invalid_url naming it, no connection, nothing stored', async (_, url, says) => {
    const { key, account } = await service.newAccount();
    const res = await connect(service, key, url());
    expectError(res, 422, 'invalid_url', says);
    expect(res.body.error.message).not.toContain(SECRET);
    expect(counter.count).toBe(0);
    expect(await status(service, key)).toEqual(NOT_CONNECTED);
    expect(await storedRow(service, account.id)).toBeUndefined();
  });

  it.each([
    ['127.0.0.1', () => `postgresql://u:${SECRET}@127.0.0.1:${counter.port}/db`],
    ['localhost', () => `postgresql://u:${SECRET}@localhost:${counter.port}/db`],
    ['::1', () => `postgresql://u:${SECRET}@[::1]:${counter.port}/db`],
    ['loopback as one number', () => `postgresql://u:${SECRET}@2130706433:${counter.port}/db`],
    ['a name resolving to 127.0.0.1', () => `postgresql://u:${SECRET}@db.pg.test:${counter.port}/db`],
    ['10.0.0.5', () => `postgresql://u:${SECRET}@10.0.0.5/db`],
    ['the metadata address', () => `postgresql://u:${SECRET}@169.254.169.254/db`],
    ['a name with one private address among public ones', () => `postgresql://u:${SECRET}@mixed.pg.test/db`],
  ])('a host at %s: 422 blocked_host without ALLOW_PRIVATE_TARGETS, no connection, nothing stored', async (_, url) => {
    const { key, account } = await strict.newAccount();
    const res = await connect(strict, key, url());
    expectError(res, 422, 'blocked_host');
    expect(res.body.error.message).not.toContain(SECRET);
    expect(counter.count).toBe(0);
    expect(await status(strict, key)).toEqual(NOT_CONNECTED);
    expect(await storedRow(strict, account.id)).toBeUndefined();
  });

  it('the test database itself is blocked_host without ALLOW_PRIVATE_TARGETS (the same URL connects with it)', async () => {
    const { key } = await strict.newAccount();
    expectError(await connect(strict, key, urlOf('db.pg.test')), 422, 'blocked_host');
    expect(await status(strict, key)).toEqual(NOT_CONNECTED);
  });

  it.each([
    ['no url', {}, /url: is required/],
    ['a url that is a number', { url: 5432 }, /^url: /],
    ['a url that is null', { url: null }, /^url: /],
    ['an unknown field beside the url', { url: 'postgresql://u@db.example.com/db', sslmode: 'disable' }, /sslmode: is not a known field/],
    ['an array', [{ url: 'postgresql://u@db.example.com/db' }], /body: must be a JSON object/],
    ['a bare string', 'postgresql://u@db.example.com/db', /body: must be a JSON object/],
  ])('%s: 422 invalid_request', async (_, body, says) => {
    const { key } = await service.newAccount();
    expectError(await service.api('POST', '/database', { key, body }), 422, 'invalid_request', says);
  });

  it.each([
    ['not JSON', '{"url":'],
    ['a form', 'url=postgresql://u@db.example.com/db'],
    ['empty', ''],
  ])('a body that is %s: 400 invalid_json', async (_, rawBody) => {
    const { key } = await service.newAccount();
    expectError(await service.api('POST', '/database', { key, rawBody, headers: { 'content-type': 'application/json' } }), 400, 'invalid_json');
  });
});

describe('POST /database: a server that cannot store secrets', () => {
  let off: TestService;
  beforeAll(async () => {
    off = await startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true', SECRET_KEY: 'off' });
  });
  afterAll(() => off?.close());

  it('answers 503 not_configured for a valid body, without connecting and without storing anything', async () => {
    const { key, account } = await off.newAccount();
    expectError(await connect(off, key, `postgresql://u:p@127.0.0.1:${counter.port}/db`), 503, 'not_configured');
    expectError(await connect(off, key, urlOf('db.pg.test')), 503, 'not_configured');
    expect(counter.count).toBe(0);
    expect(await storedRow(off, account.id)).toBeUndefined();
    expect(await status(off, key)).toEqual(NOT_CONNECTED);
  });

  it('judges the body first: 400 invalid_json and 422 invalid_request come before 503', async () => {
    const { key } = await off.newAccount();
    expectError(await off.api('POST', '/database', { key, rawBody: '{"url":', headers: { 'content-type': 'application/json' } }), 400, 'invalid_json');
    expectError(await off.api('POST', '/database', { key, body: { url: 1 } }), 422, 'invalid_request');
    expectError(await off.api('POST', '/database', { key, body: {} }), 422, 'invalid_request');
  });
});

describe('POST /database/test on a server restarted with SECRET_KEY=off', () => {
  let off: TestService;
  beforeAll(async () => {
    off = await startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true', SECRET_KEY: 'off' });
  });
  afterAll(() => off?.close());

  it('answers 422 database_unreachable (the stored URL cannot be opened), records it, and connects to nothing', async () => {
    const { key, account } = await off.newAccount();
    const url = `postgresql://u:p@db.pg.test:${counter.port}/db`;
    // Sealed by an earlier run with a key this one does not have.
    await storeDatabaseRow(off, account.id, url, Buffer.alloc(32, 7));
    expectError(await off.api('POST', '/database/test', { key }), 422, 'database_unreachable', /secret key/);
    expect(counter.count).toBe(0);
    expect(await status(off, key)).toMatchObject({ connected: true, state: 'unreachable', lastError: expect.stringMatching(/secret key/) });
  });
});

describe('a sub-account', () => {
  it('without its own database sees its parent’s status; with its own, its own; after deleting its own, the parent’s again', async () => {
    const { key } = await service.newAccount();
    const sub = await newSub(service, key);
    expect(await status(service, key, sub)).toEqual(NOT_CONNECTED);

    const parent = await connect(service, key, urlOf('db.pg.test'));
    expect(parent.status).toBe(200);
    expect(await status(service, key, sub)).toEqual(parent.body);

    service.clock.advance(1000);
    const own = await connect(service, key, urlOf('localhost', { database: 'second' }), sub);
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    expect(own.body).toEqual(connectedStatus(service, { host: 'localhost', database: 'second' }));
    expect(await status(service, key, sub)).toEqual(own.body);
    expect(await status(service, key)).toEqual(parent.body);

    expect((await service.api('DELETE', '/database', { key, account: sub })).status).toBe(204);
    expect(await status(service, key, sub)).toEqual(parent.body);
    expect(await status(service, key)).toEqual(parent.body);
  });

  it('deleted by its parent while its database was being connected: 404 account_not_found, nothing stored', async () => {
    const { account, key } = await service.newAccount();
    const sub = await newSub(service, key);
    const ctx: RequestContext = {
      keyId: 'parent-key',
      keyAccount: account,
      scopes: SCOPES,
      account: (await findAccount(service.deps.db, sub))!,
      viaHeader: true,
    };
    const pending = connectDatabase({ deps: service.deps, ctx, input: { url: urlOf('db.pg.test') } });
    // The call is past its first await (the connection to Postgres): the parent deletes the sub-account now.
    await service.deps.db.delete(accounts).where(eq(accounts.id, sub));
    await expect(pending).rejects.toMatchObject({ code: 'account_not_found', status: 404 });
    expect(await one(service.deps.db.select().from(customerDatabases).where(eq(customerDatabases.accountId, sub)))).toBeUndefined();
  });

  it('using its parent’s database gets 404 database_not_connected on DELETE, and the parent’s database stays', async () => {
    const { key } = await service.newAccount();
    const sub = await newSub(service, key);
    const parent = await connect(service, key, urlOf('db.pg.test'));
    expect(parent.status).toBe(200);
    expectError(await service.api('DELETE', '/database', { key, account: sub }), 404, 'database_not_connected');
    expect(await status(service, key)).toEqual(parent.body);
    expect(await status(service, key, sub)).toEqual(parent.body);
  });

  it('with a key of its own, sees that its parent’s database works and its own writes waiting, never where it is or its last error; cannot test it', async () => {
    const sender = await newSender(service);
    const sub = await newSubSender(service, sender.key);
    // The key a parent hands its customer: the sub-account's own.
    const minted = await service.api('POST', '/keys', {
      key: sender.key,
      account: sub.id,
      body: { name: 'customer', scopes: ['emails:send', 'database:read', 'database:write'] },
    });
    expect(minted.status, JSON.stringify(minted.body)).toBe(201);
    const subKey = minted.body.key as string;
    const parent = await connect(service, sender.key, urlOf('db.pg.test'));
    expect(parent.status).toBe(200);
    // The parent's write waits, then one of the sub-account's.
    expect((await service.api('POST', '/emails', { key: sender.key, body: receipt(sender.from) })).status).toBe(200);
    expect((await service.api('POST', '/emails', { key: subKey, body: receipt(sub.from) })).status).toBe(200);
    await service.deps.db
      .update(customerDatabases)
      .set({ lastError: 'could not connect to db.pg.test as the parent' })
      .where(eq(customerDatabases.accountId, sender.account.id));
    const seen = await service.api('GET', '/database', { key: subKey });
    expect(seen.status).toBe(200);
    expectDocumented(seen);
    const full = await status(service, sender.key);
    expect(full).toMatchObject({ host: 'db.pg.test', lastError: 'could not connect to db.pg.test as the parent', pending: 2 });
    expect(seen.body).toEqual({ ...full, host: null, port: null, database: null, user: null, lastError: null, pending: 1 });
    // The parent's own key acting for the sub-account sees it all, as before.
    expect(await status(service, sender.key, sub.id)).toEqual(full);
    const updatedAt = (await storedRow(service, sender.account.id))!.updatedAt;
    service.clock.advance(5000);
    expectError(await service.api('POST', '/database/test', { key: subKey }), 404, 'database_not_connected');
    expect(await storedRow(service, sender.account.id)).toMatchObject({ lastError: 'could not connect to db.pg.test as the parent', updatedAt });
    // Its own database, connected with its own key, it sees whole.
    const own = await connect(service, subKey, urlOf('localhost', { database: 'second' }));
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    expect(own.body).toMatchObject({ host: 'localhost', database: 'second' });
    expect(await status(service, subKey)).toEqual(own.body);
  });

  it('tests its parent’s database with POST /database/test', async () => {
    const { key, account } = await service.newAccount();
    const sub = await newSub(service, key);
    const connected = await connect(service, key, urlOf('db.pg.test'));
    expect(connected.status).toBe(200);
    service.clock.advance(5000);
    const res = await service.api('POST', '/database/test', { key, account: sub });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    // Fresh: lastOkAt now; updatedAt stays, since neither the state nor the error changed.
    expect(res.body).toEqual(connectedStatus(service, { updatedAt: connected.body.updatedAt }));
    expect((await storedRow(service, account.id))!.lastOkAt).toBe(service.clock.now());
  });
});

describe('POST /database/test', () => {
  it('answers 404 database_not_connected when no database is set', async () => {
    const { key } = await service.newAccount();
    const res = await service.api('POST', '/database/test', { key });
    expectError(res, 404, 'database_not_connected');
    expectDocumented(res);
  });

  it('connects to the stored URL and answers the fresh status', async () => {
    const { key } = await service.newAccount();
    const first = await connect(service, key, urlOf('db.pg.test'));
    expect(first.status).toBe(200);
    service.clock.advance(3_600_000);
    const res = await service.api('POST', '/database/test', { key });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectDocumented(res);
    // lastOkAt is this attempt's; nothing else changed, so updatedAt may stay.
    expect(res.body).toEqual({ ...first.body, lastOkAt: isoNow(service), updatedAt: expect.stringMatching(ISO) });
    expect(res.body.lastOkAt).not.toBe(first.body.lastOkAt);
    expect(await status(service, key)).toEqual(res.body);
    expectNoPassword(service, res);
  });

  it('a URL that now resolves to a blocked address: 422 blocked_host, no connection, and the status shows it', async () => {
    // Stored while the host was allowed (e.g. before ALLOW_PRIVATE_TARGETS was turned off, or its DNS changed).
    const { key, account } = await strict.newAccount();
    const url = `postgresql://u:p@db.pg.test:${counter.port}/db`;
    await storeDatabaseRow(strict, account.id, url);
    strict.clock.advance(1000);
    expectError(await strict.api('POST', '/database/test', { key }), 422, 'blocked_host');
    expect(counter.count).toBe(0);
    const after = await status(strict, key);
    expect(after).toMatchObject({
      connected: true,
      state: 'unreachable',
      lastError: expect.stringMatching(/private, loopback or reserved/),
      updatedAt: isoNow(strict),
    });
  });

  describe('a server that vanished', () => {
    afterAll(() => pgServer.restart(), 60_000);

    it('answers 422 database_unreachable and GET shows unreachable with the error; once it is back, 200 connected and the error cleared', async () => {
      const { key } = await service.newAccount();
      const first = await connect(service, key, urlOf('db.pg.test'));
      expect(first.status).toBe(200);

      await pgServer.kill();
      service.clock.advance(60_000);
      const failed = await service.api('POST', '/database/test', { key });
      expectError(failed, 422, 'database_unreachable', /could not connect/);
      expectNoPassword(service, failed);
      const down = await status(service, key);
      expect(down).toEqual({
        ...first.body,
        state: 'unreachable',
        lastError: expect.stringMatching(/could not connect/),
        updatedAt: isoNow(service),
      });

      await pgServer.restart();
      service.clock.advance(60_000);
      const back = await service.api('POST', '/database/test', { key });
      expect(back.status, JSON.stringify(back.body)).toBe(200);
      expect(back.body).toEqual(connectedStatus(service));
      expect(await status(service, key)).toEqual(back.body);
    }, 60_000);
  });
});

describe('DELETE /database', () => {
  it('answers 404 database_not_connected when no database is set', async () => {
    const { key } = await service.newAccount();
    expectError(await service.api('DELETE', '/database', { key }), 404, 'database_not_connected');
  });

  it('answers 204 and forgets the URL and the writes waiting for it; the schema and rows in the database stay', async () => {
    const sender = await newSender(service);
    const key = sender.key;
    expect((await connect(service, key, urlOf('db.pg.test'))).status).toBe(200);
    const marker = '01950000-0000-7000-8000-0000000000bb';
    await onCustomer(
      pgServer.database,
      "insert into service.events (id, email_id, recipient, status, dsn, detail, occurred_at) values ($1, $1, 'b@example.net', 'bounced', '5.1.1', 'no', now()) on conflict do nothing",
      [marker],
    );
    expect((await service.api('POST', '/emails', { key, body: receipt(sender.from) })).status).toBe(200);
    expect((await status(service, key)).pending).toBe(1);

    const res = await service.api('DELETE', '/database', { key });
    expect(res.status).toBe(204);
    expect(res.body).toBeNull();
    expect(await status(service, key)).toEqual(NOT_CONNECTED);
    expect(await storedRow(service, sender.account.id)).toBeUndefined();
    expectError(await service.api('POST', '/database/test', { key }), 404, 'database_not_connected');
    expectError(await service.api('DELETE', '/database', { key }), 404, 'database_not_connected');

    expect(await serviceTables(pgServer.database)).toEqual(expect.arrayContaining(['attachments', 'emails', 'events', 'inbound']));
    expect(await onCustomer(pgServer.database, 'select id from service.events where id = $1', [marker])).toHaveLength(1);

    // Connected again, the writes queued for the old connection are gone.
    expect((await connect(service, key, urlOf('db.pg.test'))).body.pending).toBe(0);
  });
});

describe('standard failures', () => {
  const body = { url: 'postgresql://u:p@db.example.com/db' };
  runCommonAuthTests(() => service, { method: 'GET', path: '/database', scope: 'database:read' });
  runCommonAuthTests(() => service, { method: 'POST', path: '/database', scope: 'database:write', body });
  runCommonAuthTests(() => service, { method: 'POST', path: '/database/test', scope: 'database:write' });
  runCommonAuthTests(() => service, { method: 'DELETE', path: '/database', scope: 'database:write' });

  it('database:read does not allow the writing endpoints, nor database:write GET', async () => {
    const { account } = await service.newAccount();
    const reader = await service.newKey(account.id, ['database:read']);
    const writer = await service.newKey(account.id, ['database:write']);
    expect((await service.api('GET', '/database', { key: reader })).status).toBe(200);
    expectError(await connect(service, reader, urlOf('db.pg.test')), 403, 'insufficient_scope');
    expectError(await service.api('POST', '/database/test', { key: reader }), 403, 'insufficient_scope');
    expectError(await service.api('DELETE', '/database', { key: reader }), 403, 'insufficient_scope');
    expectError(await service.api('GET', '/database', { key: writer }), 403, 'insufficient_scope');
    expect(await storedRow(service, account.id)).toBeUndefined();
  });
});

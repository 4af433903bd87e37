import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ClientConfig, Notification } from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { classifyConnectError, listenCustomerDb, openCustomerPool, probeCustomerDb } from '../db/customer/connect.js';
import { createMemoryLogger } from '../server/shared/logger.js';
import { PG_TEST_CA, PG_TEST_CA_FILE, startPostgres, type TestPostgres } from './helpers/postgres.js';

/**
 * The connection module against a real Postgres with TLS (tests/helpers/postgres.ts): certificate verification, the
 * stage a failure is reported at, and a server killed under an idle pool and under a LISTEN client without the
 * process going down. One server for the file; the self-signed and no-TLS cases switch it by reloading its config.
 */

const OTHER_CA = readFileSync(fileURLToPath(new URL('./fixtures/webhook-tls/ca.pem', import.meta.url)), 'utf8');

let pgServer: TestPostgres;
const uncaught = vi.fn();

beforeAll(async () => {
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);
  pgServer = await startPostgres({ certificate: 'trusted' });
}, 60_000);

afterAll(async () => {
  process.off('uncaughtException', uncaught);
  process.off('unhandledRejection', uncaught);
  await pgServer?.stop();
});

afterEach(() => {
  const calls = uncaught.mock.calls.length;
  uncaught.mockClear(); // one test's failure is its own, not every later test's
  expect(calls, 'uncaught exceptions or unhandled rejections').toBe(0);
});

/** What server/customer-db/url.ts hands over for a verify-mode URL: the checked address as host, the name as servername. */
function config(over: Partial<ClientConfig> & { servername?: string; verify?: boolean } = {}): ClientConfig {
  const { servername = 'db.pg.test', verify = true, ...rest } = over;
  return {
    host: '127.0.0.1',
    port: pgServer.port,
    user: pgServer.user,
    password: pgServer.password,
    database: pgServer.database,
    ssl: verify ? { rejectUnauthorized: true, servername } : { rejectUnauthorized: false, servername },
    connectionTimeoutMillis: 5_000,
    ...rest,
  };
}

async function closedPort(): Promise<number> {
  const server: Server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address();
  await new Promise<void>((r) => server.close(() => r()));
  if (typeof address !== 'object' || !address) throw new Error('no port');
  return address.port;
}

describe('probeCustomerDb: TLS', () => {
  const logger = createMemoryLogger();

  it('verify with the test CA trusted connects (name checked against servername, not the address)', async () => {
    expect(await probeCustomerDb(config(), logger, { ca: PG_TEST_CA })).toEqual({ ok: true });
  });

  it('verify with another CA fails at tls', async () => {
    const result = await probeCustomerDb(config(), logger, { ca: OTHER_CA });
    expect(result).toMatchObject({ ok: false, stage: 'tls' });
    if (!result.ok) expect(result.message).toMatch(/^TLS failed: /);
  });

  it('verify without a ca option connects: the workers trust the test CA through NODE_EXTRA_CA_CERTS (global setup)', async () => {
    // Without it the default trust store fails at tls: the spawned-process test below shows that side.
    expect(readFileSync(process.env.NODE_EXTRA_CA_CERTS ?? '', 'utf8')).toContain(PG_TEST_CA.trim());
    expect(await probeCustomerDb(config(), logger)).toEqual({ ok: true });
  });

  it('a certificate for another name fails at tls, naming the name', async () => {
    const result = await probeCustomerDb(config({ servername: 'other.pg.test' }), logger, { ca: PG_TEST_CA });
    expect(result).toMatchObject({ ok: false, stage: 'tls' });
    if (!result.ok) expect(result.message).toContain('other.pg.test');
  });

  it('no-verify connects to the trusted certificate too, and the ca option does not turn verification on', async () => {
    expect(await probeCustomerDb(config({ verify: false }), logger, { ca: OTHER_CA })).toEqual({ ok: true });
  });

  it('verify trusts the test CA through NODE_EXTRA_CA_CERTS, as the service does (dist/, a fresh process)', async () => {
    const script = `
      import { probeCustomerDb } from './dist/db/customer/connect.js';
      import { createMemoryLogger } from './dist/server/shared/logger.js';
      const result = await probeCustomerDb(JSON.parse(process.argv[1]), createMemoryLogger());
      process.stdout.write(JSON.stringify(result));`;
    const root = fileURLToPath(new URL('..', import.meta.url));
    const probeIn = (extraCa: string | undefined) =>
      new Promise<unknown>((resolve, reject) => {
        const env: NodeJS.ProcessEnv = { PATH: process.env.PATH };
        if (extraCa) env.NODE_EXTRA_CA_CERTS = extraCa;
        execFile(process.execPath, ['--input-type=module', '-e', script, JSON.stringify(config())], { cwd: root, env }, (err, stdout) =>
          err ? reject(err) : resolve(JSON.parse(stdout)),
        );
      });
    expect(await probeIn(PG_TEST_CA_FILE)).toEqual({ ok: true });
    expect(await probeIn(undefined)).toMatchObject({ ok: false, stage: 'tls' });
  });

  describe('a self-signed certificate', () => {
    beforeAll(() => pgServer.useCertificate('self-signed'), 30_000);
    afterAll(() => pgServer.useCertificate('trusted'), 30_000);

    it('fails verify at tls, even with the test CA', async () => {
      const result = await probeCustomerDb(config(), logger, { ca: PG_TEST_CA });
      expect(result).toMatchObject({ ok: false, stage: 'tls' });
      if (!result.ok) expect(result.message).toMatch(/self[- ]signed/i);
    });

    it('connects with no-verify', async () => {
      expect(await probeCustomerDb(config({ verify: false }), logger)).toEqual({ ok: true });
    });
  });

  describe('a server without TLS', () => {
    beforeAll(() => pgServer.setSsl(false), 30_000);
    afterAll(() => pgServer.setSsl(true), 30_000);

    it('fails at tls in both modes (the service never falls back to plain text)', async () => {
      for (const verify of [true, false]) {
        const result = await probeCustomerDb(config({ verify }), logger, { ca: PG_TEST_CA });
        expect(result).toEqual({ ok: false, stage: 'tls', message: 'TLS failed: the server does not accept TLS' });
      }
    });
  });
});

describe('probeCustomerDb: connect and login', () => {
  const logger = createMemoryLogger();

  it('a wrong password fails at login', async () => {
    const result = await probeCustomerDb(config({ password: 'wrong' }), logger, { ca: PG_TEST_CA });
    expect(result).toMatchObject({ ok: false, stage: 'login' });
    if (!result.ok) expect(result.message).toMatch(/^login failed: password authentication failed/);
  });

  it('a missing database fails at login', async () => {
    const result = await probeCustomerDb(config({ database: 'no_such_db' }), logger, { ca: PG_TEST_CA });
    expect(result).toMatchObject({ ok: false, stage: 'login' });
    if (!result.ok) expect(result.message).toMatch(/^login failed: the database does not exist/);
  });

  it('a closed port fails at connect, without naming the address', async () => {
    const result = await probeCustomerDb(config({ port: await closedPort() }), logger);
    expect(result).toEqual({ ok: false, stage: 'connect', message: 'could not connect: connection refused' });
  });

  it('a server that never answers fails at connect after the connect timeout', async () => {
    // Accepts TCP and says nothing: the SSLRequest waits for an answer that never comes.
    const silent = createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const address = silent.address();
    if (typeof address !== 'object' || !address) throw new Error('no port');
    const started = Date.now();
    const result = await probeCustomerDb(config({ port: address.port, connectionTimeoutMillis: 500 }), logger);
    silent.close();
    expect(result).toEqual({ ok: false, stage: 'connect', message: 'could not connect: timed out' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('neither PGPASSWORD nor ~/.pgpass stands in for a missing password', async () => {
    const home = mkdtempSync(join(tmpdir(), 'mailstead-pgpass-'));
    writeFileSync(join(home, '.pgpass'), `*:*:*:*:${pgServer.password}\n`, { mode: 0o600 });
    const saved = { PGPASSWORD: process.env.PGPASSWORD, PGPASSFILE: process.env.PGPASSFILE, HOME: process.env.HOME };
    process.env.PGPASSWORD = pgServer.password;
    process.env.PGPASSFILE = join(home, '.pgpass');
    process.env.HOME = home;
    try {
      for (const password of [undefined, '']) {
        const result = await probeCustomerDb(config({ password }), logger, { ca: PG_TEST_CA });
        expect(result).toMatchObject({ ok: false, stage: 'login' });
      }
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });
});

describe('classifyConnectError (the table)', () => {
  const withCode = (message: string, code?: string) => Object.assign(new Error(message), code ? { code } : {});
  it.each([
    [withCode('connect ECONNREFUSED 10.0.0.1:5432', 'ECONNREFUSED'), 'connect', 'could not connect: connection refused'],
    [withCode('connect ETIMEDOUT 10.0.0.1:5432', 'ETIMEDOUT'), 'connect', 'could not connect: the host did not answer'],
    [withCode('getaddrinfo ENOTFOUND db.example', 'ENOTFOUND'), 'connect', 'could not connect: the host name does not resolve'],
    [withCode('timeout expired'), 'connect', 'could not connect: timed out'],
    [withCode('Connection terminated unexpectedly'), 'connect', 'could not connect: the connection was closed'],
    [withCode('The server does not support SSL connections'), 'tls', 'TLS failed: the server does not accept TLS'],
    [withCode('self-signed certificate', 'DEPTH_ZERO_SELF_SIGNED_CERT'), 'tls', 'TLS failed: self-signed certificate'],
    [withCode('unable to verify the first certificate', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE'), 'tls', 'TLS failed: unable to verify the first certificate'],
    [
      withCode("Hostname/IP does not match certificate's altnames", 'ERR_TLS_CERT_ALTNAME_INVALID'),
      'tls',
      "TLS failed: Hostname/IP does not match certificate's altnames",
    ],
    [withCode('certificate has expired', 'CERT_HAS_EXPIRED'), 'tls', 'TLS failed: certificate has expired'],
    [
      withCode('password authentication failed for user "u"', '28P01'),
      'login',
      'login failed: password authentication failed (password authentication failed for user "u")',
    ],
    [withCode('no pg_hba.conf entry', '28000'), 'login', 'login failed: the server refused this user (no pg_hba.conf entry)'],
    [withCode('database "x" does not exist', '3D000'), 'login', 'login failed: the database does not exist (database "x" does not exist)'],
    [
      withCode('SASL: SCRAM-SERVER-FIRST-MESSAGE: client password must be a non-empty string'),
      'login',
      'login failed: the server asks for a password and none was given (SASL: SCRAM-SERVER-FIRST-MESSAGE: client password must be a non-empty string)',
    ],
    [withCode('relation "t" does not exist', '42P01'), 'other', 'the database answered with an error: relation "t" does not exist'],
  ])('%s', (err, stage, message) => {
    expect(classifyConnectError(err)).toEqual({ stage, message });
  });
});

describe('a server that vanishes', () => {
  it('under an idle pool: logged, the process stays up, the next query fails cleanly, then works after a restart', async () => {
    const logger = createMemoryLogger();
    const pool = openCustomerPool(config(), { max: 2, logger, ca: PG_TEST_CA });
    // Two idle connections in the pool.
    const [a, b] = await Promise.all([pool.connect(), pool.connect()]);
    a.release();
    b.release();
    expect(pool.idleCount).toBe(2);

    await pgServer.kill();
    await vi.waitFor(() => expect(logger.entries.filter((e) => e.event === 'customer_db.pool_error').length).toBeGreaterThanOrEqual(1), { timeout: 10_000 });

    await expect(pool.query('select 1')).rejects.toThrow();
    expect(classifyConnectError(await pool.query('select 1').catch((e: unknown) => e)).stage).toBe('connect');

    await pgServer.restart();
    await expect(pool.query('select 1 as one')).resolves.toMatchObject({ rows: [{ one: 1 }] });
    await pool.end();
    expect(uncaught).not.toHaveBeenCalled();
  }, 40_000);

  it('under a checked-out client: its error is logged, the query in flight rejects', async () => {
    const logger = createMemoryLogger();
    const pool = openCustomerPool(config(), { max: 2, logger, ca: PG_TEST_CA });
    const client = await pool.connect();
    const slow = client.query('select pg_sleep(30)').catch((e: unknown) => e);
    const idleHolder = await pool.connect(); // held, not idle: no pool-level listener on it
    await pgServer.kill();
    expect(await slow).toBeInstanceOf(Error);
    await vi.waitFor(() => expect(logger.entries.some((e) => e.event === 'customer_db.pool_error' && e.idle === false)).toBe(true), { timeout: 10_000 });
    client.release(true);
    idleHolder.release(true);
    await pgServer.restart();
    await pool.end();
    expect(uncaught).not.toHaveBeenCalled();
  }, 40_000);

  it('under a LISTEN client: logged, `lost` resolves, the process stays up', async () => {
    const logger = createMemoryLogger();
    const listener = await listenCustomerDb(config(), 'service', () => undefined, logger, { ca: PG_TEST_CA });
    await pgServer.kill();
    const lostWith = await listener.lost;
    expect(lostWith).toBeInstanceOf(Error);
    await vi.waitFor(() => expect(logger.entries.some((e) => e.event === 'customer_db.listen_error')).toBe(true), { timeout: 10_000 });
    await listener.close();
    await pgServer.restart();
    expect(uncaught).not.toHaveBeenCalled();
  }, 40_000);
});

describe('listenCustomerDb', () => {
  it('receives a NOTIFY sent by another client, on its channel only', async () => {
    const logger = createMemoryLogger();
    const got: Notification[] = [];
    const listener = await listenCustomerDb(config(), 'service', (n) => got.push(n), logger, { ca: PG_TEST_CA });
    const pool = openCustomerPool(config(), { logger, ca: PG_TEST_CA });
    await pool.query("select pg_notify('other', 'x')");
    await pool.query("NOTIFY service, '4f1c2a'");
    await vi.waitFor(() => expect(got.map((n) => n.payload)).toEqual(['4f1c2a']), { timeout: 5_000 });
    expect(got[0]?.channel).toBe('service');
    await pool.end();
    await listener.close();
    expect(logger.entries.filter((e) => e.level === 'warn')).toEqual([]);
  });
});

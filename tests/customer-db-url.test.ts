import dns from 'node:dns';
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  MAX_CUSTOMER_DB_URL_LENGTH,
  SSL_MODES,
  describeTarget,
  parseCustomerDbUrl,
  parseGivenCustomerDbUrl,
  pgClientConfig,
  resolveCustomerDbHost,
  sslModeOf,
  type CustomerDbTarget,
} from '../server/customer-db/url.js';
import { loadConfig } from '../server/shared/config.js';
import { createResolver } from '../server/shared/dns/resolver.js';
import { ApiError } from '../server/shared/errors.js';
import { TestDnsServer } from './helpers/dns-server.js';

/**
 * The customer database URL as untrusted input (docs/api/decisions.md section 8): what parseCustomerDbUrl refuses
 * and accepts as tables, the sslmode mapping as a table, that parsing reads no file and opens no connection, that the
 * pg config leaves nothing for pg to fill from PG* variables or ~/.pgpass, and the host check through a test DNS server.
 */

const SECRET = 'S3cr3t-pa55';

/** What parseCustomerDbUrl makes of a URL: the target, or the status, code and message it throws. */
function judge(raw: string): CustomerDbTarget | { status: number; code: string; message: string } {
  try {
    return parseGivenCustomerDbUrl(raw);
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    return { status: err.status, code: err.code, message: err.message };
  }
}

const longUrl = (n: number) => {
  const head = `postgresql://u:${SECRET}@db.example.com/`;
  return head + 'a'.repeat(n - head.length);
};

/** [why, url, a word the message must contain]. Every URL carries SECRET as its password where it has one. */
const REFUSED: [string, string, string][] = [
  ['the empty string', '', 'empty'],
  ['not a URL', 'db.example.com:5432/app', 'postgresql://'],
  ['another scheme', `mysql://u:${SECRET}@db.example.com/app`, 'postgresql://'],
  // docs/api/contract.md: invalid_url for a URL that is not postgresql://; the message says what to write instead.
  ['postgres:', `postgres://u:${SECRET}@db.example.com/app`, 'write it as postgresql://'],
  ['POSTGRES: in capitals', `POSTGRES://u:${SECRET}@db.example.com/app`, 'write it as postgresql://'],
  ['https', `https://u:${SECRET}@db.example.com/app`, 'postgresql://'],
  ['a socket: scheme', `socket:/var/run/postgresql/.s.PGSQL.5432`, 'Unix'],
  ['a unix: scheme', `unix:/var/run/postgresql?db=app`, 'Unix'],
  ['no slashes after the scheme', `postgresql:u:${SECRET}@db.example.com/app`, 'postgresql://'],
  ['one slash after the scheme', `postgresql:/u@db.example.com/app`, 'postgresql://'],
  ['no host', `postgresql://u:${SECRET}@/app`, 'no host'],
  ['no host, socket in the query', `postgresql://u:${SECRET}@/app?host=/var/run/postgresql`, '`host`'],
  ['no authority, socket in the query', `postgresql:///app?host=/tmp`, '`host`'],
  ['a host in the query beside one in the URL', `postgresql://u:${SECRET}@db.example.com/app?host=10.0.0.1`, '`host`'],
  ['a percent-encoded socket directory as host', `postgresql://u:${SECRET}@%2Fvar%2Frun%2Fpostgresql/app`, 'Unix'],
  ['a lower-case encoded socket directory', `postgresql://u:${SECRET}@%2ftmp/app`, 'Unix'],
  ['two hosts', `postgresql://u:${SECRET}@db1.example.com,db2.example.com/app`, 'several'],
  ['two hosts with ports', `postgresql://u:${SECRET}@db1.example.com:5432,db2.example.com:5433/app`, 'one host'],
  ['an encoded comma between hosts', `postgresql://u:${SECRET}@db1.example.com%2Cdb2.example.com/app`, 'several'],
  ['an encoded @ in the host', `postgresql://u:${SECRET}@evil.example%40db.example.com/app`, 'character'],
  ['an encoded colon in the host', `postgresql://u:${SECRET}@db.example.com%3A99/app`, 'character'],
  ['an invalid IPv4 spelling', `postgresql://u:${SECRET}@1.2.3.999/app`, 'host'],
  ['an IPv6 zone index', `postgresql://u:${SECRET}@[fe80::1%25eth0]/app`, 'postgresql://'],
  ['no user', `postgresql://db.example.com/app`, 'user name'],
  ['a password but no user', `postgresql://:${SECRET}@db.example.com/app`, 'user name'],
  ['port 0', `postgresql://u:${SECRET}@db.example.com:0/app`, 'port'],
  ['port 65536', `postgresql://u:${SECRET}@db.example.com:65536/app`, 'port'],
  ['a port that is not a number', `postgresql://u:${SECRET}@db.example.com:pg/app`, 'postgresql://'],
  ['two path segments', `postgresql://u:${SECRET}@db.example.com/app/extra`, 'single'],
  ['a database name over 63 bytes', `postgresql://u:${SECRET}@db.example.com/${'d'.repeat(64)}`, '63'],
  ['a user name over 63 bytes', `postgresql://${'u'.repeat(64)}:${SECRET}@db.example.com/app`, '63'],
  ['a NUL in the database name', `postgresql://u:${SECRET}@db.example.com/app%00x`, 'control'],
  ['a NUL in the password', `postgresql://u:${SECRET}%00@db.example.com/app`, 'NUL'],
  ['bad percent-encoding in the password', `postgresql://u:${SECRET}%E0@db.example.com/app`, 'password'],
  ['a fragment', `postgresql://u:${SECRET}@db.example.com/app#x`, 'fragment'],
  ['a space', `postgresql://u:${SECRET}@db.example.com/app ?sslmode=disable`, 'spaces'],
  ['a newline inside', `postgresql://u:${SECRET}@db.exa\nmple.com/app`, 'control'],
  ['a tab inside', `postgresql://u:${SECRET}@db.example.com/app?sslmode=verify\t`, 'control'],
  ['a leading space', ` postgresql://u:${SECRET}@db.example.com/app`, 'spaces'],
  ['2001 characters', longUrl(MAX_CUSTOMER_DB_URL_LENGTH + 1), 'longer'],
  ['sslmode twice', `postgresql://u:${SECRET}@db.example.com/app?sslmode=verify&sslmode=no-verify`, 'more than once'],
  ['sslmode without a value', `postgresql://u:${SECRET}@db.example.com/app?sslmode`, 'no value'],
  ['sslmode in capitals', `postgresql://u:${SECRET}@db.example.com/app?SSLMODE=require`, '`SSLMODE`'],
  ['a parameter name that is not plainly a name', `postgresql://u:${SECRET}@db.example.com/app?x%20y=1`, 'a query parameter'],
  // Every parameter that reads a file, changes where or how to connect, or overrides the service's own settings.
  ...[
    'sslrootcert=/etc/passwd',
    'sslcert=/etc/ssl/private/key.pem',
    'sslkey=/etc/ssl/private/key.pem',
    'sslcrl=/etc/crl.pem',
    'sslcrldir=/etc/crl',
    'sslpassword=x',
    'passfile=/root/.pgpass',
    'service=prod',
    'options=-c%20search_path%3Dpublic',
    'replication=database',
    'hostaddr=127.0.0.1',
    'port=5433',
    'dbname=other',
    'user=postgres',
    'password=x',
    'target_session_attrs=read-write',
    'gssencmode=prefer',
    'krbsrvname=postgres',
    'channel_binding=require',
    'connect_timeout=10',
    'application_name=x',
    'ssl=true',
    'sslnegotiation=direct',
    'client_encoding=LATIN1',
    'requiressl=0',
    'load_balance_hosts=random',
  ].map((q): [string, string, string] => [`?${q}`, `postgresql://u:${SECRET}@db.example.com/app?sslmode=require&${q}`, `\`${q.split('=')[0]}\``]),
];

it('a postgres:// URL stored before POST /database refused that scheme still connects: the stored form is read leniently', () => {
  expect(parseCustomerDbUrl(`postgres://u:${SECRET}@db.example.com/app`)).toEqual(T({}));
});

describe('parseGivenCustomerDbUrl refuses', () => {
  it.each(REFUSED)('%s', (_why, raw, named) => {
    const got = judge(raw);
    expect(got).toMatchObject({ status: 422, code: 'invalid_url' });
    const message = (got as { message: string }).message;
    expect(message).toContain(named);
    // Never the password, in any spelling.
    expect(message).not.toContain(SECRET);
    expect(message).not.toContain('5ecr3t');
  });

  it('refuses a password sitting in the query without echoing it', () => {
    const got = judge(`postgresql://u@db.example.com/app?password=${SECRET}`);
    expect(got).toMatchObject({ status: 422, code: 'invalid_url' });
    expect((got as { message: string }).message).not.toContain(SECRET);
  });
});

const T = (over: Partial<CustomerDbTarget>): CustomerDbTarget => ({
  host: 'db.example.com',
  port: 5432,
  database: 'app',
  user: 'u',
  password: SECRET,
  sslMode: 'verify',
  ...over,
});

const ACCEPTED: [string, string, CustomerDbTarget][] = [
  ['the plain form', `postgresql://u:${SECRET}@db.example.com/app`, T({})],
  ['a scheme in capitals', `PostgreSQL://u:${SECRET}@db.example.com/app`, T({})],
  ['a port', `postgresql://u:${SECRET}@db.example.com:6543/app`, T({ port: 6543 })],
  ['port 1', `postgresql://u:${SECRET}@db.example.com:1/app`, T({ port: 1 })],
  ['port 65535', `postgresql://u:${SECRET}@db.example.com:65535/app`, T({ port: 65535 })],
  ['no password', `postgresql://u@db.example.com/app`, T({ password: '' })],
  ['an empty password', `postgresql://u:@db.example.com/app`, T({ password: '' })],
  ['a percent-encoded password', `postgresql://u:p%40ss%3Aw%2Fo%25rd@db.example.com/app`, T({ password: 'p@ss:w/o%rd' })],
  ['an @ left raw in the password', `postgresql://u:p@ss@db.example.com/app`, T({ password: 'p@ss' })],
  ['a percent-encoded user', `postgresql://app%2Euser%40corp:${SECRET}@db.example.com/app`, T({ user: 'app.user@corp' })],
  ['no database: the user name', `postgresql://owner:${SECRET}@db.example.com`, T({ user: 'owner', database: 'owner' })],
  ['a bare slash: the user name', `postgresql://owner:${SECRET}@db.example.com/`, T({ user: 'owner', database: 'owner' })],
  ['a percent-encoded database', `postgresql://u:${SECRET}@db.example.com/my%20db%2Fx`, T({ database: 'my db/x' })],
  ['a non-ASCII database', `postgresql://u:${SECRET}@db.example.com/d%C3%A9j%C3%A0`, T({ database: 'déjà' })],
  ['a 63-byte database name', `postgresql://u:${SECRET}@db.example.com/${'d'.repeat(63)}`, T({ database: 'd'.repeat(63) })],
  ['a host in capitals with the root dot', `postgresql://u:${SECRET}@DB.Example.COM./app`, T({})],
  ['an IDN host', `postgresql://u:${SECRET}@bücher.example/app`, T({ host: 'xn--bcher-kva.example' })],
  ['an IPv4 host', `postgresql://u:${SECRET}@8.8.8.8/app`, T({ host: '8.8.8.8' })],
  ['a hex IPv4 host, as the address it is', `postgresql://u:${SECRET}@0x7f000001/app`, T({ host: '127.0.0.1' })],
  ['a decimal IPv4 host', `postgresql://u:${SECRET}@134744072/app`, T({ host: '8.8.8.8' })],
  ['an IPv6 host', `postgresql://u:${SECRET}@[2606:4700:4700:0::1111]:5433/app`, T({ host: '2606:4700:4700::1111', port: 5433 })],
  ['localhost (refused later, by the address check)', `postgresql://u:${SECRET}@localhost/app`, T({ host: 'localhost' })],
  ['sslmode=require', `postgresql://u:${SECRET}@db.example.com/app?sslmode=require`, T({})],
  ['sslmode=no-verify', `postgresql://u:${SECRET}@db.example.com/app?sslmode=no-verify`, T({ sslMode: 'no-verify' })],
  ['an empty query', `postgresql://u:${SECRET}@db.example.com/app?`, T({})],
  ['a stray &', `postgresql://u:${SECRET}@db.example.com/app?&sslmode=verify-full&`, T({})],
];

describe('parseCustomerDbUrl accepts', () => {
  it.each(ACCEPTED)('%s', (_why, raw, target) => {
    expect(judge(raw)).toEqual(target);
  });

  it('the length bound is 2000 characters, inclusive', () => {
    // A 2000-character URL is judged on its parts (here a too-long database name), not on its length.
    const at = judge(longUrl(MAX_CUSTOMER_DB_URL_LENGTH));
    expect(at).toMatchObject({ code: 'invalid_url' });
    expect((at as { message: string }).message).toContain('63 bytes');
    const head = `postgresql://u:`;
    const tail = `@db.example.com/app`;
    const pw = 'p'.repeat(MAX_CUSTOMER_DB_URL_LENGTH - head.length - tail.length);
    expect((head + pw + tail).length).toBe(2000);
    expect(judge(head + pw + tail)).toEqual(T({ password: pw }));
    expect(judge(`${head + pw}p${tail}`)).toMatchObject({ code: 'invalid_url' });
  });
});

describe('sslmode', () => {
  const cases: [string | undefined, 'verify' | 'no-verify' | 'refused'][] = [
    [undefined, 'verify'],
    ['verify', 'verify'],
    ['require', 'verify'],
    ['verify-ca', 'verify'],
    ['verify-full', 'verify'],
    ['no-verify', 'no-verify'],
    ['disable', 'refused'],
    ['allow', 'refused'],
    ['prefer', 'refused'],
    ['', 'refused'],
    ['Require', 'refused'],
    ['true', 'refused'],
    ['noverify', 'refused'],
    ['constructor', 'refused'],
    ['__proto__', 'refused'],
  ];
  it.each(cases)('%s -> %s', (value, expected) => {
    const raw = `postgresql://u:${SECRET}@db.example.com/app${value === undefined ? '' : `?sslmode=${value}`}`;
    const got = judge(raw);
    if (expected === 'refused') {
      expect(got).toMatchObject({ status: 422, code: 'invalid_url' });
      expect((got as { message: string }).message).toContain('sslmode');
      expect(() => sslModeOf(value)).toThrow(ApiError);
    } else {
      expect(got).toEqual(T({ sslMode: expected }));
      expect(sslModeOf(value)).toBe(expected);
    }
  });

  it('the table is the docs/api/decisions.md section 8 table', () => {
    expect(SSL_MODES).toEqual({
      verify: 'verify',
      require: 'verify',
      'verify-ca': 'verify',
      'verify-full': 'verify',
      'no-verify': 'no-verify',
      disable: 'refused',
      allow: 'refused',
      prefer: 'refused',
    });
  });
});

describe('parsing reads no file and opens no connection', () => {
  afterEach(() => {
    vi.restoreAllMocks();
    syncBuiltinESMExports();
  });

  it('refuses sslrootcert=/etc/passwd and the others with fs, dns and net spied', () => {
    const fsSpies = (['readFileSync', 'readFile', 'openSync', 'open', 'statSync', 'stat', 'existsSync', 'accessSync', 'createReadStream'] as const).map(
      (name) => vi.spyOn(fs, name),
    );
    const promiseSpies = (['readFile', 'open', 'stat', 'access'] as const).map((name) => vi.spyOn(fs.promises, name));
    const dnsSpies = [vi.spyOn(dns, 'lookup'), vi.spyOn(dns, 'resolve'), vi.spyOn(dns.promises, 'lookup')];
    const netSpies = [vi.spyOn(net, 'connect'), vi.spyOn(net, 'createConnection'), vi.spyOn(net.Socket.prototype, 'connect')];
    syncBuiltinESMExports();
    for (const [, raw] of REFUSED) expect(() => parseGivenCustomerDbUrl(raw)).toThrow(ApiError);
    for (const [, raw] of ACCEPTED) parseGivenCustomerDbUrl(raw);
    for (const spy of [...fsSpies, ...promiseSpies, ...dnsSpies, ...netSpies]) expect(spy).not.toHaveBeenCalled();
  });

  it('takes no deps: the function is the URL in, a target out', () => {
    expect(parseCustomerDbUrl.length).toBe(1);
  });
});

describe('describeTarget', () => {
  it('gives the status fields and never the password', () => {
    const t = parseCustomerDbUrl(`postgresql://u:${SECRET}@db.example.com:6543/app?sslmode=no-verify`);
    const shown = describeTarget(t);
    expect(shown).toEqual({ host: 'db.example.com', port: 6543, database: 'app', user: 'u', sslMode: 'no-verify' });
    expect(JSON.stringify(shown)).not.toContain(SECRET);
  });
});

describe('pgClientConfig', () => {
  const OPTS = { connectTimeoutMs: 5000, statementTimeoutMs: 15_000, idleInTransactionTimeoutMs: 20_000 };
  const ENV = {
    PGHOST: '10.9.9.9',
    PGHOSTADDR: '10.9.9.8',
    PGUSER: 'env_user',
    PGPASSWORD: 'env_password',
    PGDATABASE: 'env_db',
    PGPORT: '6000',
    PGSSLMODE: 'disable',
    PGOPTIONS: '-c search_path=attacker',
    PGREPLICATION: 'database',
    PGAPPNAME: 'env_app',
    PGCLIENT_ENCODING: 'LATIN1',
    PGSSLNEGOTIATION: 'direct',
    PGCONNECT_TIMEOUT: '999',
    PGBINARY: 'true',
  };
  let pgpassDir: string;
  const saved: Record<string, string | undefined> = {};

  beforeAll(() => {
    pgpassDir = fs.mkdtempSync(join(tmpdir(), 'mailstead-pgpass-'));
    const passfile = join(pgpassDir, 'pgpass');
    fs.writeFileSync(passfile, '*:*:*:*:from_pgpass\n', { mode: 0o600 });
    for (const [k, v] of Object.entries({ ...ENV, PGPASSFILE: passfile })) {
      saved[k] = process.env[k];
      process.env[k] = v;
    }
  });
  afterAll(() => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    fs.rmSync(pgpassDir, { recursive: true, force: true });
  });

  type Internals = { connectionParameters: Record<string, unknown>; password: unknown; binary: unknown; _getPassword(cb: () => void): void };
  const internals = (c: pg.Client) => c as unknown as Internals;
  const passwordOf = (c: pg.Client) =>
    new Promise<unknown>((resolve) => {
      const i = internals(c);
      i._getPassword(() => resolve(i.password));
    });

  it('sets every field explicitly: with PG* set and a ~/.pgpass entry, pg takes none of them', async () => {
    for (const password of [SECRET, '']) {
      const t = T({ password, host: 'db.example.com', port: 6543 });
      const config = pgClientConfig(t, '203.0.113.7', OPTS);
      const client = new pg.Client(config);
      const p = internals(client).connectionParameters;
      expect(p).toMatchObject({
        host: '203.0.113.7',
        port: 6543,
        user: 'u',
        database: 'app',
        ssl: { servername: 'db.example.com', rejectUnauthorized: true },
        sslnegotiation: 'postgres',
        options: '-c client_encoding=UTF8',
        replication: 'false',
        application_name: 'mailstead',
        client_encoding: 'utf8',
        connect_timeout: 5,
        statement_timeout: 15_000,
        idle_in_transaction_session_timeout: 20_000,
        isDomainSocket: false,
      });
      expect(internals(client).binary).toBe(false);
      // The password as pg will send it: ours, even when empty (no PGPASSWORD, no pgpass).
      expect(await passwordOf(client)).toBe(password);
      expect(JSON.stringify(p)).not.toMatch(/env_|attacker|LATIN1|10\.9\.9|from_pgpass/);
    }
  });

  it('the naive config would have taken them (the test above can fail)', async () => {
    // PGSSLNEGOTIATION=direct with PGSSLMODE=disable makes pg throw at construction: left out for the naive configs.
    delete process.env.PGSSLNEGOTIATION;
    // The naive config reaches pg's pgpass lookup, which pg flags as deprecated: expected here, so not printed.
    const noDeprecation = process.noDeprecation;
    process.noDeprecation = true;
    try {
      const naive = new pg.Client({ host: '203.0.113.7', user: 'u', password: '', database: '' });
      const p = internals(naive).connectionParameters;
      expect(p).toMatchObject({ database: 'env_db', options: '-c search_path=attacker', replication: 'database', application_name: 'env_app', ssl: false });
      // An empty password string is falsy: pg takes PGPASSWORD instead.
      expect(await passwordOf(naive)).toBe('env_password');
      // Without PGPASSWORD, a missing password makes pg read the pgpass file.
      delete process.env.PGPASSWORD;
      const noPassword = new pg.Client({ host: '203.0.113.7', user: 'u', database: 'app' });
      expect(await passwordOf(noPassword)).toBe('from_pgpass');
    } finally {
      process.noDeprecation = noDeprecation;
      process.env.PGSSLNEGOTIATION = ENV.PGSSLNEGOTIATION;
      process.env.PGPASSWORD = ENV.PGPASSWORD;
    }
  });

  it('has every field defined', () => {
    const config = pgClientConfig(T({}), '203.0.113.7', { ...OPTS, ca: 'PEM' });
    for (const [k, v] of Object.entries(config)) expect(v, k).not.toBeUndefined();
    expect(config).not.toHaveProperty('connectionString');
    expect(config.ssl).toEqual({ servername: 'db.example.com', rejectUnauthorized: true, ca: 'PEM' });
    expect(config.password()).toBe(SECRET);
    expect(config.query_timeout).toBeGreaterThan(OPTS.statementTimeoutMs);
  });

  it('no-verify skips verification only; an IP-literal host sends no servername', () => {
    expect(pgClientConfig(T({ sslMode: 'no-verify' }), '203.0.113.7', OPTS).ssl).toEqual({ servername: 'db.example.com', rejectUnauthorized: false });
    expect(pgClientConfig(T({ host: '8.8.8.8' }), '8.8.8.8', OPTS).ssl).toEqual({ rejectUnauthorized: true });
    expect(pgClientConfig(T({ host: '2606:4700:4700::1111' }), '2606:4700:4700::1111', OPTS).ssl).toEqual({ rejectUnauthorized: true });
  });

  it('does not show the password when the config is logged', () => {
    const config = pgClientConfig(T({}), '203.0.113.7', OPTS);
    expect(JSON.stringify(config)).not.toContain(SECRET);
  });
});

describe('resolveCustomerDbHost', () => {
  let dnsServer: TestDnsServer;
  beforeAll(async () => {
    dnsServer = await TestDnsServer.start();
    dnsServer.add('public.customer-db.test', { type: 'A', address: '1.1.1.1' });
    dnsServer.add('public.customer-db.test', { type: 'AAAA', address: '2606:4700:4700::1111' });
    dnsServer.add('private.customer-db.test', { type: 'A', address: '10.0.0.5' });
    dnsServer.add('loopback.customer-db.test', { type: 'A', address: '127.0.0.1' });
    dnsServer.add('metadata.customer-db.test', { type: 'A', address: '169.254.169.254' });
    dnsServer.add('mixed.customer-db.test', { type: 'A', address: '8.8.8.8' });
    dnsServer.add('mixed.customer-db.test', { type: 'AAAA', address: 'fd00::1' });
    dnsServer.add('empty.customer-db.test', { type: 'TXT', data: 'nothing' });
    dnsServer.fail('servfail.customer-db.test');
  });
  afterAll(async () => {
    await dnsServer.stop();
  });

  function depsFor(allowPrivateTargets: boolean) {
    const config = loadConfig({ DATA_DIR: '/nonexistent', DNS_SERVERS: dnsServer.address, ALLOW_PRIVATE_TARGETS: String(allowPrivateTargets) });
    return { config, resolver: createResolver({ servers: config.dnsServers, timeoutMs: 1000 }) };
  }
  /** From the URL, as the endpoints will: parse, then check the parsed host. */
  const check = (host: string, allow = false) => resolveCustomerDbHost(depsFor(allow), parseCustomerDbUrl(`postgresql://u@${host}/app`).host);

  const cases: [string, string, boolean, unknown][] = [
    ['a public name', 'public.customer-db.test', false, { kind: 'ok', addresses: ['1.1.1.1', '2606:4700:4700::1111'] }],
    ['a public IPv4 literal', '8.8.8.8', false, { kind: 'ok', addresses: ['8.8.8.8'] }],
    ['a public IPv6 literal', '[2606:4700:4700::1111]', false, { kind: 'ok', addresses: ['2606:4700:4700::1111'] }],
    ['a name with a private A', 'private.customer-db.test', false, { kind: 'blocked' }],
    ['a name resolving to loopback', 'loopback.customer-db.test', false, { kind: 'blocked' }],
    ['a name resolving to the metadata address', 'metadata.customer-db.test', false, { kind: 'blocked' }],
    ['a public A and a private AAAA', 'mixed.customer-db.test', false, { kind: 'blocked' }],
    ['localhost', 'localhost', false, { kind: 'blocked' }],
    ['a hex loopback', '0x7f000001', false, { kind: 'blocked' }],
    ['an IPv6 loopback', '[::1]', false, { kind: 'blocked' }],
    ['an IPv4-mapped loopback', '[::ffff:127.0.0.1]', false, { kind: 'blocked' }],
    ['a private literal', '192.168.1.10', false, { kind: 'blocked' }],
    ['NXDOMAIN', 'missing.customer-db.test', false, { kind: 'dns_error', reason: 'nxdomain' }],
    ['a name without addresses', 'empty.customer-db.test', false, { kind: 'dns_error', reason: 'no_address' }],
    ['a failing server', 'servfail.customer-db.test', false, { kind: 'dns_error' }],
    ['private, with ALLOW_PRIVATE_TARGETS', 'private.customer-db.test', true, { kind: 'ok', addresses: ['10.0.0.5'] }],
    ['mixed, with ALLOW_PRIVATE_TARGETS', 'mixed.customer-db.test', true, { kind: 'ok', addresses: ['8.8.8.8', 'fd00::1'] }],
    ['localhost, with ALLOW_PRIVATE_TARGETS', 'localhost', true, { kind: 'ok', addresses: ['127.0.0.1', '::1'] }],
    ['NXDOMAIN, with ALLOW_PRIVATE_TARGETS', 'missing.customer-db.test', true, { kind: 'dns_error', reason: 'nxdomain' }],
  ];
  it.each(cases)('%s', async (_why, host, allow, expected) => {
    expect(await check(host, allow)).toMatchObject(expected as object);
  });

  it('a blocked answer names no address', async () => {
    expect(await check('mixed.customer-db.test')).toEqual({ kind: 'blocked' });
  });
});

/**
 * The TLS half of pgClientConfig against a stand-in Postgres on loopback (the SSLRequest answered 'S', then TLS with the
 * webhook test certificate, for *.webhooks.test, localhost and 127.0.0.1; then a FATAL error naming the handshake as
 * done). pg connects to the checked address, and the certificate is verified against the URL's name: a name the
 * certificate does not carry fails even though the address 127.0.0.1 is in it. The real-Postgres tests are elsewhere.
 */
describe('pgClientConfig over TLS: the address is dialled, the name is verified', () => {
  const FIXTURES = new URL('./fixtures/webhook-tls/', import.meta.url);
  let server: net.Server;
  let port = 0;
  let useSelfSigned = false;
  const seen: { servername: string | false | null }[] = [];

  const errorResponse = (message: string) => {
    const body = Buffer.concat([Buffer.from(`SFATAL\0C28000\0M${message}\0\0`, 'utf8')]);
    const head = Buffer.alloc(5);
    head.write('E', 0);
    head.writeInt32BE(body.length + 4, 1);
    return Buffer.concat([head, body]);
  };

  beforeAll(async () => {
    const { TLSSocket } = await import('node:tls');
    const creds = () =>
      useSelfSigned
        ? { key: fs.readFileSync(new URL('self-signed.key', FIXTURES)), cert: fs.readFileSync(new URL('self-signed.pem', FIXTURES)) }
        : { key: fs.readFileSync(new URL('server.key', FIXTURES)), cert: fs.readFileSync(new URL('server.pem', FIXTURES)) };
    server = net.createServer((socket) => {
      socket.on('error', () => {});
      socket.once('data', (first) => {
        // SSLRequest: length 8, code 80877103.
        if (first.length !== 8 || first.readInt32BE(4) !== 80877103) return socket.destroy();
        socket.write('S');
        const tls = new TLSSocket(socket, { isServer: true, ...creds() });
        tls.on('error', () => {});
        tls.once('secure', () => seen.push({ servername: (tls as unknown as { servername: string | false | null }).servername }));
        tls.once('data', () => tls.end(errorResponse('stand-in: tls handshake done')));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  const OPTS = { connectTimeoutMs: 3000, statementTimeoutMs: 3000, idleInTransactionTimeoutMs: 3000 };
  async function connect(url: string, selfSigned = false): Promise<string> {
    useSelfSigned = selfSigned;
    const t = { ...parseCustomerDbUrl(url), port };
    const client = new pg.Client(pgClientConfig(t, '127.0.0.1', OPTS));
    client.on('error', () => {});
    try {
      await client.connect();
      return 'connected';
    } catch (err) {
      return (err as Error).message;
    } finally {
      await client.end().catch(() => {});
    }
  }

  it('verify: a name the certificate carries passes, sent as SNI', async () => {
    seen.length = 0;
    expect(await connect('postgresql://u:pw@db.webhooks.test/app')).toBe('stand-in: tls handshake done');
    expect(seen).toEqual([{ servername: 'db.webhooks.test' }]);
  });

  it('verify: a name the certificate does not carry fails, though the address it dials is in the certificate', async () => {
    seen.length = 0;
    expect(await connect('postgresql://u:pw@db.other.test/app')).toMatch(/altnames|Hostname\/IP does not match/);
    expect(await connect('postgresql://u:pw@db.other.test/app?sslmode=verify-ca')).toMatch(/altnames|Hostname\/IP does not match/);
    expect(seen).toEqual([]);
  });

  it('a self-signed certificate: refused by verify, accepted by no-verify only', async () => {
    expect(await connect('postgresql://u:pw@db.webhooks.test/app?sslmode=require', true)).toMatch(/self[- ]signed/i);
    expect(await connect('postgresql://u:pw@db.webhooks.test/app?sslmode=no-verify', true)).toBe('stand-in: tls handshake done');
  });

  it('an IP-literal host is verified against the address, with no SNI', async () => {
    seen.length = 0;
    expect(await connect('postgresql://u:pw@127.0.0.1/app')).toBe('stand-in: tls handshake done');
    expect(seen).toEqual([{ servername: false }]);
  });
});

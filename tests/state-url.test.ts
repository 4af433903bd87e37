import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../server/shared/config.js';
import { ROOT } from './helpers/service-process.js';
import { isLoopbackHost, parseStateUrl } from '../server/shared/state-url.js';

/** STATE_URL as docs/api/decisions.md section 11 reads it: TLS verified unless told, plain text on loopback only. */

const KEY = 'ab'.repeat(32);
/** SMTP off: no STARTTLS pair is needed. */
const NO_SMTP = { SMTP_PORT: '0', SUBMISSION_PORT: '0', SUBMISSIONS_PORT: '0' };
/** A readable pair (the config module checks only that the files can be read). */
const PAIR = { SMTP_TLS_CERT: `${ROOT}/tests/fixtures/webhook-tls/server.pem`, SMTP_TLS_KEY: `${ROOT}/tests/fixtures/webhook-tls/server.key` };
const noFile = (path: string): string => {
  throw new Error(`ENOENT: ${path}`);
};

describe('a STATE_URL that is taken', () => {
  it.each([
    [
      'postgresql://mail:s3cret@db.example.com:6432/state',
      { host: 'db.example.com', port: 6432, database: 'state', user: 'mail', password: 's3cret', ssl: { verify: true, ca: null } },
    ],
    ['postgres://mail@db.example.com/state', { host: 'db.example.com', port: 5432, password: '', ssl: { verify: true, ca: null } }],
    ['postgresql://mail:p@db.example.com/state?sslmode=verify-full', { ssl: { verify: true, ca: null } }],
    ['postgresql://mail:p@db.example.com/state?sslmode=require', { ssl: { verify: true, ca: null } }],
    ['postgresql://mail:p@db.example.com/state?sslmode=no-verify', { ssl: { verify: false, ca: null } }],
    ['postgresql://mail:p@127.0.0.1/state?sslmode=disable', { host: '127.0.0.1', ssl: false }],
    ['postgresql://mail:p@localhost/state?sslmode=disable', { host: 'localhost', ssl: false }],
    ['postgresql://mail:p@[::1]:5433/state?sslmode=disable', { host: '::1', port: 5433, ssl: false }],
    ['postgresql://m%40il:p%2Fw@db.example.com/st%20ate', { user: 'm@il', password: 'p/w', database: 'st ate' }],
  ])('%s', (url, expected) => {
    expect(parseStateUrl(url, noFile)).toMatchObject(expected);
  });

  it('reads the CA that sslrootcert names, and never shows the password', () => {
    const target = parseStateUrl('postgresql://mail:s3cret@db.example.com/state?sslrootcert=/etc/ca.pem', (p) => `PEM of ${p}`);
    expect(target.ssl).toEqual({ verify: true, ca: 'PEM of /etc/ca.pem' });
    expect(target.shown).not.toContain('s3cret');
    expect(target.shown).toContain('db.example.com');
  });
});

describe('a STATE_URL that is refused, saying why', () => {
  it.each([
    ['not a url', /postgresql:\/\/ URL/],
    ['mysql://u@h/db', /postgresql:\/\//],
    ['postgresql://u@/db', /host/],
    ['postgresql://u@h:0/db', /port/],
    ['postgresql://u@h', /database/],
    ['postgresql://h/db', /user/],
    ['postgresql://u@h/db?host=/tmp', /"host"/],
    ['postgresql://u@h/db?sslmode=prefer', /sslmode=prefer/],
    ['postgresql://u@h/db?sslmode=allow', /sslmode=allow/],
    ['postgresql://u@h/db?sslmode=bogus', /sslmode=bogus/],
    ['postgresql://u@db.example.com/db?sslmode=disable', /not loopback/],
    ['postgresql://u@10.0.0.5/db?sslmode=disable', /not loopback/],
    ['postgresql://u@h/db?sslmode=no-verify&sslrootcert=/ca.pem', /sslrootcert/],
    ['postgresql://u@h/db?sslrootcert=/missing.pem', /cannot be read/],
    ['postgresql://u%ZZ@h/db', /percent-escape/],
  ])('%s', (url, why) => {
    expect(() => parseStateUrl(url, noFile)).toThrow(why);
  });
});

describe('loopback', () => {
  it.each([
    ['127.0.0.1', true],
    ['127.8.9.10', true],
    ['::1', true],
    ['localhost', true],
    ['db.localhost', true],
    ['10.0.0.1', false],
    ['db.example.com', false],
    ['::ffff:10.0.0.1', false],
  ])('%s: %s', (host, loopback) => expect(isLoopbackHost(host)).toBe(loopback));
});

describe('STATE_URL in the configuration', () => {
  it('unset: the state is SQLite in DATA_DIR', () => {
    expect(loadConfig({}).state).toEqual({ engine: 'sqlite' });
  });

  it('set, with SECRET_KEY given or off: the state is on Postgres', () => {
    const config = loadConfig({ STATE_URL: 'postgresql://mail:p@db.example.com/state', SECRET_KEY: KEY, ...NO_SMTP });
    expect(config.state).toMatchObject({ engine: 'postgres', target: { host: 'db.example.com', database: 'state' } });
    expect(loadConfig({ STATE_URL: 'postgresql://mail:p@db.example.com/state', SECRET_KEY: 'off', ...PAIR }).state.engine).toBe('postgres');
  });

  it('set without SECRET_KEY: refused, since no node could generate it for the others', () => {
    expect(() => loadConfig({ STATE_URL: 'postgresql://mail:p@db.example.com/state' })).toThrow(/SECRET_KEY must be given when STATE_URL is set/);
  });

  it('a bad STATE_URL is named in the one line of problems', () => {
    expect(() => loadConfig({ STATE_URL: 'postgresql://u@db.example.com/db?sslmode=disable', SECRET_KEY: KEY, ...NO_SMTP })).toThrow(
      /invalid configuration: STATE_URL has sslmode=disable for db.example.com/,
    );
  });
});

describe('the STARTTLS pair with STATE_URL', () => {
  const STATE = { STATE_URL: 'postgresql://mail:p@db.example.com/state', SECRET_KEY: KEY };
  const REFUSED = /SMTP_TLS_CERT and SMTP_TLS_KEY must be given when STATE_URL is set and SMTP listens/;

  it.each([
    ['inbound SMTP and submission on (the defaults)', {}],
    ['inbound SMTP alone', { ...NO_SMTP, SMTP_PORT: '2525' }],
    ['submission alone', { ...NO_SMTP, SUBMISSION_PORT: '2587' }],
    ['implicit-TLS submission alone', { ...NO_SMTP, SUBMISSIONS_PORT: '2465' }],
  ])('not given, with %s: refused, since no node could generate it for the others', (_name, ports) => {
    expect(() => loadConfig({ ...STATE, ...ports })).toThrow(REFUSED);
  });

  it('given, or no SMTP port on: taken', () => {
    expect(loadConfig({ ...STATE, ...PAIR }).smtpTlsCert).toBe(PAIR.SMTP_TLS_CERT);
    expect(loadConfig({ ...STATE, ...NO_SMTP }).smtpTlsCert).toBeNull();
  });

  it('without STATE_URL it is generated into DATA_DIR as before: not required', () => {
    expect(loadConfig({}).smtpTlsCert).toBeNull();
  });

  it('a start refused for it: exit 1 and one line on stderr naming both variables', async () => {
    const child = spawn(process.execPath, ['dist/server/app/main.js'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', ...STATE, DATA_DIR: '/nonexistent/mailstead-never-made', SMTP_PORT: '2525' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code).toBe(1);
    expect(stderr.split('\n').filter(Boolean)).toEqual([
      'mailstead: invalid configuration: SMTP_TLS_CERT and SMTP_TLS_KEY must be given when STATE_URL is set and SMTP listens (SMTP_PORT, SUBMISSION_PORT or SUBMISSIONS_PORT not 0)',
    ]);
  });
});

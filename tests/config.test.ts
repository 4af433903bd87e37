import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { configTable } from '../scripts/config-table.js';
import { ConfigError, loadConfig, mailHostnameProblem } from '../server/shared/config.js';
import { resolveSecretKey } from '../server/app/deps.js';
import { decryptSecret, encryptSecret } from '../server/shared/secrets.js';

/**
 * The operator contract of docs/api/decisions.md section 1: every variable's default, a bad value stopping the start with one
 * line naming the variable, the secret key (given, generated into DATA_DIR, or off), and the documented table
 * (docs/operating/configuration.md).
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function configError(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
}

describe('defaults (docs/api/decisions.md section 1)', () => {
  const config = loadConfig({});

  it.each([
    ['DATA_DIR', config.dataDir, './data'],
    ['HTTP_HOST', config.httpHost, '0.0.0.0'],
    ['HTTP_PORT', config.httpPort, 8080],
    ['SMTP_HOST', config.smtpHost, '0.0.0.0'],
    ['SMTP_PORT', config.smtpPort, 25],
    ['SMTP_MAX_MESSAGE_BYTES', config.smtpMaxMessageBytes, 26214400],
    ['SMTP_DELIVERY_PORT', config.smtpDeliveryPort, 25],
    ['DELIVERY_MODE', config.deliveryMode, 'direct'],
    ['ALLOW_PRIVATE_TARGETS', config.allowPrivateTargets, false],
    ['WEBHOOK_INTERVAL_MS', config.webhookIntervalMs, 60000],
    ['DEFAULT_DAILY_QUOTA', config.defaultDailyQuota, 10000],
    ['TRIAL_DAYS', config.trialDays, 14],
    ['GRACE_DAYS', config.graceDays, 3],
    ['GRACE_EMAILS', config.graceEmails, 100],
    ['LOG_LEVEL', config.logLevel, 'info'],
    ['SMTP_TLS_CERT', config.smtpTlsCert, null],
    ['SMTP_TLS_KEY', config.smtpTlsKey, null],
    ['DNS_SERVERS', config.dnsServers, null],
    ['SMTP_RELAY_URL', config.smtpRelayUrl, null],
    ['ADMIN_TOKEN', config.adminToken, null],
    ['SMTP_PROXY_PROTOCOL', config.smtpProxyProtocol, false],
    ['TRUST_PROXY', config.trustProxy.entries, []],
  ])('%s defaults to %j', (_name, actual, expected) => {
    expect(actual).toEqual(expected);
  });

  it('MAIL_HOSTNAME defaults to the machine hostname, SPF_DOMAIN to MAIL_HOSTNAME', () => {
    expect(config.mailHostname).toBe(hostname().toLowerCase());
    expect(config.spfDomain).toBe(config.mailHostname);
  });

  it('an unset MAIL_HOSTNAME is the machine name when that is a host name, else localhost (the start warns)', async () => {
    vi.resetModules();
    vi.doMock('node:os', async (original) => ({ ...(await original<typeof import('node:os')>()), hostname: () => 'My_Box' }));
    try {
      const { loadConfig: load, mailHostnameProblem } = await import('../server/shared/config.js');
      expect(load({})).toMatchObject({ mailHostname: 'localhost', spfDomain: 'localhost' });
      expect(mailHostnameProblem('localhost')).toContain('not a fully qualified name');
      expect(load({ MAIL_HOSTNAME: 'mx.example.net' }).mailHostname).toBe('mx.example.net');
    } finally {
      vi.doUnmock('node:os');
      vi.resetModules();
    }
  });

  it('a refused name or number says the value it got and what it must be', () => {
    const problem = (env: Record<string, string>) => {
      try {
        loadConfig(env);
      } catch (err) {
        return (err as Error).message;
      }
      throw new Error('accepted');
    };
    expect(problem({ MAIL_HOSTNAME: 'mail.example.com.' })).toContain(
      'MAIL_HOSTNAME must be a host name (letters, digits and hyphens in dot-separated labels of at most 63, no trailing dot), got "mail.example.com."',
    );
    expect(problem({ SPF_DOMAIN: '_spf.example.com.' })).toContain('got "_spf.example.com."');
    expect(problem({ GRACE_EMAILS: '99999999999999999' })).toContain(
      `GRACE_EMAILS must be an integer from 0 to ${Number.MAX_SAFE_INTEGER}, got "99999999999999999"`,
    );
  });

  it('SPF_DOMAIN takes an underscore label, the usual form of an include target', () => {
    expect(loadConfig({ MAIL_HOSTNAME: 'mx.example.net', SPF_DOMAIN: '_spf.example.net' }).spfDomain).toBe('_spf.example.net');
  });

  it('the largest accepted values: a century of trial or grace, the longest timer', () => {
    expect(loadConfig({ TRIAL_DAYS: '36500', GRACE_DAYS: '36500', WEBHOOK_INTERVAL_MS: '2147483647' })).toMatchObject({
      trialDays: 36500,
      graceDays: 36500,
      webhookIntervalMs: 2147483647,
    });
  });

  it('SPF_DOMAIN follows a configured MAIL_HOSTNAME, and can be set on its own', () => {
    expect(loadConfig({ MAIL_HOSTNAME: 'mx.example.net' }).spfDomain).toBe('mx.example.net');
    expect(loadConfig({ MAIL_HOSTNAME: 'mx.example.net', SPF_DOMAIN: 'spf.example.net' }).spfDomain).toBe('spf.example.net');
  });

  it('SECRET_KEY unset means generated into DATA_DIR', () => {
    expect(config.secretKey).toEqual({ mode: 'file' });
  });

  it('an empty value means unset', () => {
    expect(loadConfig({ HTTP_PORT: '', LOG_LEVEL: '' })).toMatchObject({ httpPort: 8080, logLevel: 'info' });
  });
});

describe('values that parse', () => {
  it('numbers, booleans and the log level', () => {
    const config = loadConfig({
      HTTP_PORT: '0',
      SMTP_PORT: '2525',
      ALLOW_PRIVATE_TARGETS: 'true',
      DEFAULT_DAILY_QUOTA: '50',
      TRIAL_DAYS: '0',
      LOG_LEVEL: 'debug',
    });
    expect(config).toMatchObject({ httpPort: 0, smtpPort: 2525, allowPrivateTargets: true, defaultDailyQuota: 50, trialDays: 0, logLevel: 'debug' });
  });

  it('DNS_SERVERS "127.0.0.1:5353,10.0.0.1" parses to host/port pairs, port 53 by default', () => {
    expect(loadConfig({ DNS_SERVERS: '127.0.0.1:5353,10.0.0.1' }).dnsServers).toEqual([
      { host: '127.0.0.1', port: 5353 },
      { host: '10.0.0.1', port: 53 },
    ]);
  });

  it('DNS_SERVERS takes IPv6 bare, in brackets, and in brackets with a port', () => {
    expect(loadConfig({ DNS_SERVERS: '::1, [2001:db8::53], [::1]:5353' }).dnsServers).toEqual([
      { host: '::1', port: 53 },
      { host: '2001:db8::53', port: 53 },
      { host: '::1', port: 5353 },
    ]);
    // As the configuration table says: without brackets the last group is part of the address, never a port.
    expect(loadConfig({ DNS_SERVERS: '::1:53' }).dnsServers).toEqual([{ host: '::1:53', port: 53 }]);
  });

  it('HTTP_HOST and SMTP_HOST take IPv4, IPv6 and localhost', () => {
    for (const host of ['127.0.0.1', '0.0.0.0', '::', '::1', '2001:db8::25', 'localhost']) {
      expect(loadConfig({ HTTP_HOST: host, SMTP_HOST: host }), host).toMatchObject({ httpHost: host, smtpHost: host });
    }
    expect(loadConfig({ HTTP_HOST: ' 10.0.0.5 ' }).httpHost).toBe('10.0.0.5');
  });

  it('SMTP_DELIVERY_PORT takes 1 to 65535', () => {
    expect(loadConfig({ SMTP_DELIVERY_PORT: '1' }).smtpDeliveryPort).toBe(1);
    expect(loadConfig({ SMTP_DELIVERY_PORT: '2525' }).smtpDeliveryPort).toBe(2525);
    expect(loadConfig({ SMTP_DELIVERY_PORT: '65535' }).smtpDeliveryPort).toBe(65535);
  });

  it('DELIVERY_MODE takes direct and capture', () => {
    expect(loadConfig({ DELIVERY_MODE: 'direct' }).deliveryMode).toBe('direct');
    expect(loadConfig({ DELIVERY_MODE: 'capture' }).deliveryMode).toBe('capture');
  });

  it('SMTP_RELAY_URL takes smtp:// and smtps://', () => {
    expect(loadConfig({ SMTP_RELAY_URL: 'smtp://relay.example.net:587' }).smtpRelayUrl?.hostname).toBe('relay.example.net');
    expect(loadConfig({ SMTP_RELAY_URL: 'smtps://user:pass@relay.example.net:465' }).smtpRelayUrl?.protocol).toBe('smtps:');
  });
});

describe('SECRET_KEY', () => {
  const bytes = Buffer.from(Array.from({ length: 32 }, (_, i) => (i * 37 + 11) & 0xff));

  it('is accepted as 64 hex characters', () => {
    expect(loadConfig({ SECRET_KEY: bytes.toString('hex') }).secretKey).toEqual({ mode: 'given', key: bytes });
    expect(loadConfig({ SECRET_KEY: bytes.toString('hex').toUpperCase() }).secretKey).toEqual({ mode: 'given', key: bytes });
  });

  it('is accepted as base64 of 32 bytes', () => {
    expect(loadConfig({ SECRET_KEY: bytes.toString('base64') }).secretKey).toEqual({ mode: 'given', key: bytes });
  });

  it('is accepted as "off"', () => {
    expect(loadConfig({ SECRET_KEY: 'off' }).secretKey).toEqual({ mode: 'off' });
  });

  it.each([
    ['31 bytes of hex', bytes.subarray(0, 31).toString('hex')],
    ['33 bytes of base64', Buffer.concat([bytes, Buffer.from([1])]).toString('base64')],
    ['16 bytes of base64', bytes.subarray(0, 16).toString('base64')],
    ['a passphrase', 'correct horse battery staple'],
  ])('is refused as %s', (_label, value) => {
    expect(configError({ SECRET_KEY: value }).message).toContain('SECRET_KEY');
  });
});

describe('a bad value throws ConfigError: one line naming the variable', () => {
  it.each([
    ['HTTP_PORT', 'abc'],
    ['HTTP_PORT', '70000'],
    ['HTTP_PORT', '-1'],
    ['SMTP_PORT', '25.5'],
    ['SMTP_DELIVERY_PORT', 'twenty-five'],
    ['SMTP_DELIVERY_PORT', '0'],
    ['SMTP_DELIVERY_PORT', '65536'],
    ['HTTP_HOST', 'example.com'],
    ['HTTP_HOST', 'not an address'],
    ['HTTP_HOST', '256.0.0.1'],
    ['HTTP_HOST', '[::1]'],
    ['HTTP_HOST', '127.0.0.1:8080'],
    ['SMTP_HOST', 'mail.example.com'],
    ['SMTP_HOST', 'localhost.example'],
    ['SMTP_HOST', '::1::2'],
    ['SECRET_KEY', 'short'],
    ['DNS_SERVERS', 'not-an-ip'],
    ['DNS_SERVERS', '127.0.0.1:99999'],
    ['DNS_SERVERS', '127.0.0.1:0'],
    ['DNS_SERVERS', '[::1]:0'],
    ['DNS_SERVERS', '[::1]:99999'],
    ['DNS_SERVERS', '[127.0.0.1]:53'],
    ['DNS_SERVERS', 'dns.example:53'],
    ['SMTP_RELAY_URL', 'http://x'],
    ['SMTP_RELAY_URL', 'not a url'],
    ['LOG_LEVEL', 'loud'],
    ['DELIVERY_MODE', 'smtp'],
    ['DELIVERY_MODE', 'Capture'],
    ['DEFAULT_DAILY_QUOTA', '-1'],
    ['DEFAULT_DAILY_QUOTA', '0'],
    ['WEBHOOK_INTERVAL_MS', 'soon'],
    ['TRIAL_DAYS', '1.5'],
    ['GRACE_EMAILS', 'many'],
    ['SMTP_MAX_MESSAGE_BYTES', '25MB'],
    ['ALLOW_PRIVATE_TARGETS', 'maybe'],
    ['SMTP_PROXY_PROTOCOL', 'maybe'],
    ['TRUST_PROXY', 'proxy.example'],
    ['TRUST_PROXY', '10.0.0.0/33'],
    ['TRUST_PROXY', '10.0.0.1, 2001:db8::/129'],
    ['TRUST_PROXY', '10.0.0.0/8/8'],
    ['TRUST_PROXY', '10.0.0.0/-1'],
    ['TRUST_PROXY', 'fe80::1%eth0'],
    ['MAIL_HOSTNAME', 'not a host!'],
    ['RATE_LIMIT_PER_KEY', '0'],
    // From the operator audit: values that started and then misbehaved.
    ['TRIAL_DAYS', '100000000'],
    ['GRACE_DAYS', '9007199254740991'],
    ['WEBHOOK_INTERVAL_MS', '2147483648'],
    ['METRICS_TOKEN', 'abcdefghijklmnop1234\n'],
    ['METRICS_TOKEN', 'my metrics token 2024'],
    ['ADMIN_TOKEN', 'abcdefghijklmnop1234\n'],
    ['DATA_DIR', '   '],
    ['SMTP_RELAY_URL', 'smtp://relay.example.net:0'],
    ['SMTP_RELAY_URL', 'smtp://relay.example.net/path?x=1'],
  ])('%s=%s', (name, value) => {
    const err = configError({ [name]: value });
    expect(err.message).toContain(name);
    expect(err.message).not.toMatch(/[\r\n]/);
    expect(err.message.length).toBeGreaterThan(name.length);
  });

  describe('SMTP_TLS_CERT and SMTP_TLS_KEY must each be a readable file', () => {
    let dir: string;
    let cert: string;
    let key: string;
    beforeEach(() => {
      dir = mkdtempSync(join(tmpdir(), 'mailstead-tls-'));
      cert = join(dir, 'cert.pem');
      key = join(dir, 'key.pem');
      writeFileSync(cert, '-----BEGIN CERTIFICATE-----\n');
      writeFileSync(key, '-----BEGIN PRIVATE KEY-----\n', { mode: 0o600 });
    });
    afterEach(() => {
      rmSync(dir, { recursive: true, force: true });
    });

    it('two readable files are accepted', () => {
      expect(loadConfig({ SMTP_TLS_CERT: cert, SMTP_TLS_KEY: key })).toMatchObject({ smtpTlsCert: cert, smtpTlsKey: key });
    });

    it.each([
      ['SMTP_TLS_CERT', 'a missing file', () => ({ SMTP_TLS_CERT: join(dir, 'missing.pem'), SMTP_TLS_KEY: key })],
      ['SMTP_TLS_KEY', 'a missing file', () => ({ SMTP_TLS_CERT: cert, SMTP_TLS_KEY: join(dir, 'missing.pem') })],
      ['SMTP_TLS_CERT', 'a directory', () => ({ SMTP_TLS_CERT: dir, SMTP_TLS_KEY: key })],
      ['SMTP_TLS_KEY', 'a directory', () => ({ SMTP_TLS_CERT: cert, SMTP_TLS_KEY: dir })],
    ])('%s naming %s is refused, and only it is named', (name, _what, env) => {
      const err = configError(env());
      expect(err.message).toContain(name);
      expect(err.message).not.toContain(name === 'SMTP_TLS_CERT' ? 'SMTP_TLS_KEY' : 'SMTP_TLS_CERT');
      expect(err.message).not.toMatch(/[\r\n]/);
    });

    it('one set without the other is refused naming both, even when the file is readable', () => {
      const err = configError({ SMTP_TLS_KEY: key });
      expect(err.message).toContain('SMTP_TLS_CERT');
      expect(err.message).toContain('SMTP_TLS_KEY');
    });
  });

  it('SMTP_TLS_CERT without SMTP_TLS_KEY is refused naming both', () => {
    const err = configError({ SMTP_TLS_CERT: '/etc/cert.pem' });
    expect(err.message).toContain('SMTP_TLS_CERT');
    expect(err.message).toContain('SMTP_TLS_KEY');
  });

  it('several bad values are all listed, still on one line', () => {
    const bad = {
      HTTP_PORT: 'abc',
      LOG_LEVEL: 'loud',
      DEFAULT_DAILY_QUOTA: '-1',
      ALLOW_PRIVATE_TARGETS: 'maybe',
      SECRET_KEY: 'short',
      DNS_SERVERS: 'not-an-ip',
      SMTP_RELAY_URL: 'http://x',
    };
    const err = configError(bad);
    for (const name of Object.keys(bad)) expect(err.message, err.message).toContain(name);
    expect(err.message).not.toMatch(/[\r\n]/);
  });

  it('the variables checked after the schema are listed together too', () => {
    const err = configError({ SECRET_KEY: 'short', DNS_SERVERS: 'not-an-ip', SMTP_RELAY_URL: 'http://x' });
    for (const name of ['SECRET_KEY', 'DNS_SERVERS', 'SMTP_RELAY_URL']) expect(err.message).toContain(name);
  });

  it('a good variable is not named', () => {
    const err = configError({ HTTP_PORT: 'abc', SMTP_PORT: '2525' });
    expect(err.message).not.toContain('SMTP_PORT');
  });
});

describe('mailHostnameProblem: MAIL_HOSTNAME must be a public fully qualified name (warned at start)', () => {
  it.each([
    ['vm', 'not a fully qualified name'],
    ['localhost', 'not a fully qualified name'],
    ['mail.localhost', '.localhost'],
    ['vm.localdomain', '.localdomain'],
    ['printer.local', '.local'],
    ['mx.corp.internal', '.internal'],
    ['box.lan', '.lan'],
    ['mail.home.arpa', '.home.arpa'],
    ['mx.mailstead.test', '.test'],
    ['mail.example', '.example'],
    ['mail.invalid', '.invalid'],
    ['10.0.0.1', 'numeric'],
  ])('%s is not (%s)', (name, why) => {
    const problem = mailHostnameProblem(name);
    expect(problem).toContain(`"${name}"`);
    expect(problem).toContain(why);
  });

  it.each(['mail.example.com', 'mx1.mail.example.co.uk', 'smtp.xn--bcher-kva.de', 'mail.testing.io', 'local.example.net'])('%s is', (name) => {
    expect(mailHostnameProblem(name)).toBeNull();
  });
});

describe('the server process with a bad value', () => {
  let dataDir: string;
  beforeEach(() => {
    dataDir = join(mkdtempSync(join(tmpdir(), 'mailstead-config-')), 'data');
  });
  afterEach(() => {
    rmSync(join(dataDir, '..'), { recursive: true, force: true });
  });

  it('HTTP_PORT=abc: non-zero exit, exactly one line on stderr naming HTTP_PORT, nothing started', async () => {
    const child = spawn(process.execPath, ['dist/server/app/main.js'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', DATA_DIR: dataDir, HTTP_PORT: 'abc', MAIL_HOSTNAME: 'mx.mailstead.test' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
    expect(code).not.toBe(0);
    expect(code).not.toBeNull();
    const lines = stderr.split('\n').filter((l) => l !== '');
    expect(lines, stderr).toHaveLength(1);
    expect(stderr.endsWith('\n')).toBe(true);
    expect(lines[0]).toContain('HTTP_PORT');
    expect(stdout).toBe('');
    expect(existsSync(join(dataDir, 'mailstead.db'))).toBe(false);
  });

  /** Runs the server with `env` until it exits or prints `until` on stdout (then stops it): its code, stdout, stderr. */
  async function runServer(env: Record<string, string>, until?: string) {
    const child = spawn(process.execPath, ['dist/server/app/main.js'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        MAIL_HOSTNAME: 'mx.mailstead.test',
        HTTP_HOST: '127.0.0.1',
        HTTP_PORT: '0',
        SMTP_PORT: '0',
        SUBMISSION_PORT: '0',
        SUBMISSIONS_PORT: '0',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString();
      if (until && stdout.includes(until)) child.kill('SIGTERM');
    });
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
    clearTimeout(timer);
    return { code, stdout, stderr };
  }

  it.each([
    ['TRUST_PROXY', '10.0.0.1,proxy.example', 'TRUST_PROXY must be a comma list of IP addresses or CIDRs (10.0.0.0/8, 2001:db8::/32), got "proxy.example"'],
    ['SMTP_PROXY_PROTOCOL', 'haproxy', 'SMTP_PROXY_PROTOCOL must be true or false, got "haproxy"'],
  ])('%s=%s: exit 1, one line on stderr naming it, nothing started', async (name, value, says) => {
    const { code, stdout, stderr } = await runServer({ DATA_DIR: dataDir, [name]: value });
    expect(code).toBe(1);
    expect(stderr).toBe(`mailstead: invalid configuration: ${says}\n`);
    expect(stdout).toBe('');
    expect(existsSync(join(dataDir, 'mailstead.db'))).toBe(false);
  });

  it.each([
    ['a regular file', (dir: string) => (writeFileSync(join(dir, '..', 'file'), 'x'), join(dir, '..', 'file'))],
    ['under a regular file', (dir: string) => (writeFileSync(join(dir, '..', 'file'), 'x'), join(dir, '..', 'file', 'data'))],
  ])('DATA_DIR that is %s: exit 1, one line on stderr naming DATA_DIR, no stack', async (_name, make) => {
    const { code, stdout, stderr } = await runServer({ DATA_DIR: make(dataDir) });
    expect(code).toBe(1);
    const lines = stderr.split('\n').filter((l) => l !== '');
    expect(lines, stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/^mailstead: invalid configuration: DATA_DIR \(.+\) cannot be used: /);
    expect(stdout).toBe('');
  });

  it('an SMTP_PORT in use: the API runs, and one error line says another process holds the port (not privileges)', async () => {
    const busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const port = (busy.address() as AddressInfo).port;
    try {
      const { stdout } = await runServer({ DATA_DIR: dataDir, SMTP_HOST: '127.0.0.1', SMTP_PORT: String(port) }, 'server.started');
      const lines = stdout
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as { event: string; code?: string; message?: string });
      const failed = lines.filter((l) => l.event === 'smtp.listen_failed');
      expect(failed).toHaveLength(1);
      expect(failed[0]).toMatchObject({ code: 'EADDRINUSE' });
      expect(failed[0]!.message).toContain(`could not listen on 127.0.0.1:${port} (EADDRINUSE). Another process listens on that port`);
      expect(failed[0]!.message).not.toContain('root');
      expect(lines.filter((l) => l.event === 'inbound.server_error')).toEqual([]);
      expect(lines.some((l) => l.event === 'http.listening')).toBe(true);
    } finally {
      await new Promise<void>((resolve) => busy.close(() => resolve()));
    }
  });

  it('an HTTP_PORT in use: exit 1, one line naming HTTP_HOST and HTTP_PORT', async () => {
    const busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const port = (busy.address() as AddressInfo).port;
    try {
      const { code, stderr } = await runServer({ DATA_DIR: dataDir, HTTP_PORT: String(port) });
      expect(code).toBe(1);
      const lines = stderr.split('\n').filter((l) => l !== '');
      expect(lines, stderr).toHaveLength(1);
      expect(lines[0]).toBe(
        `mailstead: invalid configuration: HTTP_HOST and HTTP_PORT (127.0.0.1 port ${port}) cannot be listened on: listen EADDRINUSE: address already in use 127.0.0.1:${port}`,
      );
    } finally {
      await new Promise<void>((resolve) => busy.close(() => resolve()));
    }
  });

  it('a SECRET_KEY that is not the key DATA_DIR was started with: exit 1, one line naming SECRET_KEY and the generated file; the right key starts', async () => {
    // The first start generates DATA_DIR/secret.key and records a value sealed with it.
    expect((await runServer({ DATA_DIR: dataDir }, 'http.listening')).stdout).toContain('http.listening');
    const other = await runServer({ DATA_DIR: dataDir, SECRET_KEY: 'cd'.repeat(32) });
    expect(other.code).toBe(1);
    const lines = other.stderr.split('\n').filter((l) => l !== '');
    expect(lines, other.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^mailstead: invalid configuration: SECRET_KEY is not the key DATA_DIR's secrets were sealed with .*secret\.key holds it \(unset SECRET_KEY to use it\)$/,
    );
    // The generated key itself, given as SECRET_KEY, is the right one.
    const generated = readFileSync(join(dataDir, 'secret.key'), 'utf8').trim();
    expect((await runServer({ DATA_DIR: dataDir, SECRET_KEY: generated }, 'http.listening')).stdout).toContain('http.listening');
  });

  it('a DATA_DIR started with SECRET_KEY, then without it: exit 1 naming the missing file, and no new key generated in its place', async () => {
    const given = 'ab'.repeat(32);
    expect((await runServer({ DATA_DIR: dataDir, SECRET_KEY: given }, 'http.listening')).stdout).toContain('http.listening');
    const without = await runServer({ DATA_DIR: dataDir });
    expect(without.code).toBe(1);
    const lines = without.stderr.split('\n').filter((l) => l !== '');
    expect(lines, without.stderr).toHaveLength(1);
    expect(lines[0]).toContain(`${join(dataDir, 'secret.key')} is missing, and DATA_DIR holds secrets sealed with a key`);
    expect(existsSync(join(dataDir, 'secret.key'))).toBe(false);
    // A wrong key then names no file: there is none that holds the right one.
    const wrong = await runServer({ DATA_DIR: dataDir, SECRET_KEY: 'cd'.repeat(32) });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/^mailstead: invalid configuration: SECRET_KEY is not the key DATA_DIR's secrets were sealed with .*: start with that key\n$/);
    expect((await runServer({ DATA_DIR: dataDir, SECRET_KEY: given }, 'http.listening')).stdout).toContain('http.listening');
  });

  it('a secret.key that is not the right key is not named as the one to use', async () => {
    expect((await runServer({ DATA_DIR: dataDir, SECRET_KEY: 'ab'.repeat(32) }, 'http.listening')).stdout).toContain('http.listening');
    writeFileSync(join(dataDir, 'secret.key'), `${'ef'.repeat(32)}\n`, { mode: 0o600 });
    const wrong = await runServer({ DATA_DIR: dataDir, SECRET_KEY: 'cd'.repeat(32) });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).not.toContain('secret.key');
  });

  it('the admin token is printed on the first start whatever LOG_LEVEL says (here error), and nothing else at info', async () => {
    const { stdout } = await runServer({ DATA_DIR: dataDir, LOG_LEVEL: 'error' }, 'admin_token.generated');
    const lines = stdout
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as { event: string; token?: string });
    expect(lines.map((l) => l.event)).toEqual(['admin_token.generated']);
    expect(lines[0]!.token).toMatch(/^\S{20,}$/);
  });
});

describe('resolveSecretKey', () => {
  let dataDir: string;
  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'mailstead-secret-'));
  });
  afterEach(() => {
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('generates DATA_DIR/secret.key (mode 0600, 64 hex characters) on first call and reads it back after', () => {
    const config = loadConfig({ DATA_DIR: dataDir });
    const first = resolveSecretKey(config);
    const path = join(dataDir, 'secret.key');
    expect(existsSync(path)).toBe(true);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const text = readFileSync(path, 'utf8').trim();
    expect(text).toMatch(/^[0-9a-f]{64}$/);
    expect(first).toBeInstanceOf(Buffer);
    expect(first!.length).toBe(32);
    expect(first!.toString('hex')).toBe(text);

    const second = resolveSecretKey(loadConfig({ DATA_DIR: dataDir }));
    expect(second!.equals(first!)).toBe(true);
  });

  it('two data directories get different keys', () => {
    const otherDir = mkdtempSync(join(tmpdir(), 'mailstead-secret-'));
    try {
      const a = resolveSecretKey(loadConfig({ DATA_DIR: dataDir }));
      const b = resolveSecretKey(loadConfig({ DATA_DIR: otherDir }));
      expect(a!.equals(b!)).toBe(false);
    } finally {
      rmSync(otherDir, { recursive: true, force: true });
    }
  });

  it('SECRET_KEY=off gives null and writes no file', () => {
    expect(resolveSecretKey(loadConfig({ DATA_DIR: dataDir, SECRET_KEY: 'off' }))).toBeNull();
    expect(existsSync(join(dataDir, 'secret.key'))).toBe(false);
  });

  it('a given SECRET_KEY is used as is and writes no file', () => {
    const hex = 'ab'.repeat(32);
    expect(resolveSecretKey(loadConfig({ DATA_DIR: dataDir, SECRET_KEY: hex }))!.toString('hex')).toBe(hex);
    expect(existsSync(join(dataDir, 'secret.key'))).toBe(false);
  });

  it('a secret.key that does not hold 32 bytes of hex stops the start instead of being replaced', () => {
    writeFileSync(join(dataDir, 'secret.key'), 'garbage\n', { mode: 0o600 });
    expect(() => resolveSecretKey(loadConfig({ DATA_DIR: dataDir }))).toThrow();
    expect(readFileSync(join(dataDir, 'secret.key'), 'utf8')).toBe('garbage\n');
  });
});

describe('encryptSecret / decryptSecret', () => {
  const key = Buffer.alloc(32, 7);

  it('round-trips text and bytes', () => {
    expect(decryptSecret(key, encryptSecret(key, 'postgresql://u:p@db.example.net/app')).toString('utf8')).toBe('postgresql://u:p@db.example.net/app');
    const bytes = Buffer.from([0, 1, 2, 255, 254]);
    expect(decryptSecret(key, encryptSecret(key, bytes)).equals(bytes)).toBe(true);
    expect(decryptSecret(key, encryptSecret(key, '')).toString()).toBe('');
  });

  it('round-trips with a context, and a different context fails', () => {
    const sealed = encryptSecret(key, 'whsec_x', 'webhook:1');
    expect(decryptSecret(key, sealed, 'webhook:1').toString()).toBe('whsec_x');
    expect(() => decryptSecret(key, sealed, 'webhook:2')).toThrow();
  });

  it('uses a fresh nonce: the same plaintext seals differently each time', () => {
    expect(encryptSecret(key, 'same')).not.toBe(encryptSecret(key, 'same'));
  });

  it('does not carry the plaintext', () => {
    expect(encryptSecret(key, 'very-secret-value')).not.toContain('very-secret-value');
    expect(encryptSecret(key, 'very-secret-value')).not.toContain(Buffer.from('very-secret-value').toString('base64url'));
  });

  it('a wrong key fails', () => {
    const sealed = encryptSecret(key, 'secret');
    expect(() => decryptSecret(Buffer.alloc(32, 8), sealed)).toThrow();
  });

  it.each([0, 1, 2, 3])('tampering with part %i fails', (part) => {
    const sealed = encryptSecret(key, 'a secret long enough to tamper with');
    const parts = sealed.split('.');
    const target = parts[part]!;
    if (part === 0) parts[0] = 'v2';
    else {
      const buf = Buffer.from(target, 'base64url');
      buf[buf.length - 1] = buf[buf.length - 1]! ^ 0x01;
      parts[part] = buf.toString('base64url');
    }
    expect(() => decryptSecret(key, parts.join('.'))).toThrow();
  });

  it('a truncated value fails', () => {
    const sealed = encryptSecret(key, 'secret');
    expect(() => decryptSecret(key, sealed.split('.').slice(0, 3).join('.'))).toThrow();
    expect(() => decryptSecret(key, '')).toThrow();
  });
});

describe('docs/operating/configuration.md', () => {
  it('contains the configuration table generated from the schema (npm run -s docs:config)', () => {
    const readme = readFileSync(join(ROOT, 'docs/operating/configuration.md'), 'utf8');
    expect(readme).toContain(configTable());
  });

  it('the table lists every variable of docs/api/decisions.md section 1', () => {
    const table = configTable();
    for (const name of [
      'DATA_DIR',
      'HTTP_HOST',
      'HTTP_PORT',
      'SMTP_HOST',
      'SMTP_PORT',
      'MAIL_HOSTNAME',
      'SMTP_TLS_CERT',
      'SMTP_TLS_KEY',
      'SMTP_MAX_MESSAGE_BYTES',
      'SPF_DOMAIN',
      'SECRET_KEY',
      'DNS_SERVERS',
      'SMTP_DELIVERY_PORT',
      'SMTP_RELAY_URL',
      'ALLOW_PRIVATE_TARGETS',
      'WEBHOOK_INTERVAL_MS',
      'ADMIN_TOKEN',
      'DEFAULT_DAILY_QUOTA',
      'TRIAL_DAYS',
      'GRACE_DAYS',
      'GRACE_EMAILS',
      'LOG_LEVEL',
    ]) {
      expect(table).toContain(`| \`${name}\` |`);
    }
  });
});

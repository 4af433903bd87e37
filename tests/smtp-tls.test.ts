import { spawn } from 'node:child_process';
import { X509Certificate, createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, createServer } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadOrCreateSmtpTls, selfSignedCertificate, type TlsPair } from '../mta/inbound/tls.js';
import { freePort } from '../scripts/lib/free-port.js';
import { ROOT, processEnv } from './helpers/service-process.js';
import { ensureState } from './helpers/test-state.js';

/**
 * STARTTLS's key and certificate (docs/api/decisions.md section 1): SMTP_TLS_CERT and SMTP_TLS_KEY when set, else a self-signed
 * pair generated into DATA_DIR on first start. The certificate is checked by Node's own X.509 parser and by a real TLS
 * handshake; what Node does not expose (the keyUsage bits, which extensions are critical, which time type) by a
 * DER reader written here apart from the encoder.
 */

const HOST = 'mail.example.test';
type KeyPair = { privateKey: KeyObject; publicKey: KeyObject };

let keys: KeyPair;
let otherKeys: KeyPair;
let scratch: string;
beforeAll(() => {
  keys = generateKeyPairSync('rsa', { modulusLength: 2048 });
  otherKeys = generateKeyPairSync('rsa', { modulusLength: 2048 });
  scratch = mkdtempSync(join(tmpdir(), 'mailstead-smtp-tls-'));
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let dirs = 0;
const freshDir = () => {
  const dir = join(scratch, `case-${++dirs}`);
  mkdirSync(dir, { mode: 0o700 });
  return dir;
};

// ---- a DER reader, enough to walk a certificate ----

interface Tlv {
  tag: number;
  content: Buffer;
}

function readTlvs(buf: Buffer): Tlv[] {
  const out: Tlv[] = [];
  let at = 0;
  while (at < buf.length) {
    const tag = buf[at] as number;
    let length = buf[at + 1] as number;
    let header = 2;
    if (length & 0x80) {
      const count = length & 0x7f;
      length = 0;
      for (let i = 0; i < count; i++) length = length * 256 + (buf[at + 2 + i] as number);
      header += count;
    }
    out.push({ tag, content: buf.subarray(at + header, at + header + length) });
    at += header + length;
  }
  return out;
}

const only = (buf: Buffer): Tlv => {
  const items = readTlvs(buf);
  expect(items).toHaveLength(1);
  return items[0] as Tlv;
};

function oidText(content: Buffer): string {
  const arcs: number[] = [];
  let value = 0;
  for (const byte of content) {
    value = value * 128 + (byte & 0x7f);
    if ((byte & 0x80) === 0) {
      arcs.push(value);
      value = 0;
    }
  }
  const first = arcs.shift() as number;
  return [Math.min(2, Math.floor(first / 40)), first - 40 * Math.min(2, Math.floor(first / 40)), ...arcs].join('.');
}

/** The TBSCertificate's fields, and its extensions by OID: critical flag and extnValue. */
function parseCertificate(pem: string) {
  const certificate = only(new X509Certificate(pem).raw);
  const [tbs] = readTlvs(certificate.content);
  const fields = readTlvs((tbs as Tlv).content);
  const extensionsField = fields.find((f) => f.tag === 0xa3) as Tlv;
  const extensions = new Map<string, { critical: boolean; value: Buffer }>();
  for (const ext of readTlvs(only(extensionsField.content).content)) {
    const parts = readTlvs(ext.content);
    const critical = parts.length === 3 && (parts[1] as Tlv).tag === 0x01 && (parts[1] as Tlv).content[0] === 0xff;
    extensions.set(oidText((parts[0] as Tlv).content), { critical, value: (parts[parts.length - 1] as Tlv).content });
  }
  const validity = readTlvs((fields[4] as Tlv).content);
  return { version: fields[0] as Tlv, extensions, validity };
}

// ---- a TLS handshake over loopback ----

interface HandshakeResult {
  authorized: boolean;
  error?: string;
  protocol?: string | null;
}

async function handshake(pair: { key: string; cert: string }, client: { servername: string; ca?: string; maxVersion?: 'TLSv1.2' }): Promise<HandshakeResult> {
  const server = createServer({ key: pair.key, cert: pair.cert }, (socket) => socket.end());
  server.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  try {
    return await new Promise<HandshakeResult>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port, ...client });
      socket.once('secureConnect', () => {
        resolve({ authorized: socket.authorized, protocol: socket.getProtocol() });
        socket.destroy();
      });
      socket.once('error', (err: NodeJS.ErrnoException) => resolve({ authorized: false, error: err.code ?? err.message }));
    });
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
}

describe('selfSignedCertificate', () => {
  const now = new Date('2030-06-15T12:34:56.789Z');

  it('is a v3 certificate for the host, self-signed over the given key, as Node parses it', () => {
    const x509 = new X509Certificate(selfSignedCertificate(HOST, keys, now));
    expect(x509.subject).toBe(`CN=${HOST}`);
    expect(x509.issuer).toBe(`CN=${HOST}`);
    expect(x509.subjectAltName).toBe(`DNS:${HOST}`);
    expect(x509.checkHost(HOST)).toBe(HOST);
    expect(x509.checkHost('other.example.test')).toBeUndefined();
    expect(x509.verify(keys.publicKey)).toBe(true);
    expect(x509.verify(otherKeys.publicKey)).toBe(false);
    expect(x509.checkPrivateKey(keys.privateKey)).toBe(true);
    expect(x509.checkPrivateKey(otherKeys.privateKey)).toBe(false);
    expect(x509.publicKey.export({ type: 'spki', format: 'der' })).toEqual(keys.publicKey.export({ type: 'spki', format: 'der' }));
    expect(x509.ca).toBe(false);
    expect(x509.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']); // extKeyUsage serverAuth
  });

  it('is valid from one day ago (whole seconds) for ten years', () => {
    const x509 = new X509Certificate(selfSignedCertificate(HOST, keys, now));
    expect(new Date(x509.validFrom).toISOString()).toBe('2030-06-14T12:34:56.000Z');
    expect(new Date(x509.validTo).toISOString()).toBe('2040-06-14T12:34:56.000Z');
  });

  it('has a random positive serial of 16 bytes', () => {
    const serials = Array.from({ length: 16 }, () => new X509Certificate(selfSignedCertificate(HOST, keys, now)).serialNumber);
    for (const serial of serials) {
      expect(serial).toMatch(/^[0-9A-F]{32}$/);
      expect(Number.parseInt(serial.slice(0, 1), 16)).toBeLessThan(8); // top bit clear: positive, no sign byte
    }
    expect(new Set(serials).size).toBe(16);
  });

  it('says version 3, basicConstraints critical without cA, keyUsage critical with digitalSignature and keyEncipherment only', () => {
    const { version, extensions } = parseCertificate(selfSignedCertificate(HOST, keys, now));
    expect(version.tag).toBe(0xa0);
    expect(version.content.toString('hex')).toBe('020102'); // INTEGER 2 is v3
    expect([...extensions.keys()].sort()).toEqual(['2.5.29.15', '2.5.29.17', '2.5.29.19', '2.5.29.37']);
    expect(extensions.get('2.5.29.19')).toEqual({ critical: true, value: Buffer.from('3000', 'hex') }); // cA FALSE by default
    // BIT STRING, 5 unused bits, 101xxxxx: bit 0 digitalSignature, bit 2 keyEncipherment.
    expect(extensions.get('2.5.29.15')).toEqual({ critical: true, value: Buffer.from('030205a0', 'hex') });
    expect(extensions.get('2.5.29.37')?.critical).toBe(false);
    expect(extensions.get('2.5.29.17')?.critical).toBe(false);
  });

  it('encodes a date before 2050 as UTCTime and one from 2050 on as GeneralizedTime (RFC 5280)', () => {
    const pem = selfSignedCertificate(HOST, keys, new Date('2045-03-01T08:00:00Z'));
    const x509 = new X509Certificate(pem);
    expect(new Date(x509.validFrom).toISOString()).toBe('2045-02-28T08:00:00.000Z');
    expect(new Date(x509.validTo).toISOString()).toBe('2055-02-28T08:00:00.000Z');
    expect(parseCertificate(pem).validity.map((t) => [t.tag, t.content.toString('ascii')])).toEqual([
      [0x17, '450228080000Z'],
      [0x18, '20550228080000Z'],
    ]);
    // The last second of 2049 is still UTCTime; notAfter's 2059 is not.
    const edge = parseCertificate(selfSignedCertificate(HOST, keys, new Date('2050-01-01T23:59:59Z'))).validity;
    expect(edge.map((t) => [t.tag, t.content.toString('ascii')])).toEqual([
      [0x17, '491231235959Z'],
      [0x18, '20591231235959Z'],
    ]);
  });

  it('refuses a host name that is not ASCII and a key that is not RSA', () => {
    expect(() => selfSignedCertificate('mäil.example.test', keys)).toThrow(/not an ASCII host name/);
    expect(() => selfSignedCertificate(HOST, generateKeyPairSync('ec', { namedCurve: 'P-256' }))).toThrow(/RSA/);
  });
});

describe('a TLS handshake with the generated pair', () => {
  let pair: { key: string; cert: string };
  beforeAll(() => {
    pair = { key: keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), cert: selfSignedCertificate(HOST, keys) };
  });

  it('succeeds, authorized, for a client that trusts the certificate and asks for the host', async () => {
    expect(await handshake(pair, { servername: HOST, ca: pair.cert })).toEqual({ authorized: true, protocol: 'TLSv1.3' });
    expect(await handshake(pair, { servername: HOST, ca: pair.cert, maxVersion: 'TLSv1.2' })).toEqual({ authorized: true, protocol: 'TLSv1.2' });
  });

  it('fails for another server name, and for a client that does not trust it', async () => {
    expect(await handshake(pair, { servername: 'other.example.test', ca: pair.cert })).toEqual({ authorized: false, error: 'ERR_TLS_CERT_ALTNAME_INVALID' });
    expect(await handshake(pair, { servername: HOST })).toEqual({ authorized: false, error: 'DEPTH_ZERO_SELF_SIGNED_CERT' });
  });
});

describe('loadOrCreateSmtpTls', () => {
  const generated = (dataDir: string, mailHostname = HOST) => ({ dataDir, mailHostname, smtpTlsCert: null, smtpTlsKey: null });
  const files = (dir: string) => ({ key: readFileSync(join(dir, 'smtp-tls.key'), 'utf8'), cert: readFileSync(join(dir, 'smtp-tls.crt'), 'utf8') });
  const mode = (path: string) => (statSync(path).mode & 0o777).toString(8);

  it('generates a pair on first start into DATA_DIR, files 0600, and returns the same bytes on the next', () => {
    const dir = freshDir();
    const first = loadOrCreateSmtpTls(generated(dir));
    expect(first.source).toBe('generated');
    expect(readdirSync(dir).sort()).toEqual(['smtp-tls.crt', 'smtp-tls.key']);
    expect(mode(join(dir, 'smtp-tls.key'))).toBe('600');
    expect(mode(join(dir, 'smtp-tls.crt'))).toBe('600');
    expect(files(dir)).toEqual({ key: first.key, cert: first.cert });
    const x509 = new X509Certificate(first.cert);
    expect(x509.subjectAltName).toBe(`DNS:${HOST}`);
    expect(x509.checkPrivateKey(createPrivateKey(first.key))).toBe(true);
    expect(createPrivateKey(first.key).asymmetricKeyDetails?.modulusLength).toBe(2048);

    const second = loadOrCreateSmtpTls(generated(dir));
    expect(second).toEqual({ key: first.key, cert: first.cert, source: 'existing-generated' });
  });

  it('creates DATA_DIR 0700 when it is missing', () => {
    const dir = join(freshDir(), 'data');
    expect(loadOrCreateSmtpTls(generated(dir)).source).toBe('generated');
    expect(mode(dir)).toBe('700');
  });

  it('generates again when MAIL_HOSTNAME changed, and keeps that pair', () => {
    const dir = freshDir();
    const before = loadOrCreateSmtpTls(generated(dir));
    const after = loadOrCreateSmtpTls(generated(dir, 'mx.example.test'));
    expect(after.source).toBe('generated');
    expect(after.key).not.toBe(before.key);
    expect(new X509Certificate(after.cert).subjectAltName).toBe('DNS:mx.example.test');
    expect(files(dir)).toEqual({ key: after.key, cert: after.cert });
    expect(mode(join(dir, 'smtp-tls.key'))).toBe('600');
    expect(loadOrCreateSmtpTls(generated(dir, 'mx.example.test'))).toEqual({ ...after, source: 'existing-generated' });
  });

  it('generates again once the pair has expired', () => {
    const dir = freshDir();
    const start = new Date('2030-01-01T00:00:00Z');
    const first = loadOrCreateSmtpTls(generated(dir), start);
    expect(loadOrCreateSmtpTls(generated(dir), new Date('2039-12-30T00:00:00Z')).source).toBe('existing-generated');
    const later = loadOrCreateSmtpTls(generated(dir), new Date('2040-01-01T00:00:00Z'));
    expect(later.source).toBe('generated');
    expect(later.cert).not.toBe(first.cert);
    expect(new Date(new X509Certificate(later.cert).validTo).toISOString()).toBe('2049-12-31T00:00:00.000Z');
  });

  it('replaces a pair a writer left half-way: a key without a certificate, a certificate without a key, a torn file', () => {
    for (const leftover of [{ 'smtp-tls.key': 'key' }, { 'smtp-tls.crt': 'cert' }] as const) {
      const dir = freshDir();
      const whole = loadOrCreateSmtpTls(generated(dir));
      rmSync(join(dir, 'smtp-tls.key'));
      rmSync(join(dir, 'smtp-tls.crt'));
      for (const [name, which] of Object.entries(leftover)) writeFileSync(join(dir, name), whole[which as 'key' | 'cert'], { mode: 0o600 });
      const again = loadOrCreateSmtpTls(generated(dir));
      expect(again.source).toBe('generated');
      expect(files(dir)).toEqual({ key: again.key, cert: again.cert });
      expect(new X509Certificate(again.cert).checkPrivateKey(createPrivateKey(again.key))).toBe(true);
    }
    const dir = freshDir();
    const whole = loadOrCreateSmtpTls(generated(dir));
    writeFileSync(join(dir, 'smtp-tls.crt'), whole.cert.slice(0, 200));
    const again = loadOrCreateSmtpTls(generated(dir));
    expect(again.source).toBe('generated');
    expect(files(dir)).toEqual({ key: again.key, cert: again.cert });
  });

  it('waits for a writer caught between the key and the certificate, and uses its pair', async () => {
    const dir = freshDir();
    const theirs = loadOrCreateSmtpTls(generated(dir));
    const certPath = join(dir, 'smtp-tls.crt');
    rmSync(certPath);
    // Another process that has written the key and writes the certificate 200 ms from now.
    const script = `process.stdout.write('ready\\n');
      setTimeout(() => require('node:fs').writeFileSync(process.env.CERT_PATH, process.env.CERT, { mode: 0o600 }), 200);`;
    const writer = spawn(process.execPath, ['-e', script], {
      env: { ...process.env, CERT_PATH: certPath, CERT: theirs.cert },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => writer.on('close', resolve));
    await new Promise((resolve) => writer.stdout.once('data', resolve));
    expect(loadOrCreateSmtpTls(generated(dir))).toEqual({ ...theirs, source: 'existing-generated' });
    await exited;
  });

  it('lets concurrent first starts agree on one pair: one writes it, the others use it', async () => {
    const dir = freshDir();
    const moduleUrl = new URL('../dist/mta/inbound/tls.js', import.meta.url).href;
    const script = `import { loadOrCreateSmtpTls } from ${JSON.stringify(moduleUrl)};
      process.stdout.write('ready\\n');
      process.stdin.once('data', () => process.stdout.write(JSON.stringify(loadOrCreateSmtpTls(JSON.parse(process.env.TLS_CONFIG)))));`;
    const children = [1, 2, 3, 4].map(() => {
      const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
        cwd: fileURLToPath(new URL('..', import.meta.url)),
        env: { ...process.env, TLS_CONFIG: JSON.stringify(generated(dir)) },
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      let out = '';
      const ready = new Promise<void>((resolve) =>
        child.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          if (out.startsWith('ready\n')) resolve();
        }),
      );
      const done = new Promise<TlsPair>((resolve, reject) =>
        child.on('close', (code) => (code === 0 ? resolve(JSON.parse(out.slice('ready\n'.length)) as TlsPair) : reject(new Error(`child exited ${code}`)))),
      );
      return { child, ready, done };
    });
    // All four load the module first, then are released together: each finds no pair and generates its own.
    await Promise.all(children.map((c) => c.ready));
    for (const { child } of children) child.stdin.end('go\n');
    const pairs = await Promise.all(children.map((c) => c.done));
    expect(pairs.map((p) => p.source).sort()).toEqual(['existing-generated', 'existing-generated', 'existing-generated', 'generated']);
    const onDisk = files(dir);
    for (const pair of pairs) expect({ key: pair.key, cert: pair.cert }).toEqual(onDisk);
  });

  describe('configured SMTP_TLS_CERT and SMTP_TLS_KEY', () => {
    let dir: string;
    let certPath: string;
    let keyPath: string;
    let otherKeyPath: string;
    beforeAll(() => {
      dir = freshDir();
      certPath = join(dir, 'cert.pem');
      keyPath = join(dir, 'key.pem');
      otherKeyPath = join(dir, 'other-key.pem');
      // As an operator's files usually come: a chain after the leaf, a key in PKCS#1 form.
      writeFileSync(certPath, `${selfSignedCertificate(HOST, keys)}${selfSignedCertificate('ca.example.test', otherKeys)}`);
      writeFileSync(keyPath, keys.privateKey.export({ type: 'pkcs1', format: 'pem' }));
      writeFileSync(otherKeyPath, otherKeys.privateKey.export({ type: 'pkcs8', format: 'pem' }));
    });
    const configured = (smtpTlsCert: string | null, smtpTlsKey: string | null) => ({ dataDir: join(dir, 'data'), mailHostname: HOST, smtpTlsCert, smtpTlsKey });

    it('uses the files as they are and generates nothing', () => {
      expect(loadOrCreateSmtpTls(configured(certPath, keyPath))).toEqual({
        key: readFileSync(keyPath, 'utf8'),
        cert: readFileSync(certPath, 'utf8'),
        source: 'configured',
      });
      expect(readdirSync(dir).sort()).toEqual(['cert.pem', 'key.pem', 'other-key.pem']);
    });

    it('refuses one without the other, naming the one missing', () => {
      expect(() => loadOrCreateSmtpTls(configured(certPath, null))).toThrow(/^SMTP_TLS_KEY is not set but SMTP_TLS_CERT is/);
      expect(() => loadOrCreateSmtpTls(configured(null, keyPath))).toThrow(/^SMTP_TLS_CERT is not set but SMTP_TLS_KEY is/);
    });

    it('refuses a key that is not the certificate’s, naming both variables', () => {
      expect(() => loadOrCreateSmtpTls(configured(certPath, otherKeyPath))).toThrow(
        `SMTP_TLS_KEY (${otherKeyPath}) is not the private key of the certificate in SMTP_TLS_CERT (${certPath})`,
      );
    });

    it('refuses a path it cannot read, naming the variable and the path', () => {
      const missing = join(dir, 'missing.pem');
      expect(() => loadOrCreateSmtpTls(configured(missing, keyPath))).toThrow(`SMTP_TLS_CERT: cannot read ${missing} (ENOENT)`);
      expect(() => loadOrCreateSmtpTls(configured(certPath, missing))).toThrow(`SMTP_TLS_KEY: cannot read ${missing} (ENOENT)`);
      expect(() => loadOrCreateSmtpTls(configured(certPath, dir))).toThrow(`SMTP_TLS_KEY: cannot read ${dir} (EISDIR)`);
    });

    it('refuses files that hold no certificate or no key, naming the variable', () => {
      expect(() => loadOrCreateSmtpTls(configured(keyPath, keyPath))).toThrow(`SMTP_TLS_CERT: ${keyPath} holds no PEM certificate`);
      expect(() => loadOrCreateSmtpTls(configured(certPath, certPath))).toThrow(`SMTP_TLS_KEY: ${certPath} holds no unencrypted PEM private key`);
      const encrypted = join(dir, 'encrypted.pem');
      writeFileSync(encrypted, keys.privateKey.export({ type: 'pkcs8', format: 'pem', cipher: 'aes-256-cbc', passphrase: 'secret' }));
      expect(() => loadOrCreateSmtpTls(configured(certPath, encrypted))).toThrow(`SMTP_TLS_KEY: ${encrypted} holds no unencrypted PEM private key`);
      rmSync(encrypted);
    });
  });
});

describe('a bad configured pair stops the start before anything listens', () => {
  it('exits 1 naming the variable, without ever answering /healthz or showing an admin token', async () => {
    const dir = freshDir();
    const keyPath = join(dir, 'key.pem');
    writeFileSync(keyPath, keys.privateKey.export({ type: 'pkcs8', format: 'pem' }));
    const smtpPort = await freePort();
    // SMTP_TLS_CERT names the key file: readable, so the config module passes it; it holds no certificate.
    const env = processEnv(join(dir, 'data'), { SMTP_PORT: String(smtpPort), SMTP_HOST: '127.0.0.1', SMTP_TLS_CERT: keyPath, SMTP_TLS_KEY: keyPath });
    await ensureState(env);
    const child = spawn(process.execPath, ['dist/server/app/main.js'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code, stderr).toBe(1);
    expect(stderr).toContain(`SMTP_TLS_CERT: ${keyPath} holds no PEM certificate`);
    const events = stdout
      .split('\n')
      .filter(Boolean)
      .map((l) => (JSON.parse(l) as { event: string }).event);
    expect(events).not.toContain('http.listening');
    expect(events).not.toContain('admin_token.generated');
  }, 30_000);
});

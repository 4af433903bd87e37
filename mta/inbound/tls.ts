import { X509Certificate, createPrivateKey, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import { readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PRIVATE_FILE_MODE, createPrivateDir } from '../../db/data-dir.js';

/**
 * The STARTTLS key and certificate of inbound SMTP (docs/api/decisions.md section 1: `SMTP_TLS_CERT` and `SMTP_TLS_KEY`, or a
 * self-signed pair generated into DATA_DIR on first start). The certificate is built here with a small DER encoder so
 * the service needs neither an X.509 package nor an openssl binary on the machine.
 */

export interface TlsPair {
  key: string;
  cert: string;
  /** where they came from */
  source: 'configured' | 'generated' | 'existing-generated';
}

export const GENERATED_KEY_FILE = 'smtp-tls.key';
export const GENERATED_CERT_FILE = 'smtp-tls.crt';

const DAY_MS = 24 * 60 * 60 * 1000;
const VALID_YEARS = 10;
// A writer puts the key and then the certificate, both made before the first write: they land microseconds apart.
// A pair still incomplete after this long was left by a writer that died, and is generated again.
const SETTLE_MS = 1000;
const SETTLE_POLL_MS = 20;

// ---- DER, only what one certificate needs (X.690) ----

function derLength(length: number): Buffer {
  if (length < 0x80) return Buffer.from([length]);
  const bytes: number[] = [];
  for (let rest = length; rest > 0; rest = Math.floor(rest / 256)) bytes.unshift(rest % 256);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

const tlv = (tag: number, content: Buffer): Buffer => Buffer.concat([Buffer.from([tag]), derLength(content.length), content]);
const sequence = (...items: Buffer[]) => tlv(0x30, Buffer.concat(items));
// A SET OF one element needs no sorting.
const setOfOne = (item: Buffer) => tlv(0x31, item);
/** Context-specific, constructed, explicit: `[n] EXPLICIT`. */
const explicit = (n: number, inner: Buffer) => tlv(0xa0 | n, inner);
const derNull = () => tlv(0x05, Buffer.alloc(0));
const derTrue = () => tlv(0x01, Buffer.from([0xff]));
const octetString = (content: Buffer) => tlv(0x04, content);
const utf8String = (text: string) => tlv(0x0c, Buffer.from(text, 'utf8'));
const bitString = (unusedBits: number, bytes: Buffer) => tlv(0x03, Buffer.concat([Buffer.from([unusedBits]), bytes]));

/** A non-negative INTEGER from its big-endian bytes, in the minimal form DER requires. */
function unsignedInteger(bytes: Buffer): Buffer {
  let start = 0;
  while (start < bytes.length - 1 && bytes[start] === 0) start++;
  const body = bytes.subarray(start);
  // A set top bit would read as negative: a leading zero keeps it positive.
  return tlv(0x02, (body[0] ?? 0) & 0x80 ? Buffer.concat([Buffer.from([0]), body]) : body);
}

function objectIdentifier(dotted: string): Buffer {
  const [first = 0, second = 0, ...rest] = dotted.split('.').map(Number);
  const out: number[] = [];
  for (const arc of [first * 40 + second, ...rest]) {
    const digits = [arc % 128];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) digits.unshift(0x80 | (v % 128));
    out.push(...digits);
  }
  return tlv(0x06, Buffer.from(out));
}

/** RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050; whole seconds, always Z. */
function certificateTime(date: Date): Buffer {
  const year = date.getUTCFullYear();
  if (year < 1950 || year > 9999) throw new RangeError(`a certificate date must fall in 1950..9999, got ${date.toISOString()}`);
  const digits = date.toISOString().slice(0, 19).replace(/[-:T]/g, '');
  return year < 2050 ? tlv(0x17, Buffer.from(`${digits.slice(2)}Z`, 'ascii')) : tlv(0x18, Buffer.from(`${digits}Z`, 'ascii'));
}

const OID = {
  sha256WithRSAEncryption: '1.2.840.113549.1.1.11',
  commonName: '2.5.4.3',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  subjectAltName: '2.5.29.17',
  serverAuth: '1.3.6.1.5.5.7.3.1',
} as const;

const extension = (id: string, critical: boolean, value: Buffer) => sequence(objectIdentifier(id), ...(critical ? [derTrue()] : []), octetString(value));

function toPem(label: string, der: Buffer): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

/** A self-signed X.509 v3 certificate (PEM) for `hostname` over `privateKey`, sha256WithRSAEncryption. */
export function selfSignedCertificate(hostname: string, keys: { privateKey: KeyObject; publicKey: KeyObject }, now: Date = new Date()): string {
  // dNSName is an IA5String: a host name in its ASCII form.
  if (!/^[A-Za-z0-9.-]+$/.test(hostname)) throw new Error(`"${hostname}" is not an ASCII host name`);
  if (keys.privateKey.asymmetricKeyType !== 'rsa') throw new Error(`sha256WithRSAEncryption needs an RSA key, got ${keys.privateKey.asymmetricKeyType}`);
  const notBefore = new Date(Math.floor(now.getTime() / 1000) * 1000 - DAY_MS);
  const notAfter = new Date(notBefore);
  notAfter.setUTCFullYear(notAfter.getUTCFullYear() + VALID_YEARS);
  // 16 random bytes, top bit clear (positive) and the next one set, so the INTEGER is always exactly 16 bytes.
  const serial = randomBytes(16);
  serial[0] = ((serial[0] ?? 0) & 0x7f) | 0x40;

  const signatureAlgorithm = sequence(objectIdentifier(OID.sha256WithRSAEncryption), derNull());
  const name = sequence(setOfOne(sequence(objectIdentifier(OID.commonName), utf8String(hostname))));
  const tbsCertificate = sequence(
    explicit(0, unsignedInteger(Buffer.from([2]))), // v3
    unsignedInteger(serial),
    signatureAlgorithm,
    name, // issuer
    sequence(certificateTime(notBefore), certificateTime(notAfter)),
    name, // subject
    keys.publicKey.export({ type: 'spki', format: 'der' }),
    explicit(
      3,
      sequence(
        // cA FALSE is the DEFAULT, so DER leaves it out: an empty SEQUENCE.
        extension(OID.basicConstraints, true, sequence()),
        // digitalSignature (bit 0) and keyEncipherment (bit 2): 101 followed by five unused bits.
        extension(OID.keyUsage, true, bitString(5, Buffer.from([0xa0]))),
        extension(OID.extKeyUsage, false, sequence(objectIdentifier(OID.serverAuth))),
        extension(OID.subjectAltName, false, sequence(tlv(0x82, Buffer.from(hostname, 'ascii')))), // [2] dNSName
      ),
    ),
  );
  const signature = sign('sha256', tbsCertificate, keys.privateKey);
  return toPem('CERTIFICATE', sequence(tbsCertificate, signatureAlgorithm, bitString(0, signature)));
}

// ---- The pair STARTTLS uses ----

/**
 * The STARTTLS key and certificate: the configured PEM files (both must be set; read once, validated as a matching
 * pair — a clear Error naming the variable otherwise), else DATA_DIR/smtp-tls.key and DATA_DIR/smtp-tls.crt, generated
 * on first start (RSA-2048, self-signed for MAIL_HOSTNAME, 10 years), mode 0600, written with the wx flag (a
 * concurrent writer's pair is used instead). A generated pair that does not name the current MAIL_HOSTNAME, has
 * expired, or is broken (a writer died half-way) is generated again.
 */
export function loadOrCreateSmtpTls(
  config: { dataDir: string; mailHostname: string; smtpTlsCert: string | null; smtpTlsKey: string | null },
  now: Date = new Date(),
): TlsPair {
  if (config.smtpTlsCert !== null || config.smtpTlsKey !== null) return loadConfiguredPair(config.smtpTlsCert, config.smtpTlsKey);
  return loadOrGeneratePair(config.dataDir, config.mailHostname, now);
}

function loadConfiguredPair(certPath: string | null, keyPath: string | null): TlsPair {
  const neither = 'set both (PEM files) or neither (a self-signed pair is then generated into DATA_DIR)';
  if (certPath === null) throw new Error(`SMTP_TLS_CERT is not set but SMTP_TLS_KEY is: ${neither}`);
  if (keyPath === null) throw new Error(`SMTP_TLS_KEY is not set but SMTP_TLS_CERT is: ${neither}`);
  const cert = readConfigured('SMTP_TLS_CERT', certPath);
  const key = readConfigured('SMTP_TLS_KEY', keyPath);
  let certificate: X509Certificate;
  try {
    certificate = new X509Certificate(cert);
  } catch {
    throw new Error(`SMTP_TLS_CERT: ${certPath} holds no PEM certificate`);
  }
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(key);
  } catch {
    throw new Error(`SMTP_TLS_KEY: ${keyPath} holds no unencrypted PEM private key`);
  }
  if (!matches(certificate, privateKey)) {
    throw new Error(`SMTP_TLS_KEY (${keyPath}) is not the private key of the certificate in SMTP_TLS_CERT (${certPath})`);
  }
  return { key, cert, source: 'configured' };
}

function readConfigured(variable: string, path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`${variable}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}

function matches(certificate: X509Certificate, privateKey: KeyObject): boolean {
  try {
    return certificate.checkPrivateKey(privateKey);
  } catch {
    return false; // keys of different types
  }
}

interface GeneratedPaths {
  key: string;
  cert: string;
}

type Inspection =
  | { status: 'usable'; key: string; cert: string }
  | { status: 'missing' } // no key file: nothing generated yet
  | { status: 'incomplete' } // a key without its certificate, or files that do not parse or match
  | { status: 'stale' }; // a sound pair for another host, or expired

function loadOrGeneratePair(dataDir: string, hostname: string, now: Date): TlsPair {
  const paths = { key: join(dataDir, GENERATED_KEY_FILE), cert: join(dataDir, GENERATED_CERT_FILE) };
  const found = inspectSettled(paths, hostname, now);
  if (found.status === 'usable') return { key: found.key, cert: found.cert, source: 'existing-generated' };
  if (found.status !== 'missing') {
    // Key first: a start that stops between the two finds no key, so generates, and replaces the lone certificate.
    removeIfPresent(paths.key);
    removeIfPresent(paths.cert);
  }
  createPrivateDir(dataDir);
  const keys = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const key = keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const cert = selfSignedCertificate(hostname, keys, now);
  // The key file is the claim: whoever creates it writes the pair; anyone else waits for that pair and uses it.
  if (!writeNew(paths.key, key)) {
    const theirs = inspectSettled(paths, hostname, now);
    if (theirs.status === 'usable') return { key: theirs.key, cert: theirs.cert, source: 'existing-generated' };
    throw new Error(`another process created ${paths.key} but did not leave a usable pair for ${hostname} beside it in ${paths.cert}`);
  }
  if (!writeNew(paths.cert, cert)) {
    // A certificate without a key, left by a start that stopped while replacing the pair: ours now.
    removeIfPresent(paths.cert);
    if (!writeNew(paths.cert, cert)) throw new Error(`another process wrote ${paths.cert} while this one held ${paths.key}`);
  }
  return { key, cert, source: 'generated' };
}

/** Writes `path` 0600 only when it does not exist yet; false when it does. */
function writeNew(path: string, content: string): boolean {
  try {
    writeFileSync(path, content, { mode: PRIVATE_FILE_MODE, flag: 'wx' });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
}

function removeIfPresent(path: string): void {
  try {
    unlinkSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/** Inspects the generated pair, giving a writer caught half-way the time to finish. */
function inspectSettled(paths: GeneratedPaths, hostname: string, now: Date): Inspection {
  let found = inspectGenerated(paths, hostname, now);
  for (let waited = 0; found.status === 'incomplete' && waited < SETTLE_MS; waited += SETTLE_POLL_MS) {
    sleepSync(SETTLE_POLL_MS);
    found = inspectGenerated(paths, hostname, now);
  }
  return found;
}

function inspectGenerated(paths: GeneratedPaths, hostname: string, now: Date): Inspection {
  const key = readIfPresent(paths.key);
  if (key === null) return { status: 'missing' };
  const cert = readIfPresent(paths.cert);
  if (cert === null) return { status: 'incomplete' };
  let certificate: X509Certificate;
  let privateKey: KeyObject;
  try {
    certificate = new X509Certificate(cert);
    privateKey = createPrivateKey(key);
  } catch {
    return { status: 'incomplete' };
  }
  if (!matches(certificate, privateKey)) return { status: 'incomplete' };
  if (certificate.checkHost(hostname) === undefined) return { status: 'stale' };
  if (new Date(certificate.validTo).getTime() <= now.getTime()) return { status: 'stale' };
  return { status: 'usable', key, cert };
}

function readIfPresent(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

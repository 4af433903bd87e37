import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';

/**
 * STATE_URL: where the service keeps its own state when it is not SQLite in DATA_DIR (docs/api/decisions.md section
 * 11). Unlike a customer's database URL (server/customer-db/url.ts), this one is the operator's: it may name a
 * loopback or private host, and a CA file. It is still parsed here and handed to node-postgres field by field, never
 * as a connection string, so nothing is filled in from PG* variables or ~/.pgpass.
 */

export interface StateTarget {
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
  /** false: plain TCP (loopback only); else TLS, with the chain and the name checked unless `verify` is false. */
  ssl: false | { verify: boolean; ca: string | null };
  /** The URL without its password, for the start line and messages. */
  shown: string;
}

/**
 * What each `sslmode` means here. TLS is checked in full (chain and name) unless `no-verify` says otherwise; the
 * modes that would fall back to plain text without saying so are refused; `disable` is plain text, on loopback only.
 */
const SSL_MODES: Readonly<Record<string, 'verify' | 'no-verify' | 'disable' | 'refused'>> = {
  'verify-full': 'verify',
  'verify-ca': 'verify',
  require: 'verify',
  verify: 'verify',
  'no-verify': 'no-verify',
  disable: 'disable',
  allow: 'refused',
  prefer: 'refused',
};

/** The query parameters STATE_URL may carry. */
const PARAMETERS = new Set(['sslmode', 'sslrootcert']);

export const DEFAULT_STATE_PORT = 5432;

/** Whether `host` is this machine (where plain text never crosses a network). */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  return h === '::1';
}

/** Parses STATE_URL; throws an Error whose message says what is wrong (config.ts prefixes the variable's name). */
export function parseStateUrl(value: string, readFile: (path: string) => string = (p) => readFileSync(p, 'utf8')): StateTarget {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error('must be a postgresql:// URL (postgresql://user:password@host:port/database?sslmode=verify-full)');
  }
  if (url.protocol !== 'postgresql:' && url.protocol !== 'postgres:') throw new Error('must start with postgresql://');
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (!host) throw new Error('must name a host');
  const port = url.port === '' ? DEFAULT_STATE_PORT : Number(url.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error('must have a port from 1 to 65535');
  let database: string;
  let user: string;
  let password: string;
  try {
    database = decodeURIComponent(url.pathname.replace(/^\//, ''));
    user = decodeURIComponent(url.username);
    password = decodeURIComponent(url.password);
  } catch {
    throw new Error('has a malformed percent-escape');
  }
  if (!database || database.includes('/')) throw new Error('must name one database (postgresql://user@host/database)');
  if (!user) throw new Error('must name a user (postgresql://user:password@host/database)');
  if (url.hash !== '') throw new Error('must not have a #fragment');
  for (const name of url.searchParams.keys()) {
    if (!PARAMETERS.has(name)) throw new Error(`has the parameter "${name}": only sslmode and sslrootcert are read`);
  }
  const modeName = url.searchParams.get('sslmode') ?? 'verify-full';
  const mode = SSL_MODES[modeName];
  if (mode === undefined || mode === 'refused') {
    throw new Error(`has sslmode=${modeName}: use verify-full (the default), no-verify, or disable (loopback only)`);
  }
  if (mode === 'disable' && !isLoopbackHost(host)) {
    throw new Error(`has sslmode=disable for ${host}, which is not loopback: the state would cross the network in plain text`);
  }
  const rootCert = url.searchParams.get('sslrootcert');
  let ca: string | null = null;
  if (rootCert !== null) {
    if (mode !== 'verify') throw new Error(`has sslrootcert with sslmode=${modeName}: a CA is only read to verify the server`);
    try {
      ca = readFile(rootCert);
    } catch (err) {
      throw new Error(`has sslrootcert=${rootCert}, which cannot be read (${err instanceof Error ? err.message : String(err)})`);
    }
  }
  const shownUrl = new URL(url.href);
  if (shownUrl.password) shownUrl.password = '***';
  return {
    host,
    port,
    database,
    user,
    password,
    ssl: mode === 'disable' ? false : { verify: mode === 'verify', ca },
    shown: shownUrl.href,
  };
}

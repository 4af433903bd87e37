import { isIP } from 'node:net';
import type { ClientConfig } from 'pg';
import type { Deps } from '../core/deps.js';
import { ApiError } from '../shared/errors.js';
import { resolveHost } from '../shared/egress.js';

/**
 * A customer database URL is untrusted input (docs/api/decisions.md section 8). It is parsed here, every part judged by
 * this module, and handed to node-postgres as an explicit object: never as a connection string, never with a field
 * left for pg to fill from PG* environment variables or ~/.pgpass, never with a host pg would look up itself.
 */

export type SslMode = 'verify' | 'no-verify';

export interface CustomerDbTarget {
  /** A DNS name (lower case, no final dot) or an IP address (IPv6 without brackets). */
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
  sslMode: SslMode;
}

export const MAX_CUSTOMER_DB_URL_LENGTH = 2000;
export const DEFAULT_PG_PORT = 5432;
/** Postgres truncates identifiers (user and database names) to NAMEDATALEN - 1 = 63 bytes. */
export const MAX_PG_NAME_BYTES = 63;

/**
 * What each `sslmode` value means here. Every connection uses TLS: the modes that would allow plain text are refused,
 * and the libpq modes that ask for checks all get the full check (chain and name). Absent means `verify`.
 */
export const SSL_MODES: Readonly<Record<string, SslMode | 'refused'>> = {
  verify: 'verify',
  require: 'verify',
  'verify-ca': 'verify',
  'verify-full': 'verify',
  'no-verify': 'no-verify',
  disable: 'refused',
  allow: 'refused',
  prefer: 'refused',
};

/**
 * The query parameters a URL may carry: only `sslmode`. Everything else is refused by name: the ones that read a local
 * file (sslrootcert, sslcert, sslkey, sslcrl, passfile, service), change where or how to connect (host, hostaddr,
 * port, options, replication, target_session_attrs, gssencmode, ...) or would override the service's own bounds
 * (connect_timeout, application_name: the service sets both itself).
 */
export const ALLOWED_PARAMETERS: ReadonlySet<string> = new Set(['sslmode']);

/** Parameters with a reason worth telling the customer beyond "not allowed". */
const REFUSED_PARAMETER_REASONS: Readonly<Record<string, string>> = {
  host: 'a host in the query could name a Unix socket or a second host; put the one host in the URL',
  hostaddr: 'the service resolves and checks the host itself',
  port: 'put the port in the URL',
  connect_timeout: 'the service sets its own connection bounds',
  application_name: 'the service sets its own application name',
  sslrootcert: 'it would read a local file; certificates are verified against the public roots',
  sslcert: 'it would read a local file',
  sslkey: 'it would read a local file',
  sslcrl: 'it would read a local file',
  sslcrldir: 'it would read a local file',
  passfile: 'it would read a local file',
  service: 'it would read a local service file',
  options: 'it would change the server session',
  replication: 'it would open a replication connection',
};

const invalid = (message: string) => new ApiError('invalid_url', message);

/** A name is echoed in a message only when it is plainly a name (never a value that could be a secret). */
const SAFE_NAME = /^[A-Za-z0-9_.-]{1,40}$/;
const CONTROL = /[\u0000-\u0020\u007f]/;
const CONTROL_IN_PART = /[\u0000-\u001f\u007f]/;
/** The host characters accepted once percent-decoding is undone: letters, digits, dot, hyphen, underscore, non-ASCII. */
const HOST_CHARS = /^[A-Za-z0-9._\-\u0080-\uffff]+$/;
const DNS_NAME = /^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

function decodePart(raw: string, what: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw invalid(`The ${what} is not valid percent-encoding.`);
  }
}

const byteLength = (s: string) => Buffer.byteLength(s, 'utf8');

/**
 * The one host of the URL, normalised: IPv4 in any spelling (`0x7f000001`, `2130706433`) to its dotted form, IPv6
 * without brackets, names lower case in their ASCII (punycode) form without a final dot. Refuses several hosts and
 * every Unix-socket form. For `postgresql:` the WHATWG parser keeps the host opaque (percent-encoded, no IPv4
 * normalisation), so it is re-read here through the https host rules after the checks.
 */
function parseHost(opaque: string): string {
  if (opaque === '') throw invalid('The URL has no host.');
  if (opaque.includes(',')) throw invalid('The URL names several hosts; give exactly one.');
  if (opaque.startsWith('[')) {
    const inner = opaque.slice(1, -1);
    if (!opaque.endsWith(']') || isIP(inner) !== 6) throw invalid('The URL host is not a valid IPv6 address.');
    return new URL(`https://${opaque}/`).hostname.slice(1, -1);
  }
  const decoded = decodePart(opaque, 'host');
  if (decoded.includes('/') || /^%2f/i.test(opaque)) throw invalid('The URL host names a Unix socket; give a network host.');
  if (decoded.includes(',')) throw invalid('The URL names several hosts; give exactly one.');
  if (!HOST_CHARS.test(decoded)) throw invalid('The URL host contains a character a host name cannot have.');
  let normal: string;
  try {
    normal = new URL(`https://${decoded}/`).hostname;
  } catch {
    throw invalid('The URL host is not a valid host name or address.');
  }
  if (isIP(normal) !== 0) return normal;
  normal = normal.replace(/\.$/, '');
  if (!DNS_NAME.test(normal)) throw invalid('The URL host is not a valid host name.');
  return normal;
}

function parsePort(port: string): number {
  if (port === '') return DEFAULT_PG_PORT;
  const n = Number(port);
  if (!/^[0-9]{1,5}$/.test(port) || !Number.isInteger(n) || n < 1 || n > 65535) throw invalid('The URL port must be between 1 and 65535.');
  return n;
}

/** A user or database name: present, no control characters (a NUL would cut it short on the wire), at most 63 bytes. */
function checkName(value: string, what: 'user name' | 'database name'): string {
  if (value === '') throw invalid(`The URL has no ${what}.`);
  if (CONTROL_IN_PART.test(value)) throw invalid(`The ${what} contains a control character.`);
  if (byteLength(value) > MAX_PG_NAME_BYTES) throw invalid(`The ${what} is longer than ${MAX_PG_NAME_BYTES} bytes.`);
  return value;
}

/** The query parameters as name to value, refusing repeats, parameters without a value and any name off the list. */
function parseQuery(search: string): Map<string, string> {
  const params = new Map<string, string>();
  if (search === '' || search === '?') return params;
  for (const piece of search.slice(1).split('&')) {
    if (piece === '') continue;
    const eq = piece.indexOf('=');
    const name = decodePart(eq === -1 ? piece : piece.slice(0, eq), 'query parameter name');
    const shown = SAFE_NAME.test(name) ? `\`${name}\`` : 'a query parameter';
    if (!ALLOWED_PARAMETERS.has(name)) {
      const reason = REFUSED_PARAMETER_REASONS[name];
      throw invalid(`The URL parameter ${shown} is not allowed${reason ? `: ${reason}` : ''}. Only ${[...ALLOWED_PARAMETERS].join(', ')} is accepted.`);
    }
    if (eq === -1) throw invalid(`The URL parameter ${shown} has no value.`);
    if (params.has(name)) throw invalid(`The URL parameter ${shown} is given more than once.`);
    params.set(name, decodePart(piece.slice(eq + 1), `value of ${shown}`));
  }
  return params;
}

/** `sslmode` to the mode used: absent is `verify`; a value that would allow plain text, or an unknown one, is refused. */
export function sslModeOf(value: string | undefined): SslMode {
  if (value === undefined) return 'verify';
  const mode = Object.hasOwn(SSL_MODES, value) ? SSL_MODES[value] : undefined;
  const shown = /^[a-z-]{1,20}$/.test(value) ? `\`${value}\`` : 'that value';
  if (mode === 'refused') throw invalid(`sslmode ${shown} is not accepted: the connection always uses TLS (verify or no-verify).`);
  if (mode === undefined) throw invalid(`sslmode ${shown} is not supported; use verify (or require, verify-ca, verify-full) or no-verify.`);
  return mode;
}

/**
 * A URL given to `POST /database`: docs/api/contract.md's `postgresql://` only (422 invalid_url for `postgres://`, which libpq reads
 * the same, with a message that says so), then parsed as below.
 */
export function parseGivenCustomerDbUrl(raw: string): CustomerDbTarget {
  if (typeof raw === 'string' && /^postgres:/i.test(raw)) {
    throw invalid('The URL must start with postgresql:// (a postgres:// URL means the same: write it as postgresql://).');
  }
  return parseCustomerDbUrl(raw);
}

/**
 * `postgresql://user[:password]@host[:port][/database][?sslmode=...]` into a target (`postgres://` too: a URL stored
 * before `POST /database` took only `postgresql://` still connects), or
 * `422 invalid_url` whose message names the part at fault and never the password. Pure: no filesystem, no network, no
 * environment.
 */
export function parseCustomerDbUrl(raw: string): CustomerDbTarget {
  if (typeof raw !== 'string' || raw.length === 0) throw invalid('The URL is empty.');
  if (raw.length > MAX_CUSTOMER_DB_URL_LENGTH) throw invalid(`The URL is longer than ${MAX_CUSTOMER_DB_URL_LENGTH} characters.`);
  // The WHATWG parser drops tabs and newlines anywhere and trims spaces: refused instead, so what is judged is what was sent.
  if (CONTROL.test(raw)) throw invalid('The URL contains spaces or control characters.');
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(raw)?.[1]?.toLowerCase();
  if (scheme !== 'postgresql' && scheme !== 'postgres') {
    throw invalid('The URL must start with postgresql:// (Unix sockets and other schemes are not accepted).');
  }
  if (!/^[A-Za-z]+:\/\//.test(raw)) throw invalid('The URL must start with postgresql:// followed by the host.');
  if (raw.includes('#')) throw invalid('The URL must not have a #fragment.');
  // The query first, from the text itself: `postgresql://@/db?host=/tmp` is refused for its `host`, by name. A `?`
  // before the host's `@` is in the user name or password (unencoded), whose text must never be read as parameters
  // and echoed.
  const q = raw.indexOf('?');
  const at = q === -1 ? -1 : raw.indexOf('@', q);
  const slash = q === -1 ? -1 : raw.indexOf('/', q);
  if (at !== -1 && (slash === -1 || at < slash)) {
    throw invalid('The URL has a ? before the @ that ends its user name and password: percent-encode ?, @, / and # there (%3F, %40, %2F, %23).');
  }
  const params = parseQuery(q === -1 ? '' : raw.slice(q));
  const authority = raw.slice(raw.indexOf('//') + 2).split(/[/?]/, 1)[0] ?? '';
  if (authority.slice(authority.lastIndexOf('@') + 1) === '') throw invalid('The URL has no host.');
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    // Also where `host1:5432,host2:5432` lands: a port that is not a number.
    throw invalid('The URL is not a valid postgresql:// URL (one host, an optional numeric port).');
  }
  const host = parseHost(url.hostname);
  const port = parsePort(url.port);
  const user = checkName(decodePart(url.username, 'user name'), 'user name');
  const password = decodePart(url.password, 'password');
  if (password.includes('\u0000')) throw invalid('The password contains a NUL character.');
  const path = url.pathname;
  if (path !== '' && !path.startsWith('/')) throw invalid('The URL path is not a database name.');
  const segments = path.slice(1);
  if (segments.includes('/')) throw invalid('The URL path must be a single database name.');
  const database = segments === '' ? user : checkName(decodePart(segments, 'database name'), 'database name');
  return { host, port, database, user, password, sslMode: sslModeOf(params.get('sslmode')) };
}

/** The status fields of docs/api/contract.md (Database status) that come from the URL: never the password. */
export function describeTarget(t: CustomerDbTarget): { host: string; port: number; database: string; user: string; sslMode: SslMode } {
  return { host: t.host, port: t.port, database: t.database, user: t.user, sslMode: t.sslMode };
}

export type CustomerDbHostCheck = { kind: 'ok'; addresses: string[] } | { kind: 'blocked' } | { kind: 'dns_error'; reason: string };

/**
 * The addresses a customer database connection may go to: the webhook rules (server/core/webhook-url.ts resolveTarget)
 * applied to the parsed host: an IP literal as is, `localhost` names loopback, A and AAAA through deps.resolver, blocked
 * if any address is reserved unless ALLOW_PRIVATE_TARGETS.
 */
export async function resolveCustomerDbHost(deps: Pick<Deps, 'resolver' | 'config'>, host: string): Promise<CustomerDbHostCheck> {
  // The host is already normalised by parseHost.
  const check = await resolveHost(deps, host);
  if (check.kind === 'blocked') return { kind: 'blocked' };
  return check;
}

export interface PgClientOptions {
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  idleInTransactionTimeoutMs: number;
  /** Extra trusted roots (PEM); without it Node's roots and NODE_EXTRA_CA_CERTS. */
  ca?: string;
}

export const CUSTOMER_DB_APPLICATION_NAME = 'mailstead';

/** What pgClientConfig returns: ClientConfig plus `replication`, which pg reads but @types/pg does not list. */
export type CustomerPgConfig = ClientConfig & {
  host: string;
  port: number;
  user: string;
  database: string;
  password: () => string;
  replication: string;
  ssl: { servername?: string; rejectUnauthorized: boolean; ca?: string };
};

/**
 * The explicit node-postgres config for a checked address. pg (lib/connection-parameters.js) fills every FALSY field
 * from the environment (PGHOST, PGUSER, PGPASSWORD, PGDATABASE, PGPORT, PGOPTIONS, PGREPLICATION, PGCLIENT_ENCODING,
 * PGAPPNAME, PGSSLNEGOTIATION; PGSSLMODE when ssl is absent, PGCONNECT_TIMEOUT when connectionTimeoutMillis is), so
 * every one is set to a truthy value here. The password is a function: a string '' would fall back to PGPASSWORD, and
 * a null password makes pg read ~/.pgpass (lib/client.js _getPassword); a function is called as is, even for ''.
 * `host` is the address already checked, so pg never resolves the name; the name goes to TLS as `servername` so the
 * certificate is verified against it (none for an IP-literal host: SNI carries no addresses).
 */
export function pgClientConfig(t: CustomerDbTarget, address: string, opts: PgClientOptions): CustomerPgConfig {
  const password = t.password;
  const ssl: CustomerPgConfig['ssl'] = { rejectUnauthorized: t.sslMode === 'verify' };
  if (isIP(t.host) === 0) ssl.servername = t.host;
  if (opts.ca !== undefined) ssl.ca = opts.ca;
  return {
    host: address,
    port: t.port,
    user: t.user,
    database: t.database,
    password: () => password,
    ssl,
    sslnegotiation: 'postgres',
    connectionTimeoutMillis: opts.connectTimeoutMs,
    statement_timeout: opts.statementTimeoutMs,
    idle_in_transaction_session_timeout: opts.idleInTransactionTimeoutMs,
    // Client side: a server that stops answering is not bounded by statement_timeout, which it enforces itself.
    query_timeout: opts.statementTimeoutMs + opts.connectTimeoutMs,
    application_name: CUSTOMER_DB_APPLICATION_NAME,
    // pg decodes text as UTF-8; asking the server for it is also what keeps PGOPTIONS out.
    options: '-c client_encoding=UTF8',
    client_encoding: 'utf8',
    replication: 'false',
    keepAlive: true,
  };
}

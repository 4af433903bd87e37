import pg from 'pg';
import type { ClientConfig, Notification, PoolClient } from 'pg';
import type { DbLogger } from '../log.js';
import { cutErrorText } from './error-text.js';

/**
 * Connections to a customer's Postgres. A customer database is a peer that may vanish at any moment, and node-postgres
 * emits an error from a pooled idle client on the pool, and from a checked-out or LISTEN client on the client itself:
 * an 'error' event nobody listens to kills the process. Everything opened here carries a listener that logs instead.
 */

/** Bounds applied where the config leaves them unset: no step may wait on a customer's server forever. */
export const CUSTOMER_DB_LIMITS = {
  connectionTimeoutMillis: 10_000,
  statementTimeoutMillis: 30_000,
  idleInTransactionTimeoutMillis: 60_000,
  queryTimeoutMillis: 45_000,
  poolMax: 2,
  poolIdleMillis: 30_000,
} as const;

export interface ConnectOptions {
  /** A CA to trust instead of the default store (tests: the test CA). Production trusts the system store and NODE_EXTRA_CA_CERTS. */
  ca?: string | Buffer;
}

/**
 * The config pg gets: the given one with the bounds filled in, the CA merged into a verifying `ssl`, and the password
 * as a function, since pg reads PGPASSWORD and then ~/.pgpass for a missing or empty password (a customer server
 * must never be offered the operator's secrets).
 */
export function boundedClientConfig(config: ClientConfig, options: ConnectOptions = {}): ClientConfig {
  const password = typeof config.password === 'string' ? config.password : '';
  const ssl =
    options.ca !== undefined && typeof config.ssl === 'object' && config.ssl.rejectUnauthorized !== false ? { ...config.ssl, ca: options.ca } : config.ssl;
  return {
    ...config,
    ssl: ssl ?? false,
    password: typeof config.password === 'function' ? config.password : () => password,
    connectionTimeoutMillis: config.connectionTimeoutMillis ?? CUSTOMER_DB_LIMITS.connectionTimeoutMillis,
    statement_timeout: config.statement_timeout ?? CUSTOMER_DB_LIMITS.statementTimeoutMillis,
    idle_in_transaction_session_timeout: config.idle_in_transaction_session_timeout ?? CUSTOMER_DB_LIMITS.idleInTransactionTimeoutMillis,
    query_timeout: config.query_timeout ?? CUSTOMER_DB_LIMITS.queryTimeoutMillis,
    application_name: config.application_name ?? 'mailstead',
    keepAlive: config.keepAlive ?? true,
  };
}

export type FailureStage = 'connect' | 'tls' | 'login' | 'other';

export type ProbeResult = { ok: true } | { ok: false; stage: FailureStage; message: string };

interface ErrorShape {
  code?: string;
  message: string;
}

/**
 * How a failure to reach a customer database is classified, first match wins. Node network errors and pg's own
 * connect-time messages are `connect`; Node TLS and X.509 codes and the refusal of SSL are `tls`; the server's SQLSTATE
 * for a bad login or a missing database is `login`.
 */
export const FAILURE_RULES: ReadonlyArray<{ stage: Exclude<FailureStage, 'other'>; code?: RegExp; message?: RegExp; says: string }> = [
  { stage: 'login', code: /^28P01$/, says: 'password authentication failed' },
  { stage: 'login', code: /^28000$/, says: 'the server refused this user' },
  { stage: 'login', code: /^3D000$/, says: 'the database does not exist' },
  { stage: 'login', message: /^SASL: .*client password must be a (non-empty )?string$/, says: 'the server asks for a password and none was given' },
  { stage: 'connect', code: /^ECONNREFUSED$/, says: 'connection refused' },
  { stage: 'connect', code: /^(ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|EHOSTDOWN|ENETDOWN)$/, says: 'the host did not answer' },
  { stage: 'connect', code: /^(ENOTFOUND|EAI_AGAIN|EAI_FAIL|EAI_NONAME)$/, says: 'the host name does not resolve' },
  { stage: 'connect', message: /^(timeout expired|Connection terminated due to connection timeout)$/, says: 'timed out' },
  { stage: 'tls', message: /^The server does not support SSL connections$/, says: 'the server does not accept TLS' },
  { stage: 'tls', message: /^There was an error establishing an SSL connection$/, says: 'the server refused the TLS request' },
  {
    stage: 'tls',
    code: /^(ERR_TLS_|ERR_SSL_|CERT_|DEPTH_ZERO_SELF_SIGNED_CERT$|SELF_SIGNED_CERT_IN_CHAIN$|UNABLE_TO_|HOSTNAME_MISMATCH$|INVALID_CA$|INVALID_PURPOSE$)/,
    says: '',
  },
  { stage: 'connect', code: /^(ECONNRESET|EPIPE)$/, says: 'the connection was closed' },
  { stage: 'connect', message: /^Connection terminated unexpectedly$/, says: 'the connection was closed' },
];

const STAGE_PREFIX: Record<FailureStage, string> = {
  connect: 'could not connect',
  tls: 'TLS failed',
  login: 'login failed',
  other: 'the database answered with an error',
};

function errorShape(err: unknown): ErrorShape {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return { code: typeof code === 'string' ? code : undefined, message: err.message };
  }
  return { message: String(err) };
}

/**
 * A failure's stage and a message fit for `422 database_unreachable` ("could not connect: connection refused"), at most
 * MAX_ERROR_TEXT characters: the server's words and a certificate's names are the customer's (error-text.ts).
 */
export function classifyConnectError(err: unknown): { stage: FailureStage; message: string } {
  const e = errorShape(err);
  for (const rule of FAILURE_RULES) {
    const codeOk = rule.code === undefined || (e.code !== undefined && rule.code.test(e.code));
    const messageOk = rule.message === undefined || rule.message.test(e.message);
    if (codeOk && messageOk) {
      // Node's TLS errors say what is wrong in their own words (which name, which issuer), the server's login errors
      // which user or database; network errors would only add an address, and pg's own messages nothing.
      const detail = rule.says === '' ? e.message : rule.stage === 'login' ? `${rule.says} (${e.message})` : rule.says;
      return { stage: rule.stage, message: cutErrorText(`${STAGE_PREFIX[rule.stage]}: ${detail}`) };
    }
  }
  return { stage: 'other', message: cutErrorText(`${STAGE_PREFIX.other}: ${e.message}`) };
}

function logError(logger: DbLogger, event: string, err: unknown, fields: Record<string, unknown> = {}): void {
  const e = errorShape(err);
  logger.warn(event, {
    ...fields,
    code: e.code === undefined ? undefined : cutErrorText(e.code, 20),
    message: cutErrorText(e.message),
    stage: classifyConnectError(err).stage,
  });
}

/**
 * A small pool for one customer database that never crashes the process: the pool's 'error' (an idle client whose
 * server vanished) and every handed-out client's 'error' are logged as `customer_db.pool_error`; the next query then
 * fails with an error of its own, which the caller handles.
 */
export function openCustomerPool(config: ClientConfig, options: { max?: number; logger: DbLogger } & ConnectOptions): pg.Pool {
  const pool = new pg.Pool({
    ...boundedClientConfig(config, options),
    max: options.max ?? CUSTOMER_DB_LIMITS.poolMax,
    idleTimeoutMillis: CUSTOMER_DB_LIMITS.poolIdleMillis,
  });
  pool.on('error', (err) => logError(options.logger, 'customer_db.pool_error', err, { idle: true }));
  pool.on('connect', (client: PoolClient) => {
    client.on('error', (err) => logError(options.logger, 'customer_db.pool_error', err, { idle: false }));
  });
  return pool;
}

/** One connection, `select 1`, closed: `{ ok: true }` or the stage that failed and a message for the caller. */
export async function probeCustomerDb(config: ClientConfig, logger: DbLogger, options: ConnectOptions = {}): Promise<ProbeResult> {
  const client = new pg.Client(boundedClientConfig(config, options));
  client.on('error', (err) => logError(logger, 'customer_db.probe_error', err));
  try {
    await client.connect();
    await client.query('select 1');
    return { ok: true };
  } catch (err) {
    const { stage, message } = classifyConnectError(err);
    const code = errorShape(err).code;
    logger.info('customer_db.probe_failed', { stage, message, code: code === undefined ? undefined : cutErrorText(code, 20) });
    return { ok: false, stage, message };
  } finally {
    await client.end().catch(() => undefined);
  }
}

export interface CustomerListener {
  client: pg.Client;
  /** Resolves once the connection is closed (UNLISTEN is implied). */
  close(): Promise<void>;
  /** Resolves when the connection is lost (server gone, network down) rather than closed by close(). */
  lost: Promise<Error>;
}

/**
 * A dedicated connection that LISTENs on `channel` and hands each notification to onNotify. Its 'error' is logged
 * (`customer_db.listen_error`), never thrown; `lost` tells the caller to listen again later.
 */
export async function listenCustomerDb(
  config: ClientConfig,
  channel: string,
  onNotify: (notification: Notification) => void,
  logger: DbLogger,
  options: ConnectOptions = {},
): Promise<CustomerListener> {
  const client = new pg.Client(boundedClientConfig({ ...config, query_timeout: undefined }, options));
  let closing = false;
  let markLost: (err: Error) => void = () => undefined;
  const lost = new Promise<Error>((resolve) => {
    markLost = resolve;
  });
  client.on('error', (err) => {
    logError(logger, 'customer_db.listen_error', err, { channel });
    if (!closing) markLost(err);
  });
  client.on('end', () => {
    if (!closing) markLost(new Error('Connection ended'));
  });
  client.on('notification', (n) => {
    if (n.channel === channel) onNotify(n);
  });
  try {
    await client.connect();
    await client.query(`LISTEN ${client.escapeIdentifier(channel)}`);
  } catch (err) {
    closing = true;
    await client.end().catch(() => undefined);
    throw err;
  }
  return {
    client,
    lost,
    close: async () => {
      closing = true;
      await client.end().catch(() => undefined);
    },
  };
}

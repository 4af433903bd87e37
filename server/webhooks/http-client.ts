import { request } from 'node:https';
import { isIP } from 'node:net';
import type { Deps } from '../core/deps.js';
import { ApiError } from '../shared/errors.js';
import { parseWebhookUrl, resolveTarget, targetHost } from '../core/webhook-url.js';

/** A post that has no response headers this long after it started is a failure (`timeout`). */
export const WEBHOOK_TIMEOUT_MS = 10_000;

export interface PostResult {
  /** True for a 2xx within the timeout. */
  delivered: boolean;
  /** The response status, when one arrived. */
  status: number | null;
  /**
   * Null when delivered; else `HTTP <status>`, `timeout`, `connection_refused`, `dns_error`, `tls_error`,
   * `blocked_host`, `connection_error` (or `invalid_url`).
   */
  error: string | null;
}

export type PostFailure = 'timeout' | 'connection_refused' | 'tls_error' | 'connection_error';

/**
 * How a socket or TLS error code reads in `lastError`, as a table: exact codes first, then prefixes. Whatever
 * matches no row is `connection_error`.
 */
export const ERROR_CODE_TABLE: readonly { code: string; prefix?: true; error: PostFailure }[] = [
  { code: 'ECONNREFUSED', error: 'connection_refused' },
  { code: 'ETIMEDOUT', error: 'timeout' },
  // The peer does not speak TLS, or the handshake broke (OpenSSL's wrong version number, alert, ...).
  { code: 'EPROTO', error: 'tls_error' },
  { code: 'ERR_TLS_', prefix: true, error: 'tls_error' },
  { code: 'ERR_SSL_', prefix: true, error: 'tls_error' },
  // Certificate verification (OpenSSL's X509_V_ERR_* names as Node reports them).
  { code: 'CERT_', prefix: true, error: 'tls_error' },
  { code: 'DEPTH_ZERO_SELF_SIGNED_CERT', error: 'tls_error' },
  { code: 'SELF_SIGNED_CERT_IN_CHAIN', error: 'tls_error' },
  { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', error: 'tls_error' },
  { code: 'UNABLE_TO_GET_ISSUER_CERT', error: 'tls_error' },
  { code: 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', error: 'tls_error' },
  { code: 'UNABLE_TO_DECRYPT_CERT_SIGNATURE', error: 'tls_error' },
  { code: 'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY', error: 'tls_error' },
  { code: 'INVALID_CA', error: 'tls_error' },
  { code: 'PATH_LENGTH_EXCEEDED', error: 'tls_error' },
  { code: 'INVALID_PURPOSE', error: 'tls_error' },
  { code: 'HOSTNAME_MISMATCH', error: 'tls_error' },
];

/** `lastError` for an error code (see ERROR_CODE_TABLE). */
export function classifyPostError(code: string | undefined): PostFailure {
  if (code === undefined) return 'connection_error';
  const row = ERROR_CODE_TABLE.find((r) => (r.prefix ? code.startsWith(r.code) : code === r.code));
  return row?.error ?? 'connection_error';
}

type Attempt =
  | { kind: 'response'; status: number }
  | { kind: 'failed'; error: PostFailure; code: string | undefined /** True when no TCP connection was made. */; beforeConnect: boolean };

/**
 * One POST to one checked address: the connection goes to `address`, the host name travels in SNI (when it is a
 * name), in the certificate check and in `Host`. The response is destroyed as soon as its status is known, so its
 * body is never read; a redirect is just its status.
 */
function postTo(url: URL, address: string, headers: Record<string, string>, body: string, deadline: Promise<'timeout'>): Promise<Attempt> {
  const host = targetHost(url);
  return new Promise((resolve) => {
    let settled = false;
    let connected = false;
    const settle = (attempt: Attempt) => {
      if (settled) return;
      settled = true;
      resolve(attempt);
    };
    const req = request({
      host: address,
      port: url.port === '' ? 443 : Number(url.port),
      method: 'POST',
      path: `${url.pathname}${url.search}`,
      // SNI carries a host name only (RFC 6066); the certificate is checked against `servername`, else `host`.
      ...(isIP(host) === 0 ? { servername: host } : {}),
      // Names go on the wire as spelled here (see signedHeaders).
      headers: { 'User-Agent': 'Mailstead-Webhooks', ...headers, Host: url.host, 'Content-Length': String(Buffer.byteLength(body)) },
      agent: false,
      rejectUnauthorized: true,
    });
    req.on('socket', (socket) => {
      // `connect` is TCP; the TLS handshake and everything after it count as connected.
      socket.once('connect', () => {
        connected = true;
      });
    });
    req.on('response', (res) => {
      res.on('error', () => undefined);
      settle({ kind: 'response', status: res.statusCode ?? 0 });
      res.destroy();
      req.destroy();
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      settle({ kind: 'failed', error: classifyPostError(err.code), code: err.code, beforeConnect: !connected });
    });
    void deadline.then(() => {
      if (settled) return;
      settle({ kind: 'failed', error: 'timeout', code: undefined, beforeConnect: !connected });
      req.destroy();
    });
    req.end(body);
  });
}

/**
 * POSTs a webhook body: the host is resolved now (every attempt, so a name rebound to a private address since the
 * endpoint was created is refused, `blocked_host`, without connecting), then each checked address is tried in turn
 * until one accepts a TCP connection. One timer covers everything from the first connect to the response headers.
 */
export async function postWebhook(
  deps: Pick<Deps, 'resolver' | 'config' | 'logger'>,
  url: string,
  headers: Record<string, string>,
  body: string,
  options: { timeoutMs?: number } = {},
): Promise<PostResult> {
  let target: URL;
  try {
    target = parseWebhookUrl(url);
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    deps.logger.warn('webhook.invalid_url', { reason: err.message });
    return { delivered: false, status: null, error: 'invalid_url' };
  }
  const host = targetHost(target);
  const check = await resolveTarget(deps, target);
  if (check.kind === 'dns_error') {
    deps.logger.info('webhook.dns_error', { host, reason: check.reason });
    return { delivered: false, status: null, error: 'dns_error' };
  }
  if (check.kind === 'blocked') {
    deps.logger.warn('webhook.blocked_host', { host, address: check.address });
    return { delivered: false, status: null, error: 'blocked_host' };
  }

  const timeoutMs = options.timeoutMs ?? WEBHOOK_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  try {
    let first: Attempt | undefined;
    for (const address of check.addresses) {
      const attempt = await postTo(target, address, headers, body, deadline);
      first ??= attempt;
      if (attempt.kind === 'response') {
        const delivered = attempt.status >= 200 && attempt.status < 300;
        deps.logger.debug('webhook.posted', { host, address, status: attempt.status });
        return { delivered, status: attempt.status, error: delivered ? null : `HTTP ${attempt.status}` };
      }
      deps.logger.debug('webhook.post_failed', { host, address, error: attempt.error, code: attempt.code });
      // Another address only when this one took no connection (refused, unreachable) and time is left.
      if (!attempt.beforeConnect || attempt.error === 'timeout') break;
    }
    const failure = first?.kind === 'failed' ? first.error : 'connection_error';
    return { delivered: false, status: null, error: failure };
  } finally {
    clearTimeout(timer);
  }
}

import { type Socket, connect, isIP } from 'node:net';
import { type ConnectionOptions, connect as tlsConnect } from 'node:tls';
import SMTPConnection from 'nodemailer/lib/smtp-connection';
import type { NodemailerError } from 'nodemailer/lib/errors';
import { type Classified, TLS_FAILED_DSN, classifyFailure, classifyReply } from '../server/core/dsn.js';
import type { Target } from './routing.js';

export interface ClientOptions {
  /** EHLO name: MAIL_HOSTNAME. */
  name: string;
  connectTimeoutMs: number;
  greetingTimeoutMs: number;
  /** Inactivity limit on every later step (each command and the message data). */
  socketTimeoutMs: number;
}

/**
 * RFC 5321 4.5.3.2's minimums, as Postfix sets them (smtp_connect_timeout 30 s, smtp_helo_timeout 300 s,
 * smtp_data_done_timeout 600 s): a server may take five minutes to greet and ten to answer the end of data (a
 * content scanner). Giving up sooner defers a message the server may yet accept, which is then sent twice.
 * nodemailer's socket timeout is one idle bound for every step, so it is the longest of them.
 */
export const DEFAULT_CLIENT_TIMEOUTS = { connectTimeoutMs: 30_000, greetingTimeoutMs: 5 * 60_000, socketTimeoutMs: 10 * 60_000 };

/** One SMTP connection to a destination, reused for one recipient transaction after another. */
export interface SmtpSession {
  /**
   * One transaction: MAIL FROM `from`, RCPT TO `to`, DATA; the outcome read from the server's own replies.
   * `notSent`: the connection had already closed (idle timeout, or a 421 after the previous transaction) before this
   * transaction began, so this is no attempt for the recipient and `outcome` says nothing about it.
   */
  send(from: string, to: string, message: Buffer): Promise<SendResult>;
  /** QUIT, then resolves once the connection is closed (at most a second later): only then is its slot free. */
  close(): Promise<void>;
}

export interface SendResult {
  outcome: Classified;
  connectionLost: boolean;
  notSent: boolean;
}

const replyCode = (text: string): number => Number(/^(\d{3})/.exec(text)?.[1] ?? 0);

/**
 * `relay`: the failure happened on the connection to SMTP_RELAY_URL, the operator's own infrastructure, whose
 * address and error text stay out of what tenants read (the caller logs them).
 */
function outcomeOfError(err: NodemailerError, relay: boolean): Omit<SendResult, 'notSent'> {
  const rejected = err.rejectedErrors?.[0] ?? err;
  if (rejected.responseCode && rejected.response) {
    return { outcome: classifyReply(rejected.responseCode, rejected.response), connectionLost: false };
  }
  return { outcome: classifyFailure(failureCode(err), relay ? 'the relay' : err.message), connectionLost: true };
}

/** RFC 3207 and RFC 4954: "530 Must issue a STARTTLS command first", "530 Authentication required". */
const SESSION_REFUSAL_CODE = 530;

/**
 * A refusal that speaks of the session, not the recipient, is deferred, never bounced (a bounce suppresses the
 * address): a 530 wherever it comes, and in a plain-text session opened after a failed TLS handshake (`plainAfterTls`)
 * a 5xx to MAIL FROM or a 5.7.x (security or policy) refusal, which is how a server that requires TLS refuses plain
 * text. Its text is kept.
 */
function sessionLevel(result: Omit<SendResult, 'notSent'>, err: NodemailerError, plainAfterTls: boolean): Omit<SendResult, 'notSent'> {
  if (result.outcome.status !== 'bounced') return result;
  const rejected = err.rejectedErrors?.[0] ?? err;
  if (rejected.responseCode === SESSION_REFUSAL_CODE) {
    return { ...result, outcome: { ...result.outcome, status: 'deferred', dsn: plainAfterTls ? TLS_FAILED_DSN : result.outcome.dsn.replace(/^5/, '4') } };
  }
  if (plainAfterTls && (rejected.command === 'MAIL FROM' || result.outcome.dsn.startsWith('5.7.'))) {
    return { ...result, outcome: { ...result.outcome, status: 'deferred', dsn: TLS_FAILED_DSN } };
  }
  return result;
}

/** The most specific code of a failure: nodemailer wraps socket and TLS errors (ESOCKET) around the original one. */
function failureCode(err: NodemailerError): string | undefined {
  return err.originalCode ?? err.code;
}

/**
 * How to connect to a target. A recipient's MX: opportunistic STARTTLS, certificates unchecked (MX hosts rarely
 * carry a certificate for their name), and plain text on a second try if the upgrade fails (`plain`). The relay
 * with credentials: TLS required (implicit, or STARTTLS) with a verified certificate, so the password never travels
 * in clear or to an impostor; a private CA is trusted through Node's NODE_EXTRA_CA_CERTS.
 */
export function connectionOptions(address: string, target: Target, opts: ClientOptions, plain = false): SMTPConnection.Options {
  const guarded = target.auth !== null;
  return {
    host: address,
    port: target.port,
    secure: target.secure,
    name: opts.name,
    opportunisticTLS: !guarded,
    requireTLS: guarded && !target.secure,
    ignoreTLS: plain && !guarded,
    // SNI carries a host name only (RFC 6066): a relay given by IP address gets none (and Node warns, DEP0123).
    tls: { rejectUnauthorized: guarded, ...(isIP(target.host.replace(/^\[|\]$/g, '')) === 0 ? { servername: target.host } : {}) },
    // The socket arrives connected (openSocket, within connectTimeoutMs). nodemailer counts the greeting and a STARTTLS
    // handshake against its connectionTimeout too, so that is the greeting's time here, or a slow greeter would be
    // dropped at the connect timeout.
    connectionTimeout: opts.greetingTimeoutMs,
    greetingTimeout: opts.greetingTimeoutMs,
    socketTimeout: opts.socketTimeoutMs,
    logger: false,
  };
}

/**
 * A failure while the TLS handshake of STARTTLS was under way (the server closed, reset or went silent after its 220):
 * nodemailer reports the socket's own error (ECONNRESET, a timeout), which is a TLS negotiation failure all the same.
 */
export class UpgradeFailed extends Error {
  readonly code = 'ETLS';
  constructor(readonly original: NodemailerError) {
    super(`during the TLS handshake: ${original.message}`);
  }
}

/**
 * The connection to `address`, given up after `timeoutMs` (the connect timeout: a host that never answers holds a
 * slot that long): TCP, or TLS from the start for an implicit-TLS relay (`tlsOptions`), whose handshake is part of
 * connecting. The greeting's own wait starts once it is open.
 */
function openSocket(address: string, port: number, tlsOptions: ConnectionOptions | null, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = tlsOptions ? tlsConnect({ ...tlsOptions, host: address, port }) : connect({ host: address, port });
    const fail = (err: Error) => {
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    };
    const timer = setTimeout(() => fail(Object.assign(new Error(`connection timeout (${timeoutMs} ms)`), { code: 'ETIMEDOUT' })), timeoutMs);
    socket.once('error', fail);
    socket.once(tlsOptions ? 'secureConnect' : 'connect', () => {
      clearTimeout(timer);
      socket.off('error', fail);
      resolve(socket);
    });
  });
}

async function connectTo(address: string, target: Target, opts: ClientOptions, plain: boolean): Promise<SMTPConnection> {
  const options = connectionOptions(address, target, opts, plain);
  const socket = await openSocket(address, target.port, target.secure ? (options.tls ?? {}) : null, opts.connectTimeoutMs);
  return new Promise((resolve, reject) => {
    const conn = new SMTPConnection({ ...options, connection: socket, secured: target.secure });
    let settled = false;
    // nodemailer's `upgrading` is true from the 220 to STARTTLS until the handshake is done.
    const failedWith = (err: NodemailerError) => ((conn as unknown as { upgrading?: boolean }).upgrading ? new UpgradeFailed(err) : err);
    conn.once('error', (err: NodemailerError) => {
      if (!settled) {
        settled = true;
        reject(failedWith(err));
      }
    });
    conn.connect((err?: Error) => {
      // A connection closed before the greeting reports here, not through 'error'.
      if (err) {
        settled = true;
        const failure = failedWith(err as NodemailerError);
        conn.close();
        return reject(failure);
      }
      const done = () => {
        settled = true;
        resolve(conn);
      };
      if (!target.auth) return done();
      conn.login({ user: target.auth.user, pass: target.auth.pass }, (err) => {
        if (err) {
          settled = true;
          conn.close();
          return reject(err);
        }
        done();
      });
    });
  });
}

/**
 * Why a connection could not be opened, always a deferral: a TLS failure (an upgrade that broke, or STARTTLS refused
 * where it is required) is 4.7.5; a reply (a 4xx or 5xx greeting, a refused login) keeps its text and its code, a
 * 5.x.x one made 4.x.x, because it is a verdict on the server, not on the recipient; anything else is classified by
 * its error code.
 */
function connectFailure(e: NodemailerError, target: Target, address: string): Classified {
  const where = `${target.host} [${address}]`;
  // The relay is the operator's infrastructure: tenants read what went wrong, never its address or its own words.
  const failure = classifyFailure(failureCode(e), target.relay ? 'the relay' : `${where}: ${e.response ?? e.message}`);
  if (failure.dsn === TLS_FAILED_DSN) return failure;
  if (e.responseCode && e.response) {
    const reply = classifyReply(e.responseCode, e.response);
    const detail = target.relay ? `the relay refused the connection (${e.responseCode} ${reply.dsn})` : `${where}: ${reply.detail}`;
    return { status: 'deferred', dsn: reply.dsn.replace(/^5/, '4'), detail };
  }
  return failure;
}

/** One failed connection attempt, in full, for the log (never for tenants: it may name the relay). */
export interface ConnectAttempt {
  host: string;
  address: string;
  port: number;
  error: string;
}

/**
 * Connects to the first address of the first target that answers. Resolves with a session, or rejects with the
 * classified failure of the last try.
 */
export async function openSession(targets: Target[], opts: ClientOptions): Promise<SmtpSession> {
  let last: Classified = { status: 'deferred', dsn: '4.4.1', detail: 'no mail host to connect to' };
  const attempts: ConnectAttempt[] = [];
  for (const target of targets) {
    for (const address of target.addresses) {
      // A failed STARTTLS upgrade is retried once in plain text (MX only; never with relay credentials, and never
      // where TLS is the connection itself).
      for (const plain of target.auth || target.secure ? [false] : [false, true]) {
        try {
          const conn = await connectTo(address, target, opts, plain);
          return sessionOf(conn, opts, target.relay, plain);
        } catch (err) {
          const e = err as NodemailerError;
          attempts.push({ host: target.host, address, port: target.port, error: `${e.code ?? ''} ${e.response ?? e.message}`.trim() });
          last = connectFailure(e, target, address);
          if (last.dsn !== TLS_FAILED_DSN) break;
        }
      }
    }
  }
  throw new SessionFailure(last, attempts);
}

export class SessionFailure extends Error {
  constructor(
    readonly outcome: Classified,
    readonly attempts: ConnectAttempt[] = [],
  ) {
    super(outcome.detail);
  }
}

/** `plainAfterTls`: the session is the plain-text retry of one whose STARTTLS handshake failed. */
function sessionOf(conn: SMTPConnection, opts: ClientOptions, relay: boolean, plainAfterTls: boolean): SmtpSession {
  let alive = true;
  let ended = false;
  /** A transaction was left open (a refusal before its DATA completed): RSET before the next one. */
  let dirty = false;
  conn.on('error', () => {
    alive = false;
  });
  conn.on('end', () => {
    alive = false;
    ended = true;
  });

  // RSET after a transaction that did not complete. After the reply to the end of data the server has reset the
  // transaction itself (RFC 5321 4.1.1.4), so a delivered message needs none: one round trip less per message.
  // nodemailer drops the callback when the connection fails meanwhile, so the
  // connection's own 'error' or 'end', or a timer, settles it too.
  const reset = () =>
    new Promise<void>((resolve, reject) => {
      const lost = () => finish(Object.assign(new Error('connection closed during RSET'), { code: 'ECONNECTION' }));
      const timer = setTimeout(() => finish(Object.assign(new Error('no reply to RSET'), { code: 'ETIMEDOUT' })), opts.socketTimeoutMs);
      const finish = (err?: Error) => {
        clearTimeout(timer);
        conn.off('error', lost);
        conn.off('end', lost);
        if (err) reject(err);
        else resolve();
      };
      conn.once('error', lost);
      conn.once('end', lost);
      conn.reset((err) => finish(err ?? undefined));
    });

  return {
    async send(from, to, message) {
      if (!alive) return { outcome: classifyFailure('ECONNECTION', 'connection closed'), connectionLost: true, notSent: true };
      if (dirty) {
        try {
          await reset();
        } catch (err) {
          alive = false;
          return { ...outcomeOfError(err as NodemailerError, relay), connectionLost: true, notSent: true };
        }
      }
      dirty = true;
      return new Promise((resolve) => {
        conn.send({ from, to: [to] }, message, (err, info) => {
          if (err) {
            const result = sessionLevel(outcomeOfError(err as NodemailerError, relay), err as NodemailerError, plainAfterTls);
            if (result.connectionLost) alive = false;
            return resolve({ ...result, notSent: false });
          }
          if (!info?.accepted.includes(to)) {
            const rejected = info?.rejectedErrors?.[0];
            return resolve({
              ...(rejected
                ? sessionLevel(outcomeOfError(rejected, relay), rejected, plainAfterTls)
                : { outcome: classifyReply(450, '450 4.0.0 recipient not accepted'), connectionLost: false }),
              notSent: false,
            });
          }
          dirty = false;
          resolve({ outcome: classifyReply(replyCode(info.response), info.response), connectionLost: false, notSent: false });
        });
      });
    },
    close() {
      alive = false;
      if (ended) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          conn.close();
          resolve();
        }, 1000);
        conn.once('end', () => {
          clearTimeout(timer);
          resolve();
        });
        conn.quit();
      });
    },
  };
}

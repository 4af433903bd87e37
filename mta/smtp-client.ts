import SMTPConnection from 'nodemailer/lib/smtp-connection';
import type { NodemailerError } from 'nodemailer/lib/errors';
import { type Classified, classifyFailure, classifyReply } from './dsn.js';
import type { Target } from './routing.js';

export interface ClientOptions {
  /** EHLO name: MAIL_HOSTNAME. */
  name: string;
  connectTimeoutMs: number;
  greetingTimeoutMs: number;
  /** Inactivity limit on every later step (each command and the message data). */
  socketTimeoutMs: number;
}

export const DEFAULT_CLIENT_TIMEOUTS = { connectTimeoutMs: 30_000, greetingTimeoutMs: 30_000, socketTimeoutMs: 120_000 };

/** One SMTP connection to a destination, reused for one recipient transaction after another. */
export interface SmtpSession {
  /** One transaction: MAIL FROM `from`, RCPT TO `to`, DATA; the outcome read from the server's own replies. */
  send(from: string, to: string, message: Buffer): Promise<{ outcome: Classified; connectionLost: boolean }>;
  close(): void;
}

const replyCode = (text: string): number => Number(/^(\d{3})/.exec(text)?.[1] ?? 0);

function outcomeOfError(err: NodemailerError): { outcome: Classified; connectionLost: boolean } {
  const rejected = err.rejectedErrors?.[0] ?? err;
  if (rejected.responseCode && rejected.response) {
    return { outcome: classifyReply(rejected.responseCode, rejected.response), connectionLost: false };
  }
  return { outcome: classifyFailure(err.originalCode ?? err.code, err.message), connectionLost: true };
}

function connectTo(address: string, target: Target, opts: ClientOptions): Promise<SMTPConnection> {
  return new Promise((resolve, reject) => {
    const conn = new SMTPConnection({
      host: address,
      port: target.port,
      secure: target.secure,
      name: opts.name,
      // Opportunistic STARTTLS: used when offered, certificates unchecked (as MX hosts rarely match), plain if it fails.
      opportunisticTLS: true,
      tls: { rejectUnauthorized: false, servername: target.host },
      connectionTimeout: opts.connectTimeoutMs,
      greetingTimeout: opts.greetingTimeoutMs,
      socketTimeout: opts.socketTimeoutMs,
      logger: false,
    });
    let settled = false;
    conn.once('error', (err: NodemailerError) => {
      if (!settled) {
        settled = true;
        reject(err);
      }
    });
    conn.connect(() => {
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
 * Connects to the first address of the first target that answers. Resolves with a session, or rejects with the
 * classified failure of the last try.
 */
export async function openSession(targets: Target[], opts: ClientOptions): Promise<SmtpSession> {
  let last: Classified = { status: 'deferred', dsn: '4.4.1', detail: 'no mail host to connect to' };
  for (const target of targets) {
    for (const address of target.addresses) {
      try {
        const conn = await connectTo(address, target, opts);
        return sessionOf(conn);
      } catch (err) {
        const e = err as NodemailerError;
        last = e.responseCode && e.response ? { ...classifyReply(e.responseCode, e.response), status: 'deferred' } : classifyFailure(e.originalCode ?? e.code, `${target.host} [${address}]: ${e.message}`);
        // A 5xx greeting or login failure is not a verdict on the recipient: try elsewhere, then defer.
        if (last.status !== 'deferred') last = { ...last, status: 'deferred', dsn: last.dsn.replace(/^5/, '4') };
      }
    }
  }
  throw new SessionFailure(last);
}

export class SessionFailure extends Error {
  constructor(readonly outcome: Classified) {
    super(outcome.detail);
  }
}

function sessionOf(conn: SMTPConnection): SmtpSession {
  let alive = true;
  let dirty = false;
  conn.on('error', () => {
    alive = false;
  });
  conn.on('end', () => {
    alive = false;
  });

  const reset = () =>
    new Promise<void>((resolve, reject) => {
      conn.reset((err) => (err ? reject(err) : resolve()));
    });

  return {
    async send(from, to, message) {
      if (!alive) return { outcome: classifyFailure('ECONNECTION', 'connection closed'), connectionLost: true };
      if (dirty) {
        try {
          await reset();
        } catch (err) {
          alive = false;
          return { ...outcomeOfError(err as NodemailerError), connectionLost: true };
        }
      }
      dirty = true;
      return new Promise((resolve) => {
        conn.send({ from, to: [to] }, message, (err, info) => {
          if (err) {
            const result = outcomeOfError(err as NodemailerError);
            if (result.connectionLost) alive = false;
            return resolve(result);
          }
          if (!info || !info.accepted.includes(to)) {
            const rejected = info?.rejectedErrors?.[0];
            return resolve(rejected ? outcomeOfError(rejected) : { outcome: classifyReply(450, '450 4.0.0 recipient not accepted'), connectionLost: false });
          }
          resolve({ outcome: classifyReply(replyCode(info.response), info.response), connectionLost: false });
        });
      });
    },
    close() {
      alive = false;
      conn.quit();
      setTimeout(() => conn.close(), 1000).unref();
    },
  };
}

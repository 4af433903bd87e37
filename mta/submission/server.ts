import type { Readable } from 'node:stream';
import { SMTPServer, type SMTPServerAddress, type SMTPServerSession } from 'smtp-server';
import type { Deps } from '../../server/core/deps.js';
import { MAX_RECIPIENTS } from '../../server/core/send-request.js';
import { type Submission, beginSubmission, checkSubmissionRecipient, commitSubmission, newSubmissionId } from '../../server/core/submission.js';
import { type AuthLockout, type SubmissionAuth, authenticateSubmission } from '../../server/core/submission-auth.js';
import { MAX_HEADER_BYTES, headerEnd, readSubmittedHeader } from '../../server/core/submitted-message.js';
import { ApiError } from '../../server/shared/errors.js';
import { clientKey } from '../../server/shared/ip-ranges.js';
import { logFailure } from '../../server/shared/store-health.js';
import type { SubmissionStage } from '../../server/shared/metrics.js';
import { SmtpReply, createLineEndingCheck } from '../inbound/receive.js';
import { LOCKED_OUT, replyFor } from './replies.js';
import { PROXY_HEADER_TIMEOUT_MS, requireProxyHeader } from '../proxy-accept.js';
import { type SmtpConnection, connectionOf, createClientBounds, listenable } from '../smtp-sessions.js';

/**
 * SMTP submission (docs/api/decisions.md section 10): smtp-server on SUBMISSION_PORT (STARTTLS) or SUBMISSIONS_PORT
 * (implicit TLS), with inbound's TLS pair, banner and EHLO name MAIL_HOSTNAME, SIZE advertised and enforced, AUTH PLAIN
 * and LOGIN offered and taken only over TLS, bounded clients, connections per address, idle time and session length,
 * early talkers refused. The rules are the core's (server/core/submission.ts); this edge reads the DATA stream,
 * splits the header from the body as it streams, and words each refusal as a reply (./replies.ts).
 */

export interface SubmissionOptions {
  /** Clients at once on this port; more are greeted with 421 and closed. */
  maxClients: number;
  /** Connections at once from one address. */
  maxPerAddress: number;
  /** Idle time allowed between commands (and within DATA). */
  socketTimeoutMs: number;
  /** The longest a session may last, whatever it does. */
  maxSessionMs: number;
  /** With SMTP_PROXY_PROTOCOL: how long a connection has to send its PROXY header. */
  proxyHeaderTimeoutMs: number;
}

export const DEFAULT_SUBMISSION_OPTIONS: SubmissionOptions = {
  maxClients: 200,
  maxPerAddress: 20,
  socketTimeoutMs: 60_000,
  maxSessionMs: 10 * 60_000,
  proxyHeaderTimeoutMs: PROXY_HEADER_TIMEOUT_MS,
};

type SubmissionDeps = Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'keyUsage' | 'logger' | 'metrics' | 'rateLimiter' | 'secretKey' | 'storeHealth'>;

const reply = (code: number, message: string) => new SmtpReply(code, message);

/** The session's key and account, set by a successful AUTH (smtp-server keeps it as `session.user`). */
const authOf = (session: SMTPServerSession): SubmissionAuth => session.user as unknown as SubmissionAuth;

/**
 * A submission server for one port: `secure` for implicit TLS (465), else STARTTLS (587). Both ports of a process
 * share `lockout`, so failures on one count on the other.
 */
export function createSubmissionServer(
  deps: SubmissionDeps,
  tls: { key: string; cert: string },
  options: Partial<SubmissionOptions> & { secure: boolean; lockout: AuthLockout },
) {
  const opts: SubmissionOptions = { ...DEFAULT_SUBMISSION_OPTIONS, ...options };
  const { lockout } = options;
  const bounds = createClientBounds(() => server, opts);
  // Each accepted recipient as the RCPT check parsed it (smtp-server keeps the address object in the envelope).
  const judgedAtRcpt = new WeakMap<SMTPServerAddress, { address: string; domain: string }>();
  const refused = (stage: SubmissionStage, session: SMTPServerSession, err: SmtpReply) => {
    deps.metrics.submissionRefused(stage, err.responseCode);
    deps.logger.info('submission.refused', { stage, code: err.responseCode, message: err.message, remoteAddress: session.remoteAddress });
    return err;
  };

  const server: SMTPServer = new SMTPServer({
    name: deps.config.mailHostname,
    banner: 'Mailstead submission',
    key: tls.key,
    cert: tls.cert,
    secure: options.secure,
    size: deps.config.submissionMaxMessageBytes,
    // A message past SIZE is drained and answered here (552 5.3.4), never kept.
    rejectOversized: false,
    maxClients: opts.maxClients,
    socketTimeout: opts.socketTimeoutMs,
    closeTimeout: 5_000,
    disableReverseLookup: true,
    // SMTP_PROXY_PROTOCOL: every connection opens with a PROXY header, read by requireProxyHeader below.
    useProxy: deps.config.smtpProxyProtocol,
    authMethods: ['PLAIN', 'LOGIN'],
    authOptional: false,
    allowInsecureAuth: false,
    authRequiredMessage: '5.7.0 Authentication required',
    hideDSN: true,
    logger: false,

    onConnect(session, callback) {
      const refusal = bounds.admit(session);
      if (refusal) return callback(refused('connect', session, refusal));
      // (onClose releases what admit counted, refused or not.)
      if (lockout.locked(clientKey(session.remoteAddress))) return callback(refused('connect', session, reply(421, LOCKED_OUT)));
      const connection = connectionOf(server, session.id);
      if (connection) wordReplies(connection, deps.config.submissionMaxMessageBytes);
      callback();
    },

    onClose(session) {
      bounds.release(session);
    },

    async onAuth(auth, session, callback) {
      const client = clientKey(session.remoteAddress);
      if (lockout.locked(client)) return callback(refused('auth', session, reply(421, LOCKED_OUT)));
      try {
        const user = await authenticateSubmission(deps, auth.username ?? '', auth.password ?? '');
        deps.logger.info('submission.authenticated', { keyId: user.keyId, accountId: user.actingAccountId, remoteAddress: session.remoteAddress });
        // smtp-server types `user` loosely; the session keeps the key and account for each message.
        return callback(null, { user: user as unknown as string });
      } catch (err) {
        if (!(err instanceof ApiError)) {
          logFailure(deps, 'submission.auth_failed', err);
          return callback(refused('auth', session, reply(454, '4.7.0 Temporary authentication failure; try again later')));
        }
        // Nothing of what was sent is logged: the password is a key.
        if (lockout.fail(client)) return callback(refused('auth', session, reply(421, LOCKED_OUT)));
        return callback(refused('auth', session, replyFor(err)));
      }
    },

    async onMailFrom(_address, session, callback) {
      try {
        await beginSubmission(deps, authOf(session));
        callback();
      } catch (err) {
        callback(refused('mail', session, replyOf(deps, err)));
      }
    },

    async onRcptTo(address, session, callback) {
      if (session.envelope.rcptTo.length >= MAX_RECIPIENTS) {
        return callback(refused('rcpt', session, reply(452, `4.5.3 Too many recipients: at most ${MAX_RECIPIENTS} a message`)));
      }
      try {
        judgedAtRcpt.set(address, await checkSubmissionRecipient(deps, authOf(session), address.address));
        callback();
      } catch (err) {
        callback(refused('rcpt', session, replyOf(deps, err)));
      }
    },

    onData(stream, session, callback) {
      const recipients = session.envelope.rcptTo.flatMap((r) => {
        const judged = judgedAtRcpt.get(r);
        return judged ? [judged] : [];
      });
      receiveSubmission(deps, stream, authOf(session), recipients).then(
        (submitted) => {
          deps.metrics.submissionAccepted();
          deps.logger.info('submission.accepted', {
            id: submitted.id,
            duplicate: submitted.duplicate,
            recipients: recipients.length,
            accountId: authOf(session).actingAccountId,
            remoteAddress: session.remoteAddress,
          });
          callback(null, `2.0.0 Ok: queued as ${submitted.id}`);
        },
        (err: unknown) => callback(refused('data', session, replyOf(deps, err))),
      );
    },
  });
  if (deps.config.smtpProxyProtocol) requireProxyHeader(server, deps.logger, 'submission.proxy_refused', opts.proxyHeaderTimeoutMs);
  return { server, ...listenable(server, deps.logger, 'submission.server_error') };
}

export type SubmissionServer = ReturnType<typeof createSubmissionServer>;

/**
 * Replies smtp-server words itself and section 10 words otherwise: AUTH before STARTTLS is `538 5.7.11`; EHLO before
 * TLS offers no AUTH (RFC 4954 section 4: no plain-text password is invited); a declared SIZE over the limit and an
 * unknown mechanism carry their enhanced codes (`552 5.3.4`, `504 5.5.4`) like every other refusal here.
 */
function wordReplies(connection: SmtpConnection, maxBytes: number): void {
  const send = connection.send.bind(connection);
  connection.send = (code, data, context) => {
    if (code === 538) return send(538, '5.7.11 Encryption required for requested authentication mechanism', context);
    if (code === 250 && Array.isArray(data) && !connection.secure)
      return send(
        code,
        data.filter((line) => !/^AUTH\b/i.test(line)),
        context,
      );
    // smtp-server's own wording of a MAIL FROM whose SIZE= is over the limit, and of an unknown AUTH mechanism.
    if (code === 552 && typeof data === 'string' && data.startsWith('Error:')) {
      return send(552, `5.3.4 Message exceeds the fixed maximum message size of ${maxBytes} bytes`, context);
    }
    if (code === 504 && typeof data === 'string' && data.startsWith('Error:'))
      return send(504, '5.5.4 Unrecognized authentication type: PLAIN and LOGIN only', context);
    return send(code, data, context);
  };
}

/** A refusal as its reply; anything but a rule's refusal is a failure of ours, answered 451 and logged. */
function replyOf(deps: Pick<Deps, 'logger' | 'storeHealth'>, err: unknown): SmtpReply {
  if (err instanceof SmtpReply) return err;
  if (err instanceof ApiError) return replyFor(err);
  logFailure(deps, 'submission.failed', err);
  return reply(451, '4.3.0 The message could not be queued; try again later');
}

/**
 * Reads a submitted message from the DATA stream (bare CR or LF refused, SIZE enforced, the header split off as it
 * streams, the body kept as the chunks that came), then queues it through the core. Rejects with the reply to send.
 */
async function receiveSubmission(
  deps: SubmissionDeps,
  stream: Readable & { sizeExceeded?: boolean },
  auth: SubmissionAuth,
  recipients: { address: string; domain: string }[],
): Promise<{ id: string; duplicate: boolean }> {
  const lineEnds = createLineEndingCheck();
  let head: Buffer | null = Buffer.alloc(0);
  let header: Buffer | null = null;
  const body: Buffer[] = [];
  let headerTooLong = false;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    lineEnds.feed(chunk);
    if (lineEnds.sawBare || stream.sizeExceeded || headerTooLong) continue; // drained, never kept
    if (header !== null) {
      body.push(chunk);
      continue;
    }
    head = Buffer.concat([head!, chunk]);
    const end = headerEnd(head);
    if (end !== -1) {
      header = head.subarray(0, end);
      if (end < head.length) body.push(head.subarray(end));
      head = null;
    } else if (head.length > MAX_HEADER_BYTES) {
      headerTooLong = true;
      head = null;
    }
  }
  if (stream.sizeExceeded) throw reply(552, `5.3.4 Message exceeds the fixed maximum message size of ${deps.config.submissionMaxMessageBytes} bytes`);
  if (lineEnds.bad) throw reply(550, '5.6.0 Bare CR or LF in the message data is not accepted; lines must end with CRLF');
  if (headerTooLong) throw reply(552, `5.3.4 The message header exceeds ${MAX_HEADER_BYTES} bytes`);
  if (recipients.length === 0) throw reply(554, '5.5.1 No valid recipients');
  const id = newSubmissionId(deps);
  // A message with no blank line is all header.
  const read = readSubmittedHeader(header ?? head ?? Buffer.alloc(0), { id, mailHostname: deps.config.mailHostname, now: deps.clock.now() });
  const submission: Submission = { header: read, raw: Buffer.concat([read.header, ...body]), recipients, id };
  body.length = 0;
  return commitSubmission(deps, auth, submission);
}

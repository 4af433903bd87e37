import { SMTPServer, type SMTPServerSession } from 'smtp-server';
import type { Deps } from '../../server/core/deps.js';
import { type Recipient, judgeRecipient } from './recipients.js';
import type { ReportChecks } from './report-matching.js';
import { SmtpReply, receiveMessage } from './receive.js';
import { logFailure } from '../../server/shared/store-health.js';
import { PROXY_HEADER_TIMEOUT_MS, requireProxyHeader } from '../proxy-accept.js';
import { createClientBounds, listenable } from '../smtp-sessions.js';

/**
 * Inbound SMTP on SMTP_HOST:SMTP_PORT: smtp-server with the banner and EHLO name MAIL_HOSTNAME,
 * STARTTLS, SIZE advertised and enforced (a MAIL FROM SIZE= over it and a body that grows past it are 552), at most
 * 100 recipients (452 for the rest), no AUTH (nobody relays through it), no reverse DNS, bounded clients, connections
 * per address, idle time and session length. smtp-server itself refuses commands sent before the banner (early
 * talkers), HTTP requests, and plaintext pipelined behind STARTTLS.
 */

export interface InboundOptions {
  /** Clients at once; more are greeted with 421 and closed. */
  maxClients: number;
  /** Connections at once from one address. */
  maxPerAddress: number;
  /** Idle time allowed between commands (and within DATA). */
  socketTimeoutMs: number;
  /** The longest a session may last, whatever it does. */
  maxSessionMs: number;
  /** With SMTP_PROXY_PROTOCOL: how long a connection has to send its PROXY header. */
  proxyHeaderTimeoutMs: number;
  /** Recipients of one transaction. */
  maxRecipients: number;
}

export const DEFAULT_INBOUND_OPTIONS: InboundOptions = {
  maxClients: 200,
  maxPerAddress: 20,
  socketTimeoutMs: 60_000,
  maxSessionMs: 10 * 60_000,
  proxyHeaderTimeoutMs: PROXY_HEADER_TIMEOUT_MS,
  maxRecipients: 100,
};

const reply = (code: number, message: string) => new SmtpReply(code, message);

/**
 * The inbound SMTP server. `checks` (the composition root passes the inbound parser's) checks the DKIM signatures of
 * reports in a parse thread; its owner closes it after the server.
 */
export function createInboundServer(
  deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'inboundSpool' | 'logger' | 'metrics' | 'secretKey' | 'storeHealth'>,
  tls: { key: string; cert: string },
  options: Partial<InboundOptions> & { checks: ReportChecks },
) {
  const opts: InboundOptions = { ...DEFAULT_INBOUND_OPTIONS, ...options };
  const checks: ReportChecks = options.checks;
  // What the RCPT check decided for each accepted recipient (smtp-server keeps the address object in the envelope),
  // so DATA does not judge again: the transaction that stores the message does (receiveMessage).
  const judgedAtRcpt = new WeakMap<object, Recipient>();
  const bounds = createClientBounds(() => server, opts);

  const server: SMTPServer = new SMTPServer({
    name: deps.config.mailHostname,
    // smtp-server writes `220 <name> ESMTP <banner>`.
    banner: 'Mailstead',
    key: tls.key,
    cert: tls.cert,
    size: deps.config.smtpMaxMessageBytes,
    rejectOversized: true,
    maxRecipients: opts.maxRecipients,
    maxClients: opts.maxClients,
    socketTimeout: opts.socketTimeoutMs,
    closeTimeout: 5_000,
    disableReverseLookup: true,
    // SMTP_PROXY_PROTOCOL: every connection opens with a PROXY header, read by requireProxyHeader below.
    useProxy: deps.config.smtpProxyProtocol,
    authOptional: true,
    disabledCommands: ['AUTH'],
    hideDSN: true,
    logger: false,

    onConnect(session, callback) {
      const refusal = bounds.admit(session);
      if (refusal) {
        deps.metrics.inboundRefused('connect', 421);
        return callback(refusal);
      }
      callback();
    },

    onClose(session) {
      bounds.release(session);
    },

    async onRcptTo(address, _session, callback) {
      let judged;
      try {
        judged = await judgeRecipient(deps, address.address);
      } catch (err) {
        logFailure(deps, 'inbound.rcpt_failed', err);
        deps.metrics.inboundRefused('rcpt', 451);
        return callback(reply(451, '4.3.0 Temporary failure; try again later'));
      }
      // The same answer for an unknown domain, a domain that does not receive, and an account without a database.
      if (judged.kind === 'refused') {
        deps.metrics.inboundRefused('rcpt', 550);
        return callback(reply(550, '5.7.1 Relaying denied: this server does not accept mail for that address'));
      }
      judgedAtRcpt.set(address, judged);
      callback();
    },

    onData(stream, session: SMTPServerSession, callback) {
      // Judged again in the transaction that stores the message: a domain or database removed meanwhile no longer receives.
      const judged = async () => {
        const recipients = [];
        for (const r of session.envelope.rcptTo) {
          const recipient = judgedAtRcpt.get(r) ?? (await judgeRecipient(deps, r.address));
          if (recipient.kind !== 'refused') recipients.push(recipient);
        }
        return recipients;
      };
      const mailFrom = session.envelope.mailFrom ? session.envelope.mailFrom.address : '';
      judged()
        .then((recipients) =>
          receiveMessage(deps, stream, { mailFrom, recipients, remoteAddress: session.remoteAddress, helo: session.hostNameAppearsAs ?? '' }, checks),
        )
        .then(
          (received) => {
            deps.metrics.inboundAccepted();
            deps.logger.info('inbound.received', {
              id: received.id,
              size: received.size,
              stored: received.stored,
              events: received.events,
              operator: received.operator,
              remoteAddress: session.remoteAddress,
            });
            callback(null, `2.0.0 Ok: queued as ${received.id}`);
          },
          (err: unknown) => {
            if (err instanceof SmtpReply) {
              deps.metrics.inboundRefused('data', err.responseCode);
              deps.logger.info('inbound.refused', { code: err.responseCode, message: err.message, remoteAddress: session.remoteAddress });
              return callback(err);
            }
            // The client went away mid-DATA (nobody reads the answer), or something failed: nothing was stored.
            deps.metrics.inboundRefused('data', 451);
            deps.logger.info('inbound.aborted', { message: err instanceof Error ? err.message : String(err), remoteAddress: session.remoteAddress });
            callback(reply(451, '4.3.0 The message could not be stored; try again later'));
          },
        );
    },
  });
  // A client resetting its connection is routine on port 25; anything else is worth a warning. A failure to listen
  // is the caller's to report (smtp.listen_failed), once.
  if (deps.config.smtpProxyProtocol) requireProxyHeader(server, deps.logger, 'inbound.proxy_refused', opts.proxyHeaderTimeoutMs);
  return { server, ...listenable(server, deps.logger, 'inbound.server_error') };
}

export type InboundServer = ReturnType<typeof createInboundServer>;

import type { ReportChecks } from '../../mta/inbound/report-matching.js';
import { type InboundServer, createInboundServer } from '../../mta/inbound/server.js';
import type { TlsPair } from '../../mta/inbound/tls.js';
import { type SubmissionServer, createSubmissionServer } from '../../mta/submission/server.js';
import { createAuthLockout } from '../core/submission-auth.js';
import type { Deps } from '../core/deps.js';
import { createApp } from './http-app.js';
import { listenHttp } from './http-serve.js';
import { refuseStart } from './start.js';

/** The listeners of a start: the HTTP API and dashboard, inbound SMTP, and SMTP submission. */

export type HttpListener = Awaited<ReturnType<typeof listenHttp>>;

/**
 * The API and the dashboard on HTTP_HOST:HTTP_PORT. A port in use or an address not on this machine stops the start
 * with one line naming the variables (the listen error's own words).
 */
export async function listenHttpOrExit(deps: Deps): Promise<HttpListener> {
  const { config, logger } = deps;
  return listenHttp(createApp(deps), config.httpHost, config.httpPort, { logger, trustedProxies: config.trustProxy }).catch((err: unknown) => {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EADDRINUSE' && code !== 'EADDRNOTAVAIL' && code !== 'EACCES') throw err;
    refuseStart(`invalid configuration: HTTP_HOST and HTTP_PORT (${config.httpHost} port ${config.httpPort}) cannot be listened on: ${(err as Error).message}`);
  });
}

/**
 * Inbound SMTP on SMTP_HOST:SMTP_PORT: mail for customers' receiving domains, bounces and complaints. Resolves with
 * the server and its port; null when it could not listen (the API keeps running: a first `npm start` as a normal
 * user cannot bind port 25; the log says why and how); 'stopped' when a stop began while it was starting (it is
 * closed again).
 */
export async function listenSmtp(
  deps: Deps,
  tls: TlsPair,
  checks: ReportChecks,
  stopping: () => boolean,
): Promise<{ server: InboundServer; port: number } | null | 'stopped'> {
  const { config, logger } = deps;
  if (tls.source === 'generated')
    logger.info('smtp.tls_generated', {
      message: 'A self-signed STARTTLS certificate was generated into DATA_DIR; set SMTP_TLS_CERT and SMTP_TLS_KEY for a trusted one.',
    });
  const server = createInboundServer(deps, tls, { checks });
  try {
    const port = await server.listen(config.smtpHost, config.smtpPort);
    if (stopping()) {
      await server.close();
      return 'stopped';
    }
    logger.info('smtp.listening', { host: config.smtpHost, port, hostname: config.mailHostname });
    return { server, port };
  } catch (err) {
    logger.error('smtp.listen_failed', {
      host: config.smtpHost,
      port: config.smtpPort,
      code: (err as NodeJS.ErrnoException).code,
      message: smtpListenFailure(config.smtpHost, config.smtpPort, (err as NodeJS.ErrnoException).code),
    });
    return null;
  }
}

/** What to do when inbound SMTP cannot listen, by the listen error's code. */
const SMTP_LISTEN_HINTS: Record<string, string> = {
  EACCES: 'Ports below 1024 need root or CAP_NET_BIND_SERVICE; set SMTP_PORT to another port (forwarded from 25)',
  EADDRINUSE:
    "Another process listens on that port (another Mailstead, or the machine's own mail server such as Postfix or Exim); stop it, or set SMTP_PORT to another port",
  EADDRNOTAVAIL: 'SMTP_HOST is not an address of this machine; set it to one (0.0.0.0 listens on all)',
};

function smtpListenFailure(host: string, port: number, code: string | undefined): string {
  const hint = (code !== undefined && SMTP_LISTEN_HINTS[code]) || 'Check SMTP_HOST and SMTP_PORT';
  return `Inbound SMTP is off: could not listen on ${host}:${port} (${code ?? 'error'}). ${hint}; or SMTP_PORT=0 to run without inbound mail.`;
}

/**
 * SMTP submission on SMTP_HOST: SUBMISSION_PORT (STARTTLS) and SUBMISSIONS_PORT (implicit TLS), either off at 0,
 * sharing one AUTH lock-out. A port that cannot be listened on is logged (submission.listen_failed, with what to do)
 * and left off; the rest runs. 'stopped' when a stop began meanwhile (what listened is closed again).
 */
export async function listenSubmission(
  deps: Deps,
  tls: TlsPair,
  stopping: () => boolean,
): Promise<{ servers: SubmissionServer[]; submissionPort: number | null; submissionsPort: number | null } | 'stopped'> {
  const { config, logger } = deps;
  const lockout = createAuthLockout(deps.clock);
  const servers: SubmissionServer[] = [];
  const listenOne = async (port: number, secure: boolean, variable: string): Promise<number | null> => {
    if (port === 0) return null;
    const server = createSubmissionServer(deps, tls, { secure, lockout });
    try {
      const bound = await server.listen(config.smtpHost, port);
      servers.push(server);
      logger.info('submission.listening', { host: config.smtpHost, port: bound, tls: secure ? 'implicit' : 'starttls' });
      return bound;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      logger.error('submission.listen_failed', {
        host: config.smtpHost,
        port,
        code,
        message: `SMTP submission is off on ${config.smtpHost}:${port} (${code ?? 'error'}): ${SUBMISSION_LISTEN_HINTS[code ?? ''] ?? 'check SMTP_HOST'}; or ${variable}=0 to turn it off.`,
      });
      return null;
    }
  };
  const submissionPort = await listenOne(config.submissionPort, false, 'SUBMISSION_PORT');
  const submissionsPort = await listenOne(config.submissionsPort, true, 'SUBMISSIONS_PORT');
  if (stopping()) {
    await Promise.all(servers.map((s) => s.close()));
    return 'stopped';
  }
  return { servers, submissionPort, submissionsPort };
}

const SUBMISSION_LISTEN_HINTS: Record<string, string> = {
  EACCES: 'ports below 1024 need root or CAP_NET_BIND_SERVICE; set the port to one above 1024 (forwarded from 587 or 465)',
  EADDRINUSE: "another process listens on that port (the machine's own mail server, say); stop it, or choose another port",
  EADDRNOTAVAIL: 'SMTP_HOST is not an address of this machine',
};

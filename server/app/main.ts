import { writeSync } from 'node:fs';
import { API_BASE, createApp } from './http-app.js';
import { systemClock } from '../shared/clock.js';
import { ConfigError, loadConfig, mailHostnameProblem } from '../shared/config.js';
import { ensureAdminToken } from '../core/admin-token.js';
import { createPrivateDir, type DataDirLock, DataDirLockedError, lockDataDir, securePrivateDataDir } from '../../db/data-dir.js';
import { CAPTURE_LIMIT } from '../core/capture-store.js';
import { createDeliveryEngine } from '../../mta/delivery-engine.js';
import { releaseDeadClaims } from '../core/idempotency.js';
import { createDeps } from './deps.js';
import { startCheckpointer } from '../../db/checkpointer.js';
import { listenHttp } from './http-serve.js';
import { createWebhookDispatcher } from '../webhooks/dispatcher.js';
import { createCustomerDbWriter } from '../customer-db/writer.js';
import { createInboundParser } from '../customer-db/inbound/parser.js';
import { type InboundServer, createInboundServer } from '../../mta/inbound/server.js';
import { loadOrCreateSmtpTls } from '../../mta/inbound/tls.js';
import { createLogger, stdoutBatched } from '../shared/logger.js';
import { scansOffThread } from '../../db/scans.js';
import { checkSecretKey, keyOffWarning, mismatchLine } from './secret-key-check.js';
import { runStopSteps } from './shutdown.js';
import { STARTED_EVENT, type StartedMessage, startLine } from './start-line.js';

const KEY_USAGE_FLUSH_MS = 10_000;

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`mailstead: ${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
  const stdout = stdoutBatched();
  const logger = createLogger(config.logLevel, stdout);

  // One server per DATA_DIR, before anything in it is read or written; the kernel drops the lock when we die.
  let lock: DataDirLock;
  try {
    createPrivateDir(config.dataDir);
    lock = lockDataDir(config.dataDir);
  } catch (err) {
    if (err instanceof DataDirLockedError) {
      process.stderr.write(`mailstead: ${err.message}\n`);
      process.exit(1);
    }
    // A path that is a file, under a file, or somewhere this user cannot write: one line naming the variable.
    process.stderr.write(`mailstead: invalid configuration: DATA_DIR (${config.dataDir}) cannot be used: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  const tightened = securePrivateDataDir(config.dataDir);
  if (tightened.length > 0) {
    logger.warn('data_dir.permissions_tightened', { dataDir: config.dataDir, changes: tightened, message: 'DATA_DIR holds message content and keys: it is now readable by its owner only.' });
  }

  const deps = createDeps(config, systemClock, logger);
  const keyCheck = checkSecretKey(deps.db, deps.secretKey);
  if (keyCheck.kind === 'mismatch') {
    process.stderr.write(`${mismatchLine(deps.db, config, keyCheck.what)}\n`);
    process.exit(1);
  }
  // WAL checkpoints on a thread of their own, not inside a COMMIT on the event loop (db/checkpointer.ts).
  const checkpointer = startCheckpointer(deps.store.sqlite, logger);
  // The reads that walk many rows (the /metrics gauges, the dashboard's chart) run on that thread's connection.
  deps.scans = scansOffThread(checkpointer, deps.db);
  deps.metrics.collectProcessMetrics();
  const hostnameProblem = mailHostnameProblem(config.mailHostname);
  if (hostnameProblem) {
    logger.warn('config.mail_hostname_not_fqdn', {
      mailHostname: config.mailHostname,
      message: `${hostnameProblem}: DNS records would ask customers to include:${config.spfDomain} and bounces would go to @${config.mailHostname}. Set MAIL_HOSTNAME to this server's public fully qualified name in production.`,
    });
  }
  if (config.deliveryMode === 'capture') {
    logger.warn('config.delivery_mode_capture', {
      message: `DELIVERY_MODE=capture: no mail leaves this machine. Each recipient's signed message is kept in DATA_DIR (the newest ${CAPTURE_LIMIT}; GET /api/v1/emails/{id}/message?recipient= reads it) and recorded as delivered, and .test, .example, .invalid and .localhost domains verify without DNS. For development only: production runs DELIVERY_MODE=direct.`,
    });
  }
  if (config.allowPrivateTargets) logger.warn('config.allow_private_targets', { message: 'ALLOW_PRIVATE_TARGETS is set: private and loopback targets are allowed. For development and tests only.' });
  if (keyCheck.kind === 'off') logger.warn('config.secret_key_off', { message: keyOffWarning(keyCheck.sealed) });

  // STARTTLS's pair before anything starts or listens: a bad SMTP_TLS_CERT or SMTP_TLS_KEY stops the start before
  // /healthz ever answers, before the engine claims any mail, and before a first start's admin token is shown.
  const smtpTls = config.smtpPort !== 0 ? loadOrCreateSmtpTls(config) : null;

  // Written whatever LOG_LEVEL says, and on stdout before the token is stored (synchronously, behind the lines held
  // so far): it is shown once, and without it nobody signs in to the dashboard.
  ensureAdminToken(deps.db, config.adminToken, (token) => {
    const line = { time: new Date().toISOString(), level: 'info', event: 'admin_token.generated', token, message: 'Dashboard admin token; shown once. Reset with: npm run -s cli -- admin-token reset (with this DATA_DIR)' };
    stdout.flush();
    writeSync(1, `${JSON.stringify(line)}\n`);
  });

  const deadClaims = releaseDeadClaims(deps.db);
  if (deadClaims > 0) logger.info('idempotency.dead_claims_released', { count: deadClaims });

  const engine = createDeliveryEngine(deps);
  const webhooks = createWebhookDispatcher(deps);
  // One set of parse threads: the writer's parse of received mail, and the inbound server's check of reports.
  const parser = createInboundParser(deps);
  const customerDb = createCustomerDbWriter(deps, { parser });

  const flushUsage = () => {
    try {
      deps.keyUsage.flush(deps.db);
    } catch (err) {
      logger.error('key_usage.flush_failed', { err });
    }
  };
  const flushTimer = setInterval(flushUsage, KEY_USAGE_FLUSH_MS);
  flushTimer.unref();

  // The signal handlers go in before anything listens: a supervisor may stop the process the moment it reports
  // ready, and a SIGTERM must never fall through to Node's default (death by signal instead of exit 0).
  let http: Awaited<ReturnType<typeof listenHttp>> | undefined;
  let inbound: InboundServer | undefined;
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info('process.stopping', { signal });
    clearInterval(flushTimer);
    const ok = await runStopSteps(
      [
        ['http', () => http?.close()],
        ['inbound', () => inbound?.close()],
        ['delivery engine', () => engine.stop()],
        // After the engine: its last outcomes may have queued deliveries, which wait in the database for the next start.
        ['webhooks', () => webhooks.stop()],
        ['customer databases', () => customerDb.stop()],
        // After the inbound server and the writer, the two that use its threads.
        ['parse threads', () => parser.close()],
        ['key usage', () => flushUsage()],
        ['checkpointer', () => checkpointer.stop()],
        ['database', () => deps.store.close()],
        ['lock', () => lock.release()],
      ],
      logger,
    );
    logger.info('process.stopped', { signal, ...(ok ? {} : { failed: true }) });
    process.exit(ok ? 0 : 1);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  // Started by a parent over IPC (npm run dev): when the parent is gone, so is the reason to run.
  if (process.send) process.on('disconnect', () => void shutdown('disconnect'));

  engine.start();
  webhooks.start();
  customerDb.start();
  const listening = await listenHttp(createApp(deps), config.httpHost, config.httpPort, { logger }).catch((err: unknown) => {
    // A port in use or an address not on this machine: one line naming the variables (the listen error's own words).
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EADDRINUSE' && code !== 'EADDRNOTAVAIL' && code !== 'EACCES') throw err;
    process.stderr.write(`mailstead: invalid configuration: HTTP_HOST and HTTP_PORT (${config.httpHost} port ${config.httpPort}) cannot be listened on: ${(err as Error).message}\n`);
    process.exit(1);
  });
  if (stopping) {
    await listening.close();
    return;
  }
  http = listening;
  logger.info('http.listening', { host: config.httpHost, port: http.port, api: API_BASE });

  // Inbound SMTP (SMTP_PORT=0 turns it off): mail for customers' receiving domains, bounces and complaints.
  let smtpPort: number | null = null;
  if (smtpTls !== null) {
    if (smtpTls.source === 'generated') logger.info('smtp.tls_generated', { message: 'A self-signed STARTTLS certificate was generated into DATA_DIR; set SMTP_TLS_CERT and SMTP_TLS_KEY for a trusted one.' });
    const server = createInboundServer(deps, smtpTls, { checks: parser });
    try {
      const port = await server.listen(config.smtpHost, config.smtpPort);
      if (stopping) {
        await server.close();
        return;
      }
      inbound = server;
      smtpPort = port;
      logger.info('smtp.listening', { host: config.smtpHost, port, hostname: config.mailHostname });
    } catch (err) {
      // The API keeps running (a first `npm start` as a normal user cannot bind port 25); the log says why and how.
      logger.error('smtp.listen_failed', {
        host: config.smtpHost,
        port: config.smtpPort,
        code: (err as NodeJS.ErrnoException).code,
        message: smtpListenFailure(config.smtpHost, config.smtpPort, (err as NodeJS.ErrnoException).code),
      });
    }
  }
  // One line that says what runs, where: the operator's first look at a start.
  logger.info('server.started', startLine(config, { httpPort: http.port, smtpPort }));
  // A parent that started this process with an IPC channel (npm run dev) learns the same, whatever LOG_LEVEL says.
  if (process.send) {
    const started: StartedMessage = { event: STARTED_EVENT, httpPort: http.port, smtpPort };
    // Only once the start line is out (the logger holds lines up to 10 ms), so the parent prints below it.
    stdout.flush();
    process.send(started);
  }
}

/** What to do when inbound SMTP cannot listen, by the listen error's code. */
const SMTP_LISTEN_HINTS: Record<string, string> = {
  EACCES: 'Ports below 1024 need root or CAP_NET_BIND_SERVICE; set SMTP_PORT to another port (forwarded from 25)',
  EADDRINUSE: "Another process listens on that port (another Mailstead, or the machine's own mail server such as Postfix or Exim); stop it, or set SMTP_PORT to another port",
  EADDRNOTAVAIL: 'SMTP_HOST is not an address of this machine; set it to one (0.0.0.0 listens on all)',
};

function smtpListenFailure(host: string, port: number, code: string | undefined): string {
  const hint = (code !== undefined && SMTP_LISTEN_HINTS[code]) || 'Check SMTP_HOST and SMTP_PORT';
  return `Inbound SMTP is off: could not listen on ${host}:${port} (${code ?? 'error'}). ${hint}; or SMTP_PORT=0 to run without inbound mail.`;
}

main().catch((err: unknown) => {
  process.stderr.write(`mailstead: failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});

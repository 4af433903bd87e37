import { API_BASE } from './http-app.js';
import type { Deps } from '../core/deps.js';
import { createDeliveryEngine } from '../../mta/delivery-engine.js';
import { createWebhookDispatcher } from '../webhooks/dispatcher.js';
import { createCustomerDbWriter } from '../customer-db/writer.js';
import { createInboundParser } from '../customer-db/inbound/parser.js';
import type { InboundServer } from '../../mta/inbound/server.js';
import { loadOrCreateSmtpTls } from '../../mta/inbound/tls.js';
import { createLogger, stdoutBatched } from '../shared/logger.js';
import { type HttpListener, listenHttpOrExit, listenSmtp, listenSubmission } from './listeners.js';
import type { SubmissionServer } from '../../mta/submission/server.js';
import { runStopSteps, stopOnSignals } from './shutdown.js';
import {
  announceStart,
  claimDataDir,
  loadConfigOrExit,
  openDeps,
  releaseDeadIdempotencyClaims,
  showAdminTokenOnce,
  startKeyUsageFlush,
  warnAtStart,
} from './start.js';

/** The start, step by step; each step is one idea (start.ts, listeners.ts, shutdown.ts). */
async function main(): Promise<void> {
  const config = loadConfigOrExit();
  const stdout = stdoutBatched();
  // With several nodes (STATE_URL) every line names its node.
  const logger = createLogger(config.logLevel, stdout, config.state.engine === 'postgres' ? { node: config.nodeName } : {});
  const lock = claimDataDir(config, logger);
  const { deps, checkpointer, keyCheck, liveness } = await openDeps(config, logger);
  deps.metrics.collectProcessMetrics();
  warnAtStart(config, logger, keyCheck);
  // STARTTLS's pair before anything starts or listens: a bad SMTP_TLS_CERT or SMTP_TLS_KEY stops the start before
  // /healthz ever answers, before the engine claims any mail, and before a first start's admin token is shown.
  const smtpTls = config.smtpPort !== 0 || config.submissionPort !== 0 || config.submissionsPort !== 0 ? loadOrCreateSmtpTls(config) : null;
  await showAdminTokenOnce(deps, stdout);
  await releaseDeadIdempotencyClaims(deps);
  const workers = createWorkers(deps);
  const keyUsage = startKeyUsageFlush(deps);

  // Stops in this order, whatever has started by then.
  const listening: { http?: HttpListener; inbound?: InboundServer; submission?: SubmissionServer[] } = {};
  // Each worker stopped once, by the drain or by its own step, whichever comes first.
  const once = (run: () => Promise<unknown>) => {
    let done: Promise<unknown> | null = null;
    return () => (done ??= run());
  };
  const stopEngine = once(() => workers.engine.stop());
  const stopWebhooks = once(() => workers.webhooks.stop());
  const stopCustomerDb = once(() => workers.customerDb.stop());
  const stopWorkers = async () => {
    await stopEngine();
    await stopWebhooks();
    await stopCustomerDb();
  };
  const stop = stopOnSignals(logger, () => {
    keyUsage.stopTimer();
    return runStopSteps(
      [
        // Draining (DRAIN_SECONDS, docs/operating/several-nodes.md): /healthz answers 503 at once and the workers stop
        // claiming and finish what they hold, while the listeners still take what the balancer sends until it has
        // seen the 503. With no drain time (one node), the listeners close first, as they always did.
        [
          'drain',
          async () => {
            deps.drain.begin();
            if (config.drainMs > 0) await Promise.all([new Promise((r) => setTimeout(r, config.drainMs)), stopWorkers()]);
          },
        ],
        ['http', () => listening.http?.close()],
        ['inbound', () => listening.inbound?.close()],
        ['submission', async () => void (await Promise.all((listening.submission ?? []).map((s) => s.close())))],
        ['delivery engine', stopEngine],
        // After the engine: its last outcomes may have queued deliveries, which wait in the database for the next start.
        ['webhooks', stopWebhooks],
        ['customer databases', stopCustomerDb],
        // After the inbound server and the writer, the two that use its threads.
        ['parse threads', () => workers.parser.close()],
        ['key usage', () => keyUsage.flush()],
        // After every worker: the node's liveness lock goes last, so no other node takes over work still in flight.
        ['liveness', () => liveness?.stop()],
        ['checkpointer', () => checkpointer?.stop()],
        ['database', () => deps.store.close()],
        ['lock', () => lock.release()],
      ],
      logger,
    );
  });

  await workers.engine.start();
  await workers.webhooks.start();
  await workers.customerDb.start();
  const http = await listenHttpOrExit(deps);
  if (stop.stopping) {
    await http.close();
    return;
  }
  listening.http = http;
  logger.info('http.listening', { host: config.httpHost, port: http.port, api: API_BASE });

  // Inbound SMTP (SMTP_PORT=0 turns it off).
  let smtpPort: number | null = null;
  if (smtpTls !== null && config.smtpPort !== 0) {
    const smtp = await listenSmtp(deps, smtpTls, workers.parser, () => stop.stopping);
    if (smtp === 'stopped') return;
    if (smtp !== null) {
      listening.inbound = smtp.server;
      smtpPort = smtp.port;
    }
  }
  // SMTP submission (SUBMISSION_PORT and SUBMISSIONS_PORT, 0 turns either off).
  let submission: { submissionPort: number | null; submissionsPort: number | null } = { submissionPort: null, submissionsPort: null };
  if (smtpTls !== null && (config.submissionPort !== 0 || config.submissionsPort !== 0)) {
    const listened = await listenSubmission(deps, smtpTls, () => stop.stopping);
    if (listened === 'stopped') return;
    listening.submission = listened.servers;
    submission = listened;
  }
  announceStart(config, logger, stdout, {
    httpPort: http.port,
    smtpPort,
    submissionPort: submission.submissionPort,
    submissionsPort: submission.submissionsPort,
  });
}

/** The workers over the durable queues; each subscribes to its queue's wake (db/queue-wake.ts) when it starts. */
function createWorkers(deps: Deps) {
  const engine = createDeliveryEngine(deps);
  const webhooks = createWebhookDispatcher(deps);
  // One set of parse threads: the writer's parse of received mail, and the inbound server's check of reports.
  const parser = createInboundParser(deps);
  const customerDb = createCustomerDbWriter(deps, { parser });
  return { engine, webhooks, parser, customerDb };
}

main().catch((err: unknown) => {
  process.stderr.write(`mailstead: failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});

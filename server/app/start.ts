import { writeSync } from 'node:fs';
import type { Store } from '../../db/client.js';
import { type Checkpointer, startCheckpointer } from '../../db/checkpointer.js';
import { createPrivateDir, type DataDirLock, DataDirLockedError, lockDataDir, securePrivateDataDir } from '../../db/data-dir.js';
import { scansOffThread } from '../../db/scans.js';
import { ensureAdminToken } from '../core/admin-token.js';
import { CAPTURE_LIMIT } from '../core/capture-store.js';
import type { Deps } from '../core/deps.js';
import { releaseDeadClaims } from '../core/idempotency.js';
import { systemClock } from '../shared/clock.js';
import { type Config, ConfigError, loadConfig, mailHostnameProblem } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { createDeps, resolveSecretKey } from './deps.js';
import { type Liveness, startLiveness } from './liveness.js';
import { openStore } from './state.js';
import { type SecretKeyCheck, checkSecretKey, holdsSealedSecrets, keyOffWarning, mismatchLine } from './secret-key-check.js';
import { type Listening, STARTED_EVENT, type StartedMessage, startLine } from './start-line.js';

/** The steps of a start before the workers run, each one idea; main calls them in order. */

/** Stops the start with one line on stderr and exit code 1: what the operator must fix before it can run. */
export function refuseStart(message: string): never {
  process.stderr.write(`mailstead: ${message}\n`);
  process.exit(1);
}

/** The configuration from the environment; one invalid variable stops the start, naming it. */
export function loadConfigOrExit(): Config {
  try {
    return loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) refuseStart(err.message);
    throw err;
  }
}

/**
 * One server per DATA_DIR, before anything in it is read or written (the kernel drops the lock when we die); and the
 * directory readable by its owner only.
 */
export function claimDataDir(config: Config, logger: Logger): DataDirLock {
  let lock: DataDirLock;
  try {
    createPrivateDir(config.dataDir);
    lock = lockDataDir(config.dataDir);
  } catch (err) {
    if (err instanceof DataDirLockedError) refuseStart(err.message);
    // A path that is a file, under a file, or somewhere this user cannot write: one line naming the variable.
    refuseStart(`invalid configuration: DATA_DIR (${config.dataDir}) cannot be used: ${err instanceof Error ? err.message : String(err)}`);
  }
  const tightened = securePrivateDataDir(config.dataDir);
  if (tightened.length > 0) {
    logger.warn('data_dir.permissions_tightened', {
      dataDir: config.dataDir,
      changes: tightened,
      message: 'DATA_DIR holds message content and keys: it is now readable by its owner only.',
    });
  }
  return lock;
}

/**
 * Every dependency, built once: the store (SQLite in DATA_DIR, or the Postgres of STATE_URL); the secret key, which
 * must open what the store holds (else the start stops, before anything else runs); on SQLite the WAL checkpoint
 * thread, on whose connection the reads that walk many rows (the /metrics gauges, the dashboard's chart) run
 * (db/checkpointer.ts); then the rest (createDeps).
 */
export async function openDeps(
  config: Config,
  logger: Logger,
): Promise<{ deps: Deps; checkpointer: Checkpointer | null; keyCheck: SecretKeyCheck; liveness: Liveness | null }> {
  let store: Store;
  try {
    store = await openStore(config);
  } catch (err) {
    if (config.state.engine === 'postgres')
      refuseStart(`the state database of STATE_URL (${config.state.target.shown}) cannot be used: ${err instanceof Error ? err.message : String(err)}`);
    throw err;
  }
  // Generated only on a first start: DATA_DIR holding secrets sealed with a key and no key file is a lost key.
  const secretKey = resolveSecretKey(config, { mayGenerate: !(await holdsSealedSecrets(store.db)) });
  const keyCheck = await checkSecretKey(store.db, secretKey);
  if (keyCheck.kind === 'mismatch') {
    process.stderr.write(`${await mismatchLine(store.db, config, keyCheck.what)}\n`);
    process.exit(1);
  }
  if (store.engine === 'postgres') {
    // One node among any number over this database: its liveness lock before any work (server/app/liveness.ts).
    let liveness: Liveness;
    try {
      liveness = await startLiveness({ target: store.target, db: store.db, node: config.nodeName, logger });
    } catch (err) {
      refuseStart(`NODE_NAME ${config.nodeName}: ${err instanceof Error ? err.message : String(err)}`);
    }
    return { deps: await createDeps(config, systemClock, logger, { store, secretKey, nodes: liveness.nodes }), checkpointer: null, keyCheck, liveness };
  }
  // WAL checkpoints on a thread of their own, not inside a COMMIT on the event loop.
  const checkpointer = startCheckpointer(store.sqlite, logger);
  const deps = await createDeps(config, systemClock, logger, { store, secretKey, scans: scansOffThread(checkpointer, store.db) });
  return { deps, checkpointer, keyCheck, liveness: null };
}

/** What the operator should know of the configuration this start runs with (none of it stops the start). */
export function warnAtStart(config: Config, logger: Logger, keyCheck: SecretKeyCheck): void {
  // A production warning: capture mode (npm run dev) sends nothing, and its .test domains verify without DNS.
  const hostnameProblem = config.deliveryMode === 'capture' ? null : mailHostnameProblem(config.mailHostname);
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
  if (config.allowPrivateTargets)
    logger.warn('config.allow_private_targets', {
      message: 'ALLOW_PRIVATE_TARGETS is set: private and loopback targets are allowed. For development and tests only.',
    });
  if (keyCheck.kind === 'off') logger.warn('config.secret_key_off', { message: keyOffWarning(keyCheck.sealed) });
  if (config.state.engine === 'postgres' && config.state.target.ssl !== false && !config.state.target.ssl.verify) {
    logger.warn('config.state_tls_unverified', {
      message: `STATE_URL has sslmode=no-verify: the connection to ${config.state.target.host} is encrypted, but its certificate is not checked, so anyone on the path can pose as the database. Use sslmode=verify-full (with sslrootcert=/path/ca.pem for a private CA).`,
    });
  }
}

/**
 * The dashboard's admin token on a first start: written whatever LOG_LEVEL says, and on stdout before the token is
 * stored (synchronously, behind the lines held so far): it is shown once, and without it nobody signs in.
 */
export async function showAdminTokenOnce(deps: Deps, stdout: { flush(): void }): Promise<void> {
  await ensureAdminToken(deps.db, deps.config.adminToken, (token) => {
    const line = {
      time: new Date().toISOString(),
      level: 'info',
      event: 'admin_token.generated',
      token,
      message: 'Dashboard admin token; shown once. Reset with: npm run -s cli -- admin-token reset (with this DATA_DIR)',
    };
    stdout.flush();
    writeSync(1, `${JSON.stringify(line)}\n`);
  });
}

/**
 * Idempotency claims a previous process held when it died: no answer will come for them. On SQLite; on Postgres the
 * node's liveness frees those of its earlier run and of nodes gone (server/app/liveness.ts).
 */
export async function releaseDeadIdempotencyClaims(deps: Deps): Promise<void> {
  if (deps.store.engine !== 'sqlite') return;
  const deadClaims = await releaseDeadClaims(deps.db);
  if (deadClaims > 0) deps.logger.info('idempotency.dead_claims_released', { count: deadClaims });
}

const KEY_USAGE_FLUSH_MS = 10_000;

/** The keys' last-used times, written every KEY_USAGE_FLUSH_MS; `flush` writes them now (the stop's last word). */
export function startKeyUsageFlush(deps: Deps): { flush(): Promise<void>; stopTimer(): void } {
  const flush = async () => {
    try {
      await deps.keyUsage.flush(deps.db);
    } catch (err) {
      deps.logger.error('key_usage.flush_failed', { err });
    }
  };
  const timer = setInterval(flush, KEY_USAGE_FLUSH_MS);
  timer.unref();
  return { flush, stopTimer: () => clearInterval(timer) };
}

/**
 * One line that says what runs, where: the operator's first look at a start. A parent that started this process
 * with an IPC channel (npm run dev) learns the same, whatever LOG_LEVEL says.
 */
export function announceStart(config: Config, logger: Logger, stdout: { flush(): void }, listening: Listening): void {
  logger.info('server.started', startLine(config, listening));
  if (process.send) {
    const started: StartedMessage = { event: STARTED_EVENT, ...listening };
    // Only once the start line is out (the logger holds lines up to 10 ms), so the parent prints below it.
    stdout.flush();
    process.send(started);
  }
}

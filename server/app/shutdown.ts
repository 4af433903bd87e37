import type { Logger } from '../shared/logger.js';

/** One part of a stop: its name (for the log) and what it does. */
export type StopStep = readonly [name: string, run: () => unknown];

/**
 * Runs a stop's steps in order, each to its end even when one before it failed (a database damaged under the running
 * server fails the steps that write to it; the lock must still be released and the process must still exit): a
 * failure is logged as `process.stop_failed` naming its step, never thrown. Resolves false when any step failed.
 */
export async function runStopSteps(steps: readonly StopStep[], logger: Logger): Promise<boolean> {
  let ok = true;
  for (const [step, run] of steps) {
    try {
      await run();
    } catch (err) {
      ok = false;
      logger.error('process.stop_failed', { step, err });
    }
  }
  return ok;
}

/**
 * Stops the process on SIGTERM, SIGINT, or (started by a parent over IPC, npm run dev) the parent gone: once, through
 * `stop` (true when every step went well), then exits 0, or 1 when a step failed. Installed before anything listens:
 * a supervisor may stop the process the moment it reports ready, and a SIGTERM must never fall through to Node's
 * default (death by signal instead of exit 0). `stopping` says whether a stop has begun.
 */
export function stopOnSignals(logger: Logger, stop: () => Promise<boolean>): { readonly stopping: boolean } {
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info('process.stopping', { signal });
    const ok = await stop();
    logger.info('process.stopped', { signal, ...(ok ? {} : { failed: true }) });
    process.exit(ok ? 0 : 1);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  // When the parent is gone, so is the reason to run.
  if (process.send) process.on('disconnect', () => void shutdown('disconnect'));
  return {
    get stopping() {
      return stopping;
    },
  };
}

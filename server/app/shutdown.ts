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

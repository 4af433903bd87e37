import type { Classified } from '../../server/core/dsn.js';
import { type AttemptExtras, recordOutcome } from '../../server/core/outcomes.js';
import { stillHeld } from '../delivery-queue.js';
import type { DomainWork, Job } from './domain-work.js';

/** What recording an outcome takes: the outcome's own transaction and what follows it (webhooks, metrics, logs). */
export type RecordingDeps = Parameters<typeof recordOutcome>[0];

/** A build or read that failed before the transaction: deferred, tried again on the schedule. */
export function unprepared(err: unknown): Classified {
  return { status: 'deferred', dsn: '4.3.0', detail: `message could not be prepared: ${(err as Error).message}` };
}

/** A failure without an SMTP reply of its own (no connection could be opened): deferred. */
export function failure(err: unknown): Classified {
  return { status: 'deferred', dsn: '4.4.0', detail: err instanceof Error ? err.message : String(err) };
}

/**
 * The engine's outcome recording: each recipient's outcome durable before the lane's next step, the job finished
 * either way; and the recipients found gone (their account deleted since the claim) finished without one.
 */
export function createOutcomeRecording(deps: RecordingDeps, parts: { worker: string; isStopping: () => boolean }) {
  /** Records an outcome; false when it could not be written (the lane stops: nothing may happen before it is). */
  async function record(job: Job, outcome: Classified, extras?: AttemptExtras): Promise<boolean> {
    try {
      await recordOutcome(deps, job, outcome, extras);
      job.finish();
      return true;
    } catch (err) {
      // Left claimed but no longer renewed: the lease runs out and the recipient is tried again.
      // (A failure on the store was noted for /healthz by the group commit.)
      deps.logger.error('delivery.record_failed', { recipientId: job.recipient.id, err });
      job.finish();
      return false;
    }
  }

  /** Gives every queued recipient of the domain the same outcome (a routing failure, or no host reachable). */
  async function recordAll(w: DomainWork, outcome: Classified): Promise<void> {
    while (w.jobs.length > 0 && !parts.isStopping()) {
      if (!(await record(w.jobs.shift()!, outcome))) return;
    }
  }

  /** Whether this engine's claim still holds the recipient (its rows are there: its account was not deleted since). */
  async function held(job: Job): Promise<boolean> {
    return await stillHeld(deps.db, parts.worker, job.recipient.id);
  }

  /**
   * True (and the job finished, logged) when the recipient's rows are gone: its account was deleted since the claim.
   * `checked`: `held(job)` already under way (looked up ahead by the lane).
   */
  async function gone(job: Job, accountId: string, checked?: Promise<boolean>): Promise<boolean> {
    if (await (checked ?? held(job))) return false;
    deps.logger.info('delivery.recipient_gone', { recipientId: job.recipient.id, accountId });
    job.finish();
    return true;
  }

  return { record, recordAll, held, gone };
}

export type OutcomeRecording = ReturnType<typeof createOutcomeRecording>;

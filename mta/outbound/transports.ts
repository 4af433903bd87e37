import { CAPTURED, sealCapture } from '../../server/core/capture-store.js';
import type { Deps } from '../../server/core/deps.js';
import type { AttemptExtras } from '../../server/core/outcomes.js';
import { SIMULATED_COMPLAINT, simulateAttempt } from '../../server/core/simulator.js';
import type { FairSlots, Slot } from '../../server/queues/fair-slots.js';
import type { Claimed } from '../delivery-queue.js';
import type { Target } from '../routing.js';
import { type ClientOptions, SessionFailure, type SmtpSession, openSession } from '../smtp-client.js';
import { verpAddress } from '../verp.js';
import type { DomainWork, Job } from './domain-work.js';
import type { MessageCache } from './message-cache.js';
import { type OutcomeRecording, failure, unprepared } from './outcome-recording.js';

/** What the transports take besides the configuration, the log, the clock and the secret key. */
export interface TransportParts {
  slots: Pick<FairSlots, 'shouldYield'>;
  messages: Pick<MessageCache, 'messageOf'>;
  outcomes: OutcomeRecording;
  isStopping: () => boolean;
  timeouts: Omit<ClientOptions, 'name'>;
}

/**
 * How a lane's recipients leave: over SMTP to the route's targets (one connection, one transaction each), or locally,
 * to the capture store or the mailbox simulator. Each outcome is recorded before the next step.
 */
export function createTransports(deps: Pick<Deps, 'config' | 'logger' | 'secretKey' | 'clock'>, parts: TransportParts) {
  const { slots, messages, outcomes, isStopping } = parts;
  const { record, recordAll, gone } = outcomes;
  const clientOpts: ClientOptions = { name: deps.config.mailHostname, ...parts.timeouts };

  /** Delivers the queue's recipients over one slot; 'yield' when the slot should go to another account first. */
  async function serve(w: DomainWork, targets: Target[], slot: Slot): Promise<'done' | 'yield'> {
    let session: SmtpSession | null = null;
    /**
     * The queue's next recipient, taken for this connection while the previous outcome was recorded, with its check
     * that it is still held, under way (`lookAhead`); given back to the queue whenever this connection stops serving.
     */
    let ahead: { job: Job; held: Promise<boolean> } | null = null;
    const giveBack = () => {
      if (ahead) w.jobs.unshift(ahead.job);
      ahead = null;
    };
    try {
      while ((ahead !== null || w.jobs.length > 0) && !isStopping()) {
        if (!session) {
          giveBack();
          w.live++;
          try {
            session = await openSession(targets, clientOpts);
          } catch (err) {
            w.live--;
            if (err instanceof SessionFailure && err.attempts.length > 0) {
              // The full story (addresses, error text) goes to the log; tenants read the classified outcome.
              deps.logger.warn('delivery.connect_failed', { domain: w.domain, accountId: w.account, attempts: err.attempts });
            }
            // Another lane is delivering to this domain, or may be about to: leave the recipients to it. Otherwise
            // none can be reached now.
            if (w.live > 0) return 'done';
            await recordAll(w, err instanceof SessionFailure ? err.outcome : failure(err));
            return 'done';
          }
        }
        const job = ahead?.job ?? w.jobs.shift();
        const checked = ahead?.held;
        ahead = null;
        if (!job) return 'done';
        let message: Buffer;
        let index: number;
        try {
          const ready = await messages.messageOf(job);
          message = ready.message;
          index = Math.max(0, ready.to.indexOf(job.recipient.recipient));
        } catch (err) {
          // A build that failed because the account was deleted meanwhile (its domain key went with it): gone too.
          if (await gone(job, w.account)) continue;
          if (!(await record(job, unprepared(err)))) return 'done';
          continue;
        }
        // Its account deleted since the claim (the rows went with it): nothing to send, nothing to record. Checked
        // after the build's wait, just before the SMTP transaction begins, or while the previous one's outcome was
        // recorded (lookAhead).
        if (await gone(job, w.account, checked)) continue;
        const result = await session.send(verpAddress(job.message.id, index, deps.config.mailHostname, deps.secretKey), job.recipient.recipient, message);
        if (result.connectionLost) {
          await session.close();
          session = null;
          w.live--;
        }
        if (result.notSent) {
          // The connection had closed before this recipient's transaction began: not an attempt. Back to the queue,
          // and a new connection for it.
          w.jobs.unshift(job);
          continue;
        }
        // The outcome is durable before anything else happens on this connection (or any other); meanwhile the next
        // recipient's lease is read, so its transaction may begin as soon as this outcome is durable.
        ahead = lookAhead(w);
        if (!(await record(job, result.outcome))) return 'done';
        if ((ahead !== null || w.jobs.length > 0) && slots.shouldYield(slot)) return 'yield';
      }
      return 'done';
    } finally {
      giveBack();
      // The slot is released by the caller after this: only once the connection is really closed.
      if (session) {
        await session.close();
        w.live--;
      }
    }
  }

  /**
   * Takes the queue's next recipient for this connection and begins its check that it is still held (after its build,
   * as the check in line does), so the check's round trip overlaps the recording of the outcome before it.
   */
  function lookAhead(w: DomainWork): { job: Job; held: Promise<boolean> } | null {
    const next = w.jobs.shift();
    if (!next) return null;
    const held = messages
      .messageOf(next)
      .then(
        () => undefined,
        () => undefined,
      )
      .then(() => outcomes.held(next));
    held.catch(() => undefined);
    return { job: next, held };
  }

  /**
   * The transports that open no connection, so take no slot: the capture store (every recipient delivered, `2.0.0`
   * `captured`) and the mailbox simulator (its table's reply to this attempt, a complaint after complaint@'s
   * delivery). Each message is built and signed exactly as for SMTP; in capture mode it is kept, the simulator's too,
   * in the transaction that records its outcome.
   */
  async function deliverLocally(w: DomainWork, kind: 'capture' | 'simulator'): Promise<void> {
    while (w.jobs.length > 0 && !isStopping()) {
      const job = w.jobs.shift()!;
      let extras: AttemptExtras;
      try {
        const { message } = await messages.messageOf(job);
        extras = { capture: deps.config.deliveryMode === 'capture' ? capture(job, message) : null };
      } catch (err) {
        if (await gone(job, w.account)) continue;
        if (!(await record(job, unprepared(err)))) return;
        continue;
      }
      if (await gone(job, w.account)) continue;
      let outcome = CAPTURED;
      if (kind === 'simulator') {
        const reply = simulateAttempt(job.recipient.recipient, job.recipient.attempts);
        outcome = reply.outcome;
        if (reply.complains) extras.complaint = SIMULATED_COMPLAINT;
      }
      if (!(await record(job, outcome, extras))) return;
    }
  }

  function capture(job: Claimed, message: Buffer) {
    if (!deps.secretKey) throw new Error('SECRET_KEY=off: captured mail cannot be sealed');
    return sealCapture(deps.secretKey, {
      emailId: job.message.id,
      accountId: job.message.accountId,
      recipient: job.recipient.recipient,
      message,
      capturedAt: deps.clock.now(),
    });
  }

  return { serve, deliverLocally };
}

export type Transports = ReturnType<typeof createTransports>;

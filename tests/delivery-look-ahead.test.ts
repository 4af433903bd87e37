import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Classified } from '../server/core/dsn.js';
import type { DomainWork, Job } from '../mta/outbound/domain-work.js';
import type { OutcomeRecording } from '../mta/outbound/outcome-recording.js';
import { createTransports } from '../mta/outbound/transports.js';
import type { Target } from '../mta/routing.js';
import type { Slot } from '../server/queues/fair-slots.js';
import { FAST_TIMEOUTS } from './helpers/delivery-rig.js';
import { startService, type TestService } from './helpers/service.js';
import { SmtpSink } from './helpers/smtp-sink.js';

/**
 * A connection's recipients, one transaction each (mta/outbound/transports.ts): each outcome is durable before the
 * next transaction begins, and the next recipient's check that the engine still holds it (its account not deleted since
 * the claim) is read while that outcome is recorded, not after it: one round trip less a message on the critical path.
 * The recipient taken ahead belongs to the connection until it is sent, or goes back to the front of its queue when the
 * connection stops serving (a yield to another account, a stop, a failed record).
 */

let sink: SmtpSink;
let service: TestService;
let target: Target;

beforeAll(async () => {
  sink = await SmtpSink.start();
  service = await startService();
  target = { host: 'mx.example.net', addresses: ['127.0.0.1'], port: sink.port, secure: false, auth: null, relay: false };
});
afterAll(async () => {
  await service.close();
  await sink.stop();
});
beforeEach(() => {
  sink.received = [];
});

const slot: Slot = { account: 'acc', destination: 'example.net', release: () => undefined };

function jobs(n: number): Job[] {
  return Array.from(
    { length: n },
    (_, i) =>
      ({
        recipient: { id: `r${i + 1}`, recipient: `r${i + 1}@example.net`, recipientDomain: 'example.net', attempts: 0 },
        message: { id: `m${i + 1}`, accountId: 'acc' },
        to: [`r${i + 1}@example.net`],
        finish: () => undefined,
      }) as unknown as Job,
  );
}

function work(list: Job[]): DomainWork {
  return { key: 'acc example.net', account: 'acc', domain: 'example.net', jobs: list, lanes: 1, live: 0 };
}

/**
 * Outcomes that log each step: `held` (a check's read begins), `record` and `recorded` (an outcome's write begins and
 * is durable). Each record stays open `recordMs` (a group commit's wait), and `onRecord` runs as it begins.
 */
function loggingOutcomes(log: string[], opts: { recordMs?: number; onRecord?: (job: Job) => void; gone?: Set<string> } = {}) {
  const held = async (job: Job) => {
    log.push(`held ${job.recipient.id}`);
    await new Promise((r) => setTimeout(r, 5));
    return !opts.gone?.has(job.recipient.id);
  };
  const outcomes: OutcomeRecording = {
    held,
    gone: async (job, _account, checked) => {
      if (await (checked ?? held(job))) return false;
      log.push(`gone ${job.recipient.id}`);
      job.finish();
      return true;
    },
    record: async (job: Job, _outcome: Classified) => {
      log.push(`record ${job.recipient.id}`);
      opts.onRecord?.(job);
      await new Promise((r) => setTimeout(r, opts.recordMs ?? 50));
      log.push(`recorded ${job.recipient.id}`);
      job.finish();
      return true;
    },
    recordAll: async () => undefined,
  };
  return outcomes;
}

function transportsWith(outcomes: OutcomeRecording, opts: { stopping?: () => boolean; yieldAfter?: () => boolean } = {}) {
  return createTransports(service.deps, {
    slots: { shouldYield: () => opts.yieldAfter?.() ?? false },
    messages: { messageOf: async (job) => ({ message: Buffer.from(`Subject: ${job.recipient.id}\r\n\r\nhello\r\n`), to: [...job.to] }) },
    outcomes,
    isStopping: opts.stopping ?? (() => false),
    timeouts: FAST_TIMEOUTS,
  });
}

describe("a connection's next recipient", () => {
  it('is checked while the outcome before it is recorded, once, and sent only after that outcome is durable', async () => {
    const log: string[] = [];
    const w = work(jobs(3));
    sink.data = (to) => {
      log.push(`sent ${to[0]!.split('@')[0]}`);
      return 'accept';
    };
    expect(await transportsWith(loggingOutcomes(log)).serve(w, [target], slot)).toBe('done');
    expect(log).toEqual([
      'held r1',
      'sent r1',
      'record r1',
      'held r2',
      'recorded r1',
      'sent r2',
      'record r2',
      'held r3',
      'recorded r2',
      'sent r3',
      'record r3',
      'recorded r3',
    ]);
    expect(sink.received.map((r) => r.to)).toEqual([['r1@example.net'], ['r2@example.net'], ['r3@example.net']]);
    expect(w.jobs).toEqual([]);
  });

  it('found gone by its check ahead is not sent, and the one after it is checked in line', async () => {
    const log: string[] = [];
    sink.data = () => 'accept';
    const w = work(jobs(3));
    expect(await transportsWith(loggingOutcomes(log, { gone: new Set(['r2']) })).serve(w, [target], slot)).toBe('done');
    expect(log.filter((l) => !l.startsWith('record '))).toEqual(['held r1', 'held r2', 'recorded r1', 'gone r2', 'held r3', 'recorded r3']);
    expect(sink.received.map((r) => r.to)).toEqual([['r1@example.net'], ['r3@example.net']]);
  });

  it('goes back to the front of its queue, in order, when the connection yields its slot to another account', async () => {
    const log: string[] = [];
    const list = jobs(3);
    const w = work([...list]);
    expect(await transportsWith(loggingOutcomes(log), { yieldAfter: () => true }).serve(w, [target], slot)).toBe('yield');
    expect(sink.received.map((r) => r.to)).toEqual([['r1@example.net']]);
    expect(w.jobs.map((j) => j.recipient.id)).toEqual(['r2', 'r3']);
  });

  it('goes back to its queue when the engine stops while the outcome before it is recorded', async () => {
    const log: string[] = [];
    let stopping = false;
    const w = work(jobs(3));
    const outcomes = loggingOutcomes(log, { onRecord: () => (stopping = true) });
    expect(await transportsWith(outcomes, { stopping: () => stopping }).serve(w, [target], slot)).toBe('done');
    expect(sink.received).toHaveLength(1);
    expect(w.jobs.map((j) => j.recipient.id)).toEqual(['r2', 'r3']);
  });

  it('goes back to its queue when the outcome before it could not be recorded (the lane stops)', async () => {
    const log: string[] = [];
    const w = work(jobs(2));
    const outcomes = loggingOutcomes(log);
    const failing: OutcomeRecording = { ...outcomes, record: async (job) => (job.finish(), false) };
    expect(await transportsWith(failing).serve(w, [target], slot)).toBe('done');
    expect(sink.received).toHaveLength(1);
    expect(w.jobs.map((j) => j.recipient.id)).toEqual(['r2']);
  });
});

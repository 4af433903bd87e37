import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { eq } from 'drizzle-orm';
import { domainKeys, emails } from '../db/schema/index.js';
import { openDomainPrivateKey } from '../server/core/dkim-keys.js';
import type { Deps } from '../server/deps.js';
import { type Claimed, claimDueRecipients, releaseRecipients, releaseStaleLeases } from './delivery-queue.js';
import type { Classified } from './dsn.js';
import { type SigningKey, prepareSigningKey } from './dkim.js';
import { buildSignedMessage } from './message.js';
import { recordOutcome } from './outcomes.js';
import { type Route, resolveRoute } from './routing.js';
import { type ClientOptions, DEFAULT_CLIENT_TIMEOUTS, SessionFailure, type SmtpSession, openSession } from './smtp-client.js';
import { verpAddress } from './verp.js';

export interface EngineOptions {
  /** Open SMTP connections at most, overall. */
  maxConnections: number;
  /** Open SMTP connections at most per destination domain. */
  perDomain: number;
  /** Recipients claimed per round. */
  batchSize: number;
  /** How long a claim holds before another worker may take the recipient. */
  leaseMs: number;
  /** Idle wait between rounds when nothing is due (real time; due-ness itself reads the injected clock). */
  pollMs: number;
  timeouts: Omit<ClientOptions, 'name'>;
}

export const DEFAULT_ENGINE_OPTIONS: EngineOptions = {
  maxConnections: 32,
  perDomain: 8,
  batchSize: 200,
  leaseMs: 10 * 60_000,
  pollMs: 1000,
  timeouts: DEFAULT_CLIENT_TIMEOUTS,
};

/** A counting semaphore for the connection limits. */
function limiter(max: number) {
  let active = 0;
  const waiting: (() => void)[] = [];
  return async <T>(fn: () => Promise<T>): Promise<T> => {
    if (active >= max) await new Promise<void>((r) => waiting.push(r));
    active++;
    try {
      return await fn();
    } finally {
      active--;
      waiting.shift()?.();
    }
  };
}

/**
 * The outbound engine: claims due recipients, groups them by destination domain, and delivers each over its own SMTP
 * transaction on connections shared within a domain, recording every outcome before the next step.
 */
export function createDeliveryEngine(deps: Deps, options: Partial<EngineOptions> = {}) {
  const opts = { ...DEFAULT_ENGINE_OPTIONS, ...options };
  const worker = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const connections = limiter(opts.maxConnections);
  const keys = new Map<string, SigningKey>();
  const clientOpts: ClientOptions = { name: deps.config.mailHostname, ...opts.timeouts };

  let running = false;
  let stopping = false;
  let current: Promise<number> | null = null;
  let wake: (() => void) | null = null;
  let loopDone: Promise<void> = Promise.resolve();

  /** The from-domain's key, decrypted and parsed once and kept for every later message. */
  function signingKey(domainKeyId: string): SigningKey {
    const cached = keys.get(domainKeyId);
    if (cached) return cached;
    const row = deps.db.select().from(domainKeys).where(eq(domainKeys.id, domainKeyId)).get();
    if (!row) throw new Error(`domain key ${domainKeyId} not found`);
    if (!deps.secretKey) throw new Error('SECRET_KEY=off: DKIM keys cannot be opened');
    const key = prepareSigningKey(row.name, row.selector, openDomainPrivateKey(deps.secretKey, row));
    keys.set(domainKeyId, key);
    return key;
  }

  async function deliverDomain(domain: string, jobs: Claimed[], built: Map<string, Promise<Buffer>>, unstarted: Set<string>): Promise<void> {
    let route: Route;
    try {
      route = await resolveRoute(domain, deps);
    } catch (err) {
      route = { kind: 'fail', outcome: { status: 'deferred', dsn: '4.4.3', detail: `routing failed: ${(err as Error).message}` } };
    }
    if (route.kind === 'fail') {
      for (const job of jobs) await record(job, route.outcome, unstarted);
      return;
    }
    const targets = route.targets;
    const queue = [...jobs];
    const lanes = Math.min(opts.perDomain, queue.length);
    await Promise.all(
      Array.from({ length: lanes }, () =>
        connections(async () => {
          let session: SmtpSession | null = null;
          try {
            while (queue.length > 0) {
              const job = queue.shift()!;
              if (stopping) continue;
              if (!session) {
                try {
                  session = await openSession(targets, clientOpts);
                } catch (err) {
                  const outcome = err instanceof SessionFailure ? err.outcome : failure(err);
                  await record(job, outcome, unstarted);
                  // The host is unreachable: everyone else of this lane waits for the retry too.
                  while (queue.length > 0 && !stopping) await record(queue.shift()!, outcome, unstarted);
                  return;
                }
              }
              let message: Buffer;
              try {
                message = await messageFor(job, built);
              } catch (err) {
                await record(job, { status: 'deferred', dsn: '4.3.0', detail: `message could not be prepared: ${(err as Error).message}` }, unstarted);
                continue;
              }
              const { outcome, connectionLost } = await session.send(verpAddress(job.message.id, recipientIndex(job), deps.config.mailHostname), job.recipient.recipient, message);
              await record(job, outcome, unstarted);
              if (connectionLost) {
                session.close();
                session = null;
              }
            }
          } finally {
            session?.close();
          }
        }),
      ),
    );
  }

  const toLists = new Map<string, string[]>();
  function recipientIndex(job: Claimed): number {
    let list = toLists.get(job.message.id);
    if (!list) {
      list = deps.db.select({ to: emails.to }).from(emails).where(eq(emails.id, job.message.id)).get()?.to ?? [];
      toLists.set(job.message.id, list);
    }
    return Math.max(0, list.indexOf(job.recipient.recipient));
  }

  function messageFor(job: Claimed, built: Map<string, Promise<Buffer>>): Promise<Buffer> {
    let p = built.get(job.message.id);
    if (!p) {
      recipientIndex(job);
      p = buildSignedMessage(job.message, toLists.get(job.message.id) ?? [job.recipient.recipient], signingKey(job.message.domainKeyId), new Date(deps.clock.now()));
      built.set(job.message.id, p);
    }
    return p;
  }

  function failure(err: unknown): Classified {
    return { status: 'deferred', dsn: '4.4.0', detail: err instanceof Error ? err.message : String(err) };
  }

  async function record(job: Claimed, outcome: Classified, unstarted: Set<string>): Promise<void> {
    unstarted.delete(job.recipient.id);
    try {
      await recordOutcome(deps, job, outcome);
    } catch (err) {
      // Not recorded: the lease expires and the recipient is tried again.
      deps.logger.error('delivery.record_failed', { recipientId: job.recipient.id, err });
    }
  }

  /** One round: everything due now (by the injected clock), delivered; resolves with how many were claimed. */
  async function runOnce(): Promise<number> {
    const claimed = claimDueRecipients(deps.db, worker, deps.clock.now(), opts.leaseMs, opts.batchSize);
    if (claimed.length === 0) return 0;
    const unstarted = new Set(claimed.map((c) => c.recipient.id));
    const byDomain = new Map<string, Claimed[]>();
    for (const job of claimed) byDomain.set(job.recipient.recipientDomain, [...(byDomain.get(job.recipient.recipientDomain) ?? []), job]);
    const built = new Map<string, Promise<Buffer>>();
    try {
      await Promise.all([...byDomain].map(([domain, jobs]) => deliverDomain(domain, jobs, built, unstarted)));
    } finally {
      // Claimed but never tried (shutdown): back to the queue at once, not after the lease.
      releaseRecipients(deps.db, worker, [...unstarted]);
      for (const id of built.keys()) toLists.delete(id);
    }
    return claimed.length;
  }

  async function loop(): Promise<void> {
    while (running) {
      let n = 0;
      try {
        current = runOnce();
        n = await current;
      } catch (err) {
        deps.logger.error('delivery.round_failed', { err });
      } finally {
        current = null;
      }
      if (n === 0 && running) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, opts.pollMs);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = null;
      }
    }
  }

  return {
    worker,
    runOnce,
    /** Starts the loop (from main): leases of a previous run are released first. */
    start(): void {
      if (running) return;
      const released = releaseStaleLeases(deps.db, worker);
      if (released > 0) deps.logger.warn('delivery.leases_released', { released });
      running = true;
      stopping = false;
      loopDone = loop();
    },
    /** Something was queued: deliver now instead of at the next poll. */
    poke(): void {
      wake?.();
    },
    /** Stops claiming; lets in-flight transactions finish, gives untried recipients back; resolves when idle. */
    async stop(): Promise<void> {
      running = false;
      stopping = true;
      wake?.();
      await current?.catch(() => 0);
      await loopDone;
    },
  };
}

export type DeliveryEngine = ReturnType<typeof createDeliveryEngine>;

import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { eq } from 'drizzle-orm';
import { domainKeys, emails } from '../db/schema/index.js';
import { openDomainPrivateKey } from '../server/core/dkim-keys.js';
import type { Deps } from '../server/deps.js';
import { type Claimed, claimDueRecipients, releaseDeadLeases, releaseRecipients, renewLeases } from './delivery-queue.js';
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
  /** Recipients claimed at once, and held (claimed, not yet finished) at most. */
  batchSize: number;
  /** How long a claim holds unless renewed; the engine renews its own claims every third of it. */
  leaseMs: number;
  /** Idle wait between claims when nothing is due (real time; due-ness itself reads the injected clock). */
  pollMs: number;
  timeouts: Omit<ClientOptions, 'name'>;
}

export const DEFAULT_ENGINE_OPTIONS: EngineOptions = {
  maxConnections: 32,
  perDomain: 8,
  batchSize: 200,
  leaseMs: 2 * 60_000,
  pollMs: 1000,
  timeouts: DEFAULT_CLIENT_TIMEOUTS,
};

/** A counting semaphore for the connection limit; a released slot passes straight to the next waiter. */
function semaphore(max: number) {
  let active = 0;
  const waiting: (() => void)[] = [];
  return {
    async acquire(): Promise<void> {
      if (active < max) {
        active++;
        return;
      }
      await new Promise<void>((resolve) => waiting.push(resolve));
    },
    release(): void {
      const next = waiting.shift();
      if (next) next();
      else active--;
    },
  };
}

/** A claimed recipient in the engine, with whoever waits for it to be finished (recorded, released or abandoned). */
interface Job extends Claimed {
  finish: () => void;
}

/** The work of one destination domain: recipients waiting for a connection, and the connections (lanes) serving it. */
interface DomainWork {
  jobs: Job[];
  lanes: number;
  /** Lanes with an open connection, or opening one. */
  live: number;
}

/**
 * The outbound engine. Claimed recipients wait in a queue per destination domain; each domain is served by up to
 * `perDomain` connections (lanes), `maxConnections` in all, each taking the domain's next recipient for its own SMTP
 * transaction and recording the outcome before the next step. New work is claimed whenever there is room, so a slow
 * destination holds up only its own recipients.
 */
export function createDeliveryEngine(deps: Deps, options: Partial<EngineOptions> = {}) {
  const opts = { ...DEFAULT_ENGINE_OPTIONS, ...options };
  const worker = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const slots = semaphore(opts.maxConnections);
  const keys = new Map<string, SigningKey>();
  const clientOpts: ClientOptions = { name: deps.config.mailHostname, ...opts.timeouts };
  const work = new Map<string, DomainWork>();
  const lanesDone = new Set<Promise<void>>();
  /** Claimed and not yet finished: the claims this engine renews. */
  const held = new Set<string>();

  let running = false;
  let stopping = false;
  let wake: (() => void) | null = null;
  let loopDone: Promise<void> = Promise.resolve();
  let renewTimer: NodeJS.Timeout | null = null;

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

  /** The message of an email, built and signed once for all its recipients while any of them is held. */
  const built = new Map<string, { ready: Promise<{ message: Buffer; to: string[] }>; users: number }>();

  function messageOf(job: Claimed): { ready: Promise<{ message: Buffer; to: string[] }>; users: number } {
    let entry = built.get(job.message.id);
    if (!entry) {
      // Everything, the reads too, inside the promise: a failure defers that recipient, it never stops the engine.
      const ready = Promise.resolve().then(async () => {
        const to = deps.db.select({ to: emails.to }).from(emails).where(eq(emails.id, job.message.id)).get()?.to ?? [job.recipient.recipient];
        const message = await buildSignedMessage(job.message, to, signingKey(job.message.domainKeyId), new Date(deps.clock.now()));
        return { message, to };
      });
      ready.catch(() => undefined);
      entry = { ready, users: 0 };
      built.set(job.message.id, entry);
    }
    return entry;
  }

  function adopt(claimed: Claimed[]): Promise<void>[] {
    // A recipient this engine still holds (its lease lapsed, say, while the loop was stalled) is not taken twice.
    return claimed.filter((c) => !held.has(c.recipient.id)).map(
      (c) =>
        new Promise<void>((resolve) => {
          held.add(c.recipient.id);
          messageOf(c).users++;
          const job: Job = {
            ...c,
            finish: () => {
              held.delete(c.recipient.id);
              const entry = built.get(c.message.id);
              if (entry && --entry.users === 0) built.delete(c.message.id);
              resolve();
              // Room for a useful claim again: claim now rather than at the next poll.
              if (held.size === Math.floor(opts.batchSize / 2)) wake?.();
            },
          };
          const domain = c.recipient.recipientDomain;
          let w = work.get(domain);
          if (!w) {
            w = { jobs: [], lanes: 0, live: 0 };
            work.set(domain, w);
          }
          w.jobs.push(job);
          if (w.lanes < opts.perDomain && w.lanes < w.jobs.length) startLane(domain, w);
        }),
    );
  }

  function startLane(domain: string, w: DomainWork): void {
    w.lanes++;
    const done = lane(domain, w)
      .catch((err: unknown) => deps.logger.error('delivery.lane_failed', { domain, err }))
      .finally(() => {
        lanesDone.delete(done);
        w.lanes--;
        if (w.jobs.length > 0 && w.lanes === 0 && !stopping) startLane(domain, w);
        else if (w.jobs.length === 0 && w.lanes === 0) work.delete(domain);
        wake?.();
      });
    lanesDone.add(done);
  }

  /** Records an outcome; false when it could not be written (the lane stops: nothing may happen before it is). */
  async function record(job: Job, outcome: Classified): Promise<boolean> {
    try {
      await recordOutcome(deps, job, outcome);
      job.finish();
      return true;
    } catch (err) {
      // Left claimed but no longer renewed: the lease runs out and the recipient is tried again.
      deps.logger.error('delivery.record_failed', { recipientId: job.recipient.id, err });
      job.finish();
      return false;
    }
  }

  /** Gives every queued recipient of the domain the same outcome (a routing failure, or no host reachable). */
  async function recordAll(w: DomainWork, outcome: Classified): Promise<void> {
    while (w.jobs.length > 0 && !stopping) {
      if (!(await record(w.jobs.shift()!, outcome))) return;
    }
  }

  /** One connection's worth of work for a domain: its next recipients, one transaction each, until none is left. */
  async function lane(domain: string, w: DomainWork): Promise<void> {
    await slots.acquire();
    let session: SmtpSession | null = null;
    let route: Route | null = null;
    try {
      while (w.jobs.length > 0 && !stopping) {
        if (!session) {
          try {
            route ??= await resolveRoute(domain, deps);
          } catch (err) {
            route = { kind: 'fail', outcome: { status: 'deferred', dsn: '4.4.3', detail: `routing failed: ${(err as Error).message}` } };
          }
          if (route.kind === 'fail') {
            // Another lane holds a connection to this domain: its recipients stay with it.
            if (w.live > 0) return;
            return await recordAll(w, route.outcome);
          }
          w.live++;
          try {
            session = await openSession(route.targets, clientOpts);
          } catch (err) {
            w.live--;
            // Another lane is delivering to this domain, or may be about to: leave the recipients to it. Otherwise
            // none can be reached now.
            if (w.live > 0) return;
            return await recordAll(w, err instanceof SessionFailure ? err.outcome : failure(err));
          }
        }
        const job = w.jobs.shift();
        if (!job) return;
        let message: Buffer;
        let index: number;
        try {
          const ready = await messageOf(job).ready;
          message = ready.message;
          index = Math.max(0, ready.to.indexOf(job.recipient.recipient));
        } catch (err) {
          if (!(await record(job, { status: 'deferred', dsn: '4.3.0', detail: `message could not be prepared: ${(err as Error).message}` }))) return;
          continue;
        }
        const result = await session.send(verpAddress(job.message.id, index, deps.config.mailHostname), job.recipient.recipient, message);
        if (result.connectionLost) {
          session.close();
          session = null;
          w.live--;
        }
        if (result.notSent) {
          // The connection had closed before this recipient's transaction began: not an attempt. Back to the queue,
          // and a new connection for it.
          w.jobs.unshift(job);
          continue;
        }
        if (!(await record(job, result.outcome))) return;
      }
    } finally {
      if (session) {
        session.close();
        w.live--;
      }
      slots.release();
    }
  }

  function failure(err: unknown): Classified {
    return { status: 'deferred', dsn: '4.4.0', detail: err instanceof Error ? err.message : String(err) };
  }

  /** Claims what is due, up to the room left; returns how many recipients were claimed and their completions. */
  function claim(limit: number): Promise<void>[] {
    if (limit <= 0 || stopping) return [];
    return adopt(claimDueRecipients(deps.db, worker, deps.clock.now(), opts.leaseMs, limit));
  }

  /** Claims everything due now (by the injected clock, up to `batchSize`) and resolves when each is finished. */
  async function runOnce(): Promise<number> {
    const finished = claim(opts.batchSize);
    await Promise.all(finished);
    return finished.length;
  }

  async function loop(): Promise<void> {
    while (running) {
      let claimed = 0;
      // Claims are batched: one claim query serves many recipients, so it waits until half the batch is free.
      const room = opts.batchSize - held.size;
      try {
        if (held.size === 0 || room >= opts.batchSize / 2) claimed = claim(room).length;
      } catch (err) {
        deps.logger.error('delivery.claim_failed', { err });
      }
      // Claim again at once while the claim filled the room; otherwise when poked, when half the batch is done, when a
      // lane ends, or at the poll.
      if (claimed > 0 && claimed === room) continue;
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

  /** Gives back every recipient still waiting for a connection (shutdown). */
  function releaseWaiting(): void {
    for (const w of work.values()) {
      const jobs = w.jobs.splice(0);
      releaseRecipients(deps.db, worker, jobs.map((j) => j.recipient.id));
      for (const job of jobs) job.finish();
    }
  }

  return {
    worker,
    runOnce,
    /**
     * Starts the loop (from main). Leases of earlier runs whose process is gone are released first; a lease of a
     * process that may still be running is left to run out.
     */
    start(): void {
      if (running) return;
      const released = releaseDeadLeases(deps.db, worker);
      if (released > 0) deps.logger.warn('delivery.leases_released', { released });
      running = true;
      stopping = false;
      renewTimer = setInterval(() => {
        try {
          renewLeases(deps.db, worker, [...held], deps.clock.now() + opts.leaseMs);
        } catch (err) {
          deps.logger.error('delivery.lease_renewal_failed', { err });
        }
      }, Math.max(1000, Math.floor(opts.leaseMs / 3)));
      renewTimer.unref();
      loopDone = loop();
    },
    /** Something was queued: claim now instead of at the next poll. */
    poke(): void {
      wake?.();
    },
    /** Stops claiming; lets in-flight transactions finish, gives waiting recipients back; resolves when idle. */
    async stop(): Promise<void> {
      running = false;
      stopping = true;
      wake?.();
      await loopDone;
      releaseWaiting();
      while (lanesDone.size > 0) await Promise.all([...lanesDone]);
      releaseWaiting();
      if (renewTimer) clearInterval(renewTimer);
    },
  };
}

export type DeliveryEngine = ReturnType<typeof createDeliveryEngine>;

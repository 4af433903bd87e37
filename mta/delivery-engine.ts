import { createPollLoop } from '../server/queues/poll-loop.js';
import { eq, sql } from 'drizzle-orm';
import { definePrepared } from '../db/prepared.js';
import { newWorkerId } from '../server/queues/leases.js';
import { domainKeys, emails } from '../db/schema/index.js';
import { openDomainPrivateKey } from '../server/core/dkim-keys.js';
import type { Deps } from '../server/core/deps.js';
import { CAPTURED, sealCapture } from '../server/core/capture-store.js';
import { type Claimed, capForeignLeases, claimDueRecipients, releaseDeadLeases, releaseRecipients, renewLeases, stillHeld } from './delivery-queue.js';
import type { Classified } from '../server/core/dsn.js';
import { type SigningKey, prepareSigningKey } from './dkim.js';
import { type Slot, createFairSlots } from '../server/queues/fair-slots.js';
import { type Signer, createSigner } from './signer.js';
import { type AttemptExtras, recordOutcome } from '../server/core/outcomes.js';
import { type Target, createRouter } from './routing.js';
import { SIMULATED_COMPLAINT, simulateAttempt } from '../server/core/simulator.js';
import { type ClientOptions, DEFAULT_CLIENT_TIMEOUTS, SessionFailure, type SmtpSession, openSession } from './smtp-client.js';
import { verpAddress } from './verp.js';
import { logFailure } from '../server/shared/store-health.js';
import { leaseNow } from '../server/shared/clock.js';

export interface EngineOptions {
  /** Open SMTP connections at most, overall. */
  maxConnections: number;
  /** Open SMTP connections at most per destination domain, whatever the accounts. */
  perDomain: number;
  /**
   * Recipients waiting per connection before another one to the same destination is opened: the recipients of an
   * email share a connection (docs/api/decisions.md section 3), and a backlog still gets up to `perDomain`. A connection opened
   * for a queue that the others drain meanwhile is only a handshake and a QUIT, and counts against the server's limit.
   */
  recipientsPerLane: number;
  /** Open SMTP connections at most for one account, so others always find a free one (fairness). */
  perAccount: number;
  /** Recipients claimed at once, and held (claimed, not yet finished) at most. */
  batchSize: number;
  /** Recipients one account may hold at most, so a backlog of one never keeps another's mail from being claimed. */
  perAccountHeld: number;
  /** How long a claim holds unless renewed; the engine renews its own claims every third of it. */
  leaseMs: number;
  /** Idle wait between claims when nothing is due (real time; due-ness itself reads the injected clock). */
  pollMs: number;
  timeouts: Omit<ClientOptions, 'name'>;
  /**
   * How long stop() waits for the transactions in flight (a server may take up to ten minutes to answer the end of
   * data): past it, stop() returns and the process may exit; those recipients stay leased and are tried again after
   * the next start, as after a crash.
   */
  stopGraceMs: number;
}

export const DEFAULT_ENGINE_OPTIONS: EngineOptions = {
  // Postfix's default concurrency to one destination is 20; one account takes at most a third of all connections.
  maxConnections: 64,
  perDomain: 20,
  recipientsPerLane: 4,
  perAccount: 20,
  batchSize: 200,
  perAccountHeld: 100,
  leaseMs: 2 * 60_000,
  pollMs: 1000,
  timeouts: DEFAULT_CLIENT_TIMEOUTS,
  stopGraceMs: 10_000,
};

/** An email's whole `to` list (its To header), read once per message built. */
const statements = definePrepared((db) => ({
  recipientsOf: db.select({ to: emails.to }).from(emails).where(eq(emails.id, sql.placeholder('id'))).prepare(),
}));

/** A claimed recipient in the engine, with whoever waits for it to be finished (recorded, released or abandoned). */
interface Job extends Claimed {
  finish: () => void;
}

/**
 * The work of one account for one destination domain: its recipients waiting for a connection, and the connections
 * (lanes) serving them. Accounts never share a lane, so each connection slot belongs to one account (fairness).
 */
interface DomainWork {
  key: string;
  account: string;
  domain: string;
  jobs: Job[];
  lanes: number;
  /** Lanes with an open connection, or opening one. */
  live: number;
}

/**
 * The outbound engine. Claimed recipients wait in a queue per account and destination domain; each queue is served by
 * lanes (connections), each taking the queue's next recipient for its own SMTP transaction and recording the outcome
 * before the next step. A lane resolves its route first (cached, bounded, holding nothing), then asks for a
 * connection slot: at most `maxConnections` in all, `perDomain` per destination and `perAccount` per account, granted
 * to waiting accounts in turn, and given back between transactions when an account with fewer waits. Claims are fair
 * too: each account's recipients in turn, at most `perAccountHeld` held per account. So a slow destination, a silent
 * DNS or a large backlog holds up only the mail of its own account and destination.
 */
export function createDeliveryEngine(deps: Deps, options: Partial<EngineOptions> = {}) {
  const opts = { ...DEFAULT_ENGINE_OPTIONS, ...options };
  const worker = newWorkerId();
  const slots = createFairSlots({ total: opts.maxConnections, perAccount: opts.perAccount, perDestination: opts.perDomain });
  const router = createRouter(deps);
  /** Recipients held per account (claimed, not yet finished). */
  const heldByAccount = new Map<string, number>();
  /** Recipients finished since the last claim: a claim waits until enough room is worth a query. */
  let finishedSinceClaim = 0;
  const keys = new Map<string, SigningKey & { id: string }>();
  const signer: Signer = createSigner({ onCrash: (err) => deps.logger.error('delivery.signer_failed', { err }) });
  const clientOpts: ClientOptions = { name: deps.config.mailHostname, ...opts.timeouts };
  const work = new Map<string, DomainWork>();
  const lanesDone = new Set<Promise<void>>();
  /** Claimed and not yet finished: the claims this engine renews. */
  const held = new Set<string>();

  let stopping = false;
  const loop = createPollLoop({
    intervalMs: opts.pollMs,
    tick: () => tick(),
    onError: (err) => logFailure(deps, 'delivery.claim_failed', err),
  });
  let renewTimer: NodeJS.Timeout | null = null;

  /** The from-domain's key, decrypted and parsed once and kept for every later message. */
  function signingKey(domainKeyId: string): SigningKey & { id: string } {
    const cached = keys.get(domainKeyId);
    if (cached) return cached;
    const row = deps.db.select().from(domainKeys).where(eq(domainKeys.id, domainKeyId)).get();
    if (!row) throw new Error(`domain key ${domainKeyId} not found`);
    if (!deps.secretKey) throw new Error('SECRET_KEY=off: DKIM keys cannot be opened');
    const key = { id: domainKeyId, ...prepareSigningKey(row.name, row.selector, openDomainPrivateKey(deps.secretKey, row)) };
    keys.set(domainKeyId, key);
    return key;
  }

  /** The message of an email, built and signed (in the signer's thread) once for all its recipients while any of them is held. */
  const built = new Map<string, { ready: Promise<{ message: Buffer; to: string[] }>; users: number }>();

  function messageOf(job: Claimed): { ready: Promise<{ message: Buffer; to: string[] }>; users: number } {
    let entry = built.get(job.message.id);
    if (!entry) {
      // Everything, the reads too, inside the promise: a failure defers that recipient, it never stops the engine.
      const ready = Promise.resolve().then(async () => {
        const to = statements(deps.db).recipientsOf.get({ id: job.message.id })?.to ?? [job.recipient.recipient];
        const message = await signer.build(job.message, to, signingKey(job.message.domainKeyId), new Date(deps.clock.now()));
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
          const account = c.message.accountId;
          held.add(c.recipient.id);
          heldByAccount.set(account, (heldByAccount.get(account) ?? 0) + 1);
          messageOf(c).users++;
          let finished = false;
          const job: Job = {
            ...c,
            finish: () => {
              if (finished) return;
              finished = true;
              held.delete(c.recipient.id);
              const n = (heldByAccount.get(account) ?? 1) - 1;
              if (n === 0) heldByAccount.delete(account);
              else heldByAccount.set(account, n);
              const entry = built.get(c.message.id);
              if (entry && --entry.users === 0) built.delete(c.message.id);
              resolve();
              // Room for a useful claim again (a quarter of the batch, or everything): claim now, not at the poll.
              finishedSinceClaim++;
              if (finishedSinceClaim >= opts.batchSize / 4 || held.size === 0) loop.poke();
            },
          };
          const domain = c.recipient.recipientDomain;
          const key = `${account} ${domain}`;
          let w = work.get(key);
          if (!w) {
            w = { key, account, domain, jobs: [], lanes: 0, live: 0 };
            work.set(key, w);
          }
          w.jobs.push(job);
          if (w.lanes < opts.perDomain && w.jobs.length > w.lanes * opts.recipientsPerLane) startLane(w);
        }),
    );
  }

  function startLane(w: DomainWork): void {
    w.lanes++;
    const done = lane(w)
      .catch((err: unknown) => logFailure(deps, 'delivery.lane_failed', err, { domain: w.domain, accountId: w.account }))
      .finally(() => {
        lanesDone.delete(done);
        w.lanes--;
        if (w.jobs.length > 0 && w.lanes === 0 && !stopping) startLane(w);
        else if (w.jobs.length === 0 && w.lanes === 0 && work.get(w.key) === w) work.delete(w.key);
        loop.poke();
      });
    lanesDone.add(done);
  }

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
    while (w.jobs.length > 0 && !stopping) {
      if (!(await record(w.jobs.shift()!, outcome))) return;
    }
  }

  /**
   * One connection's worth of work for an account's destination: the route first (holding no slot), then a slot in
   * turn, then the queue's recipients one transaction each, until none is left, or until another account that holds
   * fewer slots waits for this one: then the slot is given back and asked for again, behind it.
   */
  async function lane(w: DomainWork): Promise<void> {
    const route = await router.route(w.domain);
    if (route.kind === 'fail') {
      // Another lane holds a connection to this domain: its recipients stay with it.
      if (w.live > 0) return;
      return await recordAll(w, route.outcome);
    }
    if (route.kind === 'capture' || route.kind === 'simulator') return await deliverLocally(w, route.kind);
    while (w.jobs.length > 0 && !stopping) {
      const slot = await slots.acquire(w.account, w.domain);
      if (!slot) return;
      try {
        if ((await serve(w, route.targets, slot)) === 'done') return;
      } finally {
        slot.release();
      }
    }
  }

  /** Delivers the queue's recipients over one slot; 'yield' when the slot should go to another account first. */
  async function serve(w: DomainWork, targets: Target[], slot: Slot): Promise<'done' | 'yield'> {
    let session: SmtpSession | null = null;
    try {
      while (w.jobs.length > 0 && !stopping) {
        if (!session) {
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
        const job = w.jobs.shift();
        if (!job) return 'done';
        let message: Buffer;
        let index: number;
        try {
          const ready = await messageOf(job).ready;
          message = ready.message;
          index = Math.max(0, ready.to.indexOf(job.recipient.recipient));
        } catch (err) {
          // A build that failed because the account was deleted meanwhile (its domain key went with it): gone too.
          if (gone(job, w.account)) continue;
          if (!(await record(job, unprepared(err)))) return 'done';
          continue;
        }
        // Its account deleted since the claim (the rows went with it): nothing to send, nothing to record. Checked
        // here, after the build's wait, just before the SMTP transaction begins.
        if (gone(job, w.account)) continue;
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
        // The outcome is durable before anything else happens on this connection (or any other).
        if (!(await record(job, result.outcome))) return 'done';
        if (w.jobs.length > 0 && slots.shouldYield(slot)) return 'yield';
      }
      return 'done';
    } finally {
      // The slot is released by the caller after this: only once the connection is really closed.
      if (session) {
        await session.close();
        w.live--;
      }
    }
  }

  /**
   * The transports that open no connection, so take no slot: the capture store (every recipient delivered, `2.0.0`
   * `captured`) and the mailbox simulator (its table's reply to this attempt, a complaint after complaint@'s
   * delivery). Each message is built and signed exactly as for SMTP; in capture mode it is kept, the simulator's too,
   * in the transaction that records its outcome.
   */
  async function deliverLocally(w: DomainWork, kind: 'capture' | 'simulator'): Promise<void> {
    while (w.jobs.length > 0 && !stopping) {
      const job = w.jobs.shift()!;
      let extras: AttemptExtras;
      try {
        const { message } = await messageOf(job).ready;
        extras = { capture: deps.config.deliveryMode === 'capture' ? capture(job, message) : null };
      } catch (err) {
        if (gone(job, w.account)) continue;
        if (!(await record(job, unprepared(err)))) return;
        continue;
      }
      if (gone(job, w.account)) continue;
      let outcome = CAPTURED;
      if (kind === 'simulator') {
        const reply = simulateAttempt(job.recipient.recipient, job.recipient.attempts);
        outcome = reply.outcome;
        if (reply.complains) extras.complaint = SIMULATED_COMPLAINT;
      }
      if (!(await record(job, outcome, extras))) return;
    }
  }

  /** True (and the job finished, logged) when the recipient's rows are gone: its account was deleted since the claim. */
  function gone(job: Job, accountId: string): boolean {
    if (stillHeld(deps.db, worker, job.recipient.id)) return false;
    deps.logger.info('delivery.recipient_gone', { recipientId: job.recipient.id, accountId });
    job.finish();
    return true;
  }

  function capture(job: Claimed, message: Buffer) {
    if (!deps.secretKey) throw new Error('SECRET_KEY=off: captured mail cannot be sealed');
    return sealCapture(deps.secretKey, { emailId: job.message.id, accountId: job.message.accountId, recipient: job.recipient.recipient, message, capturedAt: deps.clock.now() });
  }

  function unprepared(err: unknown): Classified {
    return { status: 'deferred', dsn: '4.3.0', detail: `message could not be prepared: ${(err as Error).message}` };
  }

  function failure(err: unknown): Classified {
    return { status: 'deferred', dsn: '4.4.0', detail: err instanceof Error ? err.message : String(err) };
  }

  /** Claims what is due, up to the room left; returns how many recipients were claimed and their completions. */
  function claim(limit: number): Promise<void>[] {
    if (limit <= 0 || stopping) return [];
    finishedSinceClaim = 0;
    const room: Record<string, number> = {};
    for (const [account, n] of heldByAccount) room[account] = Math.max(0, opts.perAccountHeld - n);
    // Due by the wall clock (the schedule is stored as times of day); leases on the process's steady timeline.
    return adopt(claimDueRecipients(deps.db, worker, deps.clock.now(), opts.leaseMs, limit, { perAccount: opts.perAccountHeld, room }, leaseNow(deps.clock)));
  }

  /** Claims everything due now (by the injected clock, up to `batchSize`) and resolves when each is finished. */
  async function runOnce(): Promise<number> {
    const finished = claim(opts.batchSize);
    await Promise.all(finished);
    return finished.length;
  }

  /**
   * One claim of the loop. Claims are batched: one claim query serves many recipients, so it waits until half the
   * batch is free. It claims again at once while the claim filled the room; otherwise when poked, when half the batch
   * is done, when a lane ends, or at the poll.
   */
  function tick(): boolean {
    const room = opts.batchSize - held.size;
    if (held.size !== 0 && room < opts.batchSize / 2) return false;
    const claimed = claim(room).length;
    return claimed > 0 && claimed === room;
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
      if (loop.running) return;
      const released = releaseDeadLeases(deps.db, worker);
      if (released > 0) deps.logger.warn('delivery.leases_released', { released });
      const capped = capForeignLeases(deps.db, worker, leaseNow(deps.clock), opts.leaseMs);
      if (capped > 0) deps.logger.warn('delivery.leases_capped', { capped });
      stopping = false;
      renewTimer = setInterval(() => {
        try {
          renewLeases(deps.db, worker, [...held], leaseNow(deps.clock) + opts.leaseMs);
        } catch (err) {
          logFailure(deps, 'delivery.lease_renewal_failed', err);
        }
      }, Math.max(1000, Math.floor(opts.leaseMs / 3)));
      renewTimer.unref();
      loop.start();
    },
    /** Something was queued: claim now instead of at the next poll. */
    poke: loop.poke,
    /** Stops claiming; lets in-flight transactions finish, gives waiting recipients back; resolves when idle. */
    async stop(): Promise<void> {
      stopping = true;
      await loop.stop();
      slots.cancelAll();
      releaseWaiting();
      const settled = (async () => {
        while (lanesDone.size > 0) await Promise.all([...lanesDone]);
      })();
      let grace: NodeJS.Timeout | undefined;
      const abandoned = await Promise.race([settled.then(() => false), new Promise<boolean>((resolve) => (grace = setTimeout(() => resolve(true), opts.stopGraceMs)))]);
      clearTimeout(grace);
      if (abandoned) {
        deps.logger.warn('delivery.stop_abandoned', {
          recipients: held.size,
          message: `replies still awaited after ${opts.stopGraceMs} ms: those recipients stay leased and are tried again after the next start`,
        });
      }
      releaseWaiting();
      if (renewTimer) clearInterval(renewTimer);
      await signer.close();
    },
  };
}

export type DeliveryEngine = ReturnType<typeof createDeliveryEngine>;

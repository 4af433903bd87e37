import { sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { inPostgresTransaction, plainStatement, statementsAreRoundTrips } from '../../db/sql.js';
import { type Clock, leaseNow } from '../shared/clock.js';
import { ApiError } from '../shared/errors.js';

const WINDOW_MS = 60_000;

/** One limit a request is counted against: its scope (`k:<key>`, `a:<account>`, `signin:<address>`), how many, how long. */
export interface Counted {
  scope: string;
  limit: number;
  windowMs: number;
}

/** Counted in every scope, or refused by the first scope at its limit (its index) and when it has room again. */
export type CountDecision = { ok: true } | { ok: false; refused: number; retryAfterMs: number };

/**
 * Exact sliding windows: a request is counted in each of its scopes at once, or in none when one of them already
 * holds its limit of requests within its window (a refused request does not count). In this process's memory on
 * SQLite, measured on the monotonic clock (a step of the wall clock neither shuts a key out for the size of the step
 * nor lets a burst through); on Postgres in the state database, counted by every node alike (`postgresWindows`).
 */
export interface WindowCounter {
  take(counted: readonly Counted[]): CountDecision | Promise<CountDecision>;
}

/** Timestamps of the requests inside the window, oldest first. */
class SlidingWindow {
  private stamps: number[] = [];
  private head = 0;

  count(now: number, windowMs: number): number {
    while (this.head < this.stamps.length && this.stamps[this.head]! <= now - windowMs) this.head++;
    if (this.head > 1024) {
      this.stamps = this.stamps.slice(this.head);
      this.head = 0;
    }
    return this.stamps.length - this.head;
  }

  /** Milliseconds until the oldest request leaves the window. */
  retryIn(now: number, windowMs: number): number {
    const oldest = this.stamps[this.head];
    return oldest === undefined ? 0 : oldest + windowMs - now;
  }

  add(now: number): void {
    this.stamps.push(now);
  }

  /** The stamps inside the window, oldest first. */
  live(): number[] {
    return this.stamps.slice(this.head);
  }
}

/** The memory windows, with what a move to or from the state database needs: their hits out, and hits in. */
export interface MemoryWindows extends WindowCounter {
  take(counted: readonly Counted[]): CountDecision;
  /** Every hit still held, by scope, on the monotonic clock; the windows are emptied. */
  drain(): { scope: string; at: number }[];
  /** Hits to count as if taken here (`at` on the monotonic clock, oldest first per scope). */
  seed(hits: readonly { scope: string; at: number }[]): void;
}

/** The windows in this process's memory (one node: SQLite). */
export function memoryWindows(clock: Clock): MemoryWindows {
  const windows = new Map<string, SlidingWindow>();
  const windowFor = (scope: string) => {
    let w = windows.get(scope);
    if (!w) {
      w = new SlidingWindow();
      windows.set(scope, w);
    }
    return w;
  };
  // The longest window any scope counts in: a sweep drops only what no window holds.
  let longest = 0;
  let sinceSweep = 0;
  const sweep = (now: number) => {
    if (++sinceSweep < 10_000) return;
    sinceSweep = 0;
    for (const [scope, w] of windows) if (w.count(now, longest) === 0) windows.delete(scope);
  };
  return {
    take(counted) {
      const now = clock.monotonic();
      for (const c of counted) longest = Math.max(longest, c.windowMs);
      sweep(now);
      const ws = counted.map((c) => windowFor(c.scope));
      for (let i = 0; i < counted.length; i++) {
        const { limit, windowMs } = counted[i]!;
        if (ws[i]!.count(now, windowMs) >= limit) return { ok: false, refused: i, retryAfterMs: ws[i]!.retryIn(now, windowMs) };
      }
      for (const w of ws) w.add(now);
      return { ok: true };
    },
    drain() {
      const hits = [...windows].flatMap(([scope, w]) => w.live().map((at) => ({ scope, at })));
      windows.clear();
      return hits;
    },
    seed(hits) {
      for (const { scope, at } of hits) windowFor(scope).add(at);
    },
  };
}

/** How many takes between two sweeps of the hits no window holds any more (scopes nobody uses again). */
const HITS_SWEEP_EVERY = 1000;

/** The take of a batch of requests, compiled once: each array one parameter (node-postgres sends a JS array as a Postgres array). */
const rateTake = plainStatement(
  () =>
    sql`select req, refused, retry_ms from rate_take(${sql.placeholder('reqs')}::int[], ${sql.placeholder('scopes')}::text[], ${sql.placeholder('limits')}::bigint[], ${sql.placeholder('windows')}::bigint[], ${sql.placeholder('now')}::bigint, ${sql.placeholder('durable')}::boolean)`,
);
// The hits no window holds, dropped with their counts (rate_counts keeps each scope's number of rows); a scope left
// with none loses its count row. Each kind of scope (its name's prefix) is swept past its own window, so a node that
// counts only API keys (a minute) never drops the hits of the sign-ins another node counts (15 minutes).
const sweepHits = plainStatement(
  () => sql`with gone as (delete from rate_hits h using unnest(${sql.placeholder('kinds')}::text[], ${sql.placeholder('befores')}::bigint[]) as w(kind, before)
                where starts_with(h.scope, w.kind) and h.at <= w.before returning h.scope),
    lowered as (update rate_counts c set n = greatest(c.n - g.k, 0) from (select scope, count(*) as k from gone group by scope) g
                where c.scope = g.scope returning c.scope, c.n)
    delete from rate_counts where scope in (select scope from lowered where n = 0)`,
);

/** A scope's kind: its name up to its first `:` (`k:`, `a:`, `signin:`); the scopes of one kind share one window. */
const kindOf = (scope: string): string => scope.slice(0, scope.indexOf(':') + 1) || scope;

/** A take waiting for the batch it goes in. */
interface Waiting {
  counted: readonly Counted[];
  resolve: (d: CountDecision) => void;
  reject: (err: unknown) => void;
}

/** Runs one batch of takes in one statement: each request's decision, in the order given. */
async function takeBatch(db: Db, batch: readonly (readonly Counted[])[], now: number, durable: boolean): Promise<CountDecision[]> {
  const entries = batch.flatMap((counted, req) => counted.map((c) => ({ req, ...c })));
  const rows = await rateTake.rows<{ req: number; refused: number; retry_ms: number }>(db, {
    reqs: entries.map((e) => e.req),
    scopes: entries.map((e) => e.scope),
    limits: entries.map((e) => e.limit),
    windows: entries.map((e) => e.windowMs),
    now,
    durable,
  });
  const decided: CountDecision[] = batch.map(() => ({ ok: true }));
  for (const row of rows) {
    if (row.refused !== 0) decided[row.req] = { ok: false, refused: row.refused - 1, retryAfterMs: Number(row.retry_ms) };
  }
  return decided;
}

/**
 * The windows in the state database, shared by every node (docs/api/decisions.md section 12): `rate_take()`
 * (db/pg/migrations/0008_rate_take_batch.sql, 0011_rate_take_room.sql) locks the scopes; a batch with room in every
 * scope is counted at once, otherwise it drops each scope's hits older than its window, counts, and counts each request
 * or names the scope that refused it. A node's takes go in batches, one statement in flight
 * at a time: a take finding none goes at once, alone; the takes that come while one is in flight go together in the
 * next, in the order they came, each seeing the ones before it (exact as one statement each, and through three nodes
 * a statement each was a round trip, a context switch for Postgres, and a transaction a request). A batch of takes
 * that are transactions of their own commits without waiting for the WAL flush: the scopes' locks are held to the
 * commit, and a flush each made every request of a busy key wait in line for the disk; a crash of Postgres may lose the
 * last moments of hits. A take inside a transaction (a caller's) runs in it, alone, and leaves its commit durable.
 * Measured on the node's lease timeline (server/shared/clock.ts leaseNow: the wall clock at the node's start, then its
 * monotonic clock), as the leases every node judges are: the nodes agree as their clocks did when they started (NTP),
 * and a step of one node's wall clock afterwards neither holds nor lifts a limit. Every HITS_SWEEP_EVERY takes, the
 * hits past the window of their kind of scope (as taken on this node) are deleted; kinds this node has not taken are
 * left to the nodes that take them.
 */
export function postgresWindows(db: Db, clock: Clock): WindowCounter {
  let sinceSweep = 0;
  /** The longest window taken here for each kind of scope: the sweep drops only hits past it, and only of those kinds. */
  const windowOfKind = new Map<string, number>();
  let waiting: Waiting[] = [];
  let inFlight = false;
  const flush = async () => {
    inFlight = true;
    while (waiting.length > 0) {
      const batch = waiting;
      waiting = [];
      const now = leaseNow(clock);
      try {
        if (sinceSweep >= HITS_SWEEP_EVERY) {
          sinceSweep = 0;
          const kinds = [...windowOfKind.keys()];
          await sweepHits.run(db, { kinds, befores: kinds.map((k) => now - windowOfKind.get(k)!) });
        }
        const decided = await takeBatch(
          db,
          batch.map((w) => w.counted),
          now,
          false,
        );
        for (const [i, w] of batch.entries()) w.resolve(decided[i]!);
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
    }
    inFlight = false;
  };
  return {
    async take(counted) {
      for (const c of counted) windowOfKind.set(kindOf(c.scope), Math.max(windowOfKind.get(kindOf(c.scope)) ?? 0, c.windowMs));
      sinceSweep++;
      if (inPostgresTransaction(db)) return (await takeBatch(db, [counted], leaseNow(clock), true))[0]!;
      const decided = new Promise<CountDecision>((resolve, reject) => waiting.push({ counted, resolve, reject }));
      if (!inFlight) void flush();
      return await decided;
    },
  };
}

const putHits = plainStatement(
  () => sql`with put as (insert into rate_hits (scope, at) select * from unnest(${sql.placeholder('scopes')}::text[], ${sql.placeholder('ats')}::bigint[]) returning scope)
    insert into rate_counts as c (scope, n) select scope, count(*) from put group by scope
    on conflict (scope) do update set n = c.n + excluded.n`,
);
const recentHits = plainStatement(() => sql`select scope, at from rate_hits where at > ${sql.placeholder('since')} order by scope, at`);
/** How far back a node that finds itself alone reads the hits the nodes counted (past every window: the sign-in's 15 minutes). */
const SEED_MS = 3_600_000;

/**
 * On Postgres: in this process's memory while this node is the only live one (a statement a request costs a send
 * about a third of its rate), in the state database while others are live (`several()`). Moving to the database,
 * the hits held in memory are written there first; moving back, the hits of the last hour are read into memory.
 * Exact either way, except for the moment a node joins: until this node's liveness has seen it (within a second,
 * server/app/liveness.ts), this node still counts in memory what the newcomer does not see, and the other way round.
 */
export function sharedWhenSeveral(db: Db, clock: Clock, several: () => boolean): WindowCounter {
  const memory = memoryWindows(clock);
  const shared = postgresWindows(db, clock);
  let mode: 'memory' | 'shared' = 'memory';
  let moving: Promise<void> | null = null;
  // The memory's monotonic stamps on the lease timeline the database counts on, and back.
  const toLease = () => leaseNow(clock) - clock.monotonic();
  const move = async (to: 'memory' | 'shared') => {
    if (to === 'shared') {
      const hits = memory.drain();
      const offset = toLease();
      if (hits.length > 0) await putHits.run(db, { scopes: hits.map((h) => h.scope), ats: hits.map((h) => Math.floor(h.at + offset)) });
    } else {
      const offset = toLease();
      const rows = await recentHits.rows<{ scope: string; at: number }>(db, { since: leaseNow(clock) - SEED_MS });
      memory.drain();
      memory.seed(rows.map((r) => ({ scope: r.scope, at: Number(r.at) - offset })));
    }
    mode = to;
  };
  const take = async (counted: readonly Counted[]): Promise<CountDecision> => {
    const want = several() ? 'shared' : 'memory';
    while (moving || want !== mode) {
      if (!moving) moving = move(want).finally(() => (moving = null));
      await moving;
      if (want === mode) break;
    }
    return mode === 'memory' ? memory.take(counted) : await shared.take(counted);
  };
  return {
    take(counted) {
      // The common case answered at once, without a promise: alone, in memory.
      if (!moving && mode === 'memory' && !several()) return memory.take(counted);
      return take(counted);
    },
  };
}

/**
 * The windows of this store: in memory on SQLite (one process); on Postgres in memory while this node is alone and in
 * the state database while other nodes are live (`sharedWhenSeveral`).
 */
export function windowsFor(db: Db, clock: Clock, liveNodes: () => number = () => 1): WindowCounter {
  return statementsAreRoundTrips(db) ? sharedWhenSeveral(db, clock, () => liveNodes() > 1) : memoryWindows(clock);
}

export type RateDecision = { ok: true } | { ok: false; retryAfterSeconds: number; scope: 'key' | 'account' };

const SCOPES = ['key', 'account'] as const;

function toRate(d: CountDecision): RateDecision {
  return d.ok ? d : { ok: false, scope: SCOPES[d.refused]!, retryAfterSeconds: Math.max(1, Math.ceil(d.retryAfterMs / 1000)) };
}

export interface RateLimiter {
  take(keyId: string, accountId: string): RateDecision | Promise<RateDecision>;
}

/**
 * Exact sliding-window limits: at most `perKey` requests from one key and `perAccount` from all keys of one
 * account in any 60 seconds. A refused request does not count. In memory (`windows` left out) the answer comes at
 * once; on the state database (postgresWindows) it is a promise.
 */
export function createRateLimiter(clock: Clock, limits: { perKey: number; perAccount: number }): { take(keyId: string, accountId: string): RateDecision };
export function createRateLimiter(clock: Clock, limits: { perKey: number; perAccount: number }, windows: WindowCounter): RateLimiter;
export function createRateLimiter(clock: Clock, limits: { perKey: number; perAccount: number }, windows: WindowCounter = memoryWindows(clock)): RateLimiter {
  return {
    take(keyId, accountId) {
      const decided = windows.take([
        { scope: `k:${keyId}`, limit: limits.perKey, windowMs: WINDOW_MS },
        { scope: `a:${accountId}`, limit: limits.perAccount, windowMs: WINDOW_MS },
      ]);
      return decided instanceof Promise ? decided.then(toRate) : toRate(decided);
    },
  };
}

/**
 * A refusal of the rate limits, worded once for every way a key comes in (an API request, an SMTP submission): which
 * limit, and when to retry (also as Retry-After, which HTTP sends).
 */
export function rateLimited(config: { rateLimitPerKey: number; rateLimitPerAccount: number }, refused: Extract<RateDecision, { ok: false }>): ApiError {
  const limit =
    refused.scope === 'key'
      ? `${config.rateLimitPerKey} requests a minute from this key`
      : `${config.rateLimitPerAccount} requests a minute from this account's keys`;
  return new ApiError('rate_limited', `Rate limit reached: over ${limit}. Retry in ${refused.retryAfterSeconds} s.`, {
    headers: { 'Retry-After': String(refused.retryAfterSeconds) },
  });
}

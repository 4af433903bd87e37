import type { Clock } from '../shared/clock.js';
import { ApiError } from '../shared/errors.js';

const WINDOW_MS = 60_000;

/** Timestamps of the requests inside the last minute, oldest first. */
class SlidingWindow {
  private stamps: number[] = [];
  private head = 0;

  count(now: number): number {
    while (this.head < this.stamps.length && this.stamps[this.head]! <= now - WINDOW_MS) this.head++;
    if (this.head > 1024) {
      this.stamps = this.stamps.slice(this.head);
      this.head = 0;
    }
    return this.stamps.length - this.head;
  }

  /** Milliseconds until the oldest request leaves the window. */
  retryIn(now: number): number {
    const oldest = this.stamps[this.head];
    return oldest === undefined ? 0 : oldest + WINDOW_MS - now;
  }

  add(now: number): void {
    this.stamps.push(now);
  }
}

export type RateDecision = { ok: true } | { ok: false; retryAfterSeconds: number; scope: 'key' | 'account' };

/**
 * Exact sliding-window limits: at most `perKey` requests from one key and `perAccount` from all keys of one
 * account in any 60 seconds. A refused request does not count. The window is measured on the monotonic clock: a step
 * of the wall clock neither shuts a key out for the size of the step nor lets a burst through.
 */
export function createRateLimiter(clock: Clock, limits: { perKey: number; perAccount: number }) {
  const windows = new Map<string, SlidingWindow>();
  const windowFor = (id: string) => {
    let w = windows.get(id);
    if (!w) {
      w = new SlidingWindow();
      windows.set(id, w);
    }
    return w;
  };

  let sinceSweep = 0;
  const sweep = (now: number) => {
    if (++sinceSweep < 10_000) return;
    sinceSweep = 0;
    for (const [id, w] of windows) if (w.count(now) === 0) windows.delete(id);
  };

  return {
    take(keyId: string, accountId: string): RateDecision {
      const now = clock.monotonic();
      sweep(now);
      const key = windowFor(`k:${keyId}`);
      const account = windowFor(`a:${accountId}`);
      const refuse = (w: SlidingWindow, scope: 'key' | 'account'): RateDecision => ({
        ok: false,
        scope,
        retryAfterSeconds: Math.max(1, Math.ceil(w.retryIn(now) / 1000)),
      });
      if (key.count(now) >= limits.perKey) return refuse(key, 'key');
      if (account.count(now) >= limits.perAccount) return refuse(account, 'account');
      key.add(now);
      account.add(now);
      return { ok: true };
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;

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

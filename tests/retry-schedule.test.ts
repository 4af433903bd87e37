import { describe, expect, it } from 'vitest';
import { DELIVERY_WINDOW_MS, RETRY_GAPS_MS, nextAttemptAt } from '../server/core/delivery-schedule.js';

/**
 * The retry schedule of docs/api/decisions.md section 3 as data: after the 1st, 2nd, ... deferred attempt the next try comes
 * 5, 10, 20, 40, 80 minutes later, then every 2 hours, counted from the attempt; never past 5 days after the send
 * (the last try lands on the window's end), and none once the window has closed.
 */

const MIN = 60_000;
const HOUR = 60 * MIN;
const SENT = Date.parse('2026-03-10T12:00:00.000Z');
const EXPIRES = SENT + DELIVERY_WINDOW_MS;

describe('retry schedule', () => {
  it('is the decided table: 5, 10, 20, 40, 80 minutes, then every 2 hours; the window is 5 days', () => {
    expect(RETRY_GAPS_MS).toEqual([5 * MIN, 10 * MIN, 20 * MIN, 40 * MIN, 80 * MIN, 2 * HOUR]);
    expect(DELIVERY_WINDOW_MS).toBe(5 * 24 * HOUR);
  });

  it.each([
    { attempts: 1, gap: 5 * MIN },
    { attempts: 2, gap: 10 * MIN },
    { attempts: 3, gap: 20 * MIN },
    { attempts: 4, gap: 40 * MIN },
    { attempts: 5, gap: 80 * MIN },
    { attempts: 6, gap: 2 * HOUR },
    { attempts: 7, gap: 2 * HOUR },
    { attempts: 30, gap: 2 * HOUR },
    { attempts: 500, gap: 2 * HOUR },
  ])('after attempt $attempts the next comes $gap ms later, counted from that attempt', ({ attempts, gap }) => {
    // Counted from the attempt itself, however late it ran against its own due time.
    for (const at of [SENT, SENT + 17 * MIN + 123, SENT + 3 * 24 * HOUR]) {
      expect(nextAttemptAt(attempts, at, EXPIRES)).toBe(at + gap);
    }
  });

  it('walks the whole window: the tries an always-deferred recipient gets, ending exactly on the 5th day', () => {
    const tries = [SENT];
    for (;;) {
      const next = nextAttemptAt(tries.length, tries.at(-1)!, EXPIRES);
      if (next === null) break;
      tries.push(next);
      if (tries.length > 1000) throw new Error('the schedule never ends');
    }
    const gaps = tries.slice(1).map((t, i) => t - tries[i]!);
    expect(gaps.slice(0, 5)).toEqual([5 * MIN, 10 * MIN, 20 * MIN, 40 * MIN, 80 * MIN]);
    expect(gaps.slice(5, -1).every((g) => g === 2 * HOUR)).toBe(true);
    expect(tries.at(-1)).toBe(EXPIRES);
    expect(gaps.at(-1)!).toBeLessThanOrEqual(2 * HOUR);
    // 0, 5, 15, 35, 75, 155 minutes, then every 2 hours up to 7115 minutes, then the window's end at 7200.
    expect(tries.length).toBe(6 + 58 + 1);
  });

  it('caps a try that would land after the window at the window end', () => {
    expect(nextAttemptAt(1, EXPIRES - MIN, EXPIRES)).toBe(EXPIRES);
    expect(nextAttemptAt(9, EXPIRES - HOUR, EXPIRES)).toBe(EXPIRES);
    expect(nextAttemptAt(9, EXPIRES - 2 * HOUR, EXPIRES)).toBe(EXPIRES);
    expect(nextAttemptAt(9, EXPIRES - 2 * HOUR - 1, EXPIRES)).toBe(EXPIRES - 1);
    expect(nextAttemptAt(1, EXPIRES - 1, EXPIRES)).toBe(EXPIRES);
  });

  it('gives no further try once the window has closed', () => {
    expect(nextAttemptAt(1, EXPIRES, EXPIRES)).toBeNull();
    expect(nextAttemptAt(65, EXPIRES, EXPIRES)).toBeNull();
    expect(nextAttemptAt(3, EXPIRES + 1, EXPIRES)).toBeNull();
    expect(nextAttemptAt(3, EXPIRES + 10 * 24 * HOUR, EXPIRES)).toBeNull();
  });
});

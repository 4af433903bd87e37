import { describe, expect, it } from 'vitest';
import { nowAndThen } from '../server/shared/now-and-then.js';

/** server/shared/now-and-then.ts: the schedule of the chores run as part of other work (forgetting expired rows). */
describe('a chore now and then', () => {
  it('is due at the first call for a key, then once every interval, counted from its last run', () => {
    const chore = nowAndThen(60_000);
    const store = {};
    expect(chore.due(store, 1_000)).toBe(true);
    expect(chore.due(store, 1_000)).toBe(false);
    expect(chore.due(store, 60_999)).toBe(false);
    expect(chore.due(store, 61_000)).toBe(true);
    expect(chore.due(store, 61_001)).toBe(false);
    expect(chore.due(store, 121_000)).toBe(true);
  });

  it('keeps each key (store) on a schedule of its own', () => {
    const chore = nowAndThen(60_000);
    const a = {};
    const b = {};
    expect(chore.due(a, 0)).toBe(true);
    expect(chore.due(b, 30_000)).toBe(true);
    expect(chore.due(a, 59_999)).toBe(false);
    expect(chore.due(a, 60_000)).toBe(true);
    expect(chore.due(b, 60_000)).toBe(false);
    expect(chore.due(b, 90_000)).toBe(true);
  });

  it('is due again at once when the last run left work behind, or when the clock stepped back', () => {
    const chore = nowAndThen(60_000);
    const store = {};
    expect(chore.due(store, 100_000)).toBe(true);
    chore.again(store);
    expect(chore.due(store, 100_001)).toBe(true);
    expect(chore.due(store, 100_002)).toBe(false);
    // The wall clock stepped back: what the chore judges is judged on that clock, so it runs now.
    expect(chore.due(store, 50_000)).toBe(true);
    expect(chore.due(store, 50_001)).toBe(false);
  });
});

import { describe, expect, it } from 'vitest';
import { createPollLoop } from '../server/queues/poll-loop.js';

/**
 * The loop under the three queues' workers (server/queues/poll-loop.ts), with ticks that await (their claims run on
 * the database): a stop or a poke that comes while a tick is under way is not lost in the wait for the interval.
 */

const HOUR = 3_600_000;

function pendingTick() {
  const started: (() => void)[] = [];
  return {
    started,
    tick: () => new Promise<boolean | undefined>((resolve) => started.push(() => resolve(false))),
  };
}

describe('the poll loop', () => {
  it('a stop that comes while a tick awaits: the loop returns once that tick ends, without waiting for the interval', async () => {
    const ticks = pendingTick();
    const loop = createPollLoop({ intervalMs: HOUR, tick: ticks.tick, onError: () => undefined });
    loop.start();
    expect(ticks.started).toHaveLength(1);
    let stopped = false;
    const stop = loop.stop().then(() => (stopped = true));
    await new Promise((r) => setImmediate(r));
    expect(stopped).toBe(false);
    ticks.started[0]!();
    await stop;
    expect(stopped).toBe(true);
    expect(ticks.started).toHaveLength(1);
  });

  it('a poke that comes while a tick awaits runs the next tick at once', async () => {
    const ticks = pendingTick();
    const loop = createPollLoop({ intervalMs: HOUR, tick: ticks.tick, onError: () => undefined });
    loop.start();
    loop.poke();
    ticks.started[0]!();
    await new Promise((r) => setImmediate(r));
    expect(ticks.started).toHaveLength(2);
    const stop = loop.stop();
    ticks.started[1]!();
    await stop;
  });

  it('an idle loop waits for the interval, and a poke ends the wait', async () => {
    let n = 0;
    const loop = createPollLoop({ intervalMs: HOUR, tick: async () => void n++, onError: () => undefined });
    loop.start();
    await new Promise((r) => setImmediate(r));
    expect(n).toBe(1);
    loop.poke();
    await new Promise((r) => setImmediate(r));
    expect(n).toBe(2);
    await loop.stop();
  });
});

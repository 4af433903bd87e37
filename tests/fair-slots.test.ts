import { describe, expect, it } from 'vitest';
import { type Slot, createFairSlots } from '../server/queues/fair-slots.js';

/**
 * The connection slots of the mail engine, without sockets: the three bounds (in all, per account, per destination),
 * waiting accounts served in turn, the yield rule, and cancellation at shutdown.
 */

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Requests a slot and records when it is granted. */
function request(slots: ReturnType<typeof createFairSlots>, account: string, destination: string, log: string[]) {
  let slot: Slot | null = null;
  const done = slots.acquire(account, destination).then((s) => {
    slot = s;
    if (s) log.push(`${account}:${destination}`);
    return s;
  });
  return {
    done,
    get slot() {
      return slot;
    },
  };
}

describe('fair connection slots', () => {
  it.each([
    // [limits, requests (account:destination), granted at once]
    [{ total: 3, perAccount: 3, perDestination: 3 }, ['a:x', 'a:x', 'a:x', 'a:x'], 3],
    [{ total: 10, perAccount: 2, perDestination: 10 }, ['a:x', 'a:y', 'a:z', 'b:x'], 3],
    [{ total: 10, perAccount: 10, perDestination: 2 }, ['a:x', 'b:x', 'c:x', 'c:y'], 3],
    [{ total: 4, perAccount: 3, perDestination: 2 }, ['a:x', 'a:x', 'a:x', 'a:y', 'b:y', 'b:z'], 4],
  ] as const)('with %j, of %j, grants %i at once and never passes a bound', async (limits, requests, grantedNow) => {
    const slots = createFairSlots(limits);
    const log: string[] = [];
    for (const r of requests) {
      const [a, d] = r.split(':') as [string, string];
      request(slots, a, d, log);
    }
    await flush();
    expect(log).toHaveLength(grantedNow);
    expect(slots.held()).toBeLessThanOrEqual(limits.total);
    for (const a of ['a', 'b', 'c']) expect(slots.held({ account: a })).toBeLessThanOrEqual(limits.perAccount);
    for (const d of ['x', 'y', 'z']) expect(slots.held({ destination: d })).toBeLessThanOrEqual(limits.perDestination);
  });

  it('serves waiting accounts in turn, not in the order their requests arrived', async () => {
    const slots = createFairSlots({ total: 1, perAccount: 1, perDestination: 1 });
    const log: string[] = [];
    const requests = [request(slots, 'a', 'x', log)];
    await requests[0]!.done;
    // a queues three more before b and c ask once each.
    requests.push(
      request(slots, 'a', 'x', log),
      request(slots, 'a', 'x', log),
      request(slots, 'a', 'x', log),
      request(slots, 'b', 'x', log),
      request(slots, 'c', 'x', log),
    );
    await flush();
    for (let released = 0; released < 5; released++) {
      const holders = requests.filter((r) => r.slot && slots.held() > 0);
      expect(slots.held()).toBe(1);
      // The one slot is held by the request granted last; give it back.
      holders.at(-1)!.slot!.release();
      requests.splice(requests.indexOf(holders.at(-1)!), 1);
      await flush();
    }
    expect(log).toEqual(['a:x', 'a:x', 'b:x', 'c:x', 'a:x', 'a:x']);
  });

  it('asks a holder to yield only to an account holding fewer slots that the release would serve', async () => {
    const slots = createFairSlots({ total: 4, perAccount: 4, perDestination: 4 });
    const log: string[] = [];
    const held = [request(slots, 'a', 'x', log), request(slots, 'a', 'x', log), request(slots, 'a', 'y', log), request(slots, 'a', 'y', log)];
    await Promise.all(held.map((h) => h.done));
    const aSlot = held[0]!.slot!;
    // Nobody waits: no yield.
    expect(slots.shouldYield(aSlot)).toBe(false);
    const b = request(slots, 'b', 'x', log);
    await flush();
    expect(slots.waiting()).toBe(1);
    expect(slots.shouldYield(aSlot)).toBe(true);
    aSlot.release();
    await b.done;
    expect(b.slot).not.toBeNull();
    // a now holds 3 and b 1: a further request of b still makes a yield, one of a does not.
    request(slots, 'b', 'y', log);
    await flush();
    expect(slots.shouldYield(held[2]!.slot!)).toBe(true);
    expect(slots.shouldYield(b.slot!)).toBe(false);
  });

  it('does not ask to yield when the waiter is held back by its own bound, not by this slot', async () => {
    const slots = createFairSlots({ total: 3, perAccount: 3, perDestination: 1 });
    const log: string[] = [];
    const a = [request(slots, 'a', 'x', log), request(slots, 'a', 'y', log), request(slots, 'a', 'z', log)];
    await Promise.all(a.map((r) => r.done));
    request(slots, 'b', 'y', log);
    await flush();
    // Releasing a's slot to x would not let b reach y (one per destination), releasing the one to y would.
    expect(slots.shouldYield(a[0]!.slot!)).toBe(false);
    expect(slots.shouldYield(a[1]!.slot!)).toBe(true);
  });

  it('ends every wait with null on cancelAll, and a release is counted once', async () => {
    const slots = createFairSlots({ total: 1, perAccount: 1, perDestination: 1 });
    const log: string[] = [];
    const first = request(slots, 'a', 'x', log);
    await first.done;
    const waiting = request(slots, 'b', 'x', log);
    slots.cancelAll();
    expect(await waiting.done).toBeNull();
    first.slot!.release();
    first.slot!.release();
    expect(slots.held()).toBe(0);
    const again = request(slots, 'c', 'x', log);
    expect(await again.done).not.toBeNull();
    expect(slots.held()).toBe(1);
  });
});

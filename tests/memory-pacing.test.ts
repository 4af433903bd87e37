import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { PerformanceObserver, constants } from 'node:perf_hooks';
import {
  COLLECTION_SHARE,
  COLLECTION_POLICY,
  COLLECT_EVERY_BYTES,
  type CollectionType,
  FULL_FROM_BYTES,
  collectNow,
  collectionDelay,
  collectionType,
  createCollectionPacer,
  createCollector,
} from '../server/shared/memory.js';

/**
 * The full collections a large message's streams ask for (server/shared/memory.ts) are paced on the main thread: one
 * takes at most COLLECTION_SHARE of its time, and a stream whose collection must wait is handed what to wait for.
 * A clock and a timer the test drives; the collection is a function that advances the clock by its cost.
 */
function pacerUnderTest(cost: number) {
  let now = 1000;
  const timers: { at: number; fn: () => void }[] = [];
  const ran: number[] = [];
  const kinds: CollectionType[] = [];
  const pacer = createCollectionPacer({
    now: () => now,
    collect: (type) => {
      ran.push(now);
      kinds.push(type);
      now += cost;
    },
    after: (ms, fn) => void timers.push({ at: now + ms, fn }),
  });
  return {
    pacer,
    ran,
    kinds,
    timers,
    advance(ms: number) {
      now += ms;
      for (const t of timers.splice(0).sort((a, b) => a.at - b.at)) {
        if (t.at <= now) t.fn();
        else timers.push(t);
      }
    },
    get now() {
      return now;
    },
  };
}

describe('collection pacing', () => {
  it('a collection after one that took t waits until t is at most a fifth of the time since it began', () => {
    expect(COLLECTION_SHARE).toBe(0.2);
    expect(collectionDelay(0, { end: Number.NEGATIVE_INFINITY, cost: 0 })).toBe(0);
    // Began at 950, ended at 1000 (50 ms): the next may begin at 1200, when 50 is a fifth of 250.
    expect(collectionDelay(1000, { end: 1000, cost: 50 })).toBe(200);
    expect(collectionDelay(1150, { end: 1000, cost: 50 })).toBe(50);
    expect(collectionDelay(1200, { end: 1000, cost: 50 })).toBe(0);
    expect(collectionDelay(5000, { end: 1000, cost: 50 })).toBe(0);
  });

  it('the first collection runs at once; one due too soon after it is deferred and handed to the stream to wait for', async () => {
    const p = pacerUnderTest(40);
    expect(p.pacer.due('minor')).toBeUndefined();
    expect(p.ran).toEqual([1000]);
    // Due 10 ms after the first ended (at 1040): it may begin at 1040 + 160.
    p.advance(10);
    const wait = p.pacer.due('minor');
    expect(wait).toBeInstanceOf(Promise);
    expect(p.ran).toEqual([1000]);
    p.advance(149);
    expect(p.ran).toEqual([1000]);
    p.advance(1);
    expect(p.ran).toEqual([1000, 1200]);
    await wait;
  });

  it('streams due while one collection waits share it: one collection, not one each', async () => {
    const p = pacerUnderTest(40);
    p.pacer.due('minor');
    const first = p.pacer.due('minor');
    const second = p.pacer.due('minor');
    expect(second).toBe(first);
    expect(p.timers).toHaveLength(1);
    p.advance(200);
    await Promise.all([first, second]);
    expect(p.ran).toHaveLength(2);
    // The next, due now, waits its turn after that one.
    expect(p.pacer.due('minor')).toBeInstanceOf(Promise);
  });

  it('a waiting collection is a full one if any stream that waits for it asked for one', async () => {
    const p = pacerUnderTest(40);
    p.pacer.due('minor');
    const first = p.pacer.due('minor');
    expect(p.pacer.due('major')).toBe(first);
    expect(p.pacer.due('minor')).toBe(first);
    p.advance(200);
    await first;
    expect(p.kinds).toEqual(['minor', 'major']);
  });

  it('a payload asks for scavenges only until it passes FULL_FROM_BYTES, then every other collection is a full one', () => {
    expect(FULL_FROM_BYTES).toBe(4 * 1024 * 1024);
    // A 2.5 MB message: five collections, none of them full (each would stop the main thread 33-75 ms).
    expect([1, 2, 3, 4, 5].map((n) => collectionType(n, n * COLLECT_EVERY_BYTES))).toEqual(['minor', 'minor', 'minor', 'minor', 'minor']);
    expect(collectionType(8, FULL_FROM_BYTES)).toBe('minor');
    expect([9, 10, 11, 12].map((n) => collectionType(n, n * COLLECT_EVERY_BYTES))).toEqual(['minor', 'major', 'minor', 'major']);
  });

  it("a collector asks its pacer for the kind its payload's size calls for", () => {
    const asked: CollectionType[] = [];
    const collector = createCollector({ due: (type) => void asked.push(type) });
    for (let i = 0; i < 12; i++) collector.streamed(COLLECT_EVERY_BYTES);
    expect(asked).toEqual([...Array(9).fill('minor'), 'major', 'minor', 'major']);
  });

  it('in a worker thread (a parse holding one large message) every collection is a full one, each COLLECT_EVERY_BYTES / 2', () => {
    expect(COLLECTION_POLICY.worker).toEqual({ everyBytes: COLLECT_EVERY_BYTES / 2, fullFromBytes: 0, fullEvery: 1 });
    const asked: CollectionType[] = [];
    const collector = createCollector({ due: (type) => void asked.push(type) }, COLLECTION_POLICY.worker);
    const chunk = 64 * 1024;
    for (let sent = 0; sent < 2 * COLLECT_EVERY_BYTES; sent += chunk) collector.streamed(chunk);
    expect(asked).toEqual(['major', 'major', 'major', 'major']);
  });

  it('a worker thread collects by its own policy, the main thread by the main one', async () => {
    // Each thread loads its own copy of the module (the build, as the service's threads do: tests/helpers/global-setup.ts
    // builds it): the policy it streams by is the one of the thread it runs in.
    const url = new URL('../dist/server/shared/memory.js', import.meta.url).href;
    const source = `import { parentPort } from 'node:worker_threads';
      const { createCollector } = await import(${JSON.stringify(url)});
      const asked = [];
      const collector = createCollector({ due: (type) => void asked.push(type) });
      for (let i = 0; i < 8; i++) collector.streamed(${COLLECT_EVERY_BYTES / 2});
      parentPort.postMessage(asked);`;
    const worker = new Worker(source, { eval: true });
    const [asked] = (await once(worker, 'message')) as [CollectionType[]];
    await worker.terminate();
    expect(asked).toEqual(Array(8).fill('major'));
    const main: CollectionType[] = [];
    const collector = createCollector({ due: (type) => void main.push(type) });
    for (let i = 0; i < 8; i++) collector.streamed(COLLECT_EVERY_BYTES / 2);
    expect(main).toEqual(['minor', 'minor', 'minor', 'minor']);
  });

  it('a full collection is a mark-compact and a minor one a scavenge, on this Node (20 and 24 read the options apart)', async () => {
    const kindsOf = async (type: 'major' | 'minor') => {
      const kinds: number[] = [];
      const observer = new PerformanceObserver((list) => {
        for (const e of list.getEntries()) kinds.push((e as unknown as { detail: { kind: number } }).detail.kind);
      });
      observer.observe({ entryTypes: ['gc'] });
      collectNow(type);
      // GC entries are delivered on a later turn.
      await new Promise((r) => setTimeout(r, 50));
      observer.disconnect();
      return kinds;
    };
    expect(await kindsOf('major')).toContain(constants.NODE_PERFORMANCE_GC_MAJOR);
    // (V8 may finish a collection of its own in the same window: the first is the one asked for.)
    expect((await kindsOf('minor'))[0]).toBe(constants.NODE_PERFORMANCE_GC_MINOR);
  });

  it('a collector asks for a collection once a payload passes COLLECT_EVERY_BYTES, and every as many bytes after', () => {
    let asked = 0;
    const collector = createCollector({ due: () => void asked++ });
    const chunk = 64 * 1024;
    for (let sent = 0; sent < 4 * COLLECT_EVERY_BYTES; sent += chunk) collector.streamed(chunk);
    expect(asked).toBe(4);
    // A small message never causes one.
    const small = createCollector({ due: () => void asked++ });
    small.streamed(COLLECT_EVERY_BYTES - 1);
    expect(asked).toBe(4);
  });

  it('a collector hands the stream what its pacer says to wait for', async () => {
    const p = pacerUnderTest(40);
    const collector = createCollector(p.pacer);
    expect(collector.streamed(COLLECT_EVERY_BYTES)).toBeUndefined();
    const wait = collector.streamed(COLLECT_EVERY_BYTES);
    expect(wait).toBeInstanceOf(Promise);
    p.advance(160);
    await wait;
    expect(p.ran).toEqual([1000, 1200]);
  });
});

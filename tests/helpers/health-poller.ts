import { Worker } from 'node:worker_threads';

/**
 * Asks a service's /healthz over and over (10 ms apart) from a thread of its own, so what is measured is the service's
 * answer, not the test runner's event loop: the runner's loop stops for its own collections (its heap holds vitest and
 * the test's bombs) and for its own work (writing the messages a test sends), 35-40 ms at times, and a request it
 * timed meanwhile counted that as the service's. A worker has its own heap and loop; the CPU is shared, as it is with
 * everything else on the machine.
 */

export interface HealthPolls {
  /** Each answer's time, ms, sorted. */
  latencies: number[];
  /** The answers over 50 ms, each with when it was asked (ms after polling began). */
  slow: string[];
}

export interface HealthPoller {
  /** Stops after the request in flight and resolves with every answer's time. */
  stop(): Promise<HealthPolls>;
}

const SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { performance } = require('node:perf_hooks');
let polling = true;
parentPort.on('message', () => (polling = false));
(async () => {
  // One request first, not counted: the thread's first fetch loads and compiles its HTTP client (50-100 ms).
  await (await fetch(workerData.url)).arrayBuffer();
  const latencies = [];
  const slow = [];
  const start = performance.now();
  parentPort.postMessage({ started: true });
  while (polling) {
    const t = performance.now();
    const res = await fetch(workerData.url);
    await res.arrayBuffer();
    const took = performance.now() - t;
    latencies.push(took);
    if (took > 50) slow.push(took.toFixed(0) + ' ms at +' + (t - start).toFixed(0));
    await new Promise((r) => setTimeout(r, 10));
  }
  parentPort.postMessage({ latencies, slow });
})().catch((err) => parentPort.postMessage({ error: String(err && err.stack || err) }));
`;

/** Starts polling `http://127.0.0.1:<port>/healthz`; resolves once the first counted request is on its way. */
export async function startHealthPoller(port: number): Promise<HealthPoller> {
  const worker = new Worker(SOURCE, { eval: true, workerData: { url: `http://127.0.0.1:${port}/healthz` } });
  const result = new Promise<HealthPolls>((resolve, reject) => {
    worker.on('message', (m: { started?: true; latencies?: number[]; slow?: string[]; error?: string }) => {
      if (m.error) reject(new Error(`the /healthz poller failed: ${m.error}`));
      else if (m.latencies) resolve({ latencies: [...m.latencies].sort((a, b) => a - b), slow: m.slow ?? [] });
    });
    worker.on('error', reject);
  });
  await new Promise<void>((resolve, reject) => {
    worker.once('message', () => resolve());
    worker.once('error', reject);
  });
  return {
    async stop() {
      worker.postMessage('stop');
      try {
        return await result;
      } finally {
        await worker.terminate();
      }
    },
  };
}

/**
 * The answer at quantile q (0..1) of sorted latencies, by nearest rank: the least answer that at least q of them are
 * no slower than. The p99 of 100 answers is their 99th, not their slowest (one outlier in 100 is within p99).
 */
export function quantile(sorted: number[], q: number): number {
  return sorted[Math.max(0, Math.ceil(sorted.length * q) - 1)]!;
}

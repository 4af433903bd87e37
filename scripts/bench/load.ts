import { Agent, request } from 'node:http';

/** A closed-loop HTTP load generator: `concurrency` keep-alive clients, each sending its next request on an answer. */
export interface LoadResult {
  requests: number;
  errors: number;
  seconds: number;
  rps: number;
  p50ms: number;
  p99ms: number;
  statuses: Record<number, number>;
}

export async function runLoad(opts: {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: () => string;
  /** Headers that change per request (merged over `headers`). */
  vary?: () => Record<string, string>;
  concurrency: number;
  seconds: number;
}): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: opts.concurrency });
  const target = new URL(opts.url);
  const latencies: number[] = [];
  const statuses: Record<number, number> = {};
  let errors = 0;
  const started = performance.now();
  const deadline = started + opts.seconds * 1000;

  const one = () =>
    new Promise<void>((resolve) => {
      const varied = opts.vary?.();
      const body = opts.body?.();
      const t0 = performance.now();
      const headers = { ...opts.headers, ...varied, ...(body ? { 'content-length': Buffer.byteLength(body) } : {}) };
      const req = request({ agent, host: target.hostname, port: target.port, path: target.pathname, method: opts.method ?? 'GET', headers }, (res) => {
        res.resume();
        res.on('end', () => {
          latencies.push(performance.now() - t0);
          statuses[res.statusCode ?? 0] = (statuses[res.statusCode ?? 0] ?? 0) + 1;
          resolve();
        });
      });
      req.on('error', () => {
        errors++;
        resolve();
      });
      req.end(body);
    });

  const client = async () => {
    while (performance.now() < deadline) await one();
  };
  await Promise.all(Array.from({ length: opts.concurrency }, client));
  agent.destroy();
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? 0;
  return { requests: latencies.length, errors, seconds, rps: latencies.length / seconds, p50ms: pct(50), p99ms: pct(99), statuses };
}

export function formatLoad(name: string, r: LoadResult): string {
  return `${name.padEnd(44)} ${r.rps.toFixed(0).padStart(7)} req/s   p50 ${r.p50ms.toFixed(2).padStart(7)} ms   p99 ${r.p99ms.toFixed(2).padStart(7)} ms   (${r.requests} requests, statuses ${JSON.stringify(r.statuses)}${r.errors ? `, ${r.errors} errors` : ''})`;
}

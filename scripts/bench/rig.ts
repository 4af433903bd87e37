import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { eq } from 'drizzle-orm';
import { domains } from '../../db/schema/index.js';
import { openStore } from '../../server/app/state.js';
import { systemClock } from '../../server/shared/clock.js';
import { loadConfig } from '../../server/shared/config.js';
import { createTopLevelAccount } from '../../server/core/accounts.js';
import { insertKey } from '../../server/core/keys.js';
import { SCOPES } from '../../server/core/scopes.js';
import { TestDnsServer } from '../lib/dns-server.js';
import { createHttpPoster } from '../lib/http-poster.js';
import { type BenchSink, startBenchSink } from './postfix.js';
import { serviceNodeFlags, spawnListening, stop } from './spawn.js';
import { cpuSeconds, peakRssMb, percentile } from '../lib/proc.js';

/**
 * What the end-to-end benchmarks run against: the built service (`dist/server/app/main.js`) in its own process with a
 * fresh DATA_DIR and the limits lifted, a DNS server whose `example.net` MX is a local SMTP sink, and senders made as
 * the operator would (an account, a key, a domain marked verified).
 */

const here = fileURLToPath(new URL('.', import.meta.url));

export interface BenchRig {
  dataDir: string;
  dns: TestDnsServer;
  /** Where `example.net`'s MX points: Postfix's smtp-sink where installed, else the Node sink. */
  sink: BenchSink;
  service: ChildProcess;
  pid: number;
  /** `http://127.0.0.1:<port>/api/v1` */
  base: string;
  /** A new account with a key and a verified sending domain; the headers to send as it. */
  newSender(name: string, domain: string): Promise<{ accountId: string; headers: Record<string, string> }>;
  close(): Promise<void>;
}

/** `sink`, when given, is the caller's to stop; otherwise the rig starts one and stops it on close. */
export async function startBenchRig(extraEnv: Record<string, string> = {}, givenSink?: BenchSink): Promise<BenchRig> {
  const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-bench-'));
  const dns = await TestDnsServer.start();
  const sink = givenSink ?? (await startBenchSink());
  dns.add('example.net', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
  dns.add('mx.example.net', { type: 'A', address: '127.0.0.1' });
  const env = {
    DATA_DIR: dataDir,
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: '0',
    SMTP_PORT: '0',
    SUBMISSION_PORT: '0',
    SUBMISSIONS_PORT: '0',
    MAIL_HOSTNAME: 'mx.bench.test',
    DNS_SERVERS: dns.address,
    SMTP_DELIVERY_PORT: String(sink.port),
    ALLOW_PRIVATE_TARGETS: 'true',
    RATE_LIMIT_PER_KEY: '100000000',
    RATE_LIMIT_PER_ACCOUNT: '100000000',
    DEFAULT_DAILY_QUOTA: '100000000',
    LOG_LEVEL: 'info',
    ...extraEnv,
  };
  const config = loadConfig(env);
  // The state exists (migrated) before the service starts, so senders can be made beside it: DATA_DIR's SQLite file,
  // or the Postgres that extraEnv's STATE_URL names.
  await (await openStore(config)).close();
  const { child, port } = await spawnListening(join(here, '../../server/app/main.js'), env, serviceNodeFlags());
  const base = `http://127.0.0.1:${port}/api/v1`;

  return {
    dataDir,
    dns,
    sink,
    service: child,
    pid: child.pid!,
    base,
    async newSender(name, domain) {
      const store = await openStore(config);
      try {
        const account = await createTopLevelAccount({ db: store.db, clock: systemClock, config }, { name, credits: 100_000_000 });
        const key = (await insertKey({ db: store.db, clock: systemClock }, { accountId: account.id, name: 'bench', scopes: SCOPES })).key;
        const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
        const res = await fetch(`${base}/domains`, { method: 'POST', headers, body: JSON.stringify({ name: domain }) });
        if (res.status !== 201) throw new Error(`POST /domains answered ${res.status}: ${await res.text()}`);
        const created = (await res.json()) as { id: string };
        await store.db
          .update(domains)
          .set({ recordStatus: { ownership: 'published', spf: 'published', receiving: 'published', signing: 'published' } })
          .where(eq(domains.id, created.id));
        return { accountId: account.id, headers };
      } finally {
        await store.close();
      }
    },
    async close() {
      await stop(child);
      if (!givenSink) await sink.stop();
      await dns.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * The API clients of the delivery benchmarks: `concurrency` keep-alive connections through the lean client of
 * scripts/lib/http-poster.ts, so the load generator takes as little of the machine's CPU as `smtp-source` does on
 * Postfix's side.
 */
export function createPoster(url: string, headers: Record<string, string>, concurrency: number) {
  return createHttpPoster(url, { 'content-type': 'application/json', ...headers }, concurrency);
}

/** A ~5 KB notification send to customer<i>@example.net, from orders@`domain` (the sender's verified domain). */
export function benchSendBody(i: number, domain = 'bench.example'): string {
  const paragraph = 'Your order has shipped and is on its way. Track it from your account page at any time. ';
  return JSON.stringify({
    from: `Bench <orders@${domain}>`,
    to: `customer${i}@example.net`,
    template: { name: 'notification', subject: `Order ${i} shipped`, body: paragraph.repeat(24) },
  });
}

/** Sends `total` bodies through `post` from `concurrency` clients at once (`onSend(i)` just before each); how many were not answered 200. */
export async function postAll(
  post: (payload: string) => Promise<number>,
  total: number,
  concurrency: number,
  body: (i: number) => string,
  onSend?: (i: number) => void,
): Promise<number> {
  let next = 0;
  let failed = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        onSend?.(i);
        if ((await post(body(i))) !== 200) failed++;
      }
    }),
  );
  return failed;
}

export interface DeliveryFigures {
  total: number;
  refused: number;
  delivered: number;
  /** First request to the last request answered. */
  acceptSeconds: number;
  /** First request to the last message received by the sink. */
  seconds: number;
  rate: number;
  /** Send-to-delivered, ms: the k-th delivery against the k-th request (the sink does not say which message it got). */
  p50: number;
  p99: number;
  cpuPer1000: number;
  /** This process's CPU meanwhile (the API clients and the sink's polling) per 1000 messages. */
  loadCpuPer1000: number;
  peakRssMb: number;
}

/**
 * `total` ~5 KB sends through POST /emails from `concurrency` keep-alive clients as the sender (`headers`, from
 * rig.newSender with the domain bench.example), then
 * waits (up to 5 minutes) for the rig's sink to have received every accepted one.
 */
export async function measureDelivery(rig: BenchRig, headers: Record<string, string>, total: number, concurrency: number): Promise<DeliveryFigures> {
  return measureDeliveryOf(rig, [{ headers, domain: 'bench.example', concurrency }], total);
}

/** One sender's share of a delivery measurement: its key, its verified domain, its clients, and where they post. */
export interface SendStream {
  headers: Record<string, string>;
  domain: string;
  concurrency: number;
  /** The API base its clients post to; the rig's when absent. */
  base?: string;
}

/**
 * `total` ~5 KB sends through POST /emails, split evenly between `streams` (several senders at once, each with its own
 * clients), timed from the first request to the last message received by the rig's sink (up to 5 minutes).
 */
export async function measureDeliveryOf(rig: BenchRig, streams: readonly SendStream[], total: number): Promise<DeliveryFigures> {
  const { sink, pid } = rig;
  const posters = streams.map((s) => createPoster(`${s.base ?? rig.base}/emails`, s.headers, s.concurrency));
  const before = sink.delivered();
  const sentAt: number[] = [];
  const cpu0 = cpuSeconds(pid);
  const own0 = process.cpuUsage();
  const started = Date.now();
  // Each stream's messages are numbered apart (customer<i> stays unique across them).
  const shares = streams.map((_, k) => Math.floor(total / streams.length) + (k < total % streams.length ? 1 : 0));
  const offsets = shares.map((_, k) => shares.slice(0, k).reduce((a, b) => a + b, 0));
  const refusedEach = await Promise.all(
    streams.map((s, k) =>
      postAll(
        posters[k]!.post,
        shares[k]!,
        s.concurrency,
        (i) => benchSendBody(offsets[k]! + i, s.domain),
        () => sentAt.push(Date.now()),
      ),
    ),
  );
  const refused = refusedEach.reduce((a, b) => a + b, 0);
  const accepted = Date.now();
  const deadline = Date.now() + 300_000;
  while (sink.delivered() - before < total - refused && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  const cpu = cpuSeconds(pid) - cpu0;
  const own = process.cpuUsage(own0);
  for (const poster of posters) poster.close();
  const times = sink.times().slice(before);
  const finished = Math.max(...times);
  const latencies = times.map((t, k) => t - (sentAt[k] ?? t)).sort((a, b) => a - b);
  const seconds = (finished - started) / 1000;
  return {
    total,
    refused,
    delivered: times.length,
    acceptSeconds: (accepted - started) / 1000,
    seconds,
    rate: times.length / seconds,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    cpuPer1000: (cpu / Math.max(1, times.length)) * 1000,
    loadCpuPer1000: ((own.user + own.system) / 1e6 / Math.max(1, times.length)) * 1000,
    peakRssMb: peakRssMb(pid),
  };
}

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startCheckpointer } from '../../db/checkpointer.js';
import { openDatabase } from '../../db/client.js';
import { systemClock } from '../../server/clock.js';
import { createMemoryLogger } from '../../server/logger.js';
import { type Metrics, createMetrics, readOffThread } from '../../server/metrics.js';

/**
 * A /metrics scrape over a large outbound backlog: N queued recipients (`BENCH_QUEUED`, default 500,000) written
 * straight into a fresh database, then three scrapes with the gauges' scans on the event loop's connection and three
 * on the checkpoint thread's (what main does): how long each scrape took and how long the event loop was held
 * meanwhile (the longest gap between ticks of a 1 ms timer).
 * Run: npm run build && node dist/scripts/bench/scrape.js
 */
const queued = Number(process.env.BENCH_QUEUED ?? 500_000);

async function scrapes(name: string, metrics: Metrics): Promise<void> {
  for (let round = 0; round < 3; round++) {
    let last = performance.now();
    let held = 0;
    const ticker = setInterval(() => {
      const now = performance.now();
      held = Math.max(held, now - last);
      last = now;
    }, 1);
    await new Promise((r) => setTimeout(r, 30));
    const started = performance.now();
    const text = await metrics.registry.metrics();
    const took = performance.now() - started;
    await new Promise((r) => setTimeout(r, 20));
    clearInterval(ticker);
    const due = /mailstead_outbound_queue_depth\{state="due"\} (\d+)/.exec(text)?.[1];
    console.log(`  ${name.padEnd(28)} scrape ${took.toFixed(0).padStart(4)} ms, event loop held at most ${held.toFixed(0).padStart(4)} ms (due ${due})`);
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mailstead-bench-'));
  const store = openDatabase(dir);
  try {
    // The rows alone: no messages or accounts behind them, which the scan does not read.
    store.sqlite.pragma('foreign_keys = OFF');
    const insert = store.sqlite.prepare(
      `insert into outbound_recipients (id, message_id, account_id, recipient, recipient_domain, status, next_attempt_at, created_at)
       values (?, ?, ?, ?, 'example.net', 'queued', ?, ?)`,
    );
    const now = Date.now();
    store.sqlite.transaction(() => {
      // One in seven waits for a retry an hour from now; the rest are due, their attempt times interleaved (retries
      // reorder a real queue), so the index's order is not the table's.
      for (let i = 0; i < queued; i++) {
        insert.run(`r${String(i).padStart(10, '0')}`, `m${i}`, `a${i % 50}`, `u${i}@example.net`, now - (i % 3) * 1000 + (i % 7 === 0 ? 3_600_000 : 0), now - i);
      }
    })();
    console.log(`GET /metrics with ${queued} queued recipients (Node ${process.version})`);
    await scrapes('on the event loop', createMetrics(store.db, systemClock));
    const thread = startCheckpointer(store.sqlite, createMemoryLogger());
    const metrics = createMetrics(store.db, systemClock);
    metrics.readWith(readOffThread(thread, store.db));
    await scrapes('on the checkpoint thread', metrics);
    await thread.stop();
  } finally {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

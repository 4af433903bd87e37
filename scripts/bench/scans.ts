import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startCheckpointer } from '../../db/checkpointer.js';
import { openDatabase } from '../../db/client.js';
import { createMemoryLogger } from '../../server/shared/logger.js';
import { dailyVolume } from '../../dashboard/queries/mail-volume.js';
import { DAY_MS, systemClock } from '../../server/shared/clock.js';
import { newId } from '../../server/shared/ids.js';
import { type Metrics, createMetrics } from '../../server/shared/metrics.js';
import { type Scans, scansOffThread, scansOn } from '../../db/scans.js';

/**
 * The reads that walk many rows, on the event loop's connection and on the checkpoint thread's (what main does,
 * db/scans.ts): a /metrics scrape over N queued recipients (`BENCH_QUEUED`, default 500,000), and the dashboard's
 * 30-day chart over M sends and as many outcomes (`BENCH_SENDS`, default 1,000,000), all written straight into a
 * fresh database. Prints how long each took and how long the event loop was held meanwhile (the longest gap between
 * ticks of a 1 ms timer).
 * Run: npm run build && node dist/scripts/bench/scans.js
 */
const queued = Number(process.env.BENCH_QUEUED ?? 500_000);
const sends = Number(process.env.BENCH_SENDS ?? 1_000_000);

/** Runs `work` three times, each timed, with the event loop's longest hold meanwhile. */
async function timed(name: string, work: () => Promise<string>): Promise<void> {
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
    const what = await work();
    const took = performance.now() - started;
    await new Promise((r) => setTimeout(r, 20));
    clearInterval(ticker);
    console.log(`  ${name.padEnd(48)} ${took.toFixed(0).padStart(4)} ms, event loop held at most ${held.toFixed(0).padStart(4)} ms (${what})`);
  }
}

const scrape = (metrics: Metrics) => async () => {
  const text = await metrics.registry.metrics();
  return `due ${/mailstead_outbound_queue_depth\{state="due"\} (\d+)/.exec(text)?.[1]}`;
};

const chart = (scans: Scans) => async () => {
  const days = await dailyVolume(scans, Date.now());
  return `sent ${days.reduce((n, d) => n + d.sent, 0)}, delivered ${days.reduce((n, d) => n + d.delivered, 0)}`;
};

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
        insert.run(
          `r${String(i).padStart(10, '0')}`,
          `m${i}`,
          `a${i % 50}`,
          `u${i}@example.net`,
          now - (i % 3) * 1000 + (i % 7 === 0 ? 3_600_000 : 0),
          now - i,
        );
      }
    })();
    // A month of sends, each with its delivered outcome.
    const email = store.sqlite.prepare(
      `insert into emails (id, account_id, from_address, "to", subject, template, status, tags, sandbox, created_at)
       values (?, ?, 'billing@shop.example', '["customer@example.net"]', 'Your receipt', 'receipt', 'sent', '{}', 0, ?)`,
    );
    const event = store.sqlite.prepare(
      `insert into email_events (id, email_id, account_id, recipient, status, dsn, detail, occurred_at)
       values (?, ?, ?, 'customer@example.net', 'delivered', '2.0.0', '250 ok', ?)`,
    );
    store.sqlite.transaction(() => {
      for (let i = 0; i < sends; i++) {
        const at = now - Math.floor((i / sends) * 29 * DAY_MS);
        const id = newId(at);
        email.run(id, `a${i % 50}`, at);
        event.run(newId(at + 1000), id, `a${i % 50}`, at + 1000);
      }
    })();
    console.log(`${queued} queued recipients, ${sends} sends and as many outcomes over 30 days (Node ${process.version})`);
    const onLoop = scansOn(store.db);
    const thread = startCheckpointer(store.sqlite, createMemoryLogger());
    const offLoop = scansOffThread(thread, store.db);
    await timed('GET /metrics, on the event loop', scrape(createMetrics(systemClock, () => onLoop)));
    await timed('GET /metrics, on the checkpoint thread', scrape(createMetrics(systemClock, () => offLoop)));
    await timed("the dashboard's chart, on the event loop", chart(onLoop));
    await timed("the dashboard's chart, on the checkpoint thread", chart(offLoop));
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

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { Hono } from 'hono';
import { domains } from '../../db/schema/index.js';
import { createApp } from '../../server/app/http-app.js';
import { systemClock } from '../../server/shared/clock.js';
import { loadConfig } from '../../server/shared/config.js';
import { createTopLevelAccount } from '../../server/core/accounts.js';
import { insertKey } from '../../server/core/keys.js';
import { SCOPES } from '../../server/core/scopes.js';
import { createDeps } from '../../server/app/deps.js';
import { createLogger } from '../../server/shared/logger.js';

/**
 * The CPU cost of one POST /emails in-process, without sockets or a load generator: the service's Hono app called
 * directly (`app.request`), `CONCURRENCY` requests in flight so that the group commit batches as it does under load,
 * for sandbox and queued sends (and queued with an Idempotency-Key), then a bare Hono route parsing the same JSON body. Prints µs per request and the
 * ratios; run it under `node --cpu-prof` to see where a send's time goes (scripts/bench/README.md).
 * Run: npm run build && node dist/scripts/bench/send-path.js   (env BENCH_REQUESTS, default 6000; BENCH_ONLY=sandbox, queued
 * or idempotent runs that phase alone)
 */
const total = Number(process.env.BENCH_REQUESTS ?? 6000);
const CONCURRENCY = 32;

async function timeRequests(send: (i: number) => Promise<Response>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < total) {
        const res = await send(next++);
        if (res.status !== 200) throw new Error(`answered ${res.status}: ${await res.text()}`);
        await res.arrayBuffer();
      }
    }),
  );
  return ((performance.now() - started) * 1000) / total;
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-bench-'));
  const config = loadConfig({
    DATA_DIR: dataDir,
    MAIL_HOSTNAME: 'mx.bench.test',
    RATE_LIMIT_PER_KEY: '100000000',
    RATE_LIMIT_PER_ACCOUNT: '100000000',
    DEFAULT_DAILY_QUOTA: '100000000',
    LOG_LEVEL: 'warn',
  });
  const deps = await createDeps(config, systemClock, createLogger('warn'));
  const app = createApp(deps);
  // Sandbox sends are limited to 1000 a day per account: one account per 900 of them.
  const senders: { key: string; domain: string }[] = [];
  for (let i = 0; i < Math.ceil(total / 900) + 1; i++) {
    const account = await createTopLevelAccount(deps, { name: `Bench ${i}`, credits: 100_000_000 });
    const key = (await insertKey(deps, { accountId: account.id, name: 'bench', scopes: SCOPES })).key;
    senders.push({ key, domain: `bench${i}.example` });
  }
  for (const s of senders) {
    const res = await app.request('/api/v1/domains', {
      method: 'POST',
      headers: { authorization: `Bearer ${s.key}` },
      body: JSON.stringify({ name: s.domain }),
    });
    const { id } = (await res.json()) as { id: string };
    await deps.db
      .update(domains)
      .set({ recordStatus: { ownership: 'published', spf: 'published', receiving: 'published', signing: 'published' } })
      .where(eq(domains.id, id));
  }
  const body = (i: number, sandbox: boolean, domain: string) =>
    JSON.stringify({
      from: `Bench Billing <billing@${domain}>`,
      to: `customer${i}@example.net`,
      template: { name: 'receipt', receiptNumber: `R-${i}`, paidOn: '2026-11-21', paymentMethod: 'Visa 4242', total: '$42.00' },
      sandbox,
    });
  let round = 0;
  const post =
    (sandbox: boolean, idempotent = false) =>
    (i: number) => {
      const s = senders[Math.floor(i / 900)]!;
      const headers: Record<string, string> = { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' };
      if (idempotent) headers['idempotency-key'] = `bench-${round}-${i}`;
      return Promise.resolve(app.request('/api/v1/emails', { method: 'POST', headers, body: body(i, sandbox, s.domain) }));
    };

  const bare = new Hono().post('/bare', async (c) => {
    await c.req.json();
    return c.json({ id: '019a0000-0000-7000-8000-000000000000', sandbox: true });
  });
  const postBare = (i: number) =>
    Promise.resolve(bare.request('/bare', { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(i, true, 'bench.example') }));

  // BENCH_ONLY=sandbox (or queued, idempotent) runs that phase alone, for a profile of it.
  const only = process.env.BENCH_ONLY;
  const phase = async (name: string, send: (i: number) => Promise<Response>) => (only === undefined || only === name ? timeRequests(send) : NaN);
  await timeRequests(postBare); // warm-up
  const sandbox = await phase('sandbox', post(true));
  const queued = await phase('queued', post(false));
  round++;
  const idempotent = await phase('idempotent', post(false, true));
  const baseline = await timeRequests(postBare);
  console.log(`POST /emails in-process, ${total} requests each, ${CONCURRENCY} in flight (Node ${process.version}); the delivery engine is not running`);
  // A phase BENCH_ONLY skipped prints '-'.
  const us = (v: number) => (Number.isNaN(v) ? '-' : `${v.toFixed(0)} µs per request`);
  const ratio = (v: number) => (Number.isNaN(v) ? '-' : (baseline / v).toFixed(2));
  console.log(`  sandbox            ${us(sandbox)}`);
  console.log(`  queued             ${us(queued)}`);
  console.log(`  queued, with an Idempotency-Key  ${us(idempotent)}`);
  console.log(`  bare Hono JSON     ${us(baseline)}`);
  console.log(`  ratio to bare: sandbox ${ratio(sandbox)}, queued ${ratio(queued)}`);
  deps.store.close();
  rmSync(dataDir, { recursive: true, force: true });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

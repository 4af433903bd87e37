import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { eq } from 'drizzle-orm';
import { openDatabase } from '../../db/client.js';
import { domains } from '../../db/schema/index.js';
import { systemClock } from '../../server/clock.js';
import { loadConfig } from '../../server/config.js';
import { createTopLevelAccount } from '../../server/core/accounts.js';
import { insertKey } from '../../server/core/keys.js';
import { SCOPES } from '../../server/core/scopes.js';
import { formatLoad, runLoad } from './load.js';
import { spawnListening, stop } from './spawn.js';

/**
 * POST /emails under load: sandbox sends, and real sends queued (durably) to a verified domain, from `CONCURRENCY`
 * keep-alive clients for `SECONDS` each; then a bare Hono route in the same run, for the ratio.
 * Run: npm run bench:send-api   (env BENCH_SECONDS, BENCH_CONCURRENCY)
 */
const seconds = Number(process.env.BENCH_SECONDS ?? 10);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 32);
const here = fileURLToPath(new URL('.', import.meta.url));
const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-bench-'));

const env = {
  DATA_DIR: dataDir,
  HTTP_HOST: '127.0.0.1',
  HTTP_PORT: '0',
  SMTP_PORT: '0',
  MAIL_HOSTNAME: 'mx.bench.test',
  RATE_LIMIT_PER_KEY: '100000000',
  RATE_LIMIT_PER_ACCOUNT: '100000000',
  DEFAULT_DAILY_QUOTA: '100000000',
  LOG_LEVEL: 'info',
};

async function main(): Promise<void> {
  const config = loadConfig(env);
  const store = openDatabase(dataDir);
  const account = createTopLevelAccount({ db: store.db, clock: systemClock, config }, { name: 'Bench', credits: 100_000_000 });
  const key = insertKey({ db: store.db, clock: systemClock }, { accountId: account.id, name: 'bench', scopes: SCOPES }).key;

  const service = await spawnListening(join(here, '../../server/main.js'), env);
  const base = `http://127.0.0.1:${service.port}/api/v1`;
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const created = await fetch(`${base}/domains`, { method: 'POST', headers, body: JSON.stringify({ name: 'bench.example' }) });
  const domain = (await created.json()) as { id: string };
  store.db.update(domains).set({ recordStatus: { ownership: 'published', spf: 'published', receiving: 'published', signing: 'published' } }).where(eq(domains.id, domain.id)).run();
  store.close();

  let n = 0;
  const send = (sandbox: boolean) => () =>
    JSON.stringify({
      from: 'Bench Billing <billing@bench.example>',
      to: `customer${n++}@example.net`,
      template: { name: 'receipt', receiptNumber: `R-${n}`, paidOn: '2026-11-21', paymentMethod: 'Visa 4242', total: '$42.00' },
      sandbox,
    });

  console.log(`POST /emails, ${concurrency} keep-alive clients, ${seconds} s each (Node ${process.version})`);
  // Warm up the JIT and the connection pool.
  await runLoad({ url: `${base}/emails`, method: 'POST', headers, body: send(true), concurrency, seconds: 1 });
  const sandbox = await runLoad({ url: `${base}/emails`, method: 'POST', headers, body: send(true), concurrency, seconds });
  console.log(formatLoad('POST /emails (sandbox)', sandbox));
  const queued = await runLoad({ url: `${base}/emails`, method: 'POST', headers, body: send(false), concurrency, seconds });
  console.log(formatLoad('POST /emails (queued)', queued));
  await stop(service.child);

  const bare = await spawnListening(join(here, 'bare-hono.js'), {});
  const bareUrl = `http://127.0.0.1:${bare.port}/bare`;
  await runLoad({ url: bareUrl, method: 'POST', headers: { 'content-type': 'application/json' }, body: send(true), concurrency, seconds: 1 });
  const baseline = await runLoad({ url: bareUrl, method: 'POST', headers: { 'content-type': 'application/json' }, body: send(true), concurrency, seconds });
  console.log(formatLoad('bare Hono JSON route', baseline));
  await stop(bare.child);

  console.log(`ratio to bare Hono: sandbox ${(sandbox.rps / baseline.rps).toFixed(2)}, queued ${(queued.rps / baseline.rps).toFixed(2)}`);
  rmSync(dataDir, { recursive: true, force: true });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PG_TEST_CA_FILE, type TestPostgres, benchPostgresMode, startPostgres, stateUrlOf } from '../lib/postgres.js';
import { TestDnsServer } from '../lib/dns-server.js';
import { SmtpSink } from '../lib/smtp-sink.js';
import { cpuSeconds, machineCpu } from '../lib/proc.js';
import { formatLoad, runLoad } from './load.js';
import { serviceNodeFlags, spawnListening, stop } from './spawn.js';

/**
 * POST /emails under load: sandbox sends, and real sends queued (durably) to a verified domain, from `CONCURRENCY`
 * keep-alive clients for `SECONDS` each; then a bare Hono route parsing the same body in the same run, for the ratio;
 * then the floors under a send: the bare route writing the body as one row through the group commit before it answers,
 * and a sandbox send with every check served from memory (send-floor.ts) on the service's database, its log row in the
 * service's indexed table and in an unindexed one.
 * Each phase is eight slices of a quarter of SECONDS (twice its time in all), summed: with the built-in receipt, and,
 * alternating with it, an account's own receipt in a layout whose CSS is inlined (docs/api/decisions.md section 9),
 * for the ratio of the two.
 * With STATE_URL (a Postgres database of its own), or BENCH_POSTGRES=embedded (an embedded Postgres with TLS on
 * loopback, started here; `embedded-plain`: the same over plain TCP), a second service keeps its state on Postgres and
 * the two engines take turns slice by slice in the sandbox and queued phases, each queued slice starting on an empty
 * queue; the two are printed side by side (the target: Postgres's queued sends at least 0.5 of SQLite's).
 * With BENCH_BASELINE=<another checkout, built> instead, that build's service on SQLite takes the second turn: this
 * build's SQLite figures against it, in the same slices (a regression check).
 * Run: npm run bench:send-api   (env BENCH_SECONDS, BENCH_CONCURRENCY, BENCH_ONLY, STATE_URL, BENCH_POSTGRES, BENCH_BASELINE)
 */
const seconds = Number(process.env.BENCH_SECONDS ?? 10);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 32);
const here = fileURLToPath(new URL('.', import.meta.url));
/** This checkout: the bench runs from its dist/scripts/bench. */
const ROOT = join(here, '../../..');
// Sandbox sends are limited to 1000 a day per account: enough accounts that none reaches it at 20,000 sends/s (a 429
// is cheaper than a send and would flatter the figure).
const ACCOUNTS = Math.ceil((20_000 * (seconds + 1)) / 1000);
/** BENCH_ONLY=sandbox or queued runs that phase alone (with the bare route), e.g. for a profile of it. */
const only = process.env.BENCH_ONLY;
const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-bench-'));
/** Postgres for the second run; the SQLite run's service must not inherit it (spawn passes the environment on). */
const givenStateUrl = process.env.STATE_URL;
delete process.env.STATE_URL;
/** The Postgres run's own DATA_DIR (its key pair and spool; the state is in Postgres). */
const pgDataDir = mkdtempSync(join(tmpdir(), 'mailstead-bench-pg-'));

const env: Record<string, string> = {
  DATA_DIR: dataDir,
  HTTP_HOST: '127.0.0.1',
  HTTP_PORT: '0',
  SMTP_PORT: '0',
  SUBMISSION_PORT: '0',
  SUBMISSIONS_PORT: '0',
  MAIL_HOSTNAME: 'mx.bench.test',
  RATE_LIMIT_PER_KEY: '100000000',
  RATE_LIMIT_PER_ACCOUNT: '100000000',
  DEFAULT_DAILY_QUOTA: '100000000',
  LOG_LEVEL: 'info',
};

/** An account's own receipt: the built-in's wording, in a layout whose <style> is inlined at render. */
const OWN_LAYOUT = {
  name: 'brand',
  kind: 'layout',
  html:
    '<!doctype html><html><head><meta charset="utf-8"><style>body { font-family: Helvetica, Arial, sans-serif; color: #222; } ' +
    'h1 { font-size: 20px; } td.label { padding: 4px 12px 4px 0; color: #666; } .footer { color: #888; font-size: 12px; }</style></head>' +
    '<body>{{ content }}<p class="footer">Bench Inc., 1 Main Street</p></body></html>',
};
const OWN_RECEIPT = {
  name: 'bench-receipt',
  layout: 'brand',
  subject: 'Your receipt{% if receiptNumber %} {{ receiptNumber }}{% endif %}',
  html:
    '<h1>Receipt{% if receiptNumber %} {{ receiptNumber }}{% endif %}</h1><table>' +
    '{% if paidOn %}<tr><td class="label">Paid on</td><td>{{ paidOn }}</td></tr>{% endif %}' +
    '{% if paymentMethod %}<tr><td class="label">Payment method</td><td>{{ paymentMethod }}</td></tr>{% endif %}' +
    '<tr><td class="label">Total</td><td><strong>{{ total }}</strong></td></tr></table><p>Thank you for your payment.</p>',
  variables: {
    receiptNumber: { kind: 'text' },
    paidOn: { kind: 'text' },
    paymentMethod: { kind: 'text' },
    total: { kind: 'text', required: true },
  },
};

type LoadResult = Awaited<ReturnType<typeof runLoad>>;

/** A load's figures, and the service's and the machine's CPU seconds over it. */
interface Measured {
  result: LoadResult;
  cpu: number;
  machine: number;
}

/** One service under test, started with its senders and warmed up, until `stop()`. */
interface BenchService {
  /** One load of `seconds` on POST /emails, with the CPU over it. */
  load(sandboxed: boolean, seconds: number, template?: string): Promise<Measured>;
  /** The own template against the built-in receipt in alternating slices: the ratio of their requests/s. */
  compareTemplates(name: string, sandboxed: boolean): Promise<number | null>;
  /** The load this service is sent, for the floors that follow: its bodies and senders. */
  shape: { headers: Record<string, string>; vary: () => Record<string, string>; send: (sandbox: boolean, template?: string) => () => string };
  stop(): Promise<void>;
}

const cpuNote = (m: { cpu: number; machine: number }, requests: number, seconds: number) =>
  `service CPU ${((m.cpu * 1e6) / Math.max(1, requests)).toFixed(0)} µs a request, ${((100 * m.cpu) / seconds).toFixed(0)}% of a core; machine ${((100 * m.machine) / seconds).toFixed(0)}% of a core`;

/**
 * Makes `accounts` senders on a service's state, each with a verified domain and the own receipt in its layout, with
 * the code of the build at `root` (its own modules, in a child: another build's schema and API may differ from this
 * one's, synchronous or not).
 */
async function makeSenders(root: string, env: Record<string, string>, base: string, accounts: number): Promise<{ key: string; domain: string }[]> {
  const script = `
    import { join } from 'node:path';
    import { pathToFileURL } from 'node:url';
    const built = (path) => import(pathToFileURL(join(process.cwd(), 'dist', path)).href);
    const env = JSON.parse(process.env.BENCH_SETUP);
    const { eq } = await import('drizzle-orm');
    const { loadConfig } = await built('server/shared/config.js');
    const { systemClock } = await built('server/shared/clock.js');
    const { createTopLevelAccount } = await built('server/core/accounts.js');
    const { insertKey } = await built('server/core/keys.js');
    const { SCOPES } = await built('server/core/scopes.js');
    const { domains } = await built('db/schema/index.js');
    const config = loadConfig(env);
    // The state as that build opens it: openStore (either engine), or an earlier build's synchronous openDatabase.
    const store = await built('server/app/state.js').then(
      (m) => m.openStore(config),
      async () => (await built('db/client.js')).openDatabase(config.dataDir),
    );
    const run = (q) => (typeof q.run === 'function' ? q.run() : q);
    const senders = [];
    for (let i = 0; i < env.ACCOUNTS; i++) {
      const account = await createTopLevelAccount({ db: store.db, clock: systemClock, config }, { name: 'Bench ' + i, credits: 100000000 });
      const { key } = await insertKey({ db: store.db, clock: systemClock }, { accountId: account.id, name: 'bench', scopes: SCOPES });
      const domain = 'bench' + i + '.example';
      const created = await fetch(env.BASE + '/domains', { method: 'POST', headers: { authorization: 'Bearer ' + key }, body: JSON.stringify({ name: domain }) });
      const { id } = await created.json();
      await run(store.db.update(domains).set({ recordStatus: { ownership: 'published', spf: 'published', receiving: 'published', signing: 'published' } }).where(eq(domains.id, id)));
      for (const body of env.TEMPLATES) {
        const made = await fetch(env.BASE + '/templates', { method: 'POST', headers: { authorization: 'Bearer ' + key }, body: JSON.stringify(body) });
        if (made.status !== 201) throw new Error('POST /templates answered ' + made.status + ': ' + (await made.text()));
      }
      senders.push({ key, domain });
    }
    await store.close();
    process.stdout.write(JSON.stringify(senders));`;
  const setup = { ...env, ACCOUNTS: accounts, BASE: base, TEMPLATES: [OWN_LAYOUT, OWN_RECEIPT] };
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: root,
    env: { ...process.env, ...env, BENCH_SETUP: JSON.stringify(setup) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new Error(`making the senders with ${root} failed (exit ${code})`);
  return JSON.parse(out) as { key: string; domain: string }[];
}

/** The service of the build at `root` (this one's by default) on `env`'s state, with its senders made and warmed up. */
async function startService(env: Record<string, string>, root = ROOT): Promise<BenchService> {
  const service = await spawnListening(join(root, 'dist/server/app/main.js'), env, [
    ...serviceNodeFlags(),
    ...(process.env.BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? []),
  ]);
  const base = `http://127.0.0.1:${service.port}/api/v1`;
  // Sandbox sends are limited to 1000 a day per account: spread them over many accounts, each with its own domain.
  const senders = await makeSenders(root, env, base, ACCOUNTS);

  let n = 0;
  const headers = { 'content-type': 'application/json' };
  let current = senders[0]!;
  const vary = () => {
    current = senders[n % senders.length]!;
    return { authorization: `Bearer ${current.key}` };
  };
  const send =
    (sandbox: boolean, template = 'receipt') =>
    () =>
      JSON.stringify({
        from: `Bench Billing <billing@${current.domain}>`,
        to: `customer${n++}@example.net`,
        template: { name: template, receiptNumber: `R-${n}`, paidOn: '2026-11-21', paymentMethod: 'Visa 4242', total: '$42.00' },
        sandbox,
      });

  // Warm up the JIT and the connection pool; and compile every account's own template once, as a service does at its
  // first send of a version (about 10 ms each, CSS inlined): the phases measure sends, not those compiles.
  await runLoad({ url: `${base}/emails`, method: 'POST', headers, vary, body: send(true), concurrency, seconds: 1 });
  await runLoad({ url: `${base}/emails`, method: 'POST', headers, vary, body: send(true, OWN_RECEIPT.name), concurrency, seconds: 2 });
  /** The service's CPU seconds and the machine's busy seconds (both cores) over a load, beside its figure. */
  const load = async (sandboxed: boolean, seconds: number, template?: string): Promise<Measured> => {
    const cpu = cpuSeconds(service.child.pid!);
    const machine = machineCpu().busy;
    const result = await runLoad({ url: `${base}/emails`, method: 'POST', headers, vary, body: send(sandboxed, template), concurrency, seconds });
    return { result, cpu: cpuSeconds(service.child.pid!) - cpu, machine: machineCpu().busy - machine };
  };
  /**
   * The own template against the built-in receipt: ROUNDS alternating slices of each (in ABBA order), summed, so a
   * change in the VM's speed during the run falls on both (sequential phases of 8 s measured the built-in at 1,480 and 1,840 requests/s
   * a minute apart).
   */
  const compareTemplates = async (name: string, sandboxed: boolean) => {
    if (only !== undefined && only !== name) return null;
    const [builtIn, own] = await alternate(['receipt', OWN_RECEIPT.name], (template, secs) => load(sandboxed, secs, template));
    console.log(`POST /emails (${name}), ${ROUNDS} alternating slices of ${seconds / 4} s:`);
    console.log(
      `  built-in receipt              ${builtIn!.result.rps.toFixed(0).padStart(5)} req/s  ${cpuNote(builtIn!, builtIn!.result.requests, builtIn!.result.seconds)}`,
    );
    console.log(`  own template with a layout    ${own!.result.rps.toFixed(0).padStart(5)} req/s  ${cpuNote(own!, own!.result.requests, own!.result.seconds)}`);
    return own!.result.rps / builtIn!.result.rps;
  };
  return { load, compareTemplates, shape: { headers, vary, send }, stop: () => stop(service.child) };
}

/**
 * Eight slices of a quarter of SECONDS each for every contender: twice a phase's time each, so one slow moment of the
 * VM weighs less on a ratio (four slices measured 0.84 to 1.05 for the same code).
 */
const ROUNDS = 8;

/**
 * ROUNDS slices of each contender in turn, in ABBA order (whichever runs second in a round meets more of what the first
 * left behind, so they take turns), after each the `between` wait; each contender's slices summed into one figure.
 */
async function alternate<T>(contenders: readonly T[], slice: (c: T, seconds: number) => Promise<Measured>, between?: () => Promise<void>): Promise<Measured[]> {
  const sums = contenders.map(() => ({
    requests: 0,
    errors: 0,
    seconds: 0,
    cpu: 0,
    machine: 0,
    statuses: {} as Record<number, number>,
    p50: [] as number[],
    p99: [] as number[],
  }));
  for (let round = 0; round < ROUNDS; round++) {
    const order = contenders.map((_, i) => i);
    if (round % 2 === 1) order.reverse();
    for (const i of order) {
      const m = await slice(contenders[i]!, seconds / 4);
      const sum = sums[i]!;
      sum.requests += m.result.requests;
      sum.errors += m.result.errors;
      sum.seconds += m.result.seconds;
      sum.cpu += m.cpu;
      sum.machine += m.machine;
      sum.p50.push(m.result.p50ms);
      sum.p99.push(m.result.p99ms);
      for (const [status, n] of Object.entries(m.result.statuses)) sum.statuses[Number(status)] = (sum.statuses[Number(status)] ?? 0) + n;
      await between?.();
    }
  }
  const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
  return sums.map((sum) => ({
    // The slices' latency percentiles are not summable: their medians stand in.
    result: {
      requests: sum.requests,
      errors: sum.errors,
      seconds: sum.seconds,
      rps: sum.requests / sum.seconds,
      p50ms: median(sum.p50),
      p99ms: median(sum.p99),
      statuses: sum.statuses,
    },
    cpu: sum.cpu,
    machine: sum.machine,
  }));
}

async function main(): Promise<void> {
  if (process.env.BENCH_BASELINE && (givenStateUrl !== undefined || benchPostgresMode()))
    throw new Error('BENCH_BASELINE compares two builds on SQLite: leave STATE_URL and BENCH_POSTGRES unset');
  // Queued sends are delivered while the benchmark runs, as in production: to a local sink, through a local DNS.
  const dns = await TestDnsServer.start();
  const sink = await SmtpSink.start();
  sink.keepRaw = false;
  dns.add('example.net', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
  dns.add('mx.example.net', { type: 'A', address: '127.0.0.1' });
  Object.assign(env, { DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port), ALLOW_PRIVATE_TARGETS: 'true' });

  console.log(`POST /emails, ${concurrency} keep-alive clients, ${seconds} s each (Node ${process.version})`);
  const onSqlite = await startService(env);
  // The same phases with the state on Postgres, when one is given (or started here): both services run side by side
  // and take turns (alternate), so a change in the VM's speed falls on both engines' figures, not on their ratio
  // (run one after the other, a minute apart, the ratio measured 0.34 to 0.81 for the same build).
  let postgres: TestPostgres | null = null;
  let onPostgres: BenchService | null = null;
  const embedded = benchPostgresMode();
  const stateUrl = givenStateUrl ?? (embedded ? await embeddedState(embedded) : undefined);
  if (stateUrl !== undefined) {
    console.log(`state on Postgres: ${stateUrl.replace(/:[^:@/]*@/, ':***@')}`);
    onPostgres = await startService({
      ...env,
      DATA_DIR: pgDataDir,
      STATE_URL: stateUrl,
      SECRET_KEY: process.env.SECRET_KEY ?? 'ab'.repeat(32),
      NODE_EXTRA_CA_CERTS: PG_TEST_CA_FILE,
    });
  }
  async function embeddedState(mode: 'tls' | 'plain'): Promise<string> {
    postgres = await startPostgres({ certificate: 'trusted' });
    await postgres.admin('create database bench_state');
    return stateUrlOf(postgres, 'bench_state', mode);
  }
  // Or, with BENCH_BASELINE (another checkout of Mailstead, built), that build on SQLite beside this one: whether this
  // build's SQLite figures regressed against it, measured in the same turns.
  const baselineRoot = process.env.BENCH_BASELINE;
  const baselineDataDir = baselineRoot ? mkdtempSync(join(tmpdir(), 'mailstead-bench-base-')) : null;
  const onBaseline = baselineRoot && baselineDataDir ? await startService({ ...env, DATA_DIR: baselineDataDir }, baselineRoot) : null;
  if (baselineRoot) console.log(`baseline: the build in ${baselineRoot}, on SQLite`);
  const second = onPostgres ?? onBaseline;
  const engines = second ? [onSqlite, second] : [onSqlite];
  const engineName = (i: number) => (i === 0 ? (onBaseline ? 'this build' : 'SQLite') : onBaseline ? 'baseline' : 'Postgres');

  // Each queued slice starts on an empty queue: what one engine queued is delivered before the other's slice, so
  // neither's delivery runs in the other's time (the delivery of its own sends does, as in production).
  let queuedAccepted = 0;
  const deliveredAll = async () => {
    let seen = sink.received.length;
    let since = performance.now();
    while (sink.received.length < queuedAccepted) {
      await new Promise((r) => setTimeout(r, 50));
      if (sink.received.length !== seen) [seen, since] = [sink.received.length, performance.now()];
      else if (performance.now() - since > 10_000) throw new Error(`delivery stalled: ${seen} of ${queuedAccepted} queued sends delivered`);
    }
  };
  const phase = async (name: string, sandboxed: boolean): Promise<(LoadResult | null)[]> => {
    if (only !== undefined && only !== name) return engines.map(() => null);
    const slices = await alternate(
      engines,
      async (engine, secs) => {
        const m = await engine.load(sandboxed, secs);
        if (!sandboxed) queuedAccepted += m.result.statuses[200] ?? 0;
        return m;
      },
      sandboxed ? undefined : deliveredAll,
    );
    console.log(`POST /emails (${name}), ${ROUNDS} alternating slices of ${seconds / 4} s${engines.length > 1 ? ' on each engine' : ''}:`);
    for (const [i, m] of slices.entries())
      console.log(`  ${formatLoad(engines.length > 1 ? engineName(i) : 'the service', m.result)}  ${cpuNote(m, m.result.requests, m.result.seconds)}`);
    return slices.map((m) => m.result);
  };
  const [sandbox, sandboxOfSecond] = await phase('sandbox', true);
  const [queued, queuedOfSecond] = await phase('queued', false);
  // The own template's ratio is about rendering, not the state: measured on SQLite alone.
  await second?.stop();
  const ownSandbox = await onSqlite.compareTemplates('sandbox', true);
  const ownQueued = await onSqlite.compareTemplates('queued', false);
  await onSqlite.stop();
  const { headers, vary, send } = onSqlite.shape;

  const bare = await spawnListening(join(here, 'bare-hono.js'), {});
  const bareUrl = `http://127.0.0.1:${bare.port}/bare`;
  await runLoad({ url: bareUrl, method: 'POST', headers: { 'content-type': 'application/json' }, body: send(true), concurrency, seconds: 1 });
  const baseline = await runLoad({ url: bareUrl, method: 'POST', headers: { 'content-type': 'application/json' }, body: send(true), concurrency, seconds });
  console.log(formatLoad('bare Hono JSON route', baseline));
  await stop(bare.child);

  // The floor under a send: the bare route writing the body as one durable row (group commit, WAL fdatasync).
  const floor = await spawnListening(join(here, 'bare-hono.js'), { BARE_DURABLE: '1' });
  const floorUrl = `http://127.0.0.1:${floor.port}/bare`;
  await runLoad({ url: floorUrl, method: 'POST', headers: { 'content-type': 'application/json' }, body: send(true), concurrency, seconds: 1 });
  const durableFloor = await runLoad({
    url: floorUrl,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: send(true),
    concurrency,
    seconds,
  });
  console.log(formatLoad('bare route + one durable row', durableFloor));
  await stop(floor.child);

  // The floors under a send: its checks served from memory, its body validated and rendered, its rows durable in the
  // service's indexed tables, or as one row of a table with no index.
  const memorySend = async (sandboxed: boolean, log: 'emails' | 'plain') => {
    const floor = await spawnListening(join(here, 'send-floor.js'), { BENCH_DATA_DIR: dataDir, SEND_FLOOR_LOG: log });
    const url = `http://127.0.0.1:${floor.port}/emails`;
    await runLoad({ url, method: 'POST', headers, vary, body: send(sandboxed), concurrency, seconds: 1 });
    const result = await runLoad({ url, method: 'POST', headers, vary, body: send(sandboxed), concurrency, seconds });
    console.log(formatLoad(`${sandboxed ? 'sandbox' : 'queued'} send from memory, ${log === 'emails' ? 'indexed rows' : 'one unindexed row'}`, result));
    await stop(floor.child);
    return result;
  };
  const floors = {
    sandbox: only === 'queued' ? null : { indexed: await memorySend(true, 'emails'), plain: await memorySend(true, 'plain') },
    queued: only === 'sandbox' ? null : { indexed: await memorySend(false, 'emails'), plain: await memorySend(false, 'plain') },
  };

  const ratio = (r: typeof baseline | null | undefined) => (r ? (r.rps / baseline.rps).toFixed(2) : '-');
  console.log(`ratio to bare Hono: sandbox ${ratio(sandbox)}, queued ${ratio(queued)}`);
  console.log(
    `  the floors (send-floor.ts): one durable row ${ratio(durableFloor)}; served from memory, with the service's indexed rows or one unindexed row:`,
  );
  console.log(
    `  sandbox ${ratio(floors.sandbox?.indexed)} or ${ratio(floors.sandbox?.plain)}, queued ${ratio(floors.queued?.indexed)} or ${ratio(floors.queued?.plain)}`,
  );
  const own = (ratio: number | null) => (ratio === null ? '-' : ratio.toFixed(2));
  console.log(
    `own template with a layout, to the built-in receipt in the same run (target at least 0.90): sandbox ${own(ownSandbox)}, queued ${own(ownQueued)}`,
  );
  if (onBaseline) {
    const toBaseline = (mine: LoadResult | null | undefined, theirs: LoadResult | null | undefined) =>
      mine && theirs ? (mine.rps / theirs.rps).toFixed(2) : '-';
    console.log(`this build to the baseline in the same slices: sandbox ${toBaseline(sandbox, sandboxOfSecond)}, queued ${toBaseline(queued, queuedOfSecond)}`);
  }
  if (onPostgres) {
    const toSqlite = (pgRun: LoadResult | null | undefined, sqliteRun: LoadResult | null | undefined) =>
      pgRun && sqliteRun ? (pgRun.rps / sqliteRun.rps).toFixed(2) : '-';
    console.log(
      `state on Postgres, to SQLite in the same slices: sandbox ${toSqlite(sandboxOfSecond, sandbox)}, queued ${toSqlite(queuedOfSecond, queued)} (target for queued: at least 0.50)`,
    );
  }
  console.log(`(the delivery engine delivered ${sink.received.length} of the queued messages to the local sink meanwhile)`);
  await (postgres as TestPostgres | null)?.stop();
  await sink.stop();
  await dns.stop();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(pgDataDir, { recursive: true, force: true });
  if (baselineDataDir) rmSync(baselineDataDir, { recursive: true, force: true });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

import { createInterface } from 'node:readline';
import pg from 'pg';
import { PG_TEST_CA_FILE, startPostgres } from '../lib/postgres.js';
import { type BenchRig, startBenchRig } from './rig.js';
import { findPostfixTool, startNodeSink, startPostfixSink, waitForPort } from './postfix.js';
import { freePort } from '../lib/free-port.js';
import { type LoadResult, MESSAGE_BYTES, RECEIVING_DOMAIN, SENDER_DOMAIN, runLoad } from './smtp-load.js';
import { cpuSeconds, machineCpu, peakRssMb, percentile, threadCpu } from '../lib/proc.js';

/**
 * Inbound SMTP: concurrent SMTP sessions for a fixed time, ~5 KB messages for a customer's receiving
 * domain, each made durable before its 250 and written into a local Postgres (TLS, verified) by the customer-database
 * writer. Prints accepted messages/s, p50/p99 transaction latency (MAIL FROM sent to the 250 after the dot), refusals
 * by code, the service's peak RSS, the rows in service.inbound beside the accepted count and the writer's drain time;
 * then the same load for the same time against an SMTP sink that throws mail away, and the ratio.
 * The load comes from Postfix's smtp-source where installed, else from a Node generator in a worker thread (one raw
 * socket per session, no pipelining, EHLO once per session); the sink is Postfix's smtp-sink, else scripts/lib's.
 * Run: npm run bench:inbound   (env BENCH_SESSIONS, default 16 (all from 127.0.0.1: the server takes 20 connections
 * from one address); BENCH_SECONDS, default 10; BENCH_GENERATOR=node and BENCH_BASELINE=node skip Postfix's tools)
 */

const pct = percentile;
const counts = (c: Record<string, number>) =>
  Object.entries(c)
    .map(([k, v]) => `${k}: ${v}`)
    .join(', ') || 'none';

type Load = (port: number, domain: string) => Promise<LoadResult>;

/** The service with inbound SMTP on and a customer database, under `load`, then drained and counted. */
async function measureMailstead(load: Load) {
  const postgres = await startPostgres({ certificate: 'trusted' });
  let rig: BenchRig | undefined;
  try {
    const smtpPort = await freePort();
    rig = await startBenchRig({ NODE_EXTRA_CA_CERTS: PG_TEST_CA_FILE, SMTP_HOST: '127.0.0.1', SMTP_PORT: String(smtpPort) });
    // What the service says about the mail it takes: every received, refused or aborted message, every warning (by
    // event and message, with their times, to tell those of the generator's stop from the rest).
    const logged = { received: 0, refused: {} as Record<string, number>, aborted: 0, problems: new Map<string, number[]>() };
    createInterface({ input: rig.service.stdout! }).on('line', (line) => {
      try {
        const entry = JSON.parse(line) as { event?: string; level?: string; code?: number; time?: string; message?: string };
        if (entry.event === 'inbound.received') logged.received++;
        else if (entry.event === 'inbound.refused') logged.refused[String(entry.code)] = (logged.refused[String(entry.code)] ?? 0) + 1;
        else if (entry.event === 'inbound.aborted') logged.aborted++;
        if (entry.level === 'warn' || entry.level === 'error') {
          const key = `${entry.level} ${entry.event}${entry.message ? ` (${entry.message.slice(0, 200)})` : ''}`;
          logged.problems.set(key, [...(logged.problems.get(key) ?? []), Date.parse(entry.time ?? '') || 0]);
        }
      } catch {
        // not a log line
      }
    });
    // The rig resolves on http.listening; SMTP listens right after.
    await waitForPort(smtpPort);

    rig.dns.add('db.pg.test', { type: 'A', address: '127.0.0.1' });
    // The sender's SPF and DMARC records, so the writer's verdicts come from real lookups.
    rig.dns.add(SENDER_DOMAIN, { type: 'TXT', data: 'v=spf1 ip4:127.0.0.1 -all' });
    rig.dns.add(`_dmarc.${SENDER_DOMAIN}`, { type: 'TXT', data: 'v=DMARC1; p=none' });
    const { headers } = await rig.newSender('Bench', RECEIVING_DOMAIN);
    const connected = await fetch(`${rig.base}/database`, { method: 'POST', headers, body: JSON.stringify({ url: postgres.url('db.pg.test') }) });
    if (connected.status !== 200) throw new Error(`POST /database answered ${connected.status}: ${await connected.text()}`);

    const reader = new pg.Client({
      host: '127.0.0.1',
      port: postgres.port,
      user: postgres.user,
      password: postgres.password,
      database: postgres.database,
      ssl: { rejectUnauthorized: false },
    });
    await reader.connect();
    const countRows = async () => Number((await reader.query<{ n: string }>('select count(*) as n from service.inbound')).rows[0]!.n);
    const cpuAtStart = cpuSeconds(rig.pid);
    const threadsAtStart = threadCpu(rig.pid);
    const machineAtStart = machineCpu();
    const result = await load(smtpPort, RECEIVING_DOMAIN);
    const cpuOfLoad = cpuSeconds(rig.pid) - cpuAtStart;
    const split = cpuSplit(rig.pid, threadsAtStart, machineAtStart);
    // The writer deletes a batch's outbox rows (up to 500) once all are written, so `pending` lags the rows.
    const rowsAtLoadEnd = await countRows();
    const drainStarted = performance.now();
    let status: { pending: number; lastError: string | null } = { pending: -1, lastError: null };
    let backlog = -1;
    while (performance.now() - drainStarted < 600_000) {
      status = (await (await fetch(`${rig.base}/database`, { headers })).json()) as typeof status;
      if (backlog < 0) backlog = status.pending;
      if (status.pending === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const drainSeconds = (performance.now() - drainStarted) / 1000;
    const rss = peakRssMb(rig.pid);
    const cpuOfAll = cpuSeconds(rig.pid) - cpuAtStart;

    try {
      const rows = await countRows();
      const verdicts = (
        await reader.query<{ v: string; n: string }>(
          "select concat_ws('/', spf, dkim, dmarc) as v, count(*) as n from service.inbound group by 1 order by 2 desc",
        )
      ).rows;
      return { result, logged, drainSeconds, backlog, rowsAtLoadEnd, status, rss, rows, verdicts, cpuOfLoad, cpuOfAll, split };
    } finally {
      await reader.end();
    }
  } finally {
    await rig?.close();
    await postgres.stop();
  }
}

/**
 * The service's CPU during the load by thread: its event loop (the thread whose id is the process's), the parse
 * threads (those running below the process's priority, server/customer-db/inbound/parse-worker.ts), and the rest (the checkpoint
 * thread, libuv's pool with the fsyncs, V8's collector); and the whole machine's busy and idle time.
 */
function cpuSplit(pid: number, before: ReturnType<typeof threadCpu>, machineBefore: ReturnType<typeof machineCpu>) {
  const after = threadCpu(pid);
  const machine = machineCpu();
  let eventLoop = 0;
  let parse = 0;
  let other = 0;
  for (const [tid, t] of after) {
    const used = t.seconds - (before.get(tid)?.seconds ?? 0);
    if (tid === pid) eventLoop += used;
    else if (t.nice > 0) parse += used;
    else other += used;
  }
  return { eventLoop, parse, other, machineBusy: machine.busy - machineBefore.busy, machineIdle: machine.idle - machineBefore.idle };
}

async function main(): Promise<void> {
  const sessions = Number(process.env.BENCH_SESSIONS ?? 16);
  const seconds = Number(process.env.BENCH_SECONDS ?? 10);
  const sourcePath = process.env.BENCH_GENERATOR === 'node' ? null : findPostfixTool('smtp-source');
  const sinkPath = process.env.BENCH_BASELINE === 'node' ? null : findPostfixTool('smtp-sink');
  const from = `orders@${SENDER_DOMAIN}`;
  const load: Load = (port, domain) => {
    const spec = { port, sessions, seconds, from, domain };
    return runLoad(sourcePath, spec);
  };

  const { result, logged, drainSeconds, backlog, rowsAtLoadEnd, status, rss, rows, verdicts, cpuOfLoad, cpuOfAll, split } = await measureMailstead(load);

  const baselineSink = sinkPath ? await startPostfixSink(sinkPath) : await startNodeSink();
  const baseline = await load(baselineSink.port, RECEIVING_DOMAIN).finally(() => baselineSink.stop());

  const rate = result.accepted / result.seconds;
  const baseRate = baseline.accepted / baseline.seconds;
  const sorted = [...result.latencies].sort((a, b) => a - b);
  const generator = sourcePath ? `smtp-source (${sourcePath})` : 'Node generator (worker thread, raw sockets)';
  const sinkName = baselineSink.name;
  const durable = rows === logged.received && rows >= result.accepted;
  console.log(
    `${sessions} SMTP sessions for ${seconds} s, ~${MESSAGE_BYTES / 1024} KB messages, no pipelining, Postgres and sink on loopback (Node ${process.version})`,
  );
  console.log(`  load generator           ${generator}`);
  console.log(`  Mailstead accepted       ${result.accepted} messages in ${result.seconds.toFixed(2)} s = ${rate.toFixed(0)} messages/s`);
  if (sorted.length > 0)
    console.log(
      `  transaction latency      p50 ${pct(sorted, 50).toFixed(1)} ms, p99 ${pct(sorted, 99).toFixed(1)} ms (MAIL FROM sent to the 250 after the dot)`,
    );
  else
    console.log(
      `  transaction latency      not timed by smtp-source (BENCH_GENERATOR=node times it); mean from sessions x time / accepted ${((sessions * result.seconds * 1000) / Math.max(1, result.accepted)).toFixed(1)} ms`,
    );
  console.log(
    `  refused or failed        ${counts(result.failures)} (service log: received ${logged.received}, refused ${counts(logged.refused)}, aborted ${logged.aborted})`,
  );
  console.log(`  peak RSS of the service  ${rss.toFixed(0)} MB (load and drain)`);
  console.log(
    `  service CPU              ${cpuOfLoad.toFixed(1)} s during the load, ${cpuOfAll.toFixed(1)} s with the drain: ${((cpuOfAll * 1000) / Math.max(1, rows)).toFixed(2)} s per 1,000 messages received and written`,
  );
  const core = (seconds: number) => (seconds / result.seconds).toFixed(2);
  console.log(
    `  where the CPU went       during the load, in cores: the event loop ${core(split.eventLoop)}, the parse threads ${core(split.parse)}, the service's other threads ${core(split.other)}; the whole machine ${core(split.machineBusy)} busy, ${core(split.machineIdle)} idle (load generator and Postgres included)`,
  );
  console.log(
    `  rows in service.inbound  ${rows}, accepted ${result.accepted}, logged received ${logged.received}: ${durable ? 'every accepted message written' : 'MISMATCH'}`,
  );
  console.log(
    `  writer drain time        ${drainSeconds.toFixed(2)} s after the load ended, until GET /database said pending 0 (${status.pending}${status.lastError ? `, last error ${status.lastError}` : ''})`,
  );
  console.log(
    `  writer                   ${rowsAtLoadEnd} rows written during the load (${backlog} outbox writes pending), ${rows - rowsAtLoadEnd} after it: ${((rows - rowsAtLoadEnd) / drainSeconds).toFixed(0)} rows/s alone, ${(rows / (result.seconds + drainSeconds)).toFixed(0)} rows/s overall`,
  );
  console.log(`  verdicts spf/dkim/dmarc  ${verdicts.map((v) => `${v.v} ${v.n}`).join(', ')}`);
  console.log(`  baseline                 ${sinkName}`);
  console.log(
    `  baseline accepted        ${baseline.accepted} messages in ${baseline.seconds.toFixed(2)} s = ${baseRate.toFixed(0)} messages/s (refused or failed: ${counts(baseline.failures)})`,
  );
  console.log(`  ratio Mailstead/baseline ${(rate / baseRate).toFixed(2)} (target 0.30)`);
  for (const [key, times] of logged.problems) {
    const atStop = times.filter((t) => t >= result.stoppedAt).length;
    console.log(`  service log              ${key}: ${times.length - atStop} during the load, ${atStop} once the generator stopped`);
  }
  if (!durable) process.exitCode = 1;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

import { spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { createInterface } from 'node:readline';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import pg from 'pg';
import { PG_TEST_CA_FILE, startPostgres } from '../lib/postgres.js';
import { type BenchRig, startBenchRig } from './rig.js';
import { findPostfixTool, startNodeSink, startPostfixSink, waitForPort } from './postfix.js';
import { freePort } from '../lib/free-port.js';
import { cpuSeconds, machineCpu, peakRssMb, percentile, threadCpu } from '../lib/proc.js';

/**
 * Inbound SMTP (issue 12): concurrent SMTP sessions for a fixed time, ~5 KB messages for a customer's receiving
 * domain, each made durable before its 250 and written into a local Postgres (TLS, verified) by the customer-database
 * writer. Prints accepted messages/s, p50/p99 transaction latency (MAIL FROM sent to the 250 after the dot), refusals
 * by code, the service's peak RSS, the rows in service.inbound beside the accepted count and the writer's drain time;
 * then the same load for the same time against an SMTP sink that throws mail away, and the ratio.
 * The load comes from Postfix's smtp-source where installed, else from a Node generator in a worker thread (one raw
 * socket per session, no pipelining, EHLO once per session); the sink is Postfix's smtp-sink, else scripts/lib's.
 * Run: npm run bench:inbound   (env BENCH_SESSIONS, default 16 (all from 127.0.0.1: the server takes 20 connections
 * from one address); BENCH_SECONDS, default 10; BENCH_GENERATOR=node and BENCH_BASELINE=node skip Postfix's tools)
 */

interface LoadSpec {
  port: number;
  sessions: number;
  seconds: number;
  from: string;
  domain: string;
}

interface LoadResult {
  accepted: number;
  /** Start of the load to the last transaction's end. */
  seconds: number;
  /** Per accepted transaction, ms; empty when the generator does not time them. */
  latencies: number[];
  /** Refusals and failures by step and reply code (`DATA 451`, `MAIL closed`). */
  failures: Record<string, number>;
  /** Wall-clock time the generator stopped (smtp-source is killed: its open sessions reset). */
  stoppedAt: number;
}

const SENDER_DOMAIN = 'sender.example';
const RECEIVING_DOMAIN = 'receiving.example';
const CLIENT_NAME = 'client.sender.example';
const MESSAGE_BYTES = 5 * 1024;

/** A plain-text notification of MESSAGE_BYTES, CRLF line ends, lines under 78 characters, dot-stuffed. */
function message(from: string, to: string, n: number): string {
  const head = [
    `From: Sender Example <${from}>`,
    `To: <${to}>`,
    `Subject: Your order ${100000 + n} has shipped`,
    `Date: ${new Date().toUTCString().replace('GMT', '+0000')}`,
    `Message-ID: <bench.${process.pid}.${n}.${Date.now()}@${SENDER_DOMAIN}>`,
    'MIME-Version: 1.0',
    'Content-Type: text/plain; charset=utf-8',
    'Content-Transfer-Encoding: 7bit',
    '',
    'Hello,',
    '',
  ].join('\r\n');
  const words = ('Your order has shipped and is on its way. You can follow the parcel from your account page at any time, ' +
    'and the carrier will text you on the day it arrives. If anything is missing or damaged, reply to this message and ' +
    'we will sort it out. Thank you for shopping with us. ').split(' ').filter(Boolean);
  const lines: string[] = [];
  let line = '';
  for (let w = 0, size = head.length + 2; size < MESSAGE_BYTES - 80; w++) {
    const word = words[w % words.length]!;
    if (line.length + word.length + 1 > 72) {
      lines.push(line);
      size += line.length + 2;
      line = '';
    }
    line = line ? `${line} ${word}` : word;
  }
  lines.push(line, '', '-- ', 'Sender Example, 1 Example Street');
  return `${head}\r\n${lines.map((l) => (l.startsWith('.') ? `.${l}` : l)).join('\r\n')}\r\n`;
}

/** One SMTP connection: commands written, replies read whole (multi-line replies joined); `closed` once it ends. */
class SmtpConnection {
  closed = false;
  private buffer = '';
  private lines: string[] = [];
  private waiting: ((reply: { code: number; text: string }) => void) | null = null;
  private replies: { code: number; text: string }[] = [];

  constructor(private socket: Socket) {
    socket.setEncoding('latin1');
    socket.setNoDelay(true);
    socket.on('data', (chunk: string) => this.read(chunk));
    const end = () => {
      this.closed = true;
      this.deliver({ code: 0, text: 'closed' });
    };
    socket.on('close', end);
    socket.on('error', end);
  }

  static open(port: number): Promise<SmtpConnection> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => {
        socket.off('error', reject);
        resolve(new SmtpConnection(socket));
      });
      socket.once('error', reject);
    });
  }

  private read(chunk: string): void {
    this.buffer += chunk;
    for (let at = this.buffer.indexOf('\r\n'); at >= 0; at = this.buffer.indexOf('\r\n')) {
      const line = this.buffer.slice(0, at);
      this.buffer = this.buffer.slice(at + 2);
      this.lines.push(line);
      if (line[3] !== '-') {
        this.deliver({ code: Number(line.slice(0, 3)) || 0, text: this.lines.join('\n') });
        this.lines = [];
      }
    }
  }

  private deliver(reply: { code: number; text: string }): void {
    const waiting = this.waiting;
    this.waiting = null;
    if (waiting) waiting(reply);
    else if (reply.code !== 0) this.replies.push(reply);
  }

  reply(): Promise<{ code: number; text: string }> {
    const next = this.replies.shift();
    if (next) return Promise.resolve(next);
    if (this.closed) return Promise.resolve({ code: 0, text: 'closed' });
    return new Promise((resolve) => (this.waiting = resolve));
  }

  async command(line: string): Promise<number> {
    if (this.closed) return 0;
    this.socket.write(line);
    return (await this.reply()).code;
  }

  end(): void {
    this.socket.end();
  }
}

/** The Node generator (in a worker thread, so it never shares an event loop with an in-process sink). */
async function generateLoad(spec: LoadSpec): Promise<LoadResult> {
  const latencies: number[] = [];
  const failures: Record<string, number> = {};
  const fail = (key: string) => (failures[key] = (failures[key] ?? 0) + 1);
  let accepted = 0;
  let n = 0;
  const started = performance.now();
  const until = started + spec.seconds * 1000;

  const session = async () => {
    while (performance.now() < until) {
      let conn: SmtpConnection;
      try {
        conn = await SmtpConnection.open(spec.port);
      } catch (err) {
        fail(`connect ${(err as NodeJS.ErrnoException).code ?? 'error'}`);
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      const banner = (await conn.reply()).code;
      const ehlo = banner === 220 ? await conn.command(`EHLO ${CLIENT_NAME}\r\n`) : banner;
      if (ehlo !== 250) {
        fail(`${banner === 220 ? 'EHLO' : 'banner'} ${ehlo || 'closed'}`);
        conn.end();
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      while (performance.now() < until && !conn.closed) {
        const i = n++;
        const to = `user${i}@${spec.domain}`;
        const t0 = performance.now();
        const steps: [string, string, number][] = [
          ['MAIL', `MAIL FROM:<${spec.from}>\r\n`, 250],
          ['RCPT', `RCPT TO:<${to}>\r\n`, 250],
          ['DATA', 'DATA\r\n', 354],
          ['dot', `${message(spec.from, to, i)}.\r\n`, 250],
        ];
        let ok = true;
        for (const [step, line, expected] of steps) {
          const code = await conn.command(line);
          if (code === expected) continue;
          fail(`${step} ${code || 'closed'}`);
          ok = false;
          if (code !== 0 && code !== 421 && step !== 'dot') await conn.command('RSET\r\n');
          break;
        }
        if (ok) {
          accepted++;
          latencies.push(performance.now() - t0);
        }
      }
      if (!conn.closed) await conn.command('QUIT\r\n');
      conn.end();
    }
  };
  await Promise.all(Array.from({ length: spec.sessions }, session));
  return { accepted, seconds: (performance.now() - started) / 1000, latencies, failures, stoppedAt: Date.now() };
}

function runNodeGenerator(spec: LoadSpec): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), { workerData: spec });
    worker.once('message', (result: LoadResult) => resolve(result));
    worker.once('error', reject);
    worker.once('exit', (code) => code !== 0 && reject(new Error(`load worker exited with ${code}`)));
  });
}

/**
 * smtp-source for `seconds`, then SIGTERM: -d keeps each session's connection (like the Node generator), -A goes on
 * after a refusal (each one a warning on stderr), -c counts every answered dot on stdout. It does not time
 * transactions.
 */
async function runSmtpSource(path: string, spec: LoadSpec): Promise<LoadResult> {
  const args = ['-A', '-c', '-d', '-N', '-l', String(MESSAGE_BYTES), '-m', '100000000', '-s', String(spec.sessions), '-M', CLIENT_NAME, '-S', 'Your order has shipped'];
  const child = spawn(path, [...args, '-f', spec.from, '-t', `user@${spec.domain}`, `127.0.0.1:${spec.port}`], { stdio: ['ignore', 'pipe', 'pipe'] });
  let answered = 0;
  let tail = '';
  child.stdout.setEncoding('latin1').on('data', (chunk: string) => {
    const parts = (tail + chunk).split(/[\r\n]+/);
    tail = parts.pop() ?? '';
    for (const p of parts) if (/^\d+$/.test(p)) answered = Number(p);
  });
  const failures: Record<string, number> = {};
  let dataRefused = 0;
  createInterface({ input: child.stderr }).on('line', (line) => {
    const m = /(?:warning|fatal): (.*?) rejected: (\d{3})/.exec(line) ?? /(?:warning|fatal): (.*)/.exec(line);
    if (!m) return;
    const key = m[2] ? `${m[1]} ${m[2]}` : m[1]!;
    failures[key] = (failures[key] ?? 0) + 1;
    if (m[1] === 'end of data' && m[2]) dataRefused++;
  });
  const started = performance.now();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await Promise.race([exited, new Promise((r) => setTimeout(r, spec.seconds * 1000))]);
  const seconds = (performance.now() - started) / 1000;
  const stoppedAt = Date.now();
  child.kill('SIGTERM');
  await exited;
  return { accepted: answered - dataRefused, seconds, latencies: [], failures, stoppedAt };
}


const pct = percentile;
const counts = (c: Record<string, number>) => Object.entries(c).map(([k, v]) => `${k}: ${v}`).join(', ') || 'none';

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

    const reader = new pg.Client({ host: '127.0.0.1', port: postgres.port, user: postgres.user, password: postgres.password, database: postgres.database, ssl: { rejectUnauthorized: false } });
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
      const verdicts = (await reader.query<{ v: string; n: string }>("select concat_ws('/', spf, dkim, dmarc) as v, count(*) as n from service.inbound group by 1 order by 2 desc")).rows;
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
 * thread (the one running below the process's priority, mta/inbound/parse-worker.ts), and the rest (the checkpoint
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
    return sourcePath ? runSmtpSource(sourcePath, spec) : runNodeGenerator(spec);
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
  console.log(`${sessions} SMTP sessions for ${seconds} s, ~${MESSAGE_BYTES / 1024} KB messages, no pipelining, Postgres and sink on loopback (Node ${process.version})`);
  console.log(`  load generator           ${generator}`);
  console.log(`  Mailstead accepted       ${result.accepted} messages in ${result.seconds.toFixed(2)} s = ${rate.toFixed(0)} messages/s`);
  if (sorted.length > 0) console.log(`  transaction latency      p50 ${pct(sorted, 50).toFixed(1)} ms, p99 ${pct(sorted, 99).toFixed(1)} ms (MAIL FROM sent to the 250 after the dot)`);
  else console.log(`  transaction latency      not timed by smtp-source (BENCH_GENERATOR=node times it); mean from sessions x time / accepted ${((sessions * result.seconds * 1000) / Math.max(1, result.accepted)).toFixed(1)} ms`);
  console.log(`  refused or failed        ${counts(result.failures)} (service log: received ${logged.received}, refused ${counts(logged.refused)}, aborted ${logged.aborted})`);
  console.log(`  peak RSS of the service  ${rss.toFixed(0)} MB (load and drain)`);
  console.log(`  service CPU              ${cpuOfLoad.toFixed(1)} s during the load, ${cpuOfAll.toFixed(1)} s with the drain: ${((cpuOfAll * 1000) / Math.max(1, rows)).toFixed(2)} s per 1,000 messages received and written`);
  const core = (seconds: number) => (seconds / result.seconds).toFixed(2);
  console.log(
    `  where the CPU went       during the load, in cores: the event loop ${core(split.eventLoop)}, the parse thread ${core(split.parse)}, the service's other threads ${core(split.other)}; the whole machine ${core(split.machineBusy)} busy, ${core(split.machineIdle)} idle (load generator and Postgres included)`,
  );
  console.log(`  rows in service.inbound  ${rows}, accepted ${result.accepted}, logged received ${logged.received}: ${durable ? 'every accepted message written' : 'MISMATCH'}`);
  console.log(`  writer drain time        ${drainSeconds.toFixed(2)} s after the load ended, until GET /database said pending 0 (${status.pending}${status.lastError ? `, last error ${status.lastError}` : ''})`);
  console.log(`  writer                   ${rowsAtLoadEnd} rows written during the load (${backlog} outbox writes pending), ${rows - rowsAtLoadEnd} after it: ${((rows - rowsAtLoadEnd) / drainSeconds).toFixed(0)} rows/s alone, ${(rows / (result.seconds + drainSeconds)).toFixed(0)} rows/s overall`);
  console.log(`  verdicts spf/dkim/dmarc  ${verdicts.map((v) => `${v.v} ${v.n}`).join(', ')}`);
  console.log(`  baseline                 ${sinkName}`);
  console.log(`  baseline accepted        ${baseline.accepted} messages in ${baseline.seconds.toFixed(2)} s = ${baseRate.toFixed(0)} messages/s (refused or failed: ${counts(baseline.failures)})`);
  console.log(`  ratio Mailstead/baseline ${(rate / baseRate).toFixed(2)} (target 0.30)`);
  for (const [key, times] of logged.problems) {
    const atStop = times.filter((t) => t >= result.stoppedAt).length;
    console.log(`  service log              ${key}: ${times.length - atStop} during the load, ${atStop} once the generator stopped`);
  }
  if (!durable) process.exitCode = 1;
}

if (isMainThread) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
} else {
  generateLoad(workerData as LoadSpec).then((result) => parentPort!.postMessage(result));
}

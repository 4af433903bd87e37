import { connect, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { cpuSeconds, machineCpu, percentile, threadCpu } from '../lib/proc.js';
import { freePort } from '../lib/free-port.js';
import { runLoad } from './load.js';
import { type BenchRig, benchSendBody, measureDelivery, startBenchRig } from './rig.js';
import { spawnListening, stop } from './spawn.js';
import { fileURLToPath } from 'node:url';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GENERATED_CERT_FILE, GENERATED_KEY_FILE, loadOrCreateSmtpTls } from '../../mta/inbound/tls.js';
import { findPostfixTool, runSmtpSource, startPrivatePostfix } from './postfix.js';
import { PG_TEST_CA_FILE, type TestPostgres, benchPostgresMode, startPostgres, stateUrlOf } from '../lib/postgres.js';

/**
 * SMTP submission (issue 35) against POST /emails, side by side in one run: `CONCURRENCY` authenticated sessions on
 * the STARTTLS port (each: EHLO, STARTTLS, EHLO, AUTH PLAIN with the key once, then MAIL, RCPT, DATA of a ~5 KB
 * message, one transaction after another, no pipelining, as nodemailer's pooled transport does) against as many
 * keep-alive clients queueing ~5 KB sends with `POST /emails`, both to a verified domain whose MX is the rig's sink,
 * delivered meanwhile. ROUNDS alternating slices of each, summed, so a change in the VM's speed falls on both; the
 * queue is drained (every accepted message at the sink) before each slice, so neither inherits the other's
 * deliveries. Accepted messages/s, p99 (MAIL FROM to the 250 after DATA; request to answer), the service's CPU per
 * message and the machine's CPU beside each. Then, unless BENCH_ONLY=rate, end to end (endToEnd below): BENCH_MESSAGES
 * each way, submitted, posted, and through a private Postfix relaying into the same sink (fed by smtp-source, and by
 * the same STARTTLS sessions), for each way's delivered mail/s and its ratio to Postfix.
 * With STATE_URL (an empty Postgres database of its own) or BENCH_POSTGRES=embedded (an embedded Postgres on loopback over
 * verified TLS, started here; `embedded-plain`: over plain TCP), the service keeps its state on Postgres: the same
 * figures and ratios, on that engine.
 * Run: npm run bench:submission   (env BENCH_SECONDS, BENCH_CONCURRENCY, BENCH_MESSAGES, BENCH_ONLY=rate|e2e, BENCH_PEERS,
 * STATE_URL, BENCH_POSTGRES)
 */
const seconds = Number(process.env.BENCH_SECONDS ?? 10);
// The submission server takes at most 20 connections from one address (inbound's cap), and the load comes from one.
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 16);
const total = Number(process.env.BENCH_MESSAGES ?? 4000);
const only = process.env.BENCH_ONLY;
const ROUNDS = 4;
const E2E_ROUNDS = 8;
const TARGET = 0.8;
const SENDER_DOMAIN = 'bench.example';

interface Reply {
  code: number;
  text: string;
}

/** One SMTP client connection: writes commands, reads whole (multi-line) replies in order. */
class SmtpSession {
  private buffer = '';
  private lines: string[] = [];
  private replies: Reply[] = [];
  private waiting: ((r: Reply) => void) | null = null;
  private failed: ((e: Error) => void) | null = null;
  private readonly onData = (chunk: Buffer) => this.take(chunk.toString('latin1'));

  private constructor(private socket: Socket | TLSSocket) {
    this.listen();
  }

  static async open(port: number): Promise<SmtpSession> {
    const socket = connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return new SmtpSession(socket);
  }

  private listen(): void {
    this.socket.on('data', this.onData);
    this.socket.on('error', (e) => this.failed?.(e));
    this.socket.on('close', () => this.failed?.(new Error('connection closed')));
  }

  private take(text: string): void {
    this.buffer += text;
    let at = this.buffer.indexOf('\r\n');
    while (at >= 0) {
      const line = this.buffer.slice(0, at);
      this.buffer = this.buffer.slice(at + 2);
      this.lines.push(line);
      if (line[3] !== '-') {
        const reply = { code: Number(line.slice(0, 3)), text: this.lines.join('\n') };
        this.lines = [];
        const waiter = this.waiting;
        if (waiter) {
          this.waiting = null;
          this.failed = null;
          waiter(reply);
        } else this.replies.push(reply);
      }
      at = this.buffer.indexOf('\r\n');
    }
  }

  read(): Promise<Reply> {
    const queued = this.replies.shift();
    if (queued) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      this.waiting = resolve;
      this.failed = reject;
    });
  }

  command(line: string): Promise<Reply> {
    this.socket.write(`${line}\r\n`);
    return this.read();
  }

  write(data: string): void {
    this.socket.write(data);
  }

  /** After `220` to STARTTLS: the same connection, now TLS (the service's pair is self-signed here). */
  async startTls(): Promise<void> {
    this.socket.off('data', this.onData);
    this.socket.removeAllListeners('error');
    this.socket.removeAllListeners('close');
    const secure = tlsConnect({ socket: this.socket, rejectUnauthorized: false });
    await new Promise<void>((resolve, reject) => {
      secure.once('secureConnect', resolve);
      secure.once('error', reject);
    });
    this.socket = secure;
    this.buffer = '';
    this.listen();
  }

  close(): void {
    this.socket.end('QUIT\r\n');
    this.socket.destroy();
  }
}

/** The body of every message: ~5 KB of text, CRLF line ends, lines under 78 characters (made once, not per message). */
const BODY = (() => {
  const paragraph = 'Your order has shipped and is on its way. Track it from your account page at any time. ';
  const lines: string[] = [];
  let line = '';
  for (const word of paragraph.repeat(58).trim().split(' ')) {
    if (line.length + word.length + 1 > 76) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  lines.push(line);
  return ['Hello,', '', ...lines].join('\r\n');
})();

/** A ~5 KB plain-text notification with a Message-ID of its own, ending with DATA's terminating dot. */
function message(n: number): string {
  return (
    `From: Bench <orders@${SENDER_DOMAIN}>\r\nTo: <customer${n}@example.net>\r\nSubject: Order ${n} shipped\r\n` +
    `Date: ${new Date().toUTCString().replace('GMT', '+0000')}\r\nMessage-ID: <bench.${process.pid}.${n}.${Date.now()}@${SENDER_DOMAIN}>\r\n` +
    `MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 7bit\r\n\r\n${BODY}\r\n.\r\n`
  );
}

function want(reply: Reply, code: number, step: string): void {
  if (reply.code !== code) throw new Error(`${step}: expected ${code}, got ${reply.text}`);
}

/**
 * A session on a STARTTLS port, ready for MAIL FROM: authenticated with `key`, or (for the Postfix peer, which relays
 * for loopback without AUTH) with none.
 */
async function authenticated(port: number, key: string | null): Promise<SmtpSession> {
  const s = await SmtpSession.open(port);
  want(await s.read(), 220, 'banner');
  want(await s.command('EHLO client.bench.example'), 250, 'EHLO');
  want(await s.command('STARTTLS'), 220, 'STARTTLS');
  await s.startTls();
  want(await s.command('EHLO client.bench.example'), 250, 'EHLO after STARTTLS');
  if (key !== null) want(await s.command(`AUTH PLAIN ${Buffer.from(`\0mailstead\0${key}`).toString('base64')}`), 235, 'AUTH');
  return s;
}

interface SubmitResult {
  accepted: number;
  refused: Record<string, number>;
  latencies: number[];
  seconds: number;
}

let counter = 0;

/**
 * The sessions submit one message after another until `deadline` (a time) or until `count` messages have been
 * started (a count); `onSend` sees each just before its MAIL FROM.
 */
async function submit(sessions: SmtpSession[], stop: { until?: number; count?: number }, onSend?: () => void): Promise<SubmitResult> {
  const latencies: number[] = [];
  const refused: Record<string, number> = {};
  let started = 0;
  const t0 = performance.now();
  const more = () => (stop.until !== undefined ? performance.now() < stop.until : started < (stop.count ?? 0));
  await Promise.all(
    sessions.map(async (s) => {
      while (more()) {
        started++;
        const n = counter++;
        onSend?.();
        const t = performance.now();
        const mail = await s.command(`MAIL FROM:<orders@${SENDER_DOMAIN}> SIZE=6000`);
        if (mail.code !== 250) {
          refused[`MAIL ${mail.code}`] = (refused[`MAIL ${mail.code}`] ?? 0) + 1;
          continue;
        }
        const rcpt = await s.command(`RCPT TO:<customer${n}@example.net>`);
        if (rcpt.code !== 250) {
          refused[`RCPT ${rcpt.code}`] = (refused[`RCPT ${rcpt.code}`] ?? 0) + 1;
          await s.command('RSET');
          continue;
        }
        want(await s.command('DATA'), 354, 'DATA');
        s.write(message(n));
        const done = await s.read();
        if (done.code === 250) latencies.push(performance.now() - t);
        else refused[`DATA ${done.code}`] = (refused[`DATA ${done.code}`] ?? 0) + 1;
      }
    }),
  );
  latencies.sort((a, b) => a - b);
  return { accepted: latencies.length, refused, latencies, seconds: (performance.now() - t0) / 1000 };
}

/** Waits until the sink has received `count` messages in all (up to 5 minutes). */
async function drained(rig: BenchRig, count: number): Promise<void> {
  const deadline = Date.now() + 300_000;
  while (rig.sink.delivered() < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  if (rig.sink.delivered() < count) throw new Error(`the sink has ${rig.sink.delivered()} of ${count} messages after 5 minutes`);
}

type Peer = 'postfix-plain' | 'api' | 'postfix-tls' | 'smtp';

const PEER_NAMES: Record<Peer, string> = {
  'postfix-plain': 'Postfix, from smtp-source -d (plain SMTP)',
  api: 'Mailstead, POST /emails',
  'postfix-tls': 'Postfix, from the submission sessions (STARTTLS)',
  smtp: 'Mailstead, SMTP submission (STARTTLS, AUTH)',
};

/**
 * End to end: `total` messages each way, in E2E_ROUNDS slices of each, first message of a slice to its last delivery,
 * summed; the order reversed every other round. Each way has its Postfix peer, relaying into the same sink in the same
 * run: API mail's is a private Postfix fed by `smtp-source` in plain SMTP; submitted mail's is the same Postfix fed by
 * the same STARTTLS sessions as the service (without AUTH: Postfix relays for loopback, and AUTH is once a session).
 * Both feeds keep their sessions, as both of Mailstead's ways keep their connections (bench:vs-postfix's smtp-source
 * opens a connection a message, which costs Postfix more than STARTTLS does), so the two Postfix figures differ by
 * STARTTLS alone. Without root or Postfix, only the two Mailstead ways are measured.
 */
async function endToEnd(rig: BenchRig, headers: Record<string, string>, key: string, submissionPort: number): Promise<void> {
  const per = Math.max(1, Math.floor(total / E2E_ROUNDS));
  const postfixPath = findPostfixTool('postfix');
  const sourcePath = findPostfixTool('smtp-source');
  const withPostfix = postfixPath !== null && sourcePath !== null && process.getuid?.() === 0 && rig.sink.name.startsWith('smtp-sink');
  if (!withPostfix) console.log("(no Postfix peer: it needs root and Debian's postfix package; the two Mailstead ways only)");
  const tlsDir = mkdtempSync(join(tmpdir(), 'mailstead-bench-postfix-tls-'));
  const pair = loadOrCreateSmtpTls({ dataDir: tlsDir, mailHostname: 'postfix.bench.test', smtpTlsCert: null, smtpTlsKey: null });
  const postfix = withPostfix ? await startPrivatePostfix(postfixPath, rig.sink.port, concurrency, pair) : null;
  const ours = await Promise.all(Array.from({ length: concurrency }, () => authenticated(submissionPort, key)));
  const theirs = postfix ? await Promise.all(Array.from({ length: concurrency }, () => authenticated(postfix.port, null))) : [];
  try {
    const settled = async (count: number, queue: (() => boolean) | null) => {
      const deadline = Date.now() + 300_000;
      while ((rig.sink.delivered() < count || (queue && !queue())) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      if (rig.sink.delivered() < count) throw new Error(`the sink has ${rig.sink.delivered()} of ${count} messages after 5 minutes`);
    };
    /** `n` messages one way; resolves when the sink has them all (and Postfix's queue is empty). */
    const inject = async (peer: Peer, n: number): Promise<void> => {
      const before = rig.sink.delivered();
      if (peer === 'api') {
        const f = await measureDelivery(rig, headers, n, concurrency);
        if (f.refused > 0) throw new Error(`POST /emails refused ${f.refused}`);
        return;
      }
      if (peer === 'postfix-plain') {
        await runSmtpSource(sourcePath!, {
          port: postfix!.port,
          messages: n,
          sessions: concurrency,
          bytes: 5 * 1024,
          from: `orders@${SENDER_DOMAIN}`,
          to: 'customer@example.net',
          keepSessions: true,
        });
        return settled(before + n, postfix!.queueEmpty);
      }
      const sent = await submit(peer === 'smtp' ? ours : theirs, { count: n });
      if (Object.keys(sent.refused).length > 0) throw new Error(`${PEER_NAMES[peer]} refused ${JSON.stringify(sent.refused)}`);
      return settled(before + sent.accepted, peer === 'smtp' ? null : postfix!.queueEmpty);
    };
    // BENCH_PEERS (a comma list of the four) narrows the run, for a profile of one way.
    const chosen = process.env.BENCH_PEERS?.split(',');
    const peers = ((postfix ? ['postfix-plain', 'api', 'postfix-tls', 'smtp'] : ['api', 'smtp']) as Peer[]).filter((p) => !chosen || chosen.includes(p));
    // Postfix's warm-up (Mailstead's was the rate slices', or main's one second of each).
    if (postfix) for (const peer of ['postfix-plain', 'postfix-tls'] as const) await inject(peer, 300);
    const sums = new Map(peers.map((p) => [p, { delivered: 0, seconds: 0, service: 0, main: 0, load: 0, machine: 0 }]));
    // The service's main thread (its event loop: the protocols, the checks, the commits); signing runs on a thread of its own.
    const mainThread = () => threadCpu(rig.pid).get(rig.pid)?.seconds ?? 0;
    for (let round = 0; round < E2E_ROUNDS; round++) {
      for (const peer of round % 2 === 0 ? peers : [...peers].reverse()) {
        const before = rig.sink.delivered();
        const service0 = cpuSeconds(rig.pid);
        const main0 = mainThread();
        const load0 = process.cpuUsage();
        const machine0 = machineCpu().busy;
        const t0 = Date.now();
        await inject(peer, per);
        const times = rig.sink.times().slice(before);
        const sum = sums.get(peer)!;
        const load = process.cpuUsage(load0);
        sum.delivered += times.length;
        sum.seconds += (Math.max(...times) - t0) / 1000;
        sum.service += cpuSeconds(rig.pid) - service0;
        sum.main += mainThread() - main0;
        sum.load += (load.user + load.system) / 1e6;
        sum.machine += machineCpu().busy - machine0;
      }
    }
    const rate = (p: Peer) => (sums.has(p) ? sums.get(p)!.delivered / sums.get(p)!.seconds : Number.NaN);
    console.log(
      `end to end, ${per * E2E_ROUNDS} messages each way in ${E2E_ROUNDS} slices (order reversed every other round), first message of a slice to its last delivery, summed:`,
    );
    for (const peer of peers) {
      const s = sums.get(peer)!;
      const perMessage = (cpu: number) => `${((cpu * 1e6) / Math.max(1, s.delivered)).toFixed(0)} µs`;
      console.log(
        `  ${PEER_NAMES[peer].padEnd(52)} ${rate(peer).toFixed(0).padStart(6)} delivered/s   ` +
          (peer === 'api' || peer === 'smtp' ? `service CPU ${perMessage(s.service)} a message (main thread ${perMessage(s.main)}), ` : '') +
          `the load generator's ${perMessage(s.load)}; machine ${((100 * s.machine) / s.seconds).toFixed(0)}% of a core   (${s.delivered} delivered)`,
      );
    }
    if (postfix && peers.length === 4) {
      const api = rate('api') / rate('postfix-plain');
      const smtp = rate('smtp') / rate('postfix-tls');
      console.log(`API mail to Postfix (smtp-source, sessions kept): ${api.toFixed(2)}`);
      console.log(
        `submitted mail to Postfix (the same STARTTLS sessions): ${smtp.toFixed(2)} (target at least API mail's ${api.toFixed(2)}: ${smtp >= api ? 'met' : 'not met'})`,
      );
    }
    console.log(`submitted mail delivered to API mail delivered, directly: ${(rate('smtp') / rate('api')).toFixed(2)}`);
  } finally {
    for (const s of [...ours, ...theirs]) s.close();
    await postfix?.stop();
    rmSync(tlsDir, { recursive: true, force: true });
  }
}

/** The service's state: its own SQLite by default; Postgres with STATE_URL or BENCH_POSTGRES (started here). */
async function stateOnPostgres(): Promise<{ env: Record<string, string>; postgres: TestPostgres | null; name: string }> {
  if (!process.env.STATE_URL && !benchPostgresMode()) return { env: {}, postgres: null, name: 'SQLite' };
  // On Postgres the SMTP TLS pair is configured, not generated into DATA_DIR: one made here for the run.
  const tlsDir = mkdtempSync(join(tmpdir(), 'mailstead-bench-submission-tls-'));
  loadOrCreateSmtpTls({ dataDir: tlsDir, mailHostname: 'mx.bench.test', smtpTlsCert: null, smtpTlsKey: null });
  process.once('exit', () => rmSync(tlsDir, { recursive: true, force: true }));
  const secret = {
    SECRET_KEY: process.env.SECRET_KEY ?? 'ab'.repeat(32),
    NODE_EXTRA_CA_CERTS: PG_TEST_CA_FILE,
    SMTP_TLS_CERT: join(tlsDir, GENERATED_CERT_FILE),
    SMTP_TLS_KEY: join(tlsDir, GENERATED_KEY_FILE),
  };
  if (process.env.STATE_URL) return { env: { STATE_URL: process.env.STATE_URL, ...secret }, postgres: null, name: 'Postgres (STATE_URL)' };
  const mode = benchPostgresMode() ?? 'tls';
  const postgres = await startPostgres({ certificate: 'trusted' });
  await postgres.admin('create database bench_submission');
  return {
    env: { STATE_URL: stateUrlOf(postgres, 'bench_submission', mode), ...secret },
    postgres,
    name: `an embedded Postgres (${mode === 'tls' ? 'TLS verified' : 'plain TCP'})`,
  };
}

async function main(): Promise<void> {
  const submissionPort = await freePort();
  const state = await stateOnPostgres();
  const rig = await startBenchRig({ SMTP_HOST: '127.0.0.1', SUBMISSION_PORT: String(submissionPort), SUBMISSIONS_PORT: '0', ...state.env }).catch(
    async (err: unknown) => {
      await state.postgres?.stop();
      throw err;
    },
  );
  try {
    const { headers } = await rig.newSender('Bench', SENDER_DOMAIN);
    const key = headers.authorization!.replace(/^Bearer /, '');
    const url = `${rig.base}/emails`;
    let n = 0;
    const body = () => benchSendBody(n++);
    /** Messages the sink should have received once the queue is empty. */
    let expected = 0;

    console.log(
      `SMTP submission (STARTTLS, AUTH once a session) against POST /emails (queued), ${concurrency} sessions and ${concurrency} keep-alive clients, ~5 KB messages, ${rig.sink.name} on loopback, the state on ${state.name} (Node ${process.version})`,
    );
    const sessions = await Promise.all(Array.from({ length: concurrency }, () => authenticated(submissionPort, key)));
    // The floor: bare smtp-server over STARTTLS with AUTH, draining each message (bare-submission.ts), in its own process.
    const bare = only === 'e2e' ? null : await spawnListening(fileURLToPath(new URL('./bare-submission.js', import.meta.url)), {});
    const bareSessions = bare ? await Promise.all(Array.from({ length: concurrency }, () => authenticated(bare.port, key))) : [];
    const floor = { accepted: 0, seconds: 0 };

    // Warm-up of both paths (JIT, connections), delivered before the timed slices start.
    const warmApi = await runLoad({ url, method: 'POST', headers, body, concurrency, seconds: 1 });
    const warmSmtp = await submit(sessions, { until: performance.now() + 1000 });
    expected += (warmApi.statuses[200] ?? 0) + warmSmtp.accepted;
    await drained(rig, expected);

    const measured = async <T>(load: () => Promise<T>) => {
      const cpu = cpuSeconds(rig.pid);
      const machine = machineCpu().busy;
      const result = await load();
      return { result, cpu: cpuSeconds(rig.pid) - cpu, machine: machineCpu().busy - machine };
    };
    const sums = {
      api: { accepted: 0, seconds: 0, cpu: 0, machine: 0, latencies: [] as number[], other: {} as Record<string, number> },
      smtp: { accepted: 0, seconds: 0, cpu: 0, machine: 0, latencies: [] as number[], other: {} as Record<string, number> },
    };
    if (only !== 'e2e') {
      for (let round = 0; round < ROUNDS; round++) {
        const api = await measured(() => runLoad({ url, method: 'POST', headers, body, concurrency, seconds: seconds / ROUNDS }));
        const accepted = api.result.statuses[200] ?? 0;
        Object.assign(sums.api, {
          accepted: sums.api.accepted + accepted,
          seconds: sums.api.seconds + api.result.seconds,
          cpu: sums.api.cpu + api.cpu,
          machine: sums.api.machine + api.machine,
        });
        // runLoad keeps percentiles only: the slices' p99s are combined as their largest.
        sums.api.latencies.push(api.result.p99ms);
        for (const [status, count] of Object.entries(api.result.statuses)) {
          if (status !== '200') sums.api.other[status] = (sums.api.other[status] ?? 0) + count;
        }
        if (api.result.errors) sums.api.other.errors = (sums.api.other.errors ?? 0) + api.result.errors;
        expected += accepted;
        await drained(rig, expected);

        const smtp = await measured(() => submit(sessions, { until: performance.now() + (seconds / ROUNDS) * 1000 }));
        Object.assign(sums.smtp, {
          accepted: sums.smtp.accepted + smtp.result.accepted,
          seconds: sums.smtp.seconds + smtp.result.seconds,
          cpu: sums.smtp.cpu + smtp.cpu,
          machine: sums.smtp.machine + smtp.machine,
        });
        sums.smtp.latencies.push(...smtp.result.latencies);
        for (const [what, count] of Object.entries(smtp.result.refused)) sums.smtp.other[what] = (sums.smtp.other[what] ?? 0) + count;
        expected += smtp.result.accepted;
        await drained(rig, expected);

        const base = await submit(bareSessions, { until: performance.now() + (seconds / ROUNDS) * 1000 });
        floor.accepted += base.accepted;
        floor.seconds += base.seconds;
      }
      for (const s of bareSessions) s.close();
      if (bare) await stop(bare.child);
      sums.smtp.latencies.sort((a, b) => a - b);
      const line = (name: string, s: typeof sums.api, p99: number) =>
        `  ${name.padEnd(30)} ${(s.accepted / s.seconds).toFixed(0).padStart(6)} messages/s   p99 ${p99.toFixed(1).padStart(6)} ms   ` +
        `service CPU ${((s.cpu * 1e6) / Math.max(1, s.accepted)).toFixed(0)} µs a message, ${((100 * s.cpu) / s.seconds).toFixed(0)}% of a core; ` +
        `machine ${((100 * s.machine) / s.seconds).toFixed(0)}% of a core   (${s.accepted} accepted${Object.keys(s.other).length ? `, not: ${JSON.stringify(s.other)}` : ''})`;
      console.log(`accepted, ${ROUNDS} alternating slices of ${seconds / ROUNDS} s each, the queue drained before each:`);
      console.log(line('POST /emails (queued)', sums.api, Math.max(...sums.api.latencies)));
      console.log(line('SMTP submission (587, STARTTLS)', sums.smtp, percentile(sums.smtp.latencies, 99)));
      const ratio = sums.smtp.accepted / sums.smtp.seconds / (sums.api.accepted / sums.api.seconds);
      console.log(`submission to the API's queued rate: ${ratio.toFixed(2)} (target at least ${TARGET.toFixed(2)}: ${ratio >= TARGET ? 'met' : 'not met'})`);
      const apiRate = sums.api.accepted / sums.api.seconds;
      const floorRate = floor.accepted / floor.seconds;
      console.log(
        `the floor: bare smtp-server (STARTTLS, AUTH, each message drained, nothing checked or stored) ${floorRate.toFixed(0)} messages/s, ` +
          `${(floorRate / apiRate).toFixed(2)} of the API's queued rate; the service's submission is ${((ratio * apiRate) / floorRate).toFixed(2)} of that floor`,
      );
    }

    for (const s of sessions) s.close();
    if (only !== 'rate') await endToEnd(rig, headers, key, submissionPort);
  } finally {
    await rig.close();
    await state.postgres?.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

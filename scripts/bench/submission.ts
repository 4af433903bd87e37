import { connect, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { cpuSeconds, machineCpu, percentile } from '../lib/proc.js';
import { freePort } from '../lib/free-port.js';
import { runLoad } from './load.js';
import { type BenchRig, benchSendBody, measureDelivery, startBenchRig } from './rig.js';
import { spawnListening, stop } from './spawn.js';
import { fileURLToPath } from 'node:url';

/**
 * SMTP submission (issue 35) against POST /emails, side by side in one run: `CONCURRENCY` authenticated sessions on
 * the STARTTLS port (each: EHLO, STARTTLS, EHLO, AUTH PLAIN with the key once, then MAIL, RCPT, DATA of a ~5 KB
 * message, one transaction after another, no pipelining, as nodemailer's pooled transport does) against as many
 * keep-alive clients queueing ~5 KB sends with `POST /emails`, both to a verified domain whose MX is the rig's sink,
 * delivered meanwhile. ROUNDS alternating slices of each, summed, so a change in the VM's speed falls on both; the
 * queue is drained (every accepted message at the sink) before each slice, so neither inherits the other's
 * deliveries. Accepted messages/s, p99 (MAIL FROM to the 250 after DATA; request to answer), the service's CPU per
 * message and the machine's CPU beside each. Then, unless BENCH_ONLY=rate, end to end: BENCH_MESSAGES submitted
 * and as many posted, first message to last delivery, for the delivered mail/s of each.
 * Run: npm run bench:submission   (env BENCH_SECONDS, BENCH_CONCURRENCY, BENCH_MESSAGES, BENCH_ONLY=rate|e2e)
 */
const seconds = Number(process.env.BENCH_SECONDS ?? 10);
// The submission server takes at most 20 connections from one address (inbound's cap), and the load comes from one.
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 16);
const total = Number(process.env.BENCH_MESSAGES ?? 2000);
const only = process.env.BENCH_ONLY;
const ROUNDS = 4;
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

/** A ~5 KB plain-text notification, CRLF line ends, lines under 78 characters, a Message-ID of its own. */
function message(n: number): string {
  const paragraph = 'Your order has shipped and is on its way. Track it from your account page at any time. ';
  const words = paragraph.repeat(58).trim().split(' ');
  const lines: string[] = [];
  let line = '';
  for (const word of words) {
    if (line.length + word.length + 1 > 76) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  lines.push(line);
  return [
    `From: Bench <orders@${SENDER_DOMAIN}>`,
    `To: <customer${n}@example.net>`,
    `Subject: Order ${n} shipped`,
    `Date: ${new Date().toUTCString().replace('GMT', '+0000')}`,
    `Message-ID: <bench.${process.pid}.${n}.${Date.now()}@${SENDER_DOMAIN}>`,
    'MIME-Version: 1.0',
    'Content-Type: text/plain; charset=utf-8',
    'Content-Transfer-Encoding: 7bit',
    '',
    'Hello,',
    '',
    ...lines,
    '',
  ].join('\r\n');
}

function want(reply: Reply, code: number, step: string): void {
  if (reply.code !== code) throw new Error(`${step}: expected ${code}, got ${reply.text}`);
}

/** An authenticated session on the STARTTLS port, ready for MAIL FROM. */
async function authenticated(port: number, key: string): Promise<SmtpSession> {
  const s = await SmtpSession.open(port);
  want(await s.read(), 220, 'banner');
  want(await s.command('EHLO client.bench.example'), 250, 'EHLO');
  want(await s.command('STARTTLS'), 220, 'STARTTLS');
  await s.startTls();
  want(await s.command('EHLO client.bench.example'), 250, 'EHLO after STARTTLS');
  want(await s.command(`AUTH PLAIN ${Buffer.from(`\0mailstead\0${key}`).toString('base64')}`), 235, 'AUTH');
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
        s.write(`${message(n)}.\r\n`);
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

async function main(): Promise<void> {
  const submissionPort = await freePort();
  const rig = await startBenchRig({ SMTP_HOST: '127.0.0.1', SUBMISSION_PORT: String(submissionPort), SUBMISSIONS_PORT: '0' });
  try {
    const { headers } = await rig.newSender('Bench', SENDER_DOMAIN);
    const key = headers.authorization!.replace(/^Bearer /, '');
    const url = `${rig.base}/emails`;
    let n = 0;
    const body = () => benchSendBody(n++);
    /** Messages the sink should have received once the queue is empty. */
    let expected = 0;

    console.log(
      `SMTP submission (STARTTLS, AUTH once a session) against POST /emails (queued), ${concurrency} sessions and ${concurrency} keep-alive clients, ~5 KB messages, ${rig.sink.name} on loopback (Node ${process.version})`,
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

    if (only !== 'rate') {
      // End to end: `total` messages each way, first message to the sink's last, the queue empty at the start of each.
      const before = rig.sink.delivered();
      const sentAt: number[] = [];
      const cpu0 = cpuSeconds(rig.pid);
      const machine0 = machineCpu().busy;
      const t0 = Date.now();
      const sub = await submit(sessions, { count: total }, () => sentAt.push(Date.now()));
      await drained(rig, before + sub.accepted);
      const times = rig.sink.times().slice(before);
      const smtpSeconds = (Math.max(...times) - t0) / 1000;
      const smtpCpu = cpuSeconds(rig.pid) - cpu0;
      const smtpMachine = machineCpu().busy - machine0;
      const smtpLatency = times.map((t, k) => t - (sentAt[k] ?? t)).sort((a, b) => a - b);
      for (const s of sessions) s.close();

      const machine1 = machineCpu().busy;
      const api = await measureDelivery(rig, headers, total, concurrency);
      const apiMachine = machineCpu().busy - machine1;
      console.log(`end to end, ${total} messages each way, first message to the last delivered:`);
      console.log(
        `  POST /emails                   ${api.rate.toFixed(0).padStart(6)} delivered/s   send-to-delivered p50 ${api.p50} ms, p99 ${api.p99} ms   ` +
          `service CPU ${(api.cpuPer1000 * 1000).toFixed(0)} µs a message; machine ${((100 * apiMachine) / api.seconds).toFixed(0)}% of a core   (${api.delivered} delivered, ${api.refused} refused)`,
      );
      console.log(
        `  SMTP submission                ${(times.length / smtpSeconds).toFixed(0).padStart(6)} delivered/s   send-to-delivered p50 ${percentile(smtpLatency, 50)} ms, p99 ${percentile(smtpLatency, 99)} ms   ` +
          `service CPU ${((smtpCpu * 1e6) / Math.max(1, times.length)).toFixed(0)} µs a message; machine ${((100 * smtpMachine) / smtpSeconds).toFixed(0)}% of a core   (${times.length} delivered${Object.keys(sub.refused).length ? `, refused ${JSON.stringify(sub.refused)}` : ''})`,
      );
      console.log(`submitted mail delivered to API mail delivered: ${(times.length / smtpSeconds / api.rate).toFixed(2)}`);
    } else for (const s of sessions) s.close();
  } finally {
    await rig.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

import { spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { createInterface } from 'node:readline';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

/**
 * The SMTP load of the inbound benchmarks (bench:inbound, inbound-floor): concurrent sessions sending ~5 KB messages
 * for a fixed time, from Postfix's smtp-source where installed, else from a Node generator in a worker thread (one raw
 * socket per session, no pipelining, EHLO once per session, each transaction timed).
 */

export interface LoadSpec {
  port: number;
  sessions: number;
  seconds: number;
  from: string;
  domain: string;
}

export interface LoadResult {
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

export const SENDER_DOMAIN = 'sender.example';
export const RECEIVING_DOMAIN = 'receiving.example';
const CLIENT_NAME = 'client.sender.example';
export const MESSAGE_BYTES = 5 * 1024;

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
  const words = (
    'Your order has shipped and is on its way. You can follow the parcel from your account page at any time, ' +
    'and the carrier will text you on the day it arrives. If anything is missing or damaged, reply to this message and ' +
    'we will sort it out. Thank you for shopping with us. '
  )
    .split(' ')
    .filter(Boolean);
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

export function runNodeGenerator(spec: LoadSpec): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), { workerData: { ...spec, smtpLoad: true } });
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
export async function runSmtpSource(path: string, spec: LoadSpec): Promise<LoadResult> {
  const args = [
    '-A',
    '-c',
    '-d',
    '-N',
    '-l',
    String(MESSAGE_BYTES),
    '-m',
    '100000000',
    '-s',
    String(spec.sessions),
    '-M',
    CLIENT_NAME,
    '-S',
    'Your order has shipped',
  ];
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

/** The load `spec` describes, from smtp-source at `sourcePath`, else from the Node generator. */
export function runLoad(sourcePath: string | null, spec: LoadSpec): Promise<LoadResult> {
  return sourcePath ? runSmtpSource(sourcePath, spec) : runNodeGenerator(spec);
}

// The Node generator's worker thread runs this module.
if (!isMainThread && (workerData as { smtpLoad?: boolean } | undefined)?.smtpLoad) {
  generateLoad(workerData as LoadSpec).then((result) => parentPort!.postMessage(result));
}

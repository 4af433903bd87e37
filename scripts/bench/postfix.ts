import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { freePort } from '../lib/free-port.js';
import { SmtpSink } from '../lib/smtp-sink.js';
import { stop } from './spawn.js';

/**
 * Postfix's programs as benchmark peers (Debian's `postfix` package): `smtp-sink`, `smtp-source`, and a private Postfix
 * instance with its own configuration, queue and data directories under a temporary folder (never the system's).
 */

/** A Postfix program on PATH or in /usr/sbin, or null. */
export function findPostfixTool(name: 'smtp-source' | 'smtp-sink' | 'postfix'): string | null {
  for (const dir of [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin']) {
    if (dir && existsSync(join(dir, name))) return join(dir, name);
  }
  return null;
}

export async function waitForPort(port: number, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() > until) throw new Error(`nothing listens on 127.0.0.1:${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** An SMTP sink the delivery benchmarks deliver to: what it has received, and when. */
export interface BenchSink {
  name: string;
  port: number;
  /** Messages received so far. */
  delivered(): number;
  /** The time (ms since the epoch) each message was received, in order. */
  times(): number[];
  stop(): Promise<void>;
}

/**
 * Postfix's smtp-sink (as nobody when run as root: it refuses root), counting: `-c` prints `mesg=<n>` on stdout at
 * every end of data, read here as it comes.
 */
export async function startPostfixSink(path: string): Promise<BenchSink> {
  const port = await freePort();
  const user = process.getuid?.() === 0 ? ['-u', 'nobody'] : [];
  const child: ChildProcess = spawn(path, ['-c', ...user, `127.0.0.1:${port}`, '1000'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const times: number[] = [];
  child.stdout!.setEncoding('latin1').on('data', (chunk: string) => {
    const now = Date.now();
    for (const m of chunk.matchAll(/mesg=(\d+)/g)) while (times.length < Number(m[1])) times.push(now);
  });
  await waitForPort(port);
  return {
    name: `smtp-sink (${path})`,
    port,
    delivered: () => times.length,
    times: () => times,
    stop: () => stop(child),
  };
}

/** The Node sink of scripts/lib (in the benchmark's own process), keeping envelopes and times only. */
export async function startNodeSink(): Promise<BenchSink> {
  const sink = await SmtpSink.start();
  sink.keepRaw = false;
  return {
    name: 'Node sink (scripts/lib/smtp-sink.ts, in the benchmark process)',
    port: sink.port,
    delivered: () => sink.received.length,
    times: () => sink.received.map((r) => r.at),
    stop: () => sink.stop(),
  };
}

/** Postfix's smtp-sink where installed (unless BENCH_SINK=node), else the Node sink with a printed warning. */
export async function startBenchSink(): Promise<BenchSink> {
  const path = process.env.BENCH_SINK === 'node' ? null : findPostfixTool('smtp-sink');
  if (path) return startPostfixSink(path);
  if (process.env.BENCH_SINK !== 'node')
    console.warn('warning: Postfix smtp-sink not found (apt-get install postfix); delivering to the Node sink in this process instead');
  return startNodeSink();
}

/**
 * smtp-source: `messages` messages of `bytes` bytes over `sessions` parallel sessions, a connection a message unless
 * `keepSessions`; resolves when it exits.
 */
export function runSmtpSource(
  path: string,
  opts: { port: number; messages: number; sessions: number; bytes: number; from: string; to: string; keepSessions?: boolean },
): Promise<void> {
  const args = [
    // -d: each session sends its messages over one connection instead of a connection a message.
    ...(opts.keepSessions ? ['-d'] : []),
    '-s',
    String(opts.sessions),
    '-m',
    String(opts.messages),
    '-l',
    String(opts.bytes),
    '-N',
    '-f',
    opts.from,
    '-t',
    opts.to,
    `127.0.0.1:${opts.port}`,
  ];
  const child = spawn(path, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`smtp-source exited with ${code}`))));
  });
}

/** The daemons a relay needs, none chrooted (the queue is in a temporary folder, not under /var/spool). */
const MASTER_SERVICES = `
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
proxywrite unix -       -       n       -       1       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
`;

export interface PrivatePostfix {
  /** smtpd's port on 127.0.0.1. */
  port: number;
  /** Whether the queue holds no message (incoming, active, deferred, maildrop). */
  queueEmpty(): boolean;
  stop(): Promise<void>;
}

/**
 * A Postfix of its own under a temporary folder: smtpd on a loopback port accepting from 127.0.0.0/8, every message
 * relayed to `relayPort` on 127.0.0.1 with `concurrency` connections to it (Postfix's default destination concurrency
 * is 20), TLS off towards the relay, logging to a file in the folder. smtpd offers STARTTLS with `tls` (a PEM pair,
 * written into the folder readable by root only) and no TLS without it. Postfix's master runs as root and its daemons
 * as the `postfix` user, so this needs root and the package's `postfix` user.
 */
export async function startPrivatePostfix(postfix: string, relayPort: number, concurrency = 20, tls?: { key: string; cert: string }): Promise<PrivatePostfix> {
  if (process.getuid?.() !== 0) throw new Error('a private Postfix instance needs root (its master runs as root, its daemons as the postfix user)');
  const dir = mkdtempSync(join(tmpdir(), 'mailstead-postfix-'));
  // Postfix's daemons run as the postfix user and must reach the queue and data directories inside.
  chmodSync(dir, 0o755);
  const etc = join(dir, 'etc');
  const queue = join(dir, 'queue');
  const data = join(dir, 'data');
  for (const d of [etc, queue, data]) mkdirSync(d);
  chownSync(data, uidOf('postfix'), -1);
  const port = await freePort();
  const tlsFiles = tls ? { key: join(etc, 'smtpd.key'), cert: join(etc, 'smtpd.crt') } : null;
  if (tls && tlsFiles) {
    writeFileSync(tlsFiles.key, tls.key, { mode: 0o600 });
    writeFileSync(tlsFiles.cert, tls.cert);
  }
  const main = {
    compatibility_level: '3.6',
    queue_directory: queue,
    data_directory: data,
    mail_owner: 'postfix',
    setgid_group: 'postdrop',
    myhostname: 'postfix.bench.test',
    mydestination: '',
    alias_maps: '',
    alias_database: '',
    local_recipient_maps: '',
    inet_interfaces: '127.0.0.1',
    inet_protocols: 'ipv4',
    mynetworks: '127.0.0.0/8',
    smtpd_relay_restrictions: 'permit_mynetworks, reject',
    relayhost: `[127.0.0.1]:${relayPort}`,
    default_destination_concurrency_limit: String(concurrency),
    smtp_destination_concurrency_limit: String(concurrency),
    smtp_tls_security_level: 'none',
    ...(tlsFiles
      ? { smtpd_tls_security_level: 'may', smtpd_tls_key_file: tlsFiles.key, smtpd_tls_cert_file: tlsFiles.cert }
      : { smtpd_tls_security_level: 'none' }),
    // smtpd would otherwise slow its clients down by a second per message while the queue is busy; a benchmark of
    // Postfix's throughput lets it take mail as fast as it can.
    in_flow_delay: '0',
    maillog_file: join(dir, 'maillog'),
    maillog_file_prefixes: dir,
    syslog_name: 'postfix-bench',
  };
  writeFileSync(
    join(etc, 'main.cf'),
    `${Object.entries(main)
      .map(([k, v]) => `${k} = ${v}`)
      .join('\n')}\n`,
  );
  writeFileSync(join(etc, 'master.cf'), `127.0.0.1:${port} inet n - n - - smtpd${MASTER_SERVICES}`);
  try {
    await runPostfix(postfix, etc, 'start');
    await waitForPort(port);
  } catch (err) {
    throw new Error(`the private Postfix did not start (its log: ${main.maillog_file}): ${(err as Error).message}`);
  }
  return {
    port,
    queueEmpty: () => ['incoming', 'active', 'deferred', 'maildrop'].every((q) => countFiles(join(queue, q)) === 0),
    async stop() {
      await runPostfix(postfix, etc, 'stop').catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function countFiles(path: string): number {
  if (!existsSync(path)) return 0;
  let n = 0;
  for (const entry of readdirSync(path, { withFileTypes: true })) n += entry.isDirectory() ? countFiles(join(path, entry.name)) : 1;
  return n;
}

function uidOf(user: string): number {
  const entry = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${user}:`));
  if (!entry) throw new Error(`no ${user} user (apt-get install postfix)`);
  return Number(entry.split(':')[2]);
}

/** `postfix -c <etc> <command>`; Postfix reports its fatal errors only to syslog or a terminal, so they are not shown here. */
function runPostfix(postfix: string, etc: string, command: 'start' | 'stop'): Promise<void> {
  const child = spawn(postfix, ['-c', etc, command], { stdio: ['ignore', 'inherit', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`postfix ${command} exited with ${code}`))));
  });
}

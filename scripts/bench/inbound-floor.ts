import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SMTPServer } from 'smtp-server';
import { createDurabilityBarrier } from '../../db/group-commit.js';
import { sealBytes } from '../../server/secrets.js';
import { freePort } from '../lib/free-port.js';
import { cpuSeconds } from '../lib/proc.js';
import { durableRows } from './durable-rows.js';
import { findPostfixTool, startNodeSink, startPostfixSink, waitForPort } from './postfix.js';
import { RECEIVING_DOMAIN, SENDER_DOMAIN, runLoad } from './smtp-load.js';
import { stop } from './spawn.js';

/**
 * The floor under bench:inbound (issue 12's target: 30% of smtp-sink's rate): the same SMTP load, in the same run,
 * against smtp-server doing nothing but the least each acceptance needs, one step more in each mode:
 *
 * - `discard`: smtp-server reads the message and answers 250 (the protocol layer alone);
 * - `sqlite`: each message inserted as a 5 KB BLOB through the service's group commit, 250 once the WAL is fdatasynced
 *   (db/group-commit.ts: the store the service uses, shared commits and flushes);
 * - `sealed-sqlite`: the same, the message sealed first (AES-256-GCM, server/secrets.ts sealBytes), as the service
 *   must hold it;
 * - `sealed-file`: sealed, appended to one file (a `writev` per batch) and fdatasynced, no SQLite: what an
 *   append-only spool would cost instead.
 *
 * No RCPT check, no parse, no customer database, no logging: whatever the service does beyond this comes on top.
 * Each mode runs in a child process of its own (STARTTLS off; the load does not use it); then smtp-sink (or the Node
 * sink) takes the same load, and each mode's rate is printed against it.
 * Run: npm run build && node dist/scripts/bench/inbound-floor.js   (env BENCH_SESSIONS default 16, BENCH_SECONDS
 * default 10, BENCH_ROUNDS default 1 (the modes and the sink again, in turn), BENCH_GENERATOR=node, BENCH_BASELINE=node)
 */

const MODES = ['discard', 'sqlite', 'sealed-sqlite', 'sealed-file'] as const;
type Mode = (typeof MODES)[number];

/** The child: smtp-server on `port` storing each message as `mode` says; prints `listening` once it does. */
async function serve(mode: Mode, port: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mailstead-floor-'));
  const key = randomBytes(32);
  let store: (body: Buffer) => Promise<void> = async () => undefined;
  if (mode === 'sqlite' || mode === 'sealed-sqlite') {
    store = durableRows(dir);
  } else if (mode === 'sealed-file') {
    const file = await open(join(dir, 'spool.log'), 'a');
    let batch: Buffer[] = [];
    const barrier = createDurabilityBarrier(async () => {
      const bodies = batch;
      batch = [];
      if (bodies.length > 0) await file.writev(bodies);
      await file.datasync();
    });
    store = (body) => {
      batch.push(body);
      return barrier.durable();
    };
  }
  const seal = mode === 'sealed-sqlite' || mode === 'sealed-file';
  let n = 0;
  const server = new SMTPServer({
    name: 'floor.bench.test',
    disabledCommands: ['AUTH', 'STARTTLS'],
    authOptional: true,
    disableReverseLookup: true,
    size: 26_214_400,
    maxClients: 200,
    logger: false,
    onData(stream, _session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('end', () => {
        const raw = Buffer.concat(chunks);
        store(seal ? sealBytes(key, raw, `floor:${n++}`) : raw).then(
          () => callback(null, 'Ok'),
          (err: Error) => callback(err),
        );
      });
    },
  });
  server.on('error', () => undefined); // a client reset when the load stops
  server.listen(port, '127.0.0.1', () => console.log('listening'));
  process.on('SIGTERM', () => {
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

async function startFloor(mode: Mode): Promise<{ child: ChildProcess; port: number }> {
  const port = await freePort();
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--serve', mode, String(port)], { stdio: ['ignore', 'ignore', 'inherit'] });
  await waitForPort(port);
  return { child, port };
}

async function main(): Promise<void> {
  const sessions = Number(process.env.BENCH_SESSIONS ?? 16);
  const seconds = Number(process.env.BENCH_SECONDS ?? 10);
  const rounds = Number(process.env.BENCH_ROUNDS ?? 1);
  const sourcePath = process.env.BENCH_GENERATOR === 'node' ? null : findPostfixTool('smtp-source');
  const sinkPath = process.env.BENCH_BASELINE === 'node' ? null : findPostfixTool('smtp-sink');
  const load = (port: number) => runLoad(sourcePath, { port, sessions, seconds, from: `orders@${SENDER_DOMAIN}`, domain: RECEIVING_DOMAIN });
  console.log(`${sessions} SMTP sessions for ${seconds} s, ~5 KB messages, from ${sourcePath ? `smtp-source (${sourcePath})` : 'the Node generator'} (Node ${process.version})`);

  for (let round = 1; round <= rounds; round++) {
    const rates = new Map<string, { rate: number; cpu: number }>();
    for (const mode of MODES) {
      const floor = await startFloor(mode);
      const cpuBefore = cpuSeconds(floor.child.pid!);
      const result = await load(floor.port);
      const cpu = cpuSeconds(floor.child.pid!) - cpuBefore;
      await stop(floor.child);
      rates.set(mode, { rate: result.accepted / result.seconds, cpu: (cpu * 1e6) / Math.max(1, result.accepted) });
    }
    const sink = sinkPath ? await startPostfixSink(sinkPath) : await startNodeSink();
    const baseline = await load(sink.port).finally(() => sink.stop());
    const baseRate = baseline.accepted / baseline.seconds;
    console.log(`round ${round}: ${sink.name} ${baseRate.toFixed(0)} messages/s`);
    for (const [mode, { rate, cpu }] of rates) {
      console.log(`  ${mode.padEnd(14)} ${rate.toFixed(0).padStart(6)} messages/s  ratio ${(rate / baseRate).toFixed(2)}  (the process's CPU ${cpu.toFixed(0)} µs a message)`);
    }
  }
  console.log('bench:inbound against the same sink carries the whole service on top of these (target: ratio 0.30).');
}

if (process.argv[2] === '--serve') {
  serve(process.argv[3] as Mode, Number(process.argv[4])).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}

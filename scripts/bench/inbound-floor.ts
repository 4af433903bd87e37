import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readlinkSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { getPriority, setPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { MailParser } from 'mailparser';
import pg from 'pg';
import { SMTPServer } from 'smtp-server';
import { createDurabilityBarrier } from '../../db/group-commit.js';
import { sealBytes } from '../../server/shared/secrets.js';
import { freePort } from '../lib/free-port.js';
import { startPostgres } from '../lib/postgres.js';
import { cpuSeconds } from '../lib/proc.js';
import { durableRows } from './durable-rows.js';
import { findPostfixTool, startNodeSink, startPostfixSink, waitForPort } from './postfix.js';
import { RECEIVING_DOMAIN, SENDER_DOMAIN, runLoad } from './smtp-load.js';
import { stop } from './spawn.js';

/**
 * The floor under bench:inbound (its target: 30% of smtp-sink's rate): the same SMTP load, in the same run,
 * against smtp-server doing nothing but the least each acceptance needs, a step more in each mode (MODES):
 *
 * - `discard`: smtp-server reads the message and answers 250 (the protocol layer alone);
 * - `sqlite`: each message inserted as a 5 KB BLOB through the service's group commit, 250 once the WAL is fdatasynced
 *   (db/group-commit.ts: the store the service uses, shared commits and flushes);
 * - `sealed-sqlite`: the same, the message sealed first (AES-256-GCM, server/shared/secrets.ts sealBytes), as the service
 *   must hold it;
 * - `sealed-file`: sealed, appended to one file (a `writev` per batch) and fdatasynced, no SQLite: what an
 *   append-only spool would cost instead;
 * - `sqlite-parsed`, `file-parsed`: those two stores, and every accepted message also parsed by mailparser's
 *   streaming MailParser (the parser the issue prescribes, with the service's options) in a worker thread at nice 10,
 *   as the service parses;
 * - `file-parsed-pg`: `file-parsed`, each parsed batch then inserted into a local Postgres (TLS, one multi-row
 *   INSERT and one commit per batch: subject, text, size): the cheapest store, the prescribed parser and the
 *   customer's database, with no RCPT check, no mailauth, no headers, no NOTIFY, no logging.
 *
 * The rate of a parsing mode counts the messages both accepted and done (parsed, and inserted where it inserts)
 * within the load's time: what a sustained load can keep up (the accepted count is printed too when it is higher).
 * Each mode runs in a child process of its own (STARTTLS off; the load does not use it); then smtp-sink (or the Node
 * sink) takes the same load, and each mode's rate is printed against it.
 * Run: npm run build && node dist/scripts/bench/inbound-floor.js   (env BENCH_SESSIONS default 16, BENCH_SECONDS
 * default 10, BENCH_ROUNDS default 1 (the modes and the sink again, in turn), BENCH_MODES a comma-separated subset,
 * BENCH_GENERATOR=node, BENCH_BASELINE=node)
 */

interface ModeSpec {
  store: 'none' | 'sqlite' | 'file';
  seal: boolean;
  parse: boolean;
  postgres: boolean;
}

const MODES = {
  discard: { store: 'none', seal: false, parse: false, postgres: false },
  sqlite: { store: 'sqlite', seal: false, parse: false, postgres: false },
  'sealed-sqlite': { store: 'sqlite', seal: true, parse: false, postgres: false },
  'sealed-file': { store: 'file', seal: true, parse: false, postgres: false },
  'sqlite-parsed': { store: 'sqlite', seal: true, parse: true, postgres: false },
  'file-parsed': { store: 'file', seal: true, parse: true, postgres: false },
  'file-parsed-pg': { store: 'file', seal: true, parse: true, postgres: true },
} satisfies Record<string, ModeSpec>;
type Mode = keyof typeof MODES;

/** The parse thread's settings (workerData). */
interface ParseThreadData {
  postgresUrl: string | null;
}

/** An append-only file, written and fdatasynced once per batch of concurrent writes. */
async function durableFile(path: string): Promise<(body: Buffer) => Promise<void>> {
  const file = await open(path, 'a');
  let batch: Buffer[] = [];
  const barrier = createDurabilityBarrier(async () => {
    const bodies = batch;
    batch = [];
    if (bodies.length > 0) await file.writev(bodies);
    await file.datasync();
  });
  return (body) => {
    batch.push(body);
    return barrier.durable();
  };
}

/** The child: smtp-server on `port` storing each message as `mode` says (the parse thread's Postgres at `postgresUrl`). */
async function serve(mode: Mode, port: number, postgresUrl: string | null): Promise<void> {
  const spec: ModeSpec = MODES[mode];
  const dir = mkdtempSync(join(tmpdir(), 'mailstead-floor-'));
  const key = randomBytes(32);
  const stores = {
    none: async () => async () => undefined,
    sqlite: async () => durableRows(dir),
    file: () => durableFile(join(dir, 'spool.log')),
  } satisfies Record<ModeSpec['store'], () => Promise<(body: Buffer) => Promise<void>>>;
  const store = await stores[spec.store]();
  const seal = spec.seal;
  const parse = spec.parse ? startParseThread({ postgresUrl: spec.postgres ? postgresUrl : null }) : null;
  let n = 0;
  let accepted = 0;
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
          () => {
            parse?.add(raw);
            accepted++;
            callback(null, 'Ok');
          },
          (err: Error) => callback(err),
        );
      });
    },
  });
  server.on('error', () => undefined); // a client reset when the load stops
  server.listen(port, '127.0.0.1', () => console.log('listening'));
  // The parent asks, when the load stops, how many messages were accepted and parsed by then.
  process.on('SIGUSR2', () => console.log(`counts ${accepted} ${parse?.parsed() ?? accepted}`));
  process.on('SIGTERM', () => {
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

/**
 * The parse thread of the parsing modes: the messages of one turn of the event loop cross in one message (as the
 * service's batches do); the thread parses each whole (its text read, its attachments drained), inserts the batch into
 * Postgres when it has one, and answers how many are done.
 */
function startParseThread(data: ParseThreadData): { add(raw: Buffer): void; parsed(): number } {
  const worker = new Worker(fileURLToPath(import.meta.url), { workerData: data });
  let parsed = 0;
  let batch: Uint8Array[] = [];
  worker.on('message', (count: number) => (parsed += count));
  worker.on('error', (err) => {
    console.error(err);
    process.exit(1);
  });
  return {
    add(raw) {
      if (batch.length === 0)
        setImmediate(() => {
          const buffers = batch;
          batch = [];
          worker.postMessage(
            buffers,
            buffers.map((b) => b.buffer as ArrayBuffer),
          );
        });
      batch.push(new Uint8Array(raw)); // a copy in a memory of its own, which moves to the thread
    },
    parsed: () => parsed,
  };
}

async function parseThread(data: ParseThreadData): Promise<void> {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    setPriority(tid, Math.min(19, getPriority(tid) + 10));
  } catch {
    // Not Linux: the same priority as the event loop.
  }
  let client: pg.Client | null = null;
  if (data.postgresUrl) {
    client = new pg.Client({ connectionString: data.postgresUrl, ssl: { rejectUnauthorized: false } });
    await client.connect();
  }
  const parseOne = async (raw: Uint8Array): Promise<{ subject: string; text: string; size: number }> => {
    const parser = new MailParser({ skipHtmlToText: true, skipTextToHtml: true, skipTextLinks: true, skipImageLinks: true });
    let subject = '';
    parser.on('headers', (headers: Map<string, unknown>) => (subject = String(headers.get('subject') ?? '')));
    parser.end(Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength));
    let text = '';
    for await (const part of parser as AsyncIterable<{ type: string; text?: string; content?: NodeJS.ReadableStream; release?: () => void }>) {
      if (part.type === 'attachment') {
        for await (const _ of part.content!) void _;
        part.release!();
      } else if (part.type === 'text') {
        text = part.text ?? '';
      }
    }
    return { subject, text, size: raw.byteLength };
  };
  // Parsed one batch at a time; the parsed rows go to Postgres in one INSERT while the next batches are parsed (one
  // INSERT in flight, the rows parsed meanwhile in the next).
  let parsing = Promise.resolve();
  let rows: { subject: string; text: string; size: number }[] = [];
  let inserting = false;
  const insert = async (): Promise<void> => {
    if (inserting || rows.length === 0) return;
    inserting = true;
    const batch = rows;
    rows = [];
    await client!.query('insert into inbound (subject, text, size) select * from unnest($1::text[], $2::text[], $3::int[])', [
      batch.map((r) => r.subject),
      batch.map((r) => r.text),
      batch.map((r) => r.size),
    ]);
    inserting = false;
    parentPort!.postMessage(batch.length);
    await insert();
  };
  parentPort!.on('message', (buffers: Uint8Array[]) => {
    parsing = parsing.then(async () => {
      for (const raw of buffers) rows.push(await parseOne(raw));
      if (!client) {
        parentPort!.postMessage(rows.length);
        rows = [];
        return;
      }
      insert().catch((err: unknown) => {
        console.error(err);
        process.exit(1);
      });
    });
  });
}

async function startFloor(mode: Mode, postgresUrl: string | null): Promise<{ child: ChildProcess; port: number }> {
  const port = await freePort();
  const args = [fileURLToPath(import.meta.url), '--serve', mode, String(port), ...(postgresUrl ? [postgresUrl] : [])];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  child.stdout!.resume();
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
  console.log(
    `${sessions} SMTP sessions for ${seconds} s, ~5 KB messages, from ${sourcePath ? `smtp-source (${sourcePath})` : 'the Node generator'} (Node ${process.version})`,
  );

  const modes = (process.env.BENCH_MODES?.split(',') ?? Object.keys(MODES)) as Mode[];
  for (const mode of modes) if (!(mode in MODES)) throw new Error(`BENCH_MODES: no mode ${mode} (${Object.keys(MODES).join(', ')})`);
  const postgres = modes.some((m) => MODES[m].postgres) ? await startPostgres({ certificate: 'trusted' }) : null;
  try {
    for (let round = 1; round <= rounds; round++) await runRound(round);
  } finally {
    await postgres?.stop();
  }
  console.log('bench:inbound against the same sink carries the whole service on top of these (target: ratio 0.30).');

  async function runRound(round: number): Promise<void> {
    if (postgres) {
      const client = await postgres.connect();
      await client.query(
        'drop table if exists inbound; create table inbound (id bigserial primary key, subject text not null, text text not null, size int not null)',
      );
      await client.end();
    }
    const rates = new Map<string, { rate: number; cpu: number; accepted: number }>();
    for (const mode of modes) {
      const floor = await startFloor(mode, postgres && MODES[mode].postgres ? postgres.url('127.0.0.1') : null);
      const cpuBefore = cpuSeconds(floor.child.pid!);
      const result = await load(floor.port);
      const counts = await countsOf(floor.child);
      const cpu = cpuSeconds(floor.child.pid!) - cpuBefore;
      await stop(floor.child);
      const done = Math.min(result.accepted, counts.parsed);
      rates.set(mode, { rate: done / result.seconds, accepted: result.accepted / result.seconds, cpu: (cpu * 1e6) / Math.max(1, result.accepted) });
    }
    const sink = sinkPath ? await startPostfixSink(sinkPath) : await startNodeSink();
    const baseline = await load(sink.port).finally(() => sink.stop());
    const baseRate = baseline.accepted / baseline.seconds;
    console.log(`round ${round}: ${sink.name} ${baseRate.toFixed(0)} messages/s`);
    for (const [mode, { rate, cpu, accepted }] of rates) {
      const alsoAccepted = accepted > rate * 1.005 ? `, ${accepted.toFixed(0)} accepted/s, the rest parsed after the load` : '';
      console.log(
        `  ${mode.padEnd(14)} ${rate.toFixed(0).padStart(6)} messages/s  ratio ${(rate / baseRate).toFixed(2)}  (the process's CPU ${cpu.toFixed(0)} µs a message${alsoAccepted})`,
      );
    }
  }
}

/** What the floor process had accepted, and parsed, when the load stopped (it prints them on SIGUSR2). */
function countsOf(child: ChildProcess): Promise<{ accepted: number; parsed: number }> {
  return new Promise((resolve) => {
    const onData = (chunk: Buffer) => {
      const m = /counts (\d+) (\d+)/.exec(chunk.toString());
      if (!m) return;
      child.stdout!.off('data', onData);
      resolve({ accepted: Number(m[1]), parsed: Number(m[2]) });
    };
    child.stdout!.on('data', onData);
    child.kill('SIGUSR2');
  });
}

if (!isMainThread) {
  parseThread(workerData as ParseThreadData).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
} else if (process.argv[2] === '--serve') {
  serve(process.argv[3] as Mode, Number(process.argv[4]), process.argv[5] ?? null).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}

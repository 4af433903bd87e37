import { findPostfixTool, runSmtpSource, startBenchSink, startPrivatePostfix, type BenchSink } from './postfix.js';
import { PG_TEST_CA_FILE, type TestPostgres, benchPostgresMode, startPostgres, stateUrlOf } from '../lib/postgres.js';
import { type DeliveryFigures, measureDelivery, startBenchRig } from './rig.js';

/**
 * Mailstead against Postfix on the same machine, in the same run, into the same Postfix `smtp-sink`: a private Postfix
 * (its own configuration, queue and data directories under a temporary folder; smtpd on a loopback port, relayhost the
 * sink, 20 connections to it) is handed N ~5 KB messages by `smtp-source` over 20 sessions, and timed from the first
 * connection until the sink has received all N and the queue is empty; then Mailstead takes the same N through
 * `POST /emails` from 20 keep-alive clients and is timed from the first request until the sink has received all N.
 * Each side first takes as many messages as it is then timed on (`BENCH_WARMUP`, default N), untimed: the figures
 * are a running server's, with V8's optimizing compiler done with the hot paths (a 300-message warm-up left
 * Mailstead's timed phase at 1.2-1.3 s of CPU per 1000 messages instead of 1.0; scripts/bench/README.md). Prints both
 * rates and the ratio, `BENCH_RUNS` times. Needs root and Debian's `postfix` package (smtp-sink, smtp-source, postfix).
 * With `STATE_URL=postgresql://...` (an empty database of its own, `SECRET_KEY` beside it) or `BENCH_POSTGRES=embedded`
 * (an embedded Postgres with TLS on loopback, started here; `embedded-plain`: the same over plain TCP), each run also times Mailstead with its state on that
 * Postgres, into the same sink, and prints its ratio to the same Postfix figure (target 1.0x). Postfix is timed before
 * Mailstead and again after it in each run (ABA); both engines are held to the mean of the two.
 * Run: npm run bench:vs-postfix   (env BENCH_MESSAGES, default 3000; BENCH_RUNS, default 3; BENCH_WARMUP, default N)
 */
const total = Number(process.env.BENCH_MESSAGES ?? 3000);
const runs = Number(process.env.BENCH_RUNS ?? 3);
const SESSIONS = 20;
const WARMUP = Number(process.env.BENCH_WARMUP ?? total);
const MESSAGE_BYTES = 5 * 1024;
const TARGET = 1.5;
/** With the state on Postgres (issue 36). */
const TARGET_POSTGRES = 1.0;

async function waitFor(done: () => boolean, what: string, ms = 300_000): Promise<void> {
  const until = Date.now() + ms;
  while (!done()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Postfix relaying `count` messages from smtp-source to the sink: messages/s from the first connection to the last delivery. */
async function postfixRate(postfix: string, source: string, sink: BenchSink): Promise<number> {
  const instance = await startPrivatePostfix(postfix, sink.port, SESSIONS);
  try {
    const inject = async (count: number) => {
      const before = sink.delivered();
      const started = Date.now();
      await runSmtpSource(source, {
        port: instance.port,
        messages: count,
        sessions: SESSIONS,
        bytes: MESSAGE_BYTES,
        from: 'orders@bench.example',
        to: 'customer@example.net',
      });
      await waitFor(() => sink.delivered() - before >= count && instance.queueEmpty(), 'Postfix to deliver');
      const last = sink.times()[before + count - 1]!;
      return count / ((last - started) / 1000);
    };
    await inject(WARMUP);
    return await inject(total);
  } finally {
    await instance.stop();
  }
}

async function mailsteadRate(sink: BenchSink, stateEnv: Record<string, string> = {}): Promise<DeliveryFigures> {
  const rig = await startBenchRig(stateEnv, sink);
  try {
    const { headers } = await rig.newSender('Bench', 'bench.example');
    await measureDelivery(rig, headers, WARMUP, SESSIONS);
    const f = await measureDelivery(rig, headers, total, SESSIONS);
    if (f.refused > 0 || f.delivered < total) throw new Error(`Mailstead refused ${f.refused} and delivered ${f.delivered} of ${total}`);
    return f;
  } finally {
    await rig.close();
  }
}

async function main(): Promise<void> {
  const postfix = findPostfixTool('postfix');
  const source = findPostfixTool('smtp-source');
  if (!postfix || !source || !findPostfixTool('smtp-sink')) {
    console.error('bench:vs-postfix needs Postfix (apt-get install postfix: postfix, smtp-source, smtp-sink); nothing was measured');
    process.exit(2);
  }
  console.log(
    `${total} messages of ~${MESSAGE_BYTES / 1024} KB each side, ${SESSIONS} connections to the sink, Postfix's smtp-sink on loopback (Node ${process.version})`,
  );
  // The state on Postgres too: the one STATE_URL names, or an embedded one started here.
  const embedded = process.env.STATE_URL === undefined ? benchPostgresMode() : null;
  const started: TestPostgres | null = embedded ? await startPostgres({ certificate: 'trusted' }) : null;
  const stateUrl = process.env.STATE_URL ?? (started && embedded ? stateUrlOf(started, 'postgres', embedded) : undefined);
  let met = 0;
  let metPostgres = 0;
  const figures = (f: DeliveryFigures) =>
    `all accepted by the API after ${f.acceptSeconds.toFixed(2)} s of ${f.seconds.toFixed(2)}, CPU ${f.cpuPer1000.toFixed(2)} s per 1000 (the benchmark's own process ${f.loadCpuPer1000.toFixed(2)}), peak RSS ${f.peakRssMb.toFixed(0)} MB, p99 send-to-delivered ${f.p99} ms`;
  try {
    for (let run = 1; run <= runs; run++) {
      const sink = await startBenchSink();
      try {
        // Postfix timed before Mailstead and again after it (ABA), its mean the figure both engines are held to: the
        // VM's speed drifts within a run by as much as the margins measured.
        const before = await postfixRate(postfix, source, sink);
        const ours = await mailsteadRate(sink);
        let onPostgres: DeliveryFigures | null = null;
        if (stateUrl !== undefined) {
          // A fresh database for each run (the embedded server's), or the one given, emptied by the caller between runs.
          let url = stateUrl;
          if (started) {
            await started.admin(`create database vs_postfix_${run}`);
            url = stateUrl.replace('/postgres?', `/vs_postfix_${run}?`);
          }
          onPostgres = await mailsteadRate(sink, {
            STATE_URL: url,
            SECRET_KEY: process.env.SECRET_KEY ?? 'ab'.repeat(32),
            NODE_EXTRA_CA_CERTS: PG_TEST_CA_FILE,
          });
        }
        const after = await postfixRate(postfix, source, sink);
        const theirs = (before + after) / 2;
        const ratio = ours.rate / theirs;
        if (ratio >= TARGET) met++;
        console.log(
          `run ${run}: Postfix ${theirs.toFixed(0)} messages/s (${before.toFixed(0)} before Mailstead, ${after.toFixed(0)} after), Mailstead ${ours.rate.toFixed(0)} messages/s (DKIM-signed; ${figures(ours)}): ratio ${ratio.toFixed(2)}`,
        );
        if (onPostgres) {
          const ratioPostgres = onPostgres.rate / theirs;
          if (ratioPostgres >= TARGET_POSTGRES) metPostgres++;
          console.log(
            `run ${run}: Mailstead with its state on Postgres ${onPostgres.rate.toFixed(0)} messages/s (${figures(onPostgres)}): ratio ${ratioPostgres.toFixed(2)} to the same Postfix figure, ${(onPostgres.rate / ours.rate).toFixed(2)} of SQLite's`,
          );
        }
      } finally {
        await sink.stop();
      }
    }
  } finally {
    await started?.stop();
  }
  console.log(`target ${TARGET}x Postfix: met in ${met} of ${runs} runs`);
  if (stateUrl !== undefined) console.log(`with the state on Postgres, target ${TARGET_POSTGRES}x Postfix: met in ${metPostgres} of ${runs} runs`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

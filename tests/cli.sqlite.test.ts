import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * The CLI on DATA_DIR's SQLite file itself: a DATA_DIR without the file is refused, naming the file, and nothing is
 * created (the server makes the database on its first start: tests/cli.test.ts, on either engine). SQLite only: on
 * Postgres the state is no file in DATA_DIR.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
let dataDir: string;

function cli(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['dist/server/app/cli.js', ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? tmpdir(), DATA_DIR: dataDir, MAIL_HOSTNAME: 'mx.mailstead.test' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

beforeAll(() => {
  dataDir = join(mkdtempSync(join(tmpdir(), 'mailstead-cli-sqlite-')), 'data');
});
afterAll(() => {
  rmSync(join(dataDir, '..'), { recursive: true, force: true });
});

describe('first run', () => {
  it('the CLI refuses a DATA_DIR that holds no database, naming the path, and creates nothing', async () => {
    for (const args of [
      ['accounts', 'list'],
      ['accounts', 'create', '--name', 'Acme'],
      ['admin-token', 'reset'],
    ]) {
      const res = await cli(...args);
      expect(res.code, res.stderr).toBe(1);
      expect(res.stdout).toBe('');
      const lines = res.stderr.split('\n').filter((l) => l !== '');
      expect(lines, res.stderr).toHaveLength(1);
      expect(lines[0]).toContain(join(dataDir, 'mailstead.db'));
      expect(existsSync(dataDir)).toBe(false);
    }
    // A directory that exists but holds no database is refused alike, and left empty.
    mkdirSync(dataDir, { mode: 0o700 });
    const res = await cli('accounts', 'list');
    expect(res.code, res.stderr).toBe(1);
    expect(res.stderr).toContain(join(dataDir, 'mailstead.db'));
    expect(readdirSync(dataDir)).toEqual([]);
  });
});

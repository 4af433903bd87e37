import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { DatabaseTooNewError, databasePath, openDatabase } from '../db/client.js';
import { ROOT, processEnv } from './helpers/service-process.js';

/**
 * A DATA_DIR migrated by a newer Mailstead is refused by an older one (a rolled-back image, say): drizzle's migrator
 * applies only what is newer than the database's newest migration, so the older build would start and write rows
 * without the columns the newer one added, rows the newer one would then not see.
 */

const journal = JSON.parse(readFileSync(join(ROOT, 'db/migrations/meta/_journal.json'), 'utf8')) as { entries: { when: number }[] };
const newestKnown = Math.max(...journal.entries.map((e) => e.when));

/** A data directory as a newer version leaves it: every migration of this build, then one more. */
function migratedByNewerVersion(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ms-downgrade-'));
  openDatabase(dir).close();
  const sqlite = new Database(databasePath(dir));
  sqlite.prepare('insert into __drizzle_migrations (hash, created_at) values (?, ?)').run('a-later-migration', newestKnown + 86_400_000);
  sqlite.close();
  return dir;
}

function run(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    // A server that starts anyway (the rule broken) is stopped, not left running.
    const deadline = setTimeout(() => child.kill('SIGKILL'), 15_000);
    child.on('close', () => clearTimeout(deadline));
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('a database migrated by a newer version', () => {
  it('is refused by openDatabase, naming the path, and left as it was', () => {
    const dir = migratedByNewerVersion();
    expect(() => openDatabase(dir)).toThrow(DatabaseTooNewError);
    expect(() => openDatabase(dir)).toThrow(`${databasePath(dir)} was migrated by a newer Mailstead`);
    const sqlite = new Database(databasePath(dir));
    expect((sqlite.prepare('select count(*) as n from __drizzle_migrations').get() as { n: number }).n).toBe(journal.entries.length + 1);
    sqlite.close();
  });

  it('stops the server at start (exit 1, one line, nothing listening) and the CLI (exit 1)', async () => {
    const dir = migratedByNewerVersion();
    const env = processEnv(dir);
    const server = await run(['dist/server/app/main.js'], env);
    expect(server.code, server.stderr).toBe(1);
    expect(server.stderr).toContain('was migrated by a newer Mailstead');
    expect(server.stdout).not.toContain('http.listening');
    const cli = await run(['dist/server/app/cli.js', 'accounts', 'list'], env);
    expect(cli.code, cli.stderr).toBe(1);
    expect(cli.stderr).toContain('downgrade is not supported');
    expect(cli.stdout).toBe('');
  }, 30_000);

  it('a database at this build’s own migrations opens, again and again', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ms-downgrade-'));
    openDatabase(dir).close();
    openDatabase(dir).close();
  });
});

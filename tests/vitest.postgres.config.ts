import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * `npm run test:postgres`: the same tests as `npm test` with every service's state on a real Postgres
 * (tests/helpers/postgres-state-setup.ts, tests/helpers/test-state.ts). Left out: the tests of SQLite's own machinery,
 * which has no Postgres twin; `npm test` runs them.
 */
export const SQLITE_ONLY = [
  // /metrics' scans on the checkpoint thread (the rest of /metrics runs on both engines).
  'tests/metrics.sqlite.test.ts',
  // The dashboard overview's scans on the checkpoint thread (the rest of the overview runs on both engines).
  'tests/dashboard-overview.sqlite.test.ts',
  // The group commit's batches, savepoints and WAL flushes (db/group-commit.ts); queues.sqlite: the queues' wake after them.
  'tests/group-commit.test.ts',
  'tests/queues.sqlite.test.ts',
  // The one connection's units of work (db/sqlite-connection.ts).
  'tests/sqlite-connection.test.ts',
  // The WAL checkpoint thread and its own connection to DATA_DIR's file (db/checkpointer.ts).
  'tests/checkpointer.test.ts',
  // SIGKILLs against DATA_DIR's SQLite file: integrity_check of the file after each kill, the queue counted in the
  // file (a Postgres twin would count the queue in the state database; not written yet).
  'tests/chaos-kill.test.ts',
  // Store faults made with SQLite itself (a user function throwing SQLITE_CORRUPT, RAISE in a trigger) and /healthz's
  // window after them; healthz-background: a failed write or flush of the group commit under the delivery engine.
  'tests/healthz.test.ts',
  'tests/healthz-background.test.ts',
  // A full disk as SQLite meets it (max_page_count, SQLITE_FULL) and the store closed to writes after it.
  'tests/full-disk.test.ts',
  // DATA_DIR's files on a first start (server.lock, a generated secret.key), the WAL flush and its failures
  // (fsyncgate), SQLite's own fsync failing. (Its spool-file fsync tests hold on Postgres too: not split out yet.)
  'tests/durability.test.ts',
  // DATA_DIR's SQLite file migrated by a newer version (the Postgres twin is in pg-state.test.ts).
  'tests/downgrade.test.ts',
  // Idempotency where the group commit's flush decides the moment (held, failed).
  'tests/send-idempotency.sqlite.test.ts',
  // Inbound mail whose commit's WAL flush failed (the group commit's failure).
  'tests/inbound.sqlite.test.ts',
  // The CLI refusing a DATA_DIR without its SQLite file (the rest of the CLI runs on both engines: cli.test.ts).
  'tests/cli.sqlite.test.ts',
  // npm run dev: the developer's local mode on a DATA_DIR (its dev-admin-token file, a database npm start made there).
  'tests/dev-mode.test.ts',
  // The move from a DATA_DIR's SQLite file to a Postgres of its own (state copy): its source is the file itself.
  'tests/state-move.test.ts',
];

export default defineConfig({
  root: fileURLToPath(new URL('..', import.meta.url)),
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['**/node_modules/**', ...SQLITE_ONLY],
    globalSetup: ['tests/helpers/global-setup.ts', 'tests/helpers/postgres-state-setup.ts'],
    // Every file runs in the one worker's process, its modules loaded once (tests/helpers/each-file.ts resets what a
    // module keeps between files): a fresh process per file spent most of the run importing.
    isolate: false,
    setupFiles: ['tests/helpers/each-file.ts'],
    testTimeout: 20_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});

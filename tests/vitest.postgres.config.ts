import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * `npm run test:postgres`: the same tests as `npm test` with every service's state on a real Postgres
 * (tests/helpers/postgres-state-setup.ts, tests/helpers/test-state.ts). Left out: the tests of SQLite's own machinery,
 * which has no Postgres twin; `npm test` runs them.
 */
export const SQLITE_ONLY = [
  // The group commit's batches, savepoints and WAL flushes (db/group-commit.ts).
  'tests/group-commit.test.ts',
  // The one connection's units of work (db/sqlite-connection.ts).
  'tests/sqlite-connection.test.ts',
];

export default defineConfig({
  root: fileURLToPath(new URL('..', import.meta.url)),
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['**/node_modules/**', ...SQLITE_ONLY],
    globalSetup: ['tests/helpers/global-setup.ts', 'tests/helpers/postgres-state-setup.ts'],
    testTimeout: 20_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});

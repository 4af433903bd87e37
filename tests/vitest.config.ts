import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  root: fileURLToPath(new URL('..', import.meta.url)),
  test: {
    include: ['tests/**/*.test.ts'],
    // Postgres's own machinery (several nodes over one state database): `npm run test:postgres` runs these.
    exclude: ['**/node_modules/**', 'tests/**/*.postgres.test.ts'],
    globalSetup: ['tests/helpers/global-setup.ts'],
    // Every file runs in the one worker's process, its modules loaded once (tests/helpers/each-file.ts resets what a
    // module keeps between files): a fresh process per file spent most of the run importing.
    isolate: false,
    setupFiles: ['tests/helpers/each-file.ts'],
    testTimeout: 20_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});

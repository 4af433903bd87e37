import { restartIdOrder } from '../../server/shared/ids.js';

/**
 * Runs before each test file (both vitest configs' setupFiles). The runner runs many files in one process
 * (`isolate: false`, for speed: the product's modules load once), so what a module keeps for the whole life of a
 * service is reset here to how a fresh process starts: the time of the last id (server/shared/ids.ts), which a file
 * whose fake clock ran ahead would otherwise carry into the next file's ids.
 */
restartIdOrder();

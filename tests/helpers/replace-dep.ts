import type { Deps } from '../../server/core/deps.js';

/**
 * Puts another piece in place of one of a test service's dependencies (a group commit that fails or waits) and returns
 * the one it replaced. Deps is read-only to the product, which builds it once; only a test swaps a piece mid-run.
 */
export function replaceDep<K extends keyof Deps>(deps: Deps, key: K, value: Deps[K]): Deps[K] {
  const writable = deps as { -readonly [P in keyof Deps]: Deps[P] };
  const was = writable[key];
  writable[key] = value;
  return was;
}

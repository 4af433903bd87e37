import { describe, expect, it } from 'vitest';
import { createMemoryLogger } from '../server/shared/logger.js';
import { runStopSteps } from '../server/app/shutdown.js';

/**
 * The server's stop (server/app/main.ts): every step runs to its end even when one before it fails (a database damaged
 * under the running server fails the steps that write to it, yet the lock must be released and the process exit),
 * each failure one `process.stop_failed` line naming its step, nothing thrown.
 */
describe('runStopSteps', () => {
  it('runs every step in order, sync and async, and resolves true when none fails', async () => {
    const ran: string[] = [];
    const logger = createMemoryLogger();
    const ok = await runStopSteps(
      [
        ['a', () => void ran.push('a')],
        [
          'b',
          async () => {
            await new Promise((r) => setTimeout(r, 5));
            ran.push('b');
          },
        ],
        ['c', () => void ran.push('c')],
      ],
      logger,
    );
    expect(ok).toBe(true);
    expect(ran).toEqual(['a', 'b', 'c']);
    expect(logger.entries).toEqual([]);
  });

  it('a step that throws or rejects is logged by name and the steps after it still run; resolves false', async () => {
    const ran: string[] = [];
    const logger = createMemoryLogger();
    const ok = await runStopSteps(
      [
        [
          'webhooks',
          () => {
            throw Object.assign(new Error('database disk image is malformed'), { code: 'SQLITE_CORRUPT' });
          },
        ],
        ['checkpointer', () => Promise.reject(new Error('gone'))],
        ['lock', () => void ran.push('lock')],
      ],
      logger,
    );
    expect(ok).toBe(false);
    expect(ran).toEqual(['lock']);
    expect(logger.entries.map((e) => [e.level, e.event, e.step])).toEqual([
      ['error', 'process.stop_failed', 'webhooks'],
      ['error', 'process.stop_failed', 'checkpointer'],
    ]);
  });
});

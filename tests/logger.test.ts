import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LOG_FLUSH_BYTES, LOG_FLUSH_MS, createLogger, stdoutBatched } from '../server/shared/logger.js';

/** The service's stdout logger (server/shared/logger.ts): one write per LOG_FLUSH_MS at most, nothing lost at exit. */
describe('stdoutBatched', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('writes the lines that came within LOG_FLUSH_MS together, in order, once that time is over', () => {
    vi.useFakeTimers();
    const writes: string[] = [];
    const logger = createLogger('info', stdoutBatched({ write: (chunk: string) => writes.push(chunk) }));
    logger.info('one', { n: 1 });
    vi.advanceTimersByTime(LOG_FLUSH_MS - 1);
    logger.warn('two');
    logger.debug('below the level');
    expect(writes).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(writes).toHaveLength(1);
    expect(
      writes[0]!
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l).event),
    ).toEqual(['one', 'two']);
    logger.error('three');
    expect(writes).toHaveLength(1);
    vi.advanceTimersByTime(LOG_FLUSH_MS);
    expect(writes).toHaveLength(2);
  });

  it('writes at once when LOG_FLUSH_BYTES are held', () => {
    vi.useFakeTimers();
    const writes: string[] = [];
    const logger = createLogger('info', stdoutBatched({ write: (chunk: string) => writes.push(chunk) }));
    const filler = 'x'.repeat(1000);
    let n = 0;
    // 200 lines of ~1 KB are three times the bound: a logger that only writes on its timer has written nothing.
    while (writes.length === 0 && n < 200) logger.info('filler', { n: n++, filler });
    expect(writes).toHaveLength(1);
    // Written by the line that took it over the bound, not before it, and without any time passing.
    const lines = writes[0]!.split('\n').filter(Boolean);
    expect(lines).toHaveLength(n);
    expect(writes[0]!.length).toBeGreaterThanOrEqual(LOG_FLUSH_BYTES);
    expect(writes[0]!.length - lines.at(-1)!.length - 1).toBeLessThan(LOG_FLUSH_BYTES);
  });

  it('flush() writes what it holds at once (main flushes its start line before telling npm run dev it started)', () => {
    vi.useFakeTimers();
    const writes: string[] = [];
    const write = stdoutBatched({ write: (chunk: string) => writes.push(chunk) });
    const logger = createLogger('info', write);
    logger.info('server.started');
    expect(writes).toEqual([]);
    write.flush();
    expect(writes.map((w) => JSON.parse(w).event)).toEqual(['server.started']);
    // Nothing held, nothing written; the timer it cancelled writes nothing twice.
    write.flush();
    vi.advanceTimersByTime(LOG_FLUSH_MS);
    expect(writes).toHaveLength(1);
  });

  it('writes what it holds when the process exits at once, and when it dies of an uncaught error', () => {
    const logger = fileURLToPath(new URL('../dist/server/shared/logger.js', import.meta.url));
    const run = (body: string) => {
      try {
        return execFileSync(
          process.execPath,
          ['--input-type=module', '-e', `import { createLogger } from ${JSON.stringify(logger)}; const log = createLogger('info'); ${body}`],
          { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] },
        );
      } catch (err) {
        return (err as { stdout: string }).stdout;
      }
    };
    expect(JSON.parse(run(`log.info('last words'); process.exit(3);`)).event).toBe('last words');
    expect(JSON.parse(run(`log.error('before the throw'); throw new Error('boom');`)).event).toBe('before the throw');
  });
});

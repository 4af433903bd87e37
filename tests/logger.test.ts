import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createLogger, stdoutBatched } from '../server/logger.js';

/** The service's stdout logger (server/logger.ts): one write per turn of the event loop, nothing lost at exit. */
describe('stdoutBatched', () => {
  it('writes the lines of one turn together, in order, once the turn is over', async () => {
    const writes: string[] = [];
    const logger = createLogger('info', stdoutBatched({ write: (chunk: string) => writes.push(chunk) }));
    logger.info('one', { n: 1 });
    logger.warn('two');
    logger.debug('below the level');
    expect(writes).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(writes).toHaveLength(1);
    expect(writes[0]!.split('\n').filter(Boolean).map((l) => JSON.parse(l).event)).toEqual(['one', 'two']);
    logger.error('three');
    await new Promise((r) => setImmediate(r));
    expect(writes).toHaveLength(2);
  });

  it('writes what it holds when the process exits at once, and when it dies of an uncaught error', () => {
    const logger = fileURLToPath(new URL('../dist/server/logger.js', import.meta.url));
    const run = (body: string) => {
      try {
        return execFileSync(process.execPath, ['--input-type=module', '-e', `import { createLogger } from ${JSON.stringify(logger)}; const log = createLogger('info'); ${body}`], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
      } catch (err) {
        return (err as { stdout: string }).stdout;
      }
    };
    expect(JSON.parse(run(`log.info('last words'); process.exit(3);`)).event).toBe('last words');
    expect(JSON.parse(run(`log.error('before the throw'); throw new Error('boom');`)).event).toBe('before the throw');
  });
});

import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ephemeralRange, freePort } from '../scripts/lib/free-port.js';

/**
 * The tests' port picker: a port handed to a peer before it listens must not be one an outgoing connection's local
 * port (or another `listen(0)`) can take meanwhile, so it comes from below the kernel's ephemeral range; and one
 * process never gets the same port twice.
 */
describe('freePort', () => {
  it('gives ports below the ephemeral range, free, and never the same one twice', async () => {
    const ephemeral = ephemeralRange();
    const ports: number[] = [];
    for (let i = 0; i < 50; i++) ports.push(await freePort());
    expect(new Set(ports).size).toBe(ports.length);
    for (const port of ports) expect(port < ephemeral.low || port > ephemeral.high, `${port} is in the ephemeral range`).toBe(true);
    // Each is really free: listening on it works.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(ports[0], '127.0.0.1', resolve));
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('skips a port that is taken', async () => {
    const taken = await freePort();
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(taken, '127.0.0.1', resolve));
    try {
      for (let i = 0; i < 20; i++) expect(await freePort()).not.toBe(taken);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/**
 * The ports handed out come from below Linux's ephemeral range (32768-60999 by default), where neither an outgoing
 * connection's local port nor a `listen(0)` can land: a port from `listen(0)`, closed and handed to a peer, could be
 * taken by any outgoing connection (to Postgres, to a sink) before the peer listened on it, and the peer's listen failed
 * with EADDRINUSE (seen in CI). Each vitest worker (VITEST_POOL_ID) draws from a slice of its own, and no port is handed
 * out twice in one process, so two workers or two callers do not get the same port.
 */
const SLICES = 8;
const given = new Set<number>();

/** The kernel's ephemeral range (Linux's default when it cannot be read). */
export function ephemeralRange(): { low: number; high: number } {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (low !== undefined && high !== undefined && Number.isInteger(low) && Number.isInteger(high)) return { low, high };
  } catch {
    // not Linux: its default below
  }
  return { low: 32_768, high: 60_999 };
}

/** Up to 12,000 ports below the ephemeral range, or above it when there is no room below. */
function band(): { low: number; high: number } {
  const { low, high } = ephemeralRange();
  if (low - 10_000 >= SLICES * 100) return { low: Math.max(10_000, low - 12_000), high: low };
  if (65_535 - high >= SLICES * 100) return { low: high + 1, high: 65_536 };
  return { low: 10_000, high: 65_536 };
}

function slice(): { from: number; size: number } {
  const { low, high } = band();
  const size = Math.floor((high - low) / SLICES);
  const pool = Number(process.env.VITEST_POOL_ID ?? process.pid);
  const index = Number.isFinite(pool) ? Math.abs(Math.trunc(pool)) % SLICES : 0;
  return { from: low + index * size, size };
}

function tryListen(port: number, address: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, address, () => server.close(() => resolve(true)));
  });
}

async function freeOnAll(port: number, addresses: readonly string[]): Promise<boolean> {
  for (const address of addresses) if (!(await tryListen(port, address))) return false;
  return true;
}

/**
 * A TCP port free right now on each of `addresses` (127.0.0.1 unless told; listened on and closed), for a peer that
 * must be told its port up front.
 */
export async function freePort(addresses: readonly string[] = ['127.0.0.1']): Promise<number> {
  const { from, size } = slice();
  const start = Math.floor(Math.random() * size);
  for (let i = 0; i < size; i++) {
    const port = from + ((start + i) % size);
    if (given.has(port)) continue;
    if (await freeOnAll(port, addresses)) {
      given.add(port);
      return port;
    }
  }
  throw new Error(`no free port in ${from}-${from + size - 1}`);
}

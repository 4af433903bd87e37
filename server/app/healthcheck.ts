import { isIPv6 } from 'node:net';
import { pathToFileURL } from 'node:url';
import { loadConfig } from '../shared/config.js';

/**
 * The container's HEALTHCHECK: `GET /healthz` on the address the server listens on, read from the same environment
 * (HTTP_HOST, HTTP_PORT) through the one config module. Exit 0 when it answers 2xx, 1 otherwise, with the reason on
 * stderr (Docker keeps it in `docker inspect`).
 */

const TIMEOUT_MS = 4_000;

/** Where a client on this machine reaches a server listening on `host`:`port`. */
export function healthzUrl(host: string, port: number): string {
  // A wildcard listens on every address: loopback is one of them.
  const reach = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
  return `http://${isIPv6(reach) ? `[${reach}]` : reach}:${port}/healthz`;
}

async function main(): Promise<number> {
  let url: string;
  try {
    const config = loadConfig(process.env);
    if (config.httpPort === 0) throw new Error('HTTP_PORT is 0 (a port picked at start): the health check cannot know it');
    url = healthzUrl(config.httpHost, config.httpPort);
  } catch (err) {
    process.stderr.write(`mailstead healthcheck: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) });
    const body = await res.text();
    if (res.ok) return 0;
    process.stderr.write(`mailstead healthcheck: ${url} answered ${res.status}: ${body.slice(0, 500)}\n`);
  } catch (err) {
    // fetch says only "fetch failed"; the cause says why (ECONNREFUSED, a timeout).
    const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
    process.stderr.write(`mailstead healthcheck: ${url}: ${err instanceof Error ? err.message : String(err)}${cause}\n`);
  }
  return 1;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) process.exitCode = await main();

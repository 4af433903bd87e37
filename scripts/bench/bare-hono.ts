import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { durableRows } from './durable-rows.js';

/**
 * The baseline the send API's targets are measured against: a bare Hono route on @hono/node-server that parses the JSON body it is sent (the same
 * body as the sends) and answers a small JSON body. With BARE_DURABLE=1, the floor under a send instead: the same
 * route also writes the body as one row through the service's group commit and answers once the WAL is fdatasynced
 * (what "durable before the 200" costs at the least, with no key, no check and no other row).
 */
const durable = process.env.BARE_DURABLE === '1';
let store: ((body: string) => Promise<void>) | null = null;
if (durable) {
  const dir = mkdtempSync(join(tmpdir(), 'mailstead-bare-'));
  store = durableRows(dir);
  process.on('SIGTERM', () => {
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

const app = new Hono().post('/bare', async (c) => {
  const body: unknown = await c.req.json();
  if (store) await store(JSON.stringify(body));
  return c.json({ id: '019a0000-0000-7000-8000-000000000000', sandbox: true });
});
serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) =>
  process.stdout.write(`${JSON.stringify({ event: 'http.listening', port: info.port })}\n`),
);

import { serve } from '@hono/node-server';
import { Hono } from 'hono';

/** The baseline: a bare Hono route on @hono/node-server answering a small JSON body. */
const app = new Hono().post('/bare', (c) => c.json({ id: '019a0000-0000-7000-8000-000000000000', sandbox: true }));
serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => process.stdout.write(`${JSON.stringify({ event: 'http.listening', port: info.port })}\n`));

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { operatorMessages } from '../db/schema/index.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * A real HAProxy (Debian's `haproxy`; .ci/run installs it when missing) in front of inbound SMTP with `send-proxy-v2`,
 * as docs/operating/behind-a-load-balancer.md configures it, health checks (`option smtpchk`, a v2 LOCAL header each)
 * included: the client the node records is the one that connected to HAProxy, not HAProxy. The full several-node
 * layout is tested elsewhere; this is the PROXY protocol as HAProxy writes it.
 */

const HOST = 'mx.mailstead.test';
let service: TestService;
let inbound: InboundServer;
let haproxy: ChildProcess;
let haproxyOutput = '';
let frontPort: number;
let dir: string;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Resolves once something accepts connections on the port. */
async function listening(port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`haproxy did not listen on ${port}: ${haproxyOutput}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  service = await startService({ SMTP_PROXY_PROTOCOL: 'true', MAIL_HOSTNAME: HOST });
  inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
  const nodePort = await inbound.listen('127.0.0.1', 0);
  frontPort = await freePort();
  dir = mkdtempSync(join(tmpdir(), 'mailstead-haproxy-'));
  const config = join(dir, 'haproxy.cfg');
  writeFileSync(
    config,
    [
      'defaults',
      '    mode tcp',
      '    timeout connect 2s',
      '    timeout client 30s',
      '    timeout server 30s',
      'frontend smtp_in',
      `    bind 127.0.0.1:${frontPort}`,
      '    default_backend smtp_nodes',
      'backend smtp_nodes',
      '    option smtpchk EHLO lb.mailstead.test',
      `    server node1 127.0.0.1:${nodePort} send-proxy-v2 check inter 200ms`,
      '',
    ].join('\n'),
  );
  // -db: in the foreground, so the test owns the process and its output.
  haproxy = spawn('haproxy', ['-db', '-f', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  haproxy.stdout?.on('data', (c: Buffer) => (haproxyOutput += c.toString()));
  haproxy.stderr?.on('data', (c: Buffer) => (haproxyOutput += c.toString()));
  haproxy.on('error', (err) => (haproxyOutput += `spawn failed: ${err.message}`));
  await listening(frontPort);
});

afterAll(async () => {
  if (haproxy && haproxy.exitCode === null) {
    const exited = new Promise((resolve) => haproxy.once('exit', resolve));
    haproxy.kill('SIGTERM');
    await exited;
  }
  await inbound?.close();
  await service?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('HAProxy with send-proxy-v2 in front of inbound SMTP', () => {
  it('the client that connected to HAProxy is the one recorded; HAProxy’s health checks are served, nothing refused', async () => {
    // The client connects from a loopback address of its own; HAProxy reaches the node from 127.0.0.1.
    const { client, banner } = await RawSmtp.connect(frontPort, { localAddress: '127.0.0.7' });
    try {
      expect(banner, haproxyOutput).toMatch(/^220 mx\.mailstead\.test ESMTP/);
      await client.envelope('reporter@remote.example', [`postmaster@${HOST}`], 'relay.remote.example');
      expect(await client.command('DATA')).toMatch(/^354 /);
      expect(await client.command('Subject: through haproxy\r\n\r\nHello.\r\n.')).toMatch(/^250 2\.0\.0 Ok: queued as /);
    } finally {
      client.close();
    }
    const rows = await service.deps.db.select().from(operatorMessages);
    expect(rows.map((r) => r.remoteAddress)).toEqual(['127.0.0.7']);
    // A few health checks (every 200 ms) have come by now: each a v2 LOCAL header, then EHLO.
    await new Promise((r) => setTimeout(r, 600));
    expect(service.logger.entries.filter((e) => e.event === 'inbound.proxy_refused')).toEqual([]);
    expect(haproxyOutput).not.toMatch(/is DOWN/);
  });
});

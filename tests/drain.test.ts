import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDnsServer } from './helpers/dns-server.js';
import {
  connectSendingDomain,
  createAccountWithCli,
  processApi,
  processEnv,
  runningProcesses,
  startServiceProcess,
  stateRows,
} from './helpers/service-process.js';
import { SmtpSink } from './helpers/smtp-sink.js';

/**
 * A stopping node drains (docs/operating/several-nodes.md): from the signal `/healthz` answers 503 `draining`, so a load
 * balancer takes it out, while for DRAIN_SECONDS it still answers what reaches it; its workers stop claiming at once
 * and finish what they hold; then it closes and exits 0. On both engines.
 */

let dns: TestDnsServer;
let sink: SmtpSink;
const dataDirs: string[] = [];

beforeAll(async () => {
  dns = await TestDnsServer.start();
  sink = await SmtpSink.start();
  dns.add('drain-rcpt.example', { type: 'MX', priority: 10, exchange: 'mx.drain-rcpt.example' });
  dns.add('mx.drain-rcpt.example', { type: 'A', address: '127.0.0.1' });
});

afterAll(async () => {
  for (const child of runningProcesses) child.kill('SIGKILL');
  await sink?.stop();
  await dns?.stop();
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
});

describe('a draining node', () => {
  it('answers /healthz 503 at once, still answers requests for DRAIN_SECONDS, claims nothing new, then exits 0', { timeout: 40_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-drain-'));
    dataDirs.push(dataDir);
    const env = processEnv(dataDir, { DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port), DRAIN_SECONDS: '2' });
    const proc = await startServiceProcess(env);
    const { key } = await createAccountWithCli(env, 'Drain');
    await connectSendingDomain(proc, dataDir, key, 'drain-shop.example.com');
    const send = (to: string) =>
      processApi(proc, key, 'POST', '/emails', {
        from: 'billing@drain-shop.example.com',
        to,
        template: { name: 'receipt', receiptNumber: 'R-1', total: '$10.00' },
      });
    const health = async () => {
      const res = await fetch(`http://127.0.0.1:${proc.port}/healthz`);
      return { status: res.status, body: (await res.json()) as { status: string } };
    };

    // Before: delivered as usual.
    expect((await send('before@drain-rcpt.example')).status).toBe(200);
    await expect.poll(() => sink.received.length, { timeout: 10_000 }).toBe(1);
    expect(await health()).toMatchObject({ status: 200, body: { status: 'ok' } });

    const signalled = Date.now();
    proc.child.kill('SIGTERM');
    await expect.poll(async () => (await health()).status, { timeout: 1_000, interval: 20 }).toBe(503);
    expect((await health()).body.status).toBe('draining');
    // Still answered while draining; queued, and not claimed by this node, which has stopped claiming.
    const during = await send('during@drain-rcpt.example');
    expect(during.status, JSON.stringify(during.body)).toBe(200);

    expect(await proc.exited).toEqual({ code: 0, signal: null });
    expect(Date.now() - signalled).toBeGreaterThanOrEqual(2_000);
    expect(sink.deliveredTo()).toEqual(['before@drain-rcpt.example']);
    const rows = await stateRows<{ recipient: string; status: string; locked_by: string | null }>(
      dataDir,
      'select recipient, status, locked_by from outbound_recipients where recipient = ?',
      ['during@drain-rcpt.example'],
    );
    expect(rows).toEqual([{ recipient: 'during@drain-rcpt.example', status: 'queued', locked_by: null }]);
  });
});

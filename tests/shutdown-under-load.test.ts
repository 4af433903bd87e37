import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { connectSendingDomain, createAccountWithCli, processEnv, runningProcesses, startServiceProcess } from './helpers/service-process.js';

/**
 * A graceful SIGTERM while clients keep sending (keep-alive connections, a request after each answer): once stopping,
 * each answer closes its connection. Before, a connection that got its next request at once was never idle, and the
 * stop waited for it for ever (README: the process stops and exits 0, idle or busy).
 */
const dir = mkdtempSync(join(tmpdir(), 'mailstead-sigterm-load-'));
afterAll(() => {
  for (const c of runningProcesses) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

it('exits 0 promptly on SIGTERM under a steady stream of sends', { timeout: 60_000 }, async () => {
  // Sandbox sends: no delivery at all, so only the HTTP side of the stop is in play.
  const env = processEnv(dir);
  const proc = await startServiceProcess(env);
  const { key } = await createAccountWithCli(env, 'Load');
  await connectSendingDomain(proc, dir, key, 'load-shop.example.com');
  let stop = false;
  let answered = 0;
  const body = JSON.stringify({
    from: 'billing@load-shop.example.com',
    to: 'x@example.com',
    sandbox: true,
    template: { name: 'receipt', receiptNumber: 'R-1', total: '$1.00' },
  });
  const clients = Array.from({ length: 4 }, async () => {
    while (!stop) {
      try {
        const res = await fetch(`${proc.base}/emails`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body,
        });
        await res.text();
        answered++;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  });
  await new Promise((r) => setTimeout(r, 500));
  const before = answered;
  const t0 = Date.now();
  proc.child.kill('SIGTERM');
  const exit = await Promise.race([proc.exited, new Promise((r) => setTimeout(() => r('still running after 15 s'), 15_000))]);
  const afterSignal = answered - before;
  stop = true;
  await Promise.all(clients);
  console.log(`exit: ${JSON.stringify(exit)} after ${Date.now() - t0} ms; ${afterSignal} requests answered after the SIGTERM`);
  console.log(proc.logs.filter((l) => l.includes('process.st')).join('\n'));
  expect(exit).toEqual({ code: 0, signal: null });
});

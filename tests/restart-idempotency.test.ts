import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { connectSendingDomain, createAccountWithCli, processEnv, runningProcesses, startServiceProcess, stateRows } from './helpers/service-process.js';

/**
 * After a SIGKILL, a retry with the same Idempotency-Key is a fresh attempt at once. The dead request's claim (state
 * 'running') outlived its process, and the retry was answered 409 idempotency_in_progress for up to 15 s though
 * nothing was in flight; the server now frees such claims when it starts (it holds DATA_DIR's lock: none is live).
 */
const dir = mkdtempSync(join(tmpdir(), 'mailstead-stale-claim-'));
afterAll(() => {
  for (const c of runningProcesses) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

it('a retry after a kill -9 is not refused as in progress', { timeout: 90_000 }, async () => {
  const env = processEnv(dir);
  let proc = await startServiceProcess(env);
  const { key } = await createAccountWithCli(env, 'Stale');
  await connectSendingDomain(proc, dir, key, 'stale-shop.example.com');
  const bodyOf = (n: number) =>
    JSON.stringify({
      from: 'billing@stale-shop.example.com',
      to: `r${n}@example.com`,
      sandbox: true,
      template: { name: 'receipt', receiptNumber: `R-${n}`, total: '$1.00' },
    });
  const post = (base: string, n: number) =>
    fetch(`${base}/emails`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'Idempotency-Key': `k-${n}` },
      body: bodyOf(n),
    }).then(async (r) => ({ status: r.status, body: await r.json() }));
  const runningClaims = async () =>
    (await stateRows<{ key: string }>(dir, "SELECT key FROM idempotency_keys WHERE state = 'running'")).map((r) => Number(r.key.slice(2)));

  // Keyed sends from 8 clients; SIGKILL at once when a claim is seen running (its send not yet committed).
  let next = 0;
  let stale: number[] = [];
  for (let tries = 0; tries < 10 && stale.length === 0; tries++) {
    let dead = false;
    void proc.exited.then(() => (dead = true));
    const clients = Array.from({ length: 8 }, async () => {
      while (!dead) await post(proc.base, next++).catch(() => undefined);
    });
    const end = Date.now() + 3000;
    while (Date.now() < end && (await runningClaims()).length === 0) await new Promise((r) => setImmediate(r));
    proc.child.kill('SIGKILL');
    await proc.exited;
    await Promise.all(clients);
    stale = await runningClaims();
    proc = await startServiceProcess(env);
  }
  expect(stale.length, 'a kill that left a claim running').toBeGreaterThan(0);

  // The restarted process: nothing is in flight (the retry was refused until 15 s after the dead claim).
  const retry = await post(proc.base, stale[0]!);
  console.log(`retry of k-${stale[0]} after the restart: ${retry.status} ${JSON.stringify(retry.body)}`);
  expect(retry.status, JSON.stringify(retry.body)).toBe(200);
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDnsServer } from './helpers/dns-server.js';
import { type Cluster, startCluster, until } from './helpers/several-nodes.js';
import { SmtpSink } from './helpers/smtp-sink.js';

/**
 * A node that is stopping drains (issue 37 part 5; docs/operating/several-nodes.md, Draining): on SIGTERM under load
 * it answers /healthz 503 while it finishes what it holds, so haproxy (the shipped configuration, checking /healthz)
 * takes it out and sends new requests to the others; it claims nothing after the signal; what it had claimed is
 * delivered, once; it exits 0. `npm run test:postgres` runs this file.
 */

const LEASE_MS = 120_000; // mta/delivery-engine.ts: a recipient's lease term, so a lease's claim time is locked_until - LEASE_MS.
let dns: TestDnsServer;
let sink: SmtpSink;
let cluster: Cluster;
const arrivals = new Map<string, number>();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  [dns, sink] = await Promise.all([TestDnsServer.start(), SmtpSink.start()]);
  sink.keepRaw = false;
  // Each message takes 300 ms at the sink: a node always has deliveries in flight.
  sink.data = (to) => {
    for (const t of to) arrivals.set(t.toLowerCase(), (arrivals.get(t.toLowerCase()) ?? 0) + 1);
    return new Promise((resolve) => setTimeout(() => resolve('accept'), 300));
  };
  dns.add('example.net', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
  dns.add('mx.example.net', { type: 'A', address: '127.0.0.1' });
  cluster = await startCluster({ env: { DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port), DRAIN_SECONDS: '3' } });
}, 120_000);

afterAll(async () => {
  await cluster?.close();
  await sink?.stop();
  await dns?.stop();
});

describe('a draining node', () => {
  it('answers /healthz 503, takes no new claims, finishes what it holds and leaves the balancer to the others', { timeout: 120_000 }, async () => {
    const sender = await cluster.newSender('Drain', 'drain.example');
    const node = cluster.nodes[1]!;
    const pid = node.proc!.child.pid!;
    let stop = false;
    const answers: number[] = [];
    let n = 0;
    const load = Array.from({ length: 4 }, async () => {
      while (!stop) {
        const i = n++;
        const res = await fetch(`${cluster.base}/emails`, {
          method: 'POST',
          headers: { authorization: `Bearer ${sender.key}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            from: `billing@${sender.domain}`,
            to: [`d${i}a@example.net`, `d${i}b@example.net`],
            template: { name: 'receipt', receiptNumber: `R-${i}`, total: '$1.00' },
          }),
          signal: AbortSignal.timeout(10_000),
        }).catch(() => null);
        answers.push(res?.status ?? 0);
        await res?.text();
        await sleep(20);
      }
    });
    // Every lease seen, with when it was taken (its deadline less the term).
    const claims = new Map<string, { holder: string; claimedAt: number; recipient: string }>();
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const rows = await cluster.state<{ id: string; recipient: string; locked_by: string; locked_until: number }>(
          'select id, recipient, locked_by, locked_until from outbound_recipients where locked_by is not null',
        );
        for (const r of rows)
          if (!claims.has(`${r.id} ${r.locked_by}`))
            claims.set(`${r.id} ${r.locked_by}`, { holder: r.locked_by, claimedAt: r.locked_until - LEASE_MS, recipient: r.recipient });
        await sleep(20);
      }
    })();

    await sleep(2500);
    const heldAtSignal = await cluster.state<{ recipient: string }>('select recipient from outbound_recipients where locked_by like $1', [
      `${node.name}:${pid}:%`,
    ]);
    const signalAt = Date.now();
    const health: number[] = [];
    const exiting = node.terminate();
    let exited = false;
    void exiting.then(() => (exited = true));
    while (!exited) {
      health.push(await node.healthz());
      await sleep(50);
    }
    const exit = await exiting;
    const exitAt = Date.now();
    const answersBefore = answers.length;
    await sleep(1500);
    stop = true;
    await Promise.all(load);
    await until(
      'every recipient final',
      () => cluster.state<{ n: number }>(`select count(*) as n from outbound_recipients where status = 'queued'`),
      (r) => r[0]!.n === 0,
      60_000,
    );
    watching = false;
    await watcher;

    const lateClaims = [...claims.values()].filter((c) => c.holder.startsWith(`${node.name}:${pid}:`) && c.claimedAt > signalAt + 20);
    const heldTwice = heldAtSignal.filter((r) => arrivals.get(r.recipient.toLowerCase()) !== 1);
    const afterExit = answers.slice(answersBefore);
    console.log(
      `[drain] ${node.name} drained for ${exitAt - signalAt} ms holding ${heldAtSignal.length} recipients at the signal; /healthz while draining: ${health.join(' ')}; exit ${exit.code ?? exit.signal}; ` +
        `claims after the signal: ${lateClaims.length}; ${answers.length} sends (${answers.filter((s) => s !== 200).length} not 200), ${afterExit.length} after its exit`,
    );
    // /healthz answers 503 while it drains (haproxy takes it out on that), not a refused connection at once.
    expect(health.filter((s) => s === 503).length).toBeGreaterThanOrEqual(1);
    expect(health.filter((s) => s === 200).length).toBeLessThanOrEqual(1);
    expect(cluster.haproxyOutput()).toMatch(new RegExp(`http_nodes/${node.name} is DOWN`));
    // No claim after the signal.
    expect(lateClaims).toEqual([]);
    // What it held is delivered, once; it stopped cleanly.
    expect(heldAtSignal.length).toBeGreaterThan(0);
    expect(heldTwice).toEqual([]);
    expect(exit).toEqual({ code: 0, signal: null });
    // Every send through haproxy was answered 200, during the drain and after it, by the nodes left.
    expect(answers.filter((s) => s !== 200)).toEqual([]);
    expect(afterExit.length).toBeGreaterThan(0);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDnsServer } from './helpers/dns-server.js';
import { HttpsReceiver } from './helpers/https-receiver.js';
import { processApi } from './helpers/service-process.js';
import { type Cluster, customerDatabase, startCluster, until } from './helpers/several-nodes.js';
import { SmtpSink } from './helpers/smtp-sink.js';

/**
 * Three node processes behind haproxy (docs/operating/several-nodes/haproxy.cfg, as shipped) over one Postgres
 * (docs/api/decisions.md section 12): the limits are counted across them, and the work that must go one at a time
 * (the posts to one webhook endpoint, the batches into one customer database) does, whichever node claims it.
 * `npm run test:postgres` runs this file.
 */

const PER_KEY = 60;
let dns: TestDnsServer;
let sink: SmtpSink;
let receiver: HttpsReceiver;
let cluster: Cluster;

beforeAll(async () => {
  [dns, sink, receiver] = await Promise.all([TestDnsServer.start(), SmtpSink.start(), HttpsReceiver.start()]);
  sink.keepRaw = false;
  dns.add('example.net', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
  dns.add('mx.example.net', { type: 'A', address: '127.0.0.1' });
  dns.add('hooks.webhooks.test', { type: 'A', address: '127.0.0.1' });
  dns.add('db.pg.test', { type: 'A', address: '127.0.0.1' });
  cluster = await startCluster({
    env: {
      DNS_SERVERS: dns.address,
      SMTP_DELIVERY_PORT: String(sink.port),
      RATE_LIMIT_PER_KEY: String(PER_KEY),
      RATE_LIMIT_PER_ACCOUNT: '600',
      // webhook.delivered is a debug line: which node posted each.
      LOG_LEVEL: 'debug',
      // Every node's dispatcher looks for due posts every 50 ms besides the wakes: the nodes keep racing for the
      // endpoint's next post while one of them posts (with the wakes alone, the node that posts takes the next at once).
      WEBHOOK_INTERVAL_MS: '50',
    },
  });
}, 120_000);

afterAll(async () => {
  await cluster?.close();
  await receiver?.close();
  await sink?.stop();
  await dns?.stop();
});

/** How many `http.request` lines for `route` each node logged, in node order. */
function requestsPerNode(route: string): number[] {
  return cluster.nodes.map((n) => n.runs.flatMap((r) => r.logs).filter((l) => l.includes('"event":"http.request"') && l.includes(`"route":"${route}"`)).length);
}

describe('limits across nodes, through haproxy', () => {
  it(`${PER_KEY + 1} requests from one key spread over three nodes in a minute: the ${PER_KEY + 1}st is 429`, async () => {
    const { key } = await cluster.newSender('Limits', 'limits.example');
    const before = requestsPerNode('/api/v1/account');
    for (let i = 0; i < PER_KEY - 1; i++) {
      const res = await processApi(cluster, key, 'GET', '/account');
      expect(res.status, `request ${i + 1}`).toBe(200);
    }
    // POST /domains above was the key's first request of the minute.
    const refused = await processApi(cluster, key, 'GET', '/account');
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('rate_limited');
    // haproxy spread them (round robin): each node answered a third of them.
    // (Each node's log line is read from its stdout a moment after its answer.)
    const after = await until(
      'every request in the logs',
      () => requestsPerNode('/api/v1/account'),
      (n) => n.reduce((a, b) => a + b, 0) - before.reduce((a, b) => a + b, 0) === PER_KEY,
      5_000,
    );
    const served = after.map((n, i) => n - before[i]!);
    for (const n of served) expect(n).toBeGreaterThanOrEqual(15);
  });
});

describe('the API balanced by key (LB_HTTP_BALANCE=hdr(Authorization))', () => {
  it('sends every request of one key to one node, and spreads the keys over the nodes', async () => {
    // Checks every 2 s (the docs' default), not the cluster's 200 ms: two slow checks on a busy machine would take a
    // node out and move its keys mid-test.
    const byKey = await cluster.balancer({ LB_HTTP_BALANCE: 'hdr(Authorization)', LB_CHECK_INTER: '2s' });
    try {
      const { key } = await cluster.newSender('By key', 'by-key.example');
      // Twelve sub-accounts with a key each (all twelve on one node by chance: 3 in 3^12).
      const accounts: { id: string; key: string }[] = [];
      for (let i = 1; i <= 12; i++) {
        const account = await processApi(cluster, key, 'POST', '/accounts', { name: `Customer ${i}` });
        expect(account.status, JSON.stringify(account.body)).toBe(201);
        const minted = await fetch(`${cluster.base}/keys`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-service-account': account.body.id },
          body: JSON.stringify({ name: 'by key' }),
        });
        expect(minted.status).toBe(201);
        accounts.push({ id: account.body.id, key: ((await minted.json()) as { key: string }).key });
      }
      // Each node's access log names the acting account of each request it answered (POST /keys above counts for its
      // sub-account: the requests through the balancer by key are what the logs gain from here on).
      const servedBy = (id: string) =>
        cluster.nodes.map((n) => n.runs.flatMap((r) => r.logs).filter((l) => l.includes('"event":"http.request"') && l.includes(`"accountId":"${id}"`)).length);
      const gained = (before: number[][]) => accounts.map((a, k) => servedBy(a.id).map((n, i) => n - before[k]![i]!));
      const before = await until(
        'the keys minted in the logs',
        () => accounts.map((a) => servedBy(a.id)),
        (counts) => counts.every((c) => c.reduce((x, y) => x + y, 0) === 1),
        5_000,
      );
      const ROUNDS = 6;
      // Each key's requests in a row (taken in rounds over twelve keys, round robin would also give each key one node).
      for (const a of accounts) for (let i = 0; i < ROUNDS; i++) expect((await processApi(byKey, a.key, 'GET', '/account')).status).toBe(200);
      const all = await until(
        'every request in the logs',
        () => gained(before),
        (counts) => counts.every((c) => c.reduce((x, y) => x + y, 0) === ROUNDS),
        5_000,
      );
      // One node answered all of a key's requests; the keys landed on more than one node.
      for (const counts of all) expect([...counts].sort((x, y) => y - x)).toEqual([ROUNDS, 0, 0]);
      expect(new Set(all.map((counts) => counts.indexOf(ROUNDS))).size).toBeGreaterThan(1);
      // The shipped default (each request to the next node) spreads one key's requests over every node.
      const spread = accounts[0]!;
      const start = servedBy(spread.id);
      for (let i = 0; i < 6; i++) expect((await processApi(cluster, spread.key, 'GET', '/account')).status).toBe(200);
      const after = await until(
        "the default's requests in the logs",
        () => servedBy(spread.id).map((n, i) => n - start[i]!),
        (c) => c.reduce((x, y) => x + y, 0) === 6,
        5_000,
      );
      expect(after.filter((n) => n > 0).length).toBeGreaterThan(1);
    } finally {
      await byKey.close();
    }
  });
});

/** Pairs of intervals that overlap: [start, end) of two different holders at once. */
function overlaps(intervals: { who: string; start: number; end: number }[]): string[] {
  const sorted = [...intervals].sort((a, b) => a.start - b.start);
  const found: string[] = [];
  for (let i = 1; i < sorted.length; i++) {
    for (let j = 0; j < i; j++) {
      const a = sorted[j]!;
      const b = sorted[i]!;
      if (a.who !== b.who && b.start < a.end) found.push(`${a.who} [${a.start}, ${a.end}) and ${b.who} from ${b.start}`);
    }
  }
  return found;
}

describe('work that goes one at a time, raced for by three nodes', () => {
  it('posts to one webhook endpoint one at a time, and writes one batch at a time into one customer database', { timeout: 120_000 }, async () => {
    const STALL_MS = 100;
    const SENDS = 12;
    const PER_WAVE = 2;
    const RCPTS = 4;
    const sender = await cluster.newSender('Race', 'race.example');
    const hook = await processApi(cluster, sender.key, 'POST', '/webhooks', {
      url: `https://hooks.webhooks.test:${receiver.port}/race`,
      events: ['email.delivered'],
    });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    const customer = await customerDatabase();
    try {
      const connected = await processApi(cluster, sender.key, 'POST', '/database', { url: customer.url });
      expect(connected.status, JSON.stringify(connected.body)).toBe(200);
      // A probe inside the customer database: each transaction that inserts a row records its start (now()) and, at
      // its commit (a deferred constraint trigger), the time; each insert takes 5 ms longer, so two batches at once
      // would overlap for a while.
      await customer.client.query(`
        create table public.probe_tx (txid bigint primary key, pid int not null, started timestamptz not null, ended timestamptz);
        create function public.probe_row() returns trigger language plpgsql as $$
        begin
          perform pg_sleep(0.005);
          insert into public.probe_tx (txid, pid, started) values (txid_current(), pg_backend_pid(), now()) on conflict (txid) do nothing;
          return new;
        end $$;
        create function public.probe_commit() returns trigger language plpgsql as $$
        begin
          update public.probe_tx set ended = clock_timestamp() where txid = txid_current();
          return null;
        end $$;
        create trigger probe_row before insert on service.emails for each row execute function public.probe_row();
        create trigger probe_row before insert on service.events for each row execute function public.probe_row();
        create constraint trigger probe_commit after insert on service.emails deferrable initially deferred for each row execute function public.probe_commit();
        create constraint trigger probe_commit after insert on service.events deferrable initially deferred for each row execute function public.probe_commit();
      `);
      receiver.respond({ stallMs: STALL_MS });
      const firstPost = receiver.requests.length;

      // The sends go in waves of two at once, each wave started once the endpoint is idle again. In a wave, the two nodes
      // haproxy gave the sends to (round robin: A and B, then C and A, then B and C) deliver and queue their events at about
      // the same moment, and their dispatchers race for the endpoint's first post; the one that wins posts the rest of the
      // wave (each post it finishes claims the next at once, and the others find the endpoint busy meanwhile). No node is
      // in every wave, so more than one node wins some: in one unbroken run, the first winner took every post.
      const posts = SENDS * RCPTS;
      for (let wave = 0; wave < SENDS / PER_WAVE; wave++) {
        await Promise.all(
          Array.from({ length: PER_WAVE }, async (_, k) => {
            const i = wave * PER_WAVE + k;
            const res = await processApi(cluster, sender.key, 'POST', '/emails', {
              from: `Shop <shop@${sender.domain}>`,
              to: Array.from({ length: RCPTS }, (_, j) => `race${i}-${j}@example.net`),
              template: { name: 'receipt', receiptNumber: `R-${i}`, total: '$1.00' },
            });
            expect(res.status, JSON.stringify(res.body)).toBe(200);
          }),
        );
        await receiver.waitForRequests(firstPost + (wave + 1) * PER_WAVE * RCPTS, 60_000);
      }
      await until(
        'every email and event in the customer database',
        async () =>
          Number((await customer.client.query('select (select count(*) from service.emails) + (select count(*) from service.events) as n')).rows[0].n),
        (n) => n === SENDS + posts,
        60_000,
      );
      await until(
        'the customer database writes done',
        () => cluster.state<{ n: number }>('select count(*) as n from customer_db_writes'),
        (r) => r[0]!.n === 0,
      );

      // The endpoint: never two posts at once, each in event order's turn.
      const mine = receiver.requests.slice(firstPost).filter((r) => r.path === '/race');
      expect(mine).toHaveLength(posts);
      const concurrentPosts = overlaps(
        mine.map((r, i) => ({ who: `post ${i} (webhook-id ${String(r.headers['webhook-id'])})`, start: r.at, end: r.at + STALL_MS - 2 })),
      );
      const posters = cluster.nodes.map((n) => n.runs.flatMap((r) => r.logs).filter((l) => l.includes('"event":"webhook.delivered"')).length);
      // The customer database: never two transactions of the writer at once.
      const txs = (
        await customer.client.query<{ txid: string; pid: number; started: Date; ended: Date | null }>('select txid, pid, started, ended from public.probe_tx')
      ).rows;
      const concurrentBatches = overlaps(
        txs.map((t) => ({ who: `tx ${t.txid} (pid ${t.pid})`, start: t.started.getTime(), end: (t.ended ?? t.started).getTime() })),
      );
      console.log(
        `[several-nodes] ${posts} posts to one endpoint by node ${posters.join('/')}, ${txs.length} customer-database transactions from ${new Set(txs.map((t) => t.pid)).size} connections; overlapping: ${concurrentPosts.length} posts, ${concurrentBatches.length} transactions`,
      );
      expect(concurrentPosts).toEqual([]);
      expect(concurrentBatches).toEqual([]);
      expect(txs.every((t) => t.ended !== null)).toBe(true);
      // The race was run: more than one node posted to the endpoint.
      expect(posters.filter((n) => n > 0).length).toBeGreaterThanOrEqual(2);
      expect(txs.length).toBeGreaterThanOrEqual(2);
    } finally {
      await customer.close();
    }
  });
});

import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDnsServer } from './helpers/dns-server.js';
import { HttpsReceiver } from './helpers/https-receiver.js';
import { processApi } from './helpers/service-process.js';
import { type Cluster, type ClusterNode, customerDatabase, startCluster, until } from './helpers/several-nodes.js';
import { SmtpSink } from './helpers/smtp-sink.js';

/**
 * Chaos across nodes (issue 37; docs/api/decisions.md section 12): three node processes behind haproxy, run from the
 * file docs/operating/several-nodes.md ships, over one Postgres. Load through haproxy the whole time: API sends with
 * Idempotency-Keys (each retried, same key and body, until it gets an answer, as a real client does), SMTP submissions
 * (each retried with its Message-ID until a 250), inbound mail to the account's receiving domain, whose customer
 * database is connected, and a webhook endpoint for every delivery. In each round one node, chosen at random, is
 * killed with SIGKILL at a random moment and started again on the same NODE_NAME and DATA_DIR. At the end:
 *   - every 200 and every 250 ends final and delivered (the sink got it), one email per Idempotency-Key and per
 *     Message-ID, the account's credits and quota exact;
 *   - every webhook event posted at least once (repeats counted), every customer-database row written once;
 *   - the killed node's leases were given back by the others at once (before its restart), none is left with a dead
 *     process at the end;
 *   - a recipient delivered twice only across a kill, at most as many per kill as the killed node had connections open
 *     (counted and printed).
 * CHAOS_NODE_ROUNDS and CHAOS_SEED (printed) reproduce a run's schedule.
 */

const ROUNDS = Number(process.env.CHAOS_NODE_ROUNDS ?? 4);
const SEED = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const RCPT_DOMAINS = Array.from({ length: 4 }, (_, i) => `d${i}.nodes-rcpt.example`);
/** A node's outbound connections at most (mta/delivery-engine.ts maxConnections): the most one kill can leave unrecorded. */
const IN_FLIGHT_BOUND = 64;
/** How long after its exit a killed node's data may still reach the sink (this test's event loop reads both). */
const LATE_ARRIVAL_MS = 1000;

function prng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1)), pick: <T>(xs: readonly T[]) => xs[Math.floor(next() * xs.length)]! };
}
const rnd = prng(SEED);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let dns: TestDnsServer;
let sink: SmtpSink;
let receiver: HttpsReceiver;
let cluster: Cluster;
/** Every arrival of a recipient's data at the sink (before its 250), in order. */
const arrivedAt: { to: string; at: number }[] = [];

beforeAll(async () => {
  [dns, sink, receiver] = await Promise.all([TestDnsServer.start(), SmtpSink.start(), HttpsReceiver.start()]);
  sink.keepRaw = false;
  // A few milliseconds before each 250, so kills land between the data and its reply, and between the reply and the
  // outcome's commit.
  sink.data = (to) => {
    for (const t of to) arrivedAt.push({ to: t.toLowerCase(), at: Date.now() });
    return new Promise((resolve) => setTimeout(() => resolve('accept'), Math.floor(Math.random() * 8)));
  };
  for (const d of RCPT_DOMAINS) dns.add(d, { type: 'MX', priority: 10, exchange: 'mx.nodes-rcpt.example' });
  dns.add('mx.nodes-rcpt.example', { type: 'A', address: '127.0.0.1' });
  dns.add('hooks.webhooks.test', { type: 'A', address: '127.0.0.1' });
  dns.add('db.pg.test', { type: 'A', address: '127.0.0.1' });
  cluster = await startCluster({
    env: {
      DNS_SERVERS: dns.address,
      SMTP_DELIVERY_PORT: String(sink.port),
      // The webhook dispatcher's poll, the fallback behind the wakes (the liveness sweep wakes the queues when it gives
      // a killed node's leases back: server/app/liveness.ts giveBack), kept short so a missed wake costs seconds.
      WEBHOOK_INTERVAL_MS: '2000',
    },
  });
}, 120_000);

afterAll(async () => {
  await cluster?.close();
  await receiver?.close();
  await sink?.stop();
  await dns?.stop();
});

interface ApiSend {
  n: number;
  key: string;
  body: string;
  to: string[];
  ids: string[];
  /** Answers that were not a 200, and 'lost' for a request that got none. */
  others: string[];
}

interface SmtpSend {
  n: number;
  messageId: string;
  to: string;
  ids: string[];
  tries: number;
}

interface Kill {
  round: number;
  node: string;
  pid: number;
  at: number;
  exitAt: number;
  leasesAtKill: number;
  claimsAtKill: number;
  /** ms from the exit until no lease or claim of the dead process was left (before its restart). */
  releasedAfterMs: number | null;
}

async function leasesOf(node: string, pid: number): Promise<number> {
  const prefix = `${node}:${pid}:%`;
  const [r] = await cluster.state<{ n: number }>(
    `select (select count(*) from outbound_recipients where locked_by like $1) + (select count(*) from webhook_deliveries where locked_by like $1) as n`,
    [prefix],
  );
  return r!.n;
}

async function runningClaimsOf(node: string): Promise<number> {
  const [r] = await cluster.state<{ n: number }>(`select count(*) as n from idempotency_keys where state = 'running' and held_by = $1`, [node]);
  return r!.n;
}

function counts(list: string[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const a of list) m.set(a, (m.get(a) ?? 0) + 1);
  return m;
}

describe('chaos across three nodes behind haproxy', () => {
  it(`${ROUNDS} rounds of load, a random node SIGKILLed and restarted in each: nothing accepted is lost`, { timeout: 240_000 }, async () => {
    console.log(`[chaos-nodes] seed ${SEED}, ${ROUNDS} rounds`);
    const sender = await cluster.newSender('Chaos nodes', 'shop.nodes-chaos.example');
    const hook = await processApi(cluster, sender.key, 'POST', '/webhooks', {
      url: `https://hooks.webhooks.test:${receiver.port}/chaos`,
      events: ['email.delivered'],
    });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    const customer = await customerDatabase();
    const connected = await processApi(cluster, sender.key, 'POST', '/database', { url: customer.url });
    expect(connected.status, JSON.stringify(connected.body)).toBe(200);

    const apiSends: ApiSend[] = [];
    const submissions: SmtpSend[] = [];
    const inbound: SmtpSend[] = [];
    const kills: Kill[] = [];
    const unexpected: string[] = [];
    let stopping = false;

    /** One API send, retried with its key and body until it is answered 200 (or refused for good, which is unexpected). */
    const apiSend = async (): Promise<void> => {
      const n = apiSends.length;
      const to = Array.from({ length: rnd.next() < 0.6 ? 1 : rnd.int(2, 3) }, (_, j) => `api${n}r${j}@${RCPT_DOMAINS[(n + j) % RCPT_DOMAINS.length]}`);
      const s: ApiSend = {
        n,
        key: `nodes-${SEED}-${n}`,
        to,
        body: JSON.stringify({ from: `Shop <billing@${sender.domain}>`, to, template: { name: 'receipt', receiptNumber: `R-${n}`, total: '$1.00' } }),
        ids: [],
        others: [],
      };
      apiSends.push(s);
      for (let tries = 0; tries < 200; tries++) {
        try {
          const res = await fetch(`${cluster.base}/emails`, {
            method: 'POST',
            headers: { authorization: `Bearer ${sender.key}`, 'content-type': 'application/json', 'Idempotency-Key': s.key },
            body: s.body,
            signal: AbortSignal.timeout(10_000),
          });
          const text = await res.text();
          if (res.status === 200) {
            s.ids.push((JSON.parse(text) as { id: string }).id);
            return;
          }
          // haproxy's 502/503 (the node died under the request), a claim still running (409): asked again.
          s.others.push(String(res.status));
          if (res.status !== 409 && res.status < 500) {
            unexpected.push(`send ${n}: ${res.status} ${text}`);
            return;
          }
        } catch {
          s.others.push('lost');
        }
        await sleep(200);
      }
      unexpected.push(`send ${n}: never answered 200 (${s.others.join(', ')})`);
    };

    /** One SMTP message through haproxy, retried (the same Message-ID) until a 250 names the id it was queued as. */
    const smtpSend = async (list: SmtpSend[], kind: 'submission' | 'inbound'): Promise<void> => {
      const n = list.length;
      const s: SmtpSend =
        kind === 'submission'
          ? { n, messageId: `<sub-${SEED}-${n}@${sender.domain}>`, to: `sub${n}@${RCPT_DOMAINS[n % RCPT_DOMAINS.length]}`, ids: [], tries: 0 }
          : { n, messageId: `<in-${SEED}-${n}@customer.example.org>`, to: `support@${sender.domain}`, ids: [], tries: 0 };
      list.push(s);
      for (; s.tries < 200; ) {
        s.tries++;
        const transport = nodemailer.createTransport({
          host: '127.0.0.1',
          port: kind === 'submission' ? cluster.lbSubmissionPort : cluster.lbSmtpPort,
          secure: false,
          requireTLS: kind === 'submission',
          tls: { rejectUnauthorized: false },
          name: 'client.example.org',
          connectionTimeout: 5_000,
          greetingTimeout: 5_000,
          socketTimeout: 10_000,
          ...(kind === 'submission' ? { auth: { user: 'app', pass: sender.key } } : {}),
        });
        try {
          const info = await transport.sendMail({
            from: kind === 'submission' ? `Shop <billing@${sender.domain}>` : 'Ann <ann@customer.example.org>',
            to: s.to,
            subject: `${kind} ${n}`,
            text: `Message ${n}.\r\n`,
            messageId: s.messageId,
          });
          const m = /queued as (\S+)/.exec(info.response);
          if (m) {
            s.ids.push(m[1]!);
            return;
          }
          unexpected.push(`${kind} ${n}: ${info.response}`);
          return;
        } catch (err) {
          const code = (err as { responseCode?: number }).responseCode;
          if (code !== undefined && code >= 500) {
            unexpected.push(`${kind} ${n}: ${(err as Error).message}`);
            return;
          }
        } finally {
          transport.close();
        }
        await sleep(200);
      }
      unexpected.push(`${kind} ${n}: never answered 250`);
    };

    const worker = async (one: () => Promise<void>, pauseMs: [number, number]) => {
      while (!stopping) {
        await one();
        await sleep(rnd.int(...pauseMs));
      }
    };
    const load = [
      worker(apiSend, [0, 20]),
      worker(apiSend, [0, 20]),
      worker(apiSend, [0, 20]),
      worker(() => smtpSend(submissions, 'submission'), [20, 80]),
      worker(() => smtpSend(inbound, 'inbound'), [50, 150]),
    ];

    for (let round = 0; round < ROUNDS; round++) {
      await sleep(rnd.int(1500, 4000));
      const node: ClusterNode = rnd.pick(cluster.nodes);
      const pid = node.proc!.child.pid!;
      const at = Date.now();
      await node.kill();
      const kill: Kill = { round, node: node.name, pid, at, exitAt: Date.now(), leasesAtKill: 0, claimsAtKill: 0, releasedAfterMs: null };
      kill.leasesAtKill = await leasesOf(node.name, pid);
      kill.claimsAtKill = await runningClaimsOf(node.name);
      kills.push(kill);
      // The others give its leases and running claims back as soon as its liveness lock is gone (a sweep a second),
      // long before its leases' term (two minutes): watched before it starts again.
      const left = await until(
        `${node.name}'s leases and claims given back`,
        async () => (await leasesOf(node.name, pid)) + (await runningClaimsOf(node.name)),
        (n) => n === 0,
        5_000,
        50,
      ).catch(() => -1);
      if (left === 0) kill.releasedAfterMs = Date.now() - kill.exitAt;
      await sleep(rnd.int(0, 1000));
      await node.restart();
    }
    await sleep(1500);
    stopping = true;
    await Promise.all(load);

    // Everything accepted settles: every recipient final, every post made, every customer-database write applied.
    await until(
      'every queue empty',
      () =>
        cluster.state<{ q: number; w: number; c: number }>(
          `select (select count(*) from outbound_recipients where status = 'queued') as q,
                  (select count(*) from webhook_deliveries where next_attempt_at is not null) as w,
                  (select count(*) from customer_db_writes) as c`,
        ),
      (r) => r[0]!.q === 0 && r[0]!.w === 0 && r[0]!.c === 0,
      90_000,
      200,
    );

    const problems: string[] = [];
    // ---- one email per Idempotency-Key and per Message-ID, each answered id in the state ----
    type EmailRow = { id: string; to: string[]; status: string; source: string };
    const emails = await cluster.state<EmailRow>('select id, "to", status, source from emails where account_id = $1', [sender.accountId]);
    const emailById = new Map(emails.map((e) => [e.id, e]));
    for (const s of apiSends) {
      if (new Set(s.ids).size !== 1) problems.push(`send ${s.n} (key ${s.key}): answered ids ${s.ids.join(', ') || 'none'}`);
      else if (emailById.get(s.ids[0]!)?.status !== 'sent') problems.push(`send ${s.n}: ${s.ids[0]} is ${emailById.get(s.ids[0]!)?.status ?? 'missing'}`);
    }
    for (const s of submissions) {
      if (new Set(s.ids).size !== 1) problems.push(`submission ${s.n} (${s.messageId}): answered ids ${s.ids.join(', ') || 'none'}`);
      else if (emailById.get(s.ids[0]!)?.status !== 'sent') problems.push(`submission ${s.n}: ${s.ids[0]} is ${emailById.get(s.ids[0]!)?.status ?? 'missing'}`);
    }
    const answered = new Set([...apiSends, ...submissions].flatMap((s) => s.ids));
    for (const e of emails)
      if (!answered.has(e.id)) problems.push(`email ${e.id} (${e.source}) was never answered to its client: a second email for one key or Message-ID`);
    const done = await cluster.state<{ key: string; response: { id: string } | string }>(
      `select key, response from idempotency_keys where account_id = $1 and state = 'done'`,
      [sender.accountId],
    );
    const byKey = new Map(apiSends.map((s) => [s.key, s]));
    for (const d of done) {
      const id = (typeof d.response === 'string' ? (JSON.parse(d.response) as { id: string }) : d.response).id;
      if (byKey.get(d.key) && !byKey.get(d.key)!.ids.includes(id)) problems.push(`key ${d.key}: stored ${id}, answered ${byKey.get(d.key)!.ids.join(', ')}`);
    }

    // ---- every recipient delivered once in the event log, and at the sink ----
    const events = await cluster.state<{ id: string; email_id: string; recipient: string; status: string }>(
      'select ev.id, ev.email_id, ev.recipient, ev.status from email_events ev join emails e on e.id = ev.email_id where e.account_id = $1',
      [sender.accountId],
    );
    const delivered = counts(events.filter((e) => e.status === 'delivered').map((e) => `${e.email_id} ${e.recipient}`));
    const arrivals = counts(arrivedAt.map((a) => a.to));
    let recipientsTotal = 0;
    for (const e of emails) {
      for (const r of e.to) {
        recipientsTotal++;
        if (delivered.get(`${e.id} ${r}`) !== 1) problems.push(`email ${e.id}: ${delivered.get(`${e.id} ${r}`) ?? 0} delivered events for ${r}`);
        if (!arrivals.has(r.toLowerCase())) problems.push(`email ${e.id}: ${r} never reached the sink`);
      }
    }

    // ---- credits and quota ----
    const [account] = await cluster.state<{ credits_total_used: number; credits_balance: number; sent_today_count: number }>(
      'select credits_total_used, credits_balance, sent_today_count from accounts where id = $1',
      [sender.accountId],
    );
    const view = await processApi(cluster, sender.key, 'GET', '/account');
    const counters: Record<string, [number, number]> = {
      'credits used': [account!.credits_total_used, emails.length],
      'credits balance': [account!.credits_balance, 100_000 - emails.length],
      'sent today': [account!.sent_today_count, recipientsTotal],
      'API sentToday': [view.body.sending.sentToday, recipientsTotal],
      'API credits used': [view.body.credits.totalUsed, emails.length],
    };
    for (const [name, [got, want]] of Object.entries(counters)) if (got !== want) problems.push(`${name}: ${got}, expected ${want}`);

    // ---- every webhook event posted, at least once ----
    const deliveries = await cluster.state<{ id: string; delivered_at: number | null }>(
      'select id, delivered_at from webhook_deliveries where account_id = $1',
      [sender.accountId],
    );
    if (deliveries.length !== delivered.size) problems.push(`${deliveries.length} webhook deliveries for ${delivered.size} delivered recipients`);
    const posts = counts(receiver.requests.filter((r) => r.path === '/chaos').map((r) => String(r.headers['webhook-id'])));
    for (const d of deliveries) {
      if (d.delivered_at === null) problems.push(`webhook delivery ${d.id} not delivered`);
      if (!posts.has(d.id)) problems.push(`webhook delivery ${d.id} never posted`);
    }
    const repeatedPosts = [...posts.values()].filter((n) => n > 1).length;

    // ---- every customer-database row written, once ----
    const ids = async (table: string) => (await customer.client.query<{ id: string }>(`select id::text as id from service.${table}`)).rows.map((r) => r.id);
    const customerEmails = counts(await ids('emails'));
    const customerEvents = counts(await ids('events'));
    const customerInbound = counts(await ids('inbound'));
    for (const e of emails) if (customerEmails.get(e.id) !== 1) problems.push(`email ${e.id}: ${customerEmails.get(e.id) ?? 0} rows in service.emails`);
    if (customerEmails.size !== emails.length) problems.push(`${customerEmails.size} rows in service.emails for ${emails.length} emails`);
    for (const e of events) if (customerEvents.get(e.id) !== 1) problems.push(`event ${e.id}: ${customerEvents.get(e.id) ?? 0} rows in service.events`);
    if (customerEvents.size !== events.length) problems.push(`${customerEvents.size} rows in service.events for ${events.length} events`);
    // (The 250's id names the received message in the service's logs, not the row: the row is found by Message-ID.)
    const inboundRows = (
      await customer.client.query<{ message_id: string; n: string }>('select message_id, count(*) as n from service.inbound group by message_id')
    ).rows;
    const inboundByMessageId = new Map(inboundRows.map((r) => [r.message_id, Number(r.n)]));
    for (const s of inbound) {
      if (s.ids.length !== 1) problems.push(`inbound ${s.n}: answered ${s.ids.join(', ') || 'nothing'}`);
      if (!inboundByMessageId.has(s.messageId)) problems.push(`inbound ${s.n} (${s.messageId}, 250 ${s.ids.join(', ')}): no row in service.inbound`);
    }
    // A message accepted whose 250 the client never saw (its node killed between the commit and the reply) is received
    // again on the retry: a second row of the same Message-ID, at most one per retry after a lost reply.
    const inboundAgain = inboundRows.reduce((n, r) => n + Number(r.n) - 1, 0);
    for (const r of inboundRows) {
      const s = inbound.find((x) => x.messageId === r.message_id);
      if (!s) problems.push(`service.inbound holds ${r.message_id}, never sent`);
      else if (Number(r.n) > s.tries) problems.push(`${r.message_id}: ${r.n} rows for ${s.tries} tries`);
    }
    await customer.close();

    // ---- leases: given back at once after each kill, none left with a dead process ----
    for (const k of kills)
      if (k.releasedAfterMs === null) problems.push(`kill ${k.round} (${k.node}, pid ${k.pid}): its leases or claims were still held 5 s after its exit`);
    const live = new Set(cluster.nodes.map((n) => `${n.name}:${n.proc!.child.pid}:`));
    const held = await cluster.state<{ locked_by: string }>(
      'select locked_by from outbound_recipients where locked_by is not null union all select locked_by from webhook_deliveries where locked_by is not null',
    );
    for (const h of held) if (![...live].some((p) => h.locked_by.startsWith(p))) problems.push(`a lease left with ${h.locked_by}, not a live process`);
    const running = await cluster.state<{ key: string }>(`select key from idempotency_keys where state = 'running'`);
    for (const r of running) problems.push(`idempotency claim ${r.key} still running`);

    // ---- duplicate deliveries: only across a kill, at most the killed node's connections each ----
    const times = new Map<string, number[]>();
    for (const a of arrivedAt) times.set(a.to, [...(times.get(a.to) ?? []), a.at]);
    const perKill = new Map<number, number>();
    let duplicates = 0;
    for (const [r, ts] of times) {
      for (let i = 1; i < ts.length; i++) {
        duplicates++;
        // The kill a repeat is due to: one whose process died after the first arrival (allowing for data read late).
        const k = kills.findIndex((x) => ts[i - 1]! <= x.exitAt + LATE_ARRIVAL_MS && x.at <= ts[i]!);
        if (k < 0) problems.push(`${r} arrived again +${ts[i]! - ts[i - 1]!} ms later with no kill in between`);
        else perKill.set(k, (perKill.get(k) ?? 0) + 1);
      }
    }
    for (const [k, n] of perKill) if (n > IN_FLIGHT_BOUND) problems.push(`kill ${k}: ${n} duplicate deliveries, more than its ${IN_FLIGHT_BOUND} connections`);

    const lost = apiSends.reduce((n, s) => n + s.others.length, 0);
    console.log(
      `[chaos-nodes] seed ${SEED}: ${kills.length} kills (${kills.map((k) => `${k.node}: ${k.leasesAtKill} leases, ${k.claimsAtKill} claims held, given back after ${k.releasedAfterMs ?? '-'} ms`).join('; ')}); ` +
        `${apiSends.length} API sends (${lost} answers other than 200 or lost, then retried), ${submissions.length} submissions (${submissions.reduce((n, s) => n + s.tries - 1, 0)} retries), ` +
        `${inbound.length} inbound (${inbound.reduce((n, s) => n + s.tries - 1, 0)} retries, ${inboundAgain} received twice after a lost 250); ` +
        `${emails.length} emails, ${recipientsTotal} recipients; duplicate deliveries ${duplicates} (per kill ${[...perKill].map(([k, n]) => `${k}:${n}`).join(' ') || 'none'}); ` +
        `${deliveries.length} webhook events, ${repeatedPosts} posted more than once; customer database ${customerEmails.size} emails, ${customerEvents.size} events, ${customerInbound.size} inbound`,
    );
    if (unexpected.length) console.log(`[chaos-nodes] unexpected:\n  ${unexpected.join('\n  ')}`);
    expect(unexpected).toEqual([]);
    expect(problems).toEqual([]);
    expect(kills.length).toBe(ROUNDS);
    expect(apiSends.length).toBeGreaterThan(50);
    expect(submissions.length).toBeGreaterThan(5);
    expect(inbound.length).toBeGreaterThan(5);
  });
});

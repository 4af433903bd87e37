import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { eq, inArray, sql } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { customerDbWrites, outboundRecipients, webhookDeliveries } from '../db/schema/index.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { claimDueRecipients } from '../mta/delivery-queue.js';
import { ConfigError, loadConfig } from '../server/shared/config.js';
import { LATENCY_BUCKETS_SECONDS, createMetrics } from '../server/shared/metrics.js';
import { type Scans, scansOn } from '../db/scans.js';
import { metricsTokenMatches } from '../server/api/routes/metrics.js';
import { createWebhookDispatcher } from '../server/webhooks/dispatcher.js';
import { storeDatabaseRow } from './helpers/customer-db.js';
import { type DeliveryRig, FAST_TIMEOUTS, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { HttpsReceiver } from './helpers/https-receiver.js';
import { type MetricFamily, parsePrometheusText, sampleValue, sampleValueOrZero } from './helpers/prometheus-text.js';
import { type Sender, newSender } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { execute } from '../db/sql.js';

/**
 * `GET /metrics`: the Prometheus text format, read with a strict parser, its gauges read from the
 * database at the scrape and its counters moving with real sends delivered to an SMTP sink on loopback and webhooks
 * posted to an HTTPS receiver; METRICS_TOKEN; labels that never name a recipient, a domain or an account.
 */

let rig: DeliveryRig;
let receiver: HttpsReceiver;

beforeAll(async () => {
  rig = await startDeliveryRig();
  receiver = await HttpsReceiver.start();
});

afterAll(async () => {
  await receiver?.close();
  await stopDeliveryRig(rig ?? {});
});

beforeEach(async () => {
  await rig.service.deps.db.delete(outboundRecipients);
  resetDeliveryRig(rig);
  rig.dns.add('hooks.webhooks.test', { type: 'A', address: '127.0.0.1' });
  receiver.reset();
});

async function scrape(service: TestService, token?: string): Promise<Map<string, MetricFamily>> {
  const res = await fetch(`${service.url}/metrics`, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  return parsePrometheusText(text);
}

function receipt(from: string, to: string | string[]) {
  return { from, to, template: { name: 'receipt', receiptNumber: 'R-1', total: '$10.00' } };
}

async function send(sender: Sender, to: string | string[]): Promise<string> {
  const res = await rig.service.api('POST', '/emails', { key: sender.key, body: receipt(sender.from, to) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

async function newEndpoint(key: string, events: string[]): Promise<string> {
  const res = await rig.service.api('POST', '/webhooks', { key, body: { url: `https://hooks.webhooks.test:${receiver.port}/in`, events } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.id as string;
}

const deliver = () => createDeliveryEngine(rig.service.deps, { timeouts: FAST_TIMEOUTS }).runOnce();
const dispatch = () => createWebhookDispatcher(rig.service.deps).runOnce();

/** The value of a counter or gauge series now minus before (0 for a series that did not exist yet). */
const delta = (after: Map<string, MetricFamily>, before: Map<string, MetricFamily>, name: string, labels: Record<string, string> = {}) =>
  sampleValueOrZero(after, name, labels) - sampleValueOrZero(before, name, labels);

describe('GET /metrics: the families an operator scrapes', () => {
  it('declares each family with its type and help, on a fresh service, with zeroed series for the known outcomes', async () => {
    const families = await scrape(rig.service);
    const types = Object.fromEntries([...families.values()].filter((f) => f.name.startsWith('mailstead_')).map((f) => [f.name, f.type]));
    expect(types).toEqual({
      mailstead_http_requests_total: 'counter',
      mailstead_outbound_queue_depth: 'gauge',
      mailstead_outbound_queue_oldest_age_seconds: 'gauge',
      mailstead_delivery_outcomes_total: 'counter',
      mailstead_delivery_latency_seconds: 'histogram',
      mailstead_webhook_attempts_total: 'counter',
      mailstead_customer_db_writes_pending: 'gauge',
      mailstead_inbound_accepted_total: 'counter',
      mailstead_inbound_refused_total: 'counter',
      mailstead_submission_accepted_total: 'counter',
      mailstead_submission_refused_total: 'counter',
      mailstead_node_info: 'gauge',
      mailstead_nodes_live: 'gauge',
      // A server on Postgres (STATE_URL) adds its pool.
      ...(rig.service.deps.store.engine === 'postgres' ? { mailstead_state_pool_connections: 'gauge' } : {}),
    });
    for (const family of families.values()) expect(family.help, family.name).toMatch(/\w/);
    // One node, named by NODE_NAME (several nodes: tests/several-nodes.postgres.test.ts).
    expect(sampleValue(families, 'mailstead_node_info', { node: rig.service.deps.config.nodeName })).toBe(1);
    expect(sampleValue(families, 'mailstead_nodes_live')).toBe(1);
    for (const status of ['delivered', 'bounced', 'deferred', 'complained'])
      expect(sampleValue(families, 'mailstead_delivery_outcomes_total', { status })).toBe(0);
    for (const outcome of ['delivered', 'failed', 'gave_up']) expect(sampleValue(families, 'mailstead_webhook_attempts_total', { outcome })).toBe(0);
    expect(sampleValue(families, 'mailstead_inbound_accepted_total')).toBe(0);
    expect(sampleValue(families, 'mailstead_submission_accepted_total')).toBe(0);
    expect(sampleValue(families, 'mailstead_customer_db_writes_pending')).toBe(0);
    for (const state of ['due', 'sending', 'deferred']) expect(sampleValue(families, 'mailstead_outbound_queue_depth', { state })).toBe(0);
    expect(sampleValue(families, 'mailstead_outbound_queue_oldest_age_seconds')).toBe(0);
    // The process's own metrics are main's to add (once per process), not every service's.
    expect(families.has('process_cpu_seconds_total')).toBe(false);
  });

  it('a send fills the queue (due, oldest age); its delivery empties it and moves outcomes, latency, webhooks and the HTTP count', async () => {
    const { service } = rig;
    const sender = await newSender(service);
    await newEndpoint(sender.key, ['email.delivered']);
    const before = await scrape(service);

    await send(sender, ['ana@example.net', 'ben@example.net']);
    service.clock.advance(30_000);
    const queued = await scrape(service);
    expect(sampleValue(queued, 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(2);
    expect(sampleValue(queued, 'mailstead_outbound_queue_depth', { state: 'sending' })).toBe(0);
    expect(sampleValue(queued, 'mailstead_outbound_queue_depth', { state: 'deferred' })).toBe(0);
    expect(sampleValue(queued, 'mailstead_outbound_queue_oldest_age_seconds')).toBe(30);
    expect(delta(queued, before, 'mailstead_http_requests_total', { method: 'POST', route: '/api/v1/emails', status: '200' })).toBe(1);

    await deliver();
    expect(rig.sink.deliveredTo().sort()).toEqual(['ana@example.net', 'ben@example.net']);
    expect(await dispatch()).toBe(2);
    expect(receiver.requests).toHaveLength(2);

    const after = await scrape(service);
    expect(delta(after, before, 'mailstead_delivery_outcomes_total', { status: 'delivered' })).toBe(2);
    expect(delta(after, before, 'mailstead_delivery_outcomes_total', { status: 'bounced' })).toBe(0);
    // Sent 30 s before the engine ran: in the 30 s bucket, not the 10 s one.
    expect(delta(after, before, 'mailstead_delivery_latency_seconds_count', { status: 'delivered' })).toBe(2);
    expect(delta(after, before, 'mailstead_delivery_latency_seconds_sum', { status: 'delivered' })).toBe(60);
    expect(delta(after, before, 'mailstead_delivery_latency_seconds_bucket', { status: 'delivered', le: '30' })).toBe(2);
    expect(delta(after, before, 'mailstead_delivery_latency_seconds_bucket', { status: 'delivered', le: '10' })).toBe(0);
    expect(delta(after, before, 'mailstead_webhook_attempts_total', { outcome: 'delivered' })).toBe(2);
    for (const state of ['due', 'sending', 'deferred']) expect(sampleValue(after, 'mailstead_outbound_queue_depth', { state })).toBe(0);
    expect(sampleValue(after, 'mailstead_outbound_queue_oldest_age_seconds')).toBe(0);
  });

  it('a deferral and a bounce: each counted by status, the deferred recipient waits as deferred; failing webhooks count failed, then gave_up', async () => {
    const { service, sink } = rig;
    sink.rcpt = (to) =>
      to.startsWith('later') ? { code: 451, message: '4.2.0 Mailbox busy' } : to.startsWith('gone') ? { code: 550, message: '5.1.1 No such user' } : 'accept';
    const sender = await newSender(service);
    await newEndpoint(sender.key, ['email.bounced', 'email.deferred']);
    receiver.respond({ status: 500 });
    const before = await scrape(service);

    await send(sender, ['later@example.net', 'gone@example.net']);
    service.clock.advance(5_000);
    await deliver();
    const delivered = await scrape(service);
    expect(delta(delivered, before, 'mailstead_delivery_outcomes_total', { status: 'deferred' })).toBe(1);
    expect(delta(delivered, before, 'mailstead_delivery_outcomes_total', { status: 'bounced' })).toBe(1);
    expect(delta(delivered, before, 'mailstead_delivery_outcomes_total', { status: 'delivered' })).toBe(0);
    // Only a final outcome has a latency: the bounce, not the deferral.
    expect(delta(delivered, before, 'mailstead_delivery_latency_seconds_count', { status: 'bounced' })).toBe(1);
    expect(delta(delivered, before, 'mailstead_delivery_latency_seconds_bucket', { status: 'bounced', le: '5' })).toBe(1);
    expect(sampleValue(delivered, 'mailstead_outbound_queue_depth', { state: 'deferred' })).toBe(1);
    expect(sampleValue(delivered, 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(0);
    expect(sampleValue(delivered, 'mailstead_outbound_queue_oldest_age_seconds')).toBe(5);

    expect(await dispatch()).toBe(2);
    const failed = await scrape(service);
    expect(delta(failed, before, 'mailstead_webhook_attempts_total', { outcome: 'failed' })).toBe(2);
    expect(delta(failed, before, 'mailstead_webhook_attempts_total', { outcome: 'gave_up' })).toBe(0);

    // Their sixth and last attempt, due now: it fails too, and nothing follows.
    const rows = await service.deps.db.select({ id: webhookDeliveries.id }).from(webhookDeliveries).where(eq(webhookDeliveries.accountId, sender.account.id));
    expect(rows).toHaveLength(2);
    await service.deps.db
      .update(webhookDeliveries)
      .set({ attempts: 5, nextAttemptAt: service.clock.now() })
      .where(
        inArray(
          webhookDeliveries.id,
          rows.map((r) => r.id),
        ),
      );
    expect(await dispatch()).toBe(2);
    const gaveUp = await scrape(service);
    expect(delta(gaveUp, failed, 'mailstead_webhook_attempts_total', { outcome: 'gave_up' })).toBe(2);
    expect(delta(gaveUp, failed, 'mailstead_webhook_attempts_total', { outcome: 'failed' })).toBe(0);
  });

  it('a recipient leased to a worker is counted as sending', async () => {
    const { service } = rig;
    const sender = await newSender(service);
    await send(sender, ['ana@example.net', 'ben@example.net']);
    expect(await claimDueRecipients(service.deps.db, 'metrics-test', service.clock.now(), 60_000, 1)).toHaveLength(1);
    const families = await scrape(service);
    expect(sampleValue(families, 'mailstead_outbound_queue_depth', { state: 'sending' })).toBe(1);
    expect(sampleValue(families, 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(1);
    // Once its lease has run out it is due again.
    service.clock.advance(60_000);
    expect(sampleValue(await scrape(service), 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(2);
  });

  it("customer-database writes pending: a send and its outcome queue one each for the account's database; set aside ones are not pending", async () => {
    const { service } = rig;
    const sender = await newSender(service);
    await storeDatabaseRow(service, sender.account.id, 'postgresql://u:p@db.example.org:5432/app');
    const pending = async () => sampleValue(await scrape(service), 'mailstead_customer_db_writes_pending');
    const before = await pending();

    await send(sender, 'ana@example.net');
    expect(await pending()).toBe(before + 1);
    await deliver();
    expect(await pending()).toBe(before + 2);

    await service.deps.db.update(customerDbWrites).set({ setAsideAt: service.clock.now() }).where(eq(customerDbWrites.accountId, sender.account.id));
    expect(await pending()).toBe(before);
    await service.deps.db.delete(customerDbWrites).where(eq(customerDbWrites.accountId, sender.account.id));
  });

  it('inbound and submission accepted and refused, by stage and code (a code outside 200-599 is `other`)', async () => {
    const { service } = rig;
    const before = await scrape(service);
    const { metrics } = service.deps;
    metrics.inboundAccepted();
    metrics.inboundAccepted();
    metrics.inboundRefused('connect', 421);
    metrics.inboundRefused('rcpt', 550);
    metrics.inboundRefused('rcpt', 550);
    metrics.inboundRefused('data', 552);
    metrics.inboundRefused('data', 42);
    const after = await scrape(service);
    expect(delta(after, before, 'mailstead_inbound_accepted_total')).toBe(2);
    expect(delta(after, before, 'mailstead_inbound_refused_total', { stage: 'connect', code: '421' })).toBe(1);
    expect(delta(after, before, 'mailstead_inbound_refused_total', { stage: 'rcpt', code: '550' })).toBe(2);
    expect(delta(after, before, 'mailstead_inbound_refused_total', { stage: 'data', code: '552' })).toBe(1);
    expect(delta(after, before, 'mailstead_inbound_refused_total', { stage: 'data', code: 'other' })).toBe(1);
    // SMTP submission's, by its own stages.
    metrics.submissionAccepted();
    metrics.submissionRefused('auth', 535);
    metrics.submissionRefused('mail', 450);
    metrics.submissionRefused('rcpt', 550);
    const later = await scrape(service);
    expect(delta(later, after, 'mailstead_submission_accepted_total')).toBe(1);
    expect(delta(later, after, 'mailstead_submission_refused_total', { stage: 'auth', code: '535' })).toBe(1);
    expect(delta(later, after, 'mailstead_submission_refused_total', { stage: 'mail', code: '450' })).toBe(1);
    expect(delta(later, after, 'mailstead_submission_refused_total', { stage: 'rcpt', code: '550' })).toBe(1);
  });

  it('HTTP requests by route pattern and status: 401, 404 and 405 too; an unmatched path is `unmatched`, never the path', async () => {
    const { service } = rig;
    const sender = await newSender(service);
    const before = await scrape(service);
    expect((await service.api('GET', '/account', { key: 'ms_wrong' })).status).toBe(401);
    expect((await service.api('GET', `/emails/${sender.account.id}`, { key: sender.key })).status).toBe(404);
    expect((await service.api('GET', `/no-such-thing/${sender.domain}`)).status).toBe(404);
    expect((await service.api('PATCH', '/emails')).status).toBe(405);
    const after = await scrape(service);
    expect(delta(after, before, 'mailstead_http_requests_total', { method: 'GET', route: '/api/v1/account', status: '401' })).toBe(1);
    expect(delta(after, before, 'mailstead_http_requests_total', { method: 'GET', route: '/api/v1/emails/:id', status: '404' })).toBe(1);
    expect(delta(after, before, 'mailstead_http_requests_total', { method: 'GET', route: 'unmatched', status: '404' })).toBe(1);
    expect(delta(after, before, 'mailstead_http_requests_total', { method: 'PATCH', route: 'unmatched', status: '405' })).toBe(1);
    // The scrape before this one was counted too.
    expect(delta(after, before, 'mailstead_http_requests_total', { method: 'GET', route: '/metrics', status: '200' })).toBe(1);
  });

  it('no label value names a recipient, a domain, an account, a key or an id', async () => {
    const { service } = rig;
    const sender = await newSender(service);
    const id = await send(sender, 'private-person@example.net');
    await deliver();
    await service.api('GET', `/emails/${id}`, { key: sender.key });
    await service.api('DELETE', `/suppressions/${encodeURIComponent('private-person@example.net')}`, { key: sender.key });
    const families = await scrape(service);
    const values = [...families.values()].flatMap((f) => f.samples.flatMap((s) => Object.values(s.labels)));
    expect(values.length).toBeGreaterThan(0);
    for (const value of values) {
      expect(value).not.toContain('@');
      expect(value).not.toContain('example.');
      expect(value).not.toContain(sender.account.id);
      expect(value).not.toContain(id);
      expect(value).not.toContain(sender.key);
    }
    expect(values).toContain('/api/v1/suppressions/:address');
  });
});

describe('docs/operating/logs-and-metrics.md', () => {
  it('the metrics table names every family /metrics serves, and nothing else', async () => {
    const readme = readFileSync(fileURLToPath(new URL('../docs/operating/logs-and-metrics.md', import.meta.url)), 'utf8');
    const documented = new Set([...readme.matchAll(/^\| `(mailstead_[a-z_]+)` \|/gm)].map((m) => m[1]));
    // What a server on SQLite serves (on a Postgres run the service adds its pool, counted below with the rest).
    const served = [...(await scrape(rig.service)).keys()].filter((name) => name.startsWith('mailstead_') && name !== 'mailstead_state_pool_connections');
    // And what a server on Postgres (STATE_URL) adds: its pool.
    const onPostgres = createMetrics(rig.service.clock, () => rig.service.deps.scans, { statePool: () => ({ total: 3, idle: 2, waiting: 0 }) });
    const poolFamilies = [...parsePrometheusText(await onPostgres.registry.metrics()).keys()].filter((name) => !served.includes(name));
    expect(poolFamilies).toEqual(['mailstead_state_pool_connections']);
    expect([...documented].sort()).toEqual([...served, ...poolFamilies].sort());
  });

  it("on Postgres, the state pool's connections: total, idle and waiting, as the pool counts them when scraped", async () => {
    let counts = { total: 3, idle: 2, waiting: 0 };
    const metrics = createMetrics(rig.service.clock, () => rig.service.deps.scans, { statePool: () => counts });
    let scraped = parsePrometheusText(await metrics.registry.metrics());
    expect(sampleValue(scraped, 'mailstead_state_pool_connections', { state: 'total' })).toBe(3);
    expect(sampleValue(scraped, 'mailstead_state_pool_connections', { state: 'idle' })).toBe(2);
    expect(sampleValue(scraped, 'mailstead_state_pool_connections', { state: 'waiting' })).toBe(0);
    counts = { total: 10, idle: 0, waiting: 4 };
    scraped = parsePrometheusText(await metrics.registry.metrics());
    expect(sampleValue(scraped, 'mailstead_state_pool_connections', { state: 'waiting' })).toBe(4);
    // A server on SQLite serves no such family; one on Postgres does.
    expect((await scrape(rig.service)).has('mailstead_state_pool_connections')).toBe(rig.service.deps.store.engine === 'postgres');
  });
});

describe('METRICS_TOKEN', () => {
  const TOKEN = 'metrics-token-0123456789abcdef';
  let guarded: TestService;
  beforeAll(async () => {
    guarded = await startService({ METRICS_TOKEN: TOKEN });
  });
  afterAll(() => guarded?.close());

  async function expect401(headers: Record<string, string>) {
    const res = await fetch(`${guarded.url}/metrics`, { headers });
    expect(res.status).toBe(401);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const body = await res.json();
    expect(body).toEqual({ error: { code: 'invalid_key', message: expect.stringContaining('METRICS_TOKEN') } });
    expect(JSON.stringify(body)).not.toContain(TOKEN);
  }

  it('set: 401 in the error envelope without the token, with a wrong one (of any length) or another scheme; each counted', async () => {
    const before = await scrape(guarded, TOKEN);
    await expect401({});
    await expect401({ authorization: `Bearer ${TOKEN.slice(0, -1)}x` });
    await expect401({ authorization: `Bearer ${TOKEN}0` });
    await expect401({ authorization: 'Bearer short' });
    await expect401({ authorization: `Basic ${Buffer.from(`x:${TOKEN}`).toString('base64')}` });
    await expect401({ authorization: TOKEN });
    const after = await scrape(guarded, TOKEN);
    expect(delta(after, before, 'mailstead_http_requests_total', { method: 'GET', route: '/metrics', status: '401' })).toBe(6);
  });

  it('set: 200 with the Bearer token, the scheme in any case', async () => {
    const before = await scrape(guarded, TOKEN);
    const res = await fetch(`${guarded.url}/metrics`, { headers: { authorization: `bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    const after = parsePrometheusText(await res.text());
    // The scrape before this one.
    expect(delta(after, before, 'mailstead_http_requests_total', { method: 'GET', route: '/metrics', status: '200' })).toBe(1);
  });

  it('unset: open to anyone (the delivery rig runs without it)', async () => {
    expect(rig.service.deps.config.metricsToken).toBeNull();
    const res = await fetch(`${rig.service.url}/metrics`);
    expect(res.status).toBe(200);
    expect(parsePrometheusText(await res.text()).has('mailstead_outbound_queue_depth')).toBe(true);
  });

  it('the comparison: equal strings only, whatever their lengths', () => {
    expect(metricsTokenMatches(TOKEN, TOKEN)).toBe(true);
    expect(metricsTokenMatches(TOKEN, undefined)).toBe(false);
    expect(metricsTokenMatches(TOKEN, '')).toBe(false);
    expect(metricsTokenMatches(TOKEN, TOKEN.toUpperCase())).toBe(false);
    expect(metricsTokenMatches(TOKEN, `${TOKEN} `)).toBe(false);
  });

  it('a token under 16 characters stops the start, naming METRICS_TOKEN', () => {
    expect(() => loadConfig({ METRICS_TOKEN: 'too-short' })).toThrow(ConfigError);
    expect(() => loadConfig({ METRICS_TOKEN: 'too-short' })).toThrow(/METRICS_TOKEN/);
    expect(loadConfig({ METRICS_TOKEN: TOKEN }).metricsToken).toBe(TOKEN);
    expect(loadConfig({}).metricsToken).toBeNull();
  });
});

describe('createMetrics', () => {
  it('one registry per instance: two side by side neither collide nor share a count', async () => {
    const scans = scansOn(rig.service.deps.db);
    const a = createMetrics(rig.service.clock, () => scans);
    const b = createMetrics(rig.service.clock, () => scans);
    a.deliveryOutcome('complained');
    a.deliveryLatency('delivered', 7_200);
    const textA = parsePrometheusText(await a.registry.metrics());
    const textB = parsePrometheusText(await b.registry.metrics());
    expect(sampleValue(textA, 'mailstead_delivery_outcomes_total', { status: 'complained' })).toBe(1);
    expect(sampleValue(textB, 'mailstead_delivery_outcomes_total', { status: 'complained' })).toBe(0);
    expect(sampleValue(textA, 'mailstead_delivery_latency_seconds_bucket', { status: 'delivered', le: '14400' })).toBe(1);
    expect(sampleValue(textA, 'mailstead_delivery_latency_seconds_bucket', { status: 'delivered', le: '3600' })).toBe(0);
    expect(LATENCY_BUCKETS_SECONDS.at(-1)).toBe(5 * 86_400);
  });

  it('a scrape reads the outbound queue once for both queue gauges, and the next scrape reads it afresh', async () => {
    const { service } = rig;
    const { db } = service.deps;
    let queueReads = 0;
    // Every scanning read of a scrape passes through deps.scans; the queue's are the ones on outbound_recipients.
    const here = scansOn(db);
    const counting: Scans = {
      first: (query, params) => {
        if (query.includes('outbound_recipients')) queueReads++;
        return here.first(query, params);
      },
      all: here.all,
    };
    const metrics = createMetrics(service.clock, () => counting);
    const sender = await newSender(service);
    await send(sender, 'ana@example.net');
    service.clock.advance(12_000);

    const first = parsePrometheusText(await metrics.registry.metrics());
    expect(queueReads).toBe(1);
    expect(sampleValue(first, 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(1);
    expect(sampleValue(first, 'mailstead_outbound_queue_oldest_age_seconds')).toBe(12);

    await deliver();
    const second = parsePrometheusText(await metrics.registry.metrics());
    expect(queueReads).toBe(2);
    expect(sampleValue(second, 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(0);
    expect(sampleValue(second, 'mailstead_outbound_queue_oldest_age_seconds')).toBe(0);
  });

  it('overlapping scrapes share the queue read under way; the one after it reads afresh', async () => {
    const { service } = rig;
    const here = scansOn(service.deps.db);
    let queueReads = 0;
    let release: () => void = () => undefined;
    // A slow read, as a scan of a large queue on the checkpoint thread is: answered when the test says.
    const slow: Scans = {
      first: async (query, params) => {
        if (!query.includes('outbound_recipients')) return here.first(query, params);
        queueReads++;
        await new Promise<void>((resolve) => (release = resolve));
        return here.first(query, params);
      },
      all: here.all,
    };
    const metrics = createMetrics(service.clock, () => slow);
    await send(await newSender(service), 'ana@example.net');
    const first = metrics.registry.metrics();
    // The second scrape and the overview start while the first one's read is still under way.
    await new Promise((r) => setTimeout(r, 10));
    const second = metrics.registry.metrics();
    const overview = metrics.outboundQueue();
    await new Promise((r) => setTimeout(r, 20));
    expect(queueReads).toBe(1);
    release();
    const [a, b, o] = await Promise.all([first, second, overview]);
    expect(sampleValue(parsePrometheusText(a), 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(1);
    expect(sampleValue(parsePrometheusText(b), 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(1);
    expect(o.queue.due).toBe(1);
    const third = metrics.registry.metrics();
    await new Promise((r) => setTimeout(r, 20));
    release();
    await third;
    expect(queueReads).toBe(2);
  });

  it('a gauge read that fails answers 500 in the envelope, with a request id', async () => {
    const service = await startService();
    try {
      await execute(service.deps.db, sql`alter table customer_db_writes rename to customer_db_writes_gone`);
      const res = await fetch(`${service.url}/metrics`);
      expect(res.status).toBe(500);
      expect(await res.json()).toEqual({ error: { code: 'internal_error', message: expect.stringMatching(/request id [0-9a-f-]{36}/) } });
    } finally {
      await execute(service.deps.db, sql`alter table customer_db_writes_gone rename to customer_db_writes`);
      await service.close();
    }
  });
});

describe('the Prometheus text parser the tests read with', () => {
  const ok = '# HELP a_total A.\n# TYPE a_total counter\na_total{x="1"} 3\n';
  it.each([
    ['no final newline', ok.trimEnd()],
    ['a series twice', `${ok}a_total{x="1"} 4\n`],
    ['a bad label escape', '# TYPE a gauge\na{x="\\t"} 1\n'],
    ['an unquoted label value', '# TYPE a gauge\na{x=1} 1\n'],
    ['a bad value', '# TYPE a gauge\na 1,5\n'],
    ['TYPE after the samples', 'a 1\n# TYPE a gauge\n'],
    ['a family split', '# TYPE a gauge\n# TYPE b gauge\na{x="1"} 1\nb 1\na{x="2"} 1\n'],
    ['buckets not cumulative', '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n'],
    ['+Inf not the count', '# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 2\n'],
    ['no +Inf bucket', '# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n'],
  ])('refuses %s', (_why, text) => {
    expect(() => parsePrometheusText(text)).toThrow();
  });

  it('reads a well-formed answer', () => {
    const families = parsePrometheusText(`${ok}# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3.5\nh_count 2\n`);
    expect(sampleValue(families, 'a_total', { x: '1' })).toBe(3);
    expect(families.get('a_total')).toMatchObject({ type: 'counter', help: 'A.' });
    expect(sampleValue(families, 'h_sum')).toBe(3.5);
  });
});

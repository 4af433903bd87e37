import { and, eq, gt, ne, notInArray } from 'drizzle-orm';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { webhookDeliveries, webhookEndpoints } from '../db/schema/index.js';
import { PING_COOLDOWN_MS } from '../server/core/webhooks.js';
import { ERROR_STATUS } from '../server/shared/errors.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { HttpsReceiver } from './helpers/https-receiver.js';
import { seedEmail, seedEndpoint, seedEvent } from './helpers/outcomes.js';
import { type FuzzRequest, type FuzzWorld, endpoints } from './helpers/fuzz-requests.js';
import { piecesToBuffer } from './helpers/fuzz-json.js';
import { DAY, newSender, newSubSender, receipt, sendEmail, type Sender } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';
import { startPostgres, type TestPostgres } from './helpers/postgres.js';

/**
 * A property-based fuzz of every endpoint that takes a body, a query or an id, over real HTTP
 * against the real service. Whatever a client sends (well-shaped requests that reach the deep paths, or wrong types,
 * missing and extra fields, nesting 10,000 deep, bodies just under 1 MB, lone surrogates, NUL, `__proto__` keys,
 * bytes that are not JSON or not UTF-8), the service answers a 2xx, or a 4xx in exactly the error envelope with a code
 * of docs/api/contract.md, within ANSWER_WITHIN_MS; never a 5xx. A fixed seed and FUZZ_RUNS cases per endpoint (FUZZ_RUNS=5000 for
 * a long run; FUZZ_SEED to explore other cases).
 */

const RUNS = Number(process.env.FUZZ_RUNS ?? 100);
const SEED = Number(process.env.FUZZ_SEED ?? 9);
const ANSWER_WITHIN_MS = 2_000;
/**
 * POST /domains makes a fresh RSA-2048 pair, whose time varies widely (prime search): up to about 1 s on a loaded
 * 2-core machine, with a longer tail. It gets this much; every other request ANSWER_WITHIN_MS.
 */
const KEYGEN_ANSWER_WITHIN_MS = 5_000;
const timeLimitOf = (req: FuzzRequest) => (req.method === 'POST' && req.path === '/domains' ? KEYGEN_ANSWER_WITHIN_MS : ANSWER_WITHIN_MS);
/**
 * Room for a failing property to shrink its counterexample (each shrink step is a request). Shrinking is cut off
 * before the test's own timeout, so the counterexample found so far is still reported; a run cut off before its
 * cases are done fails rather than passing on fewer.
 */
const PROPERTY_TIMEOUT_MS = Math.max(120_000, RUNS * 500);
const PROPERTY_TIME_LIMIT_MS = PROPERTY_TIMEOUT_MS - 15_000;
/** The send path is the deepest (seven checks, templates, the queue): it gets twice the cases. */
const runsOf = (endpoint: string) => (endpoint === 'POST /emails' ? 2 * RUNS : RUNS);
/** Every so many requests the fake clock moves a day on, so sandbox, quota and idempotency windows reopen. */
const REQUESTS_PER_DAY = 400;
/** Every so many test pings the fake clock moves past the ping cooldown, so some pings are posted (the rest 429). */
const PINGS_PER_COOLDOWN = 3;
/** The name the test DNS server answers with 127.0.0.1: the HTTPS receiver's host in webhook URLs. */
const HOOK_HOST = 'hooks.webhooks.test';
/** The name the test DNS server answers with 127.0.0.1 for the customer Postgres (its certificate carries it). */
const DB_HOST = 'db.pg.test';
/** Endpoints of the key's account that DELETE /webhooks/{id} may remove. */
const DELETABLE_ENDPOINTS = 5;
/**
 * The key's account starts with this many endpoints (the fixture, the deletable ones and stored ones never posted to),
 * so a few creations reach the limit of 20: 422 too_many_endpoints, after which the fuzz-made ones are cleared.
 */
const ENDPOINTS_AT_START = 16;

const SUPPRESSED = ['gone@example.net', 'bounced@example.org', 'complained@customer.example', 'support@b\u00fccher.example', 'old@example.net'];

let service: TestService;
let sender: Sender;
let world: FuzzWorld;
let requests = 0;
let dns: TestDnsServer;
let receiver: HttpsReceiver;
let pgServer: TestPostgres;
/** Test pings sent, and those the service answered 200 for (each posted once to the receiver). */
let pings = 0;
let pingsAnswered = 0;
/** Endpoints made before the fuzz run (the fixture, the deletable and the stored ones): kept when fuzz-made ones are cleared. */
let fixtureEndpoints: string[] = [];

beforeAll(async () => {
  // Webhook hosts resolve through a DNS server on loopback: a random name is NXDOMAIN at once, never asked of the
  // internet; HOOK_HOST is the HTTPS receiver. No dispatcher runs (startService starts none): nothing posts by itself.
  dns = await TestDnsServer.start();
  dns.add(HOOK_HOST, { type: 'A', address: '127.0.0.1' });
  dns.add(DB_HOST, { type: 'A', address: '127.0.0.1' });
  receiver = await HttpsReceiver.start();
  // A real Postgres with TLS, so POST /database can succeed (and its failures are real ones, answered at once).
  pgServer = await startPostgres({ certificate: 'trusted' });
  service = await startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true' });
  sender = await newSender(service, { name: 'Fuzz', credits: 1_000_000 });
  const sub = await newSubSender(service, sender.key, 'Fuzz sub-account');
  // Rows on every list, so each has a live cursor and ids to aim at.
  await newSubSender(service, sender.key, 'Fuzz second sub-account');
  const sent = [];
  for (let i = 0; i < 2; i++) sent.push(await sendEmail(service, sender.key, receipt(sender.from, `r${i}@example.net`, { sandbox: true })));
  const suppressed = [];
  for (const address of SUPPRESSED) suppressed.push(await service.api('POST', '/suppressions', { key: sender.key, body: { address } }));
  await service.newKey(sender.account.id, undefined, 'second');
  const secondDomain = await service.api('POST', '/domains', { key: sender.key, body: { name: `second-${sender.domain}` } });
  expect([...sent, ...suppressed, secondDomain].map((r) => r.status)).toEqual([200, 200, ...SUPPRESSED.map(() => 201), 201]);

  // Webhooks: the fixture endpoint at the receiver, with a ping and replayed deliveries on its list; endpoints to
  // delete; recorded outcomes of the account for GET /events and replays, at one-minute steps up to now.
  const hookUrl = `https://${HOOK_HOST}:${receiver.port}/hook`;
  const made = [];
  for (let i = 0; i <= DELETABLE_ENDPOINTS; i++) {
    made.push(
      await service.api('POST', '/webhooks', {
        key: sender.key,
        body: { url: hookUrl, events: i === 0 ? ['email.delivered', 'email.bounced', 'ping'] : ['email.deferred'] },
      }),
    );
  }
  expect(
    made.map((r) => r.status),
    JSON.stringify(made.map((r) => r.body)),
  ).toEqual(made.map(() => 201));
  const [fixture, ...deletable] = made.map((r) => r.body.id as string) as [string, ...string[]];
  const stored: string[] = [];
  for (let i = made.length; i < ENDPOINTS_AT_START; i++) stored.push(await seedEndpoint(service, sender.account.id, ['email.complained']));
  fixtureEndpoints = [fixture, ...deletable, ...stored];
  const now = service.clock.now();
  const eventTimes: string[] = [new Date(now - 24 * 60 * 60_000).toISOString()];
  const statuses = ['delivered', 'bounced', 'deferred', 'complained'] as const;
  const emailId = await seedEmail(service, sender.account.id, { from: sender.from, at: now - 60 * 60_000 });
  for (let i = 0; i < 12; i++) {
    const at = now - (12 - i) * 60_000;
    await seedEvent(service, emailId, statuses[i % statuses.length]!, at, `r${i}@example.net`);
    if (i % 3 === 0) eventTimes.push(new Date(at).toISOString(), new Date(at).toISOString().replace('Z', '+00:00'));
  }
  eventTimes.push(new Date(now).toISOString(), new Date(now + 60_000).toISOString());
  const ping = await service.api('POST', `/webhooks/${fixture}/test`, { key: sender.key });
  const replayed = await service.api('POST', `/webhooks/${fixture}/replay`, { key: sender.key, body: { since: eventTimes[0] } });
  expect([ping.status, ping.body.delivered, replayed.status, replayed.body.queued]).toEqual([200, true, 200, 6]);
  pings = pingsAnswered = 1;

  // An own template naming its layout, for the template endpoints (the fuzz's DELETE aims at other names).
  const templates = { template: 'fuzz-notice', layout: 'fuzz-brand' };
  const layout = await service.api('POST', '/templates', {
    key: sender.key,
    body: { name: templates.layout, kind: 'layout', html: '<div>{{ content }}</div>' },
  });
  const notice = await service.api('POST', '/templates', {
    key: sender.key,
    body: { name: templates.template, subject: 'Notice {{ n }}', html: '<p>{{ n }}</p>', layout: templates.layout, variables: { n: { required: true } } },
  });
  expect([layout.status, notice.status], JSON.stringify([layout.body, notice.body])).toEqual([201, 201]);

  const cursor = async (list: string) => {
    const res = await service.api('GET', `/${list}?limit=1`, { key: sender.key });
    expect(res.body.nextCursor, `${list}: ${JSON.stringify(res.body)}`).toEqual(expect.any(String));
    return res.body.nextCursor as string;
  };
  world = {
    domain: sender.domain,
    pendingDomain: `second-${sender.domain}`,
    sub: { id: sub.id, domain: sub.domain },
    ids: { email: sent[0]!.body.id, domain: sender.domainId, suppression: suppressed[0]!.body.id },
    suppressed: SUPPRESSED,
    cursors: {
      emails: await cursor('emails'),
      domains: await cursor('domains'),
      accounts: await cursor('accounts'),
      keys: await cursor('keys'),
      suppressions: await cursor('suppressions'),
      webhooks: await cursor('webhooks'),
      webhookDeliveries: await cursor(`webhooks/${fixture}/deliveries`),
      events: await cursor('events'),
      templates: await cursor('templates'),
    },
    templates,
    webhooks: { fixture, deletable, host: HOOK_HOST, port: receiver.port },
    eventTimes,
    database: { url: pgServer.url(DB_HOST), host: DB_HOST, port: pgServer.port },
  };
});

afterAll(async () => {
  await service?.close();
  await receiver?.close();
  await dns?.stop();
  await pgServer?.stop();
});

/**
 * Clears the endpoints POST /webhooks made in the fuzz run once an account is at the limit (after the 422
 * too_many_endpoints that says so), so later creations can succeed again. None of them has a delivery (only the
 * fixture endpoint is ever pinged or replayed to).
 */
async function clearFuzzEndpoints(): Promise<void> {
  await service.deps.db.delete(webhookEndpoints).where(notInArray(webhookEndpoints.id, fixtureEndpoints));
}

interface Answer {
  limitMs: number;
  status: number;
  contentType: string | null;
  text: string;
  ms: number;
}

async function send(req: FuzzRequest): Promise<Answer> {
  if (++requests % REQUESTS_PER_DAY === 0) service.clock.advance(DAY);
  const ping = req.method === 'POST' && /^\/webhooks\/[^/]*\/test$/.test(req.path);
  if (ping && ++pings % PINGS_PER_COOLDOWN === 0) service.clock.advance(PING_COOLDOWN_MS + 1_000);
  const headers: Record<string, string> = { ...req.headers };
  if (req.auth === 'key') headers.authorization = `Bearer ${sender.key}`;
  else if (req.auth !== 'none') headers.authorization = req.auth.raw;
  if (req.account === 'sub') headers['x-service-account'] = world.sub.id;
  else if (req.account !== 'self') headers['x-service-account'] = req.account.raw;
  const limitMs = timeLimitOf(req);
  const started = performance.now();
  try {
    const res = await fetch(`${service.base}${req.path}`, {
      method: req.method,
      headers,
      body: req.body ? piecesToBuffer(req.body) : undefined,
      signal: AbortSignal.timeout(limitMs),
    });
    const text = await res.text();
    if (ping && res.status === 200) pingsAnswered++;
    return { limitMs, status: res.status, contentType: res.headers.get('content-type'), text, ms: performance.now() - started };
  } catch (err) {
    const ms = Math.round(performance.now() - started);
    throw new Error(err instanceof Error && err.name === 'TimeoutError' ? `no answer within ${limitMs} ms` : `request failed after ${ms} ms: ${String(err)}`);
  }
}

const CLIENT_ERROR_CODES = new Set(
  Object.entries(ERROR_STATUS)
    .filter(([, status]) => status >= 400 && status < 500)
    .map(([code]) => code),
);

/**
 * The contract every answer keeps: a 2xx, or a 4xx in exactly `{ error: { code, message } }`; in time; never a 5xx.
 * Returns the outcome (`201`, `422 invalid_request`) for the tally.
 */
function checkAnswer(a: Answer): string {
  const show = `${a.status} ${a.text.slice(0, 300)}`;
  if (a.ms > a.limitMs) throw new Error(`answered in ${Math.round(a.ms)} ms (limit ${a.limitMs}): ${show}`);
  if (a.status >= 200 && a.status < 300) {
    if (a.status === 204) {
      if (a.text !== '') throw new Error(`204 with a body: ${show}`);
      return '204';
    }
    let body: unknown;
    try {
      body = JSON.parse(a.text);
    } catch {
      throw new Error(`a ${a.status} whose body is not JSON: ${show}`);
    }
    if (typeof body !== 'object' || body === null || Object.keys(body).join() === 'error')
      throw new Error(`a ${a.status} whose body is not a resource: ${show}`);
    return String(a.status);
  }
  if (a.status < 400 || a.status >= 500) throw new Error(`answered ${show}`);
  let body: unknown;
  try {
    body = JSON.parse(a.text);
  } catch {
    throw new Error(`a ${a.status} whose body is not JSON: ${show}`);
  }
  const error = (body as { error?: unknown } | null)?.error as Record<string, unknown> | undefined;
  const exact =
    typeof body === 'object' &&
    body !== null &&
    Object.keys(body).join() === 'error' &&
    typeof error === 'object' &&
    error !== null &&
    Object.keys(error).sort().join() === 'code,message';
  if (!exact || typeof error.code !== 'string' || typeof error.message !== 'string' || error.message === '')
    throw new Error(`a ${a.status} not in the error envelope: ${show}`);
  if (!CLIENT_ERROR_CODES.has(error.code)) throw new Error(`a ${a.status} with a code that is not a 4xx code of docs/api/contract.md: ${show}`);
  if (!a.contentType?.startsWith('application/json')) throw new Error(`a ${a.status} served as ${a.contentType}: ${show}`);
  return `${a.status} ${error.code}`;
}

/** The longest answer per endpoint, in ms (printed with FUZZ_STATS). */
const slowest = new Map<string, number>();

/** Endpoints whose property held for every case. */
const completed = new Set<string>();

/** Outcomes seen per endpoint (shrinking included): how often each status and code answered. */
const tally = new Map<string, Map<string, number>>();
function count(endpoint: string, outcome: string): void {
  const seen = tally.get(endpoint) ?? new Map<string, number>();
  seen.set(outcome, (seen.get(outcome) ?? 0) + 1);
  tally.set(endpoint, seen);
}

describe('every endpoint that takes a body, a query or an id answers 2xx, or 4xx in the envelope, in time', () => {
  it('the checks of an answer fail on what they must refuse', () => {
    const ok = { limitMs: ANSWER_WITHIN_MS, contentType: 'application/json', ms: 5 };
    const refused = [
      { ...ok, status: 500, text: '{"error":{"code":"internal_error","message":"x"}}' },
      { ...ok, status: 400, text: '' },
      { ...ok, status: 400, text: '{"error":{"code":"invalid_json","message":"x","stack":"y"}}' },
      { ...ok, status: 400, text: '{"error":{"code":"made_up","message":"x"}}' },
      { ...ok, status: 422, text: '{"error":{"code":"invalid_request","message":"x"},"extra":1}' },
      { ...ok, status: 404, text: '{"error":{"code":"not_found","message":"x"}}', contentType: 'text/plain' },
      { ...ok, status: 200, text: '{"id":"x"}', ms: ANSWER_WITHIN_MS + 1 },
      { ...ok, status: 200, text: '{"error":{"code":"invalid_request","message":"x"}}' },
      { ...ok, status: 201, text: 'created' },
      { ...ok, status: 302, text: '' },
    ];
    for (const a of refused) expect(() => checkAnswer(a), JSON.stringify(a)).toThrow();
    expect(() => checkAnswer({ ...ok, status: 422, text: '{"error":{"code":"invalid_request","message":"x"}}' })).not.toThrow();
    expect(() => checkAnswer({ ...ok, status: 204, text: '' })).not.toThrow();
  });

  // Endpoints are listed once the fixture exists; each is its own test, so a failure names its endpoint.
  const names = [
    'POST /emails',
    'GET /emails',
    'GET /emails/{id}',
    'GET /emails/{id}/message',
    'GET /templates',
    'POST /templates',
    'GET, PUT, DELETE and versions /templates/{name}',
    'POST /templates/{name}/render',
    'GET /domains',
    'POST /domains',
    'GET /domains/{id}',
    'DELETE and verify /domains/{id}',
    'GET /account',
    'GET /accounts',
    'POST /accounts',
    'GET /accounts/{id}',
    'POST /accounts/{id}/suspend',
    'DELETE /accounts/{id}',
    'GET /keys',
    'POST /keys',
    'DELETE /keys/{id}',
    'GET /suppressions',
    'POST /suppressions',
    'DELETE /suppressions/{address}',
    'GET /webhooks',
    'POST /webhooks',
    'GET /webhooks/{id}',
    'DELETE /webhooks/{id}',
    'POST /webhooks/{id}/test',
    'GET /webhooks/{id}/deliveries',
    'POST /webhooks/{id}/replay',
    'GET /events',
    'GET /database',
    'POST /database',
    'POST /database/test',
    'DELETE /database',
    'methods not served on known paths',
  ];
  for (const name of names) {
    it(
      name,
      async () => {
        const endpoint = endpoints(world).find((e) => e.name === name);
        expect(endpoint, name).toBeDefined();
        await fc.assert(
          fc.asyncProperty(endpoint!.requests, async (req) => {
            const answer = await send(req);
            slowest.set(name, Math.max(slowest.get(name) ?? 0, Math.round(answer.ms)));
            const outcome = checkAnswer(answer);
            count(name, outcome);
            if (outcome === '422 too_many_endpoints') await clearFuzzEndpoints();
          }),
          { seed: SEED, numRuns: runsOf(name), interruptAfterTimeLimit: PROPERTY_TIME_LIMIT_MS, markInterruptAsFailure: true },
        );
        completed.add(name);
      },
      PROPERTY_TIMEOUT_MS,
    );
  }

  it('the generator covers every endpoint it names, and no more', () => {
    expect(endpoints(world).map((e) => e.name)).toEqual(names);
  });

  it('well-shaped requests get past validation: every endpoint that can succeed answered a 2xx', () => {
    if (process.env.FUZZ_STATS) {
      const stats = Object.fromEntries([...tally].map(([e, m]) => [e, { slowestMs: slowest.get(e), outcomes: Object.fromEntries(m) }]));
      process.stderr.write(`${JSON.stringify(stats, null, 1)}\n`);
    }
    // A captured message exists only in capture mode; this service delivers (direct), so that endpoint is always 404.
    const refusedOnly = new Set(['DELETE and verify /domains/{id}', 'DELETE /accounts/{id}', 'DELETE /keys/{id}', 'GET /emails/{id}/message']);
    // Judged on the endpoints whose property held: one that failed stopped early, and says so on its own.
    const judged = names.filter((name) => completed.has(name) && !refusedOnly.has(name));
    const succeeded = judged.filter((name) => [...(tally.get(name)?.keys() ?? [])].some((outcome) => outcome.startsWith('2')));
    expect(succeeded).toEqual(judged);
  });

  it('GET /healthz still answers 200 after the run, and nothing was logged as an unhandled error', async () => {
    const res = await fetch(`${service.url}/healthz`, { signal: AbortSignal.timeout(ANSWER_WITHIN_MS) });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok', deliveryMode: 'direct', state: service.deps.store.engine });
    expect(service.logger.entries.filter((e) => e.level === 'error')).toEqual([]);
  });

  it('nothing was posted but the test pings: each answered ping reached the receiver once, no delivery was attempted', async () => {
    expect(pings).toBeGreaterThan(1);
    expect(receiver.requests.map((r) => r.headers['x-service-event'])).toEqual(Array.from({ length: pingsAnswered }, () => 'ping'));
    const attempted = await service.deps.db
      .select({ id: webhookDeliveries.id })
      .from(webhookDeliveries)
      .where(and(ne(webhookDeliveries.eventType, 'ping'), gt(webhookDeliveries.attempts, 0)));
    expect(attempted).toEqual([]);
    expect(
      await service.deps.db.select({ id: webhookEndpoints.id }).from(webhookEndpoints).where(eq(webhookEndpoints.id, world.webhooks.fixture)),
    ).toHaveLength(1);
  });
});

import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { type Clock, leaseNow } from './clock.js';

/**
 * The operator's counters and gauges, served by `GET /metrics` in the Prometheus text format. One registry per
 * instance (never prom-client's global one), so tests that build several services do not share or collide. Labels
 * are bounded sets only: never a recipient, a domain or an account.
 */

/** The outcome statuses of a recipient (server/core/outcomes.ts), each a series from the start. */
const OUTCOME_STATUSES = ['delivered', 'bounced', 'deferred', 'complained'] as const;
export type OutcomeMetricStatus = (typeof OUTCOME_STATUSES)[number];

/** A webhook attempt: delivered (2xx), failed (retried later), or failed for the last time (no attempt follows). */
const WEBHOOK_OUTCOMES = ['delivered', 'failed', 'gave_up'] as const;
export type WebhookMetricOutcome = (typeof WEBHOOK_OUTCOMES)[number];

/** Where inbound SMTP said no: at the connection, at RCPT TO, or at the end of DATA. */
export type InboundStage = 'connect' | 'rcpt' | 'data';
/** Where SMTP submission refused: at connect, AUTH, MAIL FROM, RCPT or the end of DATA. */
export type SubmissionStage = 'connect' | 'auth' | 'mail' | 'rcpt' | 'data';

/**
 * Send-to-outcome buckets, in seconds: a direct delivery takes about a second, a deferred one is retried over hours,
 * and the last retry is 5 days after the send.
 */
export const LATENCY_BUCKETS_SECONDS = [0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14_400, 86_400, 432_000];

/** A route label for a request no route matched (404 and 405): the raw path would be one series per client whim. */
export const UNMATCHED_ROUTE = 'unmatched';

export interface Metrics {
  readonly registry: Registry;
  /** One HTTP request answered: its method, route pattern (or UNMATCHED_ROUTE) and status. */
  httpRequest(method: string, route: string, status: number): void;
  /** One recorded outcome of one recipient (the engine's reply, or a bounce or complaint received later). */
  deliveryOutcome(status: OutcomeMetricStatus): void;
  /** A recipient's final outcome (delivered or bounced) `seconds` after its send was accepted. */
  deliveryLatency(status: 'delivered' | 'bounced', seconds: number): void;
  /** One recorded webhook attempt. */
  webhookAttempt(outcome: WebhookMetricOutcome): void;
  /** Inbound SMTP accepted one message (250 at the end of DATA). */
  inboundAccepted(): void;
  /** Inbound SMTP refused with `code` (421, 451, 550, 552...) at `stage`. */
  inboundRefused(stage: InboundStage, code: number): void;
  /** SMTP submission queued one message (250 at the end of DATA; a de-duplicated retry too). */
  submissionAccepted(): void;
  /** SMTP submission refused with `code` at `stage`. */
  submissionRefused(stage: SubmissionStage, code: number): void;
  /** Adds the process's own metrics (CPU, memory, event loop, GC): once, from main, never per test service. */
  collectProcessMetrics(): void;
  /**
   * The outbound queue, what the delivery engine still has to attempt, read as the gauges read it (the dashboard's
   * overview shows it, so the two always agree), and the time it was read at.
   */
  outboundQueue(): Promise<{ at: number; queue: OutboundQueue }>;
}

/** An SMTP reply code as a label: three digits, else `other` (the label set stays bounded). */
const codeLabel = (code: number) => (Number.isInteger(code) && code >= 200 && code <= 599 ? String(code) : 'other');

/** The outbound queue at `now`: recipients still to attempt, by state, and when the oldest of them was sent. */
export interface OutboundQueue {
  /** Ready to send now. */
  due: number;
  /** Leased to a worker. */
  sending: number;
  /** Waiting for a retry. */
  deferred: number;
  /** The send time of the oldest recipient still queued; null when the queue is empty. */
  oldestCreatedAt: number | null;
}

/**
 * The queue's state at `@now` (leases judged at `@leaseNow`, the engine's timeline: server/shared/clock.ts leaseNow), in one
 * pass over the queued recipients (outbound_recipients_due_idx, then each row).
 */
export const OUTBOUND_QUEUE_SQL = `
  select
    sum(case when locked_until > @leaseNow then 1 else 0 end) as sending,
    sum(case when (locked_until is null or locked_until <= @leaseNow) and next_attempt_at <= @now then 1 else 0 end) as due,
    sum(case when (locked_until is null or locked_until <= @leaseNow) and next_attempt_at > @now then 1 else 0 end) as deferred,
    min(created_at) as oldest
  from outbound_recipients where status = 'queued'`;

/** The customer-database writes waiting (outside the set-aside ones): customer_db_writes_pending_idx alone. */
export const PENDING_WRITES_SQL = 'select count(*) as n from customer_db_writes where set_aside_at is null';

interface QueueRow {
  due: number | null;
  sending: number | null;
  deferred: number | null;
  oldest: number | null;
}

const queueOf = (row: QueueRow | undefined): OutboundQueue => ({
  due: row?.due ?? 0,
  sending: row?.sending ?? 0,
  deferred: row?.deferred ?? 0,
  oldestCreatedAt: row?.oldest ?? null,
});

/**
 * Builds the registry. The queue gauges read SQLite when scraped (their `collect`), so they are true at that moment
 * and cost nothing between scrapes; the counters move where the thing happens. The scanning reads go through
 * `scans()`, asked at each scrape: main moves them off the event loop once the checkpoint thread runs (db/scans.ts).
 */
/** Where the gauges' reads that walk many rows run (db/scans.ts's Scans is one). */
export interface GaugeReads {
  first<Row>(sql: string, params?: Record<string, unknown>): Promise<Row | undefined>;
}

/** The connections of the state's Postgres pool (STATE_URL): open, of which idle, and requests waiting for one. */
export interface PoolCounts {
  total: number;
  idle: number;
  waiting: number;
}

export function createMetrics(
  clock: Clock,
  scans: () => GaugeReads,
  opts: { statePool?: () => PoolCounts; node?: { name: string; live: () => number } } = {},
): Metrics {
  const registry = new Registry();
  const registers = [registry];

  const node = opts.node;
  if (node) {
    new Gauge({
      name: 'mailstead_node_info',
      help: 'This node: its NODE_NAME as the label, always 1',
      labelNames: ['node'] as const,
      registers,
      collect() {
        this.set({ node: node.name }, 1);
      },
    });
    new Gauge({
      name: 'mailstead_nodes_live',
      help: 'Nodes holding their liveness lock on the state database (1 with SQLite)',
      registers,
      collect() {
        this.set(node.live());
      },
    });
  }

  const statePool = opts.statePool;
  if (statePool) {
    new Gauge({
      name: 'mailstead_state_pool_connections',
      help: "Connections of the pool to the state's Postgres (STATE_URL): total open, idle, and waiting (requests queued for a connection)",
      labelNames: ['state'] as const,
      registers,
      collect() {
        const counts = statePool();
        this.set({ state: 'total' }, counts.total);
        this.set({ state: 'idle' }, counts.idle);
        this.set({ state: 'waiting' }, counts.waiting);
      },
    });
  }

  // The queue is read once at a time (it scans every queued recipient): the gauges of one scrape, overlapping scrapes
  // (two Prometheus servers) and the dashboard's overview share the read under way; the next one after it reads afresh.
  let reading: { at: number; queue: Promise<OutboundQueue> } | null = null;
  const queueNow = (): { at: number; queue: Promise<OutboundQueue> } => {
    if (!reading) {
      const at = clock.now();
      const queue = Promise.resolve()
        .then(() => scans().first<QueueRow>(OUTBOUND_QUEUE_SQL, { now: at, leaseNow: leaseNow(clock) }))
        .then(queueOf);
      const current = { at, queue };
      const done = () => {
        if (reading === current) reading = null;
      };
      queue.then(done, done);
      reading = current;
    }
    return reading;
  };

  const http = new Counter({
    name: 'mailstead_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers,
  });

  new Gauge({
    name: 'mailstead_outbound_queue_depth',
    help: 'Recipients waiting in the outbound queue: due (ready to send), sending (leased to a worker), deferred (waiting for a retry)',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      const queue = await queueNow().queue;
      this.set({ state: 'due' }, queue.due);
      this.set({ state: 'sending' }, queue.sending);
      this.set({ state: 'deferred' }, queue.deferred);
    },
  });

  new Gauge({
    name: 'mailstead_outbound_queue_oldest_age_seconds',
    help: 'Age of the oldest recipient still in the outbound queue, from its send; 0 when the queue is empty',
    registers,
    async collect() {
      const { at, queue: pending } = queueNow();
      const queue = await pending;
      this.set(queue.oldestCreatedAt === null ? 0 : Math.max(0, (at - queue.oldestCreatedAt) / 1000));
    },
  });

  const outcomes = new Counter({
    name: 'mailstead_delivery_outcomes_total',
    help: 'Recorded outcomes of recipients, by status (each deferral counts; bounces and complaints received later too)',
    labelNames: ['status'] as const,
    registers,
  });
  for (const status of OUTCOME_STATUSES) outcomes.inc({ status }, 0);

  const latency = new Histogram({
    name: 'mailstead_delivery_latency_seconds',
    help: "Time from a send's acceptance to a recipient's final outcome from the engine, by status",
    labelNames: ['status'] as const,
    buckets: LATENCY_BUCKETS_SECONDS,
    registers,
  });

  const webhooks = new Counter({
    name: 'mailstead_webhook_attempts_total',
    help: 'Webhook delivery attempts recorded, by outcome: delivered, failed (retried later), gave_up (the last attempt failed)',
    labelNames: ['outcome'] as const,
    registers,
  });
  for (const outcome of WEBHOOK_OUTCOMES) webhooks.inc({ outcome }, 0);

  new Gauge({
    name: 'mailstead_customer_db_writes_pending',
    help: "Writes waiting in the outbox for customers' databases (not counting those set aside)",
    registers,
    async collect() {
      const row = await scans().first<{ n: number }>(PENDING_WRITES_SQL);
      this.set(row?.n ?? 0);
    },
  });

  const inboundAccepted = new Counter({ name: 'mailstead_inbound_accepted_total', help: 'Messages inbound SMTP accepted (250 at the end of DATA)', registers });
  const inboundRefused = new Counter({
    name: 'mailstead_inbound_refused_total',
    help: 'Refusals of inbound SMTP, by stage (connect, rcpt, data) and reply code',
    labelNames: ['stage', 'code'] as const,
    registers,
  });

  const submissionAccepted = new Counter({
    name: 'mailstead_submission_accepted_total',
    help: 'Messages SMTP submission queued (250 at the end of DATA)',
    registers,
  });
  const submissionRefused = new Counter({
    name: 'mailstead_submission_refused_total',
    help: 'Refusals of SMTP submission, by stage (connect, auth, mail, rcpt, data) and reply code',
    labelNames: ['stage', 'code'] as const,
    registers,
  });

  let processMetrics = false;
  return {
    registry,
    async outboundQueue() {
      const { at, queue } = queueNow();
      return { at, queue: await queue };
    },
    httpRequest: (method, route, status) => http.inc({ method, route, status: String(status) }),
    deliveryOutcome: (status) => outcomes.inc({ status }),
    deliveryLatency: (status, seconds) => latency.observe({ status }, Math.max(0, seconds)),
    webhookAttempt: (outcome) => webhooks.inc({ outcome }),
    inboundAccepted: () => inboundAccepted.inc(),
    inboundRefused: (stage, code) => inboundRefused.inc({ stage, code: codeLabel(code) }),
    submissionAccepted: () => submissionAccepted.inc(),
    submissionRefused: (stage, code) => submissionRefused.inc({ stage, code: codeLabel(code) }),
    collectProcessMetrics() {
      if (processMetrics) return;
      processMetrics = true;
      collectDefaultMetrics({ register: registry });
    },
  };
}

import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCheckpointer } from '../db/checkpointer.js';
import { connectionOf } from '../db/client.js';
import { scansOffThread } from '../db/scans.js';
import { queryRows } from '../db/sql.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { createMetrics } from '../server/shared/metrics.js';
import { type DeliveryRig, FAST_TIMEOUTS, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { parsePrometheusText, sampleValue } from './helpers/prometheus-text.js';
import { type Sender, newSender } from './helpers/sending.js';
import { sqliteStoreOf } from './helpers/service.js';

/**
 * /metrics' scans on SQLite's checkpoint thread (db/checkpointer.ts, db/scans.ts): SQLite's own machinery, which a
 * server on Postgres does not have (its scans run on the pool). The rest of /metrics is tests/metrics.test.ts, on
 * both engines.
 */

let rig: DeliveryRig;

beforeAll(async () => {
  rig = await startDeliveryRig();
});

afterAll(async () => {
  await stopDeliveryRig(rig ?? {});
});

async function send(sender: Sender, to: string[]): Promise<void> {
  const res = await rig.service.api('POST', '/emails', {
    key: sender.key,
    body: { from: sender.from, to, template: { name: 'receipt', receiptNumber: 'R-1', total: '$10.00' } },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

const deliver = () => createDeliveryEngine(rig.service.deps, { timeouts: FAST_TIMEOUTS }).runOnce();

describe('the scrape reads on SQLite', () => {
  it("main's scrapes scan on the checkpoint thread's connection, never the event loop's; with the thread stopped, on the event loop's", async () => {
    const { service } = rig;
    const { db } = service.deps;
    const thread = startCheckpointer(sqliteStoreOf(service.deps).sqlite, service.logger);
    // The event loop's connection, as the reader sees it, refuses every statement while the thread runs.
    let refusing = true;
    const connection = connectionOf(db);
    const realScan = connection.scan.bind(connection);
    connection.scan = (...args) => {
      if (refusing) throw new Error('a scrape read ran on the event loop');
      return realScan(...args);
    };
    try {
      const offLoop = scansOffThread(thread, db);
      const metrics = createMetrics(service.clock, () => offLoop);
      const sender = await newSender(service);
      await send(sender, ['ana@example.net', 'ben@example.net']);
      const [writesBefore] = await queryRows<{ n: number }>(db, sql`select count(*) as n from customer_db_writes where set_aside_at is null`);
      service.clock.advance(7_000);

      const onThread = parsePrometheusText(await metrics.registry.metrics());
      expect(sampleValue(onThread, 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(2);
      expect(sampleValue(onThread, 'mailstead_outbound_queue_oldest_age_seconds')).toBe(7);
      expect(sampleValue(onThread, 'mailstead_customer_db_writes_pending')).toBe(writesBefore!.n);

      await thread.stop();
      refusing = false;
      await deliver();
      const afterStop = parsePrometheusText(await metrics.registry.metrics());
      expect(sampleValue(afterStop, 'mailstead_outbound_queue_depth', { state: 'due' })).toBe(0);
      expect(sampleValue(afterStop, 'mailstead_outbound_queue_oldest_age_seconds')).toBe(0);
    } finally {
      connection.scan = realScan;
      await thread.stop();
    }
  });
});

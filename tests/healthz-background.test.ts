import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { DeliveryEngine } from '../mta/delivery-engine.js';
import { STORE_FAULT_WINDOW_MS } from '../server/shared/store-health.js';
import { resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import type { TestDnsServer } from './helpers/dns-server.js';
import { newSender, receipt, sendEmail } from './helpers/sending.js';
import { sqliteStoreOf, type TestService } from './helpers/service.js';
import type { SmtpSink } from './helpers/smtp-sink.js';

/**
 * /healthz hears of failures on the store from the work no request waits for: a delivery whose outcome could not be
 * written, a write of the group commit that failed on the storage. With every API request answered 200, a damaged
 * database file or a full disk under the delivery engine still turns the health check to 503 for the window.
 */

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;
let engine: DeliveryEngine;
let faultOn = false;
let claimFaultOn = false;

beforeAll(async () => {
  ({ dns, sink, service, engine } = await startDeliveryRig());
  const sqlite = sqliteStoreOf(service.deps).sqlite;
  // What a damaged page would throw, from inside the engine's insert of an outcome's event.
  sqlite.function('store_fault', () => {
    throw Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR_WRITE' });
  });
  sqlite.function('fault_on', () => (faultOn ? 1 : 0));
  sqlite.exec('CREATE TRIGGER store_fault BEFORE INSERT ON email_events WHEN fault_on() = 1 BEGIN SELECT store_fault(); END');
  // And from inside the claim of the engine's loop (its lease on the recipients, outside the group commit).
  sqlite.function('claim_fault_on', () => (claimFaultOn ? 1 : 0));
  sqlite.exec('CREATE TRIGGER claim_fault BEFORE UPDATE OF locked_by ON outbound_recipients WHEN claim_fault_on() = 1 BEGIN SELECT store_fault(); END');
});
afterAll(() => stopDeliveryRig({ dns, sink, service }));
beforeEach(() => {
  resetDeliveryRig({ dns, sink });
  faultOn = false;
  claimFaultOn = false;
  service.clock.advance(STORE_FAULT_WINDOW_MS);
});

const health = async () => (await fetch(`${service.url}/healthz`)).status;

describe('GET /healthz and failures outside requests', () => {
  it('a delivery whose outcome could not be written on the store: 503 for the window', async () => {
    const sender = await newSender(service);
    expect((await sendEmail(service, sender.key, receipt(sender.from))).status).toBe(200);
    faultOn = true;
    await engine.runOnce();
    expect(sink.received).toHaveLength(1);
    expect(service.logger.entries.some((e) => e.event === 'delivery.record_failed')).toBe(true);
    expect(await health()).toBe(503);
    service.clock.advance(STORE_FAULT_WINDOW_MS);
    expect(await health()).toBe(200);
  });

  it('a write of the group commit that failed on the store, whoever made it: 503', async () => {
    expect(await health()).toBe(200);
    await expect(
      service.deps.commits.run(() => {
        throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
      }),
    ).rejects.toThrow('full');
    expect(await health()).toBe(503);
  });

  it('a refusal inside the group commit is not the store’s: still 200', async () => {
    await expect(
      service.deps.commits.run(() => {
        throw Object.assign(new Error('refused'), { code: 'SQLITE_CONSTRAINT_CHECK' });
      }),
    ).rejects.toThrow('refused');
    expect(await health()).toBe(200);
  });

  // Last: the engine's loop, once stopped, is not started again.
  it('a claim of the running engine that failed on the store (outside the group commit): 503', async () => {
    const sender = await newSender(service);
    expect((await sendEmail(service, sender.key, receipt(sender.from))).status).toBe(200);
    claimFaultOn = true;
    const failed = () => service.logger.entries.some((e) => e.event === 'delivery.claim_failed');
    await engine.start();
    try {
      // The loop claims at once when started; wait (at most 5 s) for its tick to have failed.
      for (let i = 0; i < 100 && !failed(); i++) await new Promise((r) => setTimeout(r, 50));
    } finally {
      claimFaultOn = false;
      await engine.stop();
    }
    expect(failed()).toBe(true);
    expect(await health()).toBe(503);
  });
});

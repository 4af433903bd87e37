import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { emailEvents, outboundRecipients } from '../db/schema/index.js';
import type { Db } from '../db/client.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { FAST_TIMEOUTS, type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { newSender, receipt, recipients } from './helpers/sending.js';
import { replaceDep } from './helpers/replace-dep.js';
import type { SinkAnswer } from './helpers/smtp-sink.js';
import { one } from '../db/sql.js';

/**
 * Crash safety's first rule (docs/api/decisions.md section 3, docs/api/behaviour.md "Crash safety"): one recipient's outcome is durable before
 * the next transaction starts on the same connection. Every commit is held back 300 ms; when the sink sees the next
 * RCPT TO on the connection, the previous recipient must already be recorded.
 */

let rig: DeliveryRig;

beforeAll(async () => {
  rig = await startDeliveryRig();
});

afterAll(() => stopDeliveryRig(rig));

beforeEach(async () => {
  await rig.service.deps.db.delete(outboundRecipients);
  resetDeliveryRig(rig);
});

it('records each recipient’s outcome before the next RCPT TO on the same connection, however slow the commit', async () => {
  const { service, sink } = rig;
  const s = await newSender(service);
  const to = recipients(4, 'example.net');
  const res = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, to) });
  expect(res.status).toBe(200);
  const emailId = res.body.id as string;

  const recorded = async (recipient: string) =>
    (await one(
      service.deps.db
        .select()
        .from(emailEvents)
        .where(and(eq(emailEvents.emailId, emailId), eq(emailEvents.recipient, recipient))),
    )) !== undefined;
  const seenBeforeRcpt: [string, boolean][] = [];
  let previous: string | null = null;
  sink.rcpt = async (address): Promise<SinkAnswer> => {
    if (previous) seenBeforeRcpt.push([previous, await recorded(previous)]);
    previous = address;
    return 'accept';
  };

  const commits = service.deps.commits;
  // Every other member of the group commit kept: only run is slowed.
  replaceDep(service.deps, 'commits', {
    ...commits,
    run: <T>(fn: (db: Db) => T | Promise<T>) => new Promise((resolve) => setTimeout(resolve, 300)).then(() => commits.run(fn)),
  });
  try {
    // One connection for the destination, so the four transactions follow each other on it.
    expect(await createDeliveryEngine(service.deps, { timeouts: FAST_TIMEOUTS, perDomain: 1 }).runOnce()).toBe(4);
  } finally {
    replaceDep(service.deps, 'commits', commits);
  }

  expect(new Set(sink.received.map((r) => r.session)).size).toBe(1);
  expect(sink.deliveredTo()).toEqual(to);
  expect(seenBeforeRcpt).toEqual(to.slice(0, 3).map((r) => [r, true]));
});

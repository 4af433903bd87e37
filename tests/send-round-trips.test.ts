import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { statementsAreRoundTrips } from '../db/sql.js';
import { claimDueRecipients } from '../mta/delivery-queue.js';
import { recordOutcome } from '../server/core/outcomes.js';
import { statementsOf } from './helpers/statements.js';
import { FORGET_EVERY_MS } from '../server/core/idempotency.js';
import { type TestService, startService } from './helpers/service.js';
import { type Sender, expectError, expectOk, newSender, newSubSender, receipt, sendEmail } from './helpers/sending.js';

/**
 * A send costs a small, fixed number of statements on the state (on Postgres each is a round trip): the request's
 * guard reads its key's account, and the send's one transaction reads everything its checks need in one statement and
 * writes the log entry, the message, its recipients (in one statement however many) and the account's counters with
 * the charge. Counted by statementsOf (helpers/statements.ts).
 */
const recipients = (n: number) => Array.from({ length: n }, (_, i) => `customer${i}@example.net`);

let service: TestService;
let sender: Sender;

beforeAll(async () => {
  service = await startService();
  sender = await newSender(service, { credits: 1000 });
  // The first send warms what is read once (the key, the template).
  expectOk(await sendEmail(service, sender.key, receipt(sender.from)));
});
afterAll(async () => {
  await service.close();
});

/** POSTs `body` to /emails over a raw socket: the headers and `head` of the body in one write, the rest after `held`. */
async function rawSend(key: string, body: string, split?: { head: number; held: () => Promise<void> }): Promise<number> {
  const { port } = new URL(service.url);
  const socket = connect(Number(port), '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  let answer = '';
  socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
  const ended = new Promise((resolve) => socket.once('close', resolve));
  const request = `POST /api/v1/emails HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`;
  if (split) {
    socket.write(request + body.slice(0, split.head));
    await split.held();
    socket.write(body.slice(split.head));
  } else socket.write(request + body);
  await ended;
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1]);
}

/** The read of the `keys` change counter alone: the guard's check, once the body is read, that no key stopped working. */
const isStampRead = (statement: string) => /^select "n" from "change_counters"/.test(statement);

/** The guard's read of a known key: its account with the keys stamp (core/keys.ts accountAndStamp). */
const isGuardRead = (statement: string) => /from "accounts" where "accounts"\."id" = (\$1|\?)$/.test(statement.trim()) && statement.includes('change_counters');

describe('the statements a send costs', () => {
  it('the key is not looked up again after a body that arrived with the headers; it is after one that came later', async () => {
    const body = JSON.stringify(receipt(sender.from));
    const whole = await statementsOf(async () => expect(await rawSend(sender.key, body)).toBe(200));
    expect(whole.filter(isStampRead)).toEqual([]);
    const later = await statementsOf(async () =>
      expect(await rawSend(sender.key, body, { head: 10, held: () => new Promise((resolve) => setTimeout(resolve, 50)) })).toBe(200),
    );
    if (statementsAreRoundTrips(service.deps.db)) {
      // On Postgres the guard does not read a key this process found live before: the send's own reading confirms it
      // (the keys stamp in the same statement), however late the body came.
      expect(whole.filter(isGuardRead)).toEqual([]);
      expect(later.filter(isStampRead)).toEqual([]);
      expect(later.length).toBe(whole.length);
    } else {
      expect(whole.filter(isGuardRead)).toHaveLength(1);
      expect(later.filter(isStampRead)).toHaveLength(1);
      expect(later.length).toBe(whole.length + 1);
    }
  });

  it('are as many for fifty recipients as for one, and few', async () => {
    const one = await statementsOf(async () => expectOk(await sendEmail(service, sender.key, receipt(sender.from, recipients(1)))));
    const fifty = await statementsOf(async () => expectOk(await sendEmail(service, sender.key, receipt(sender.from, recipients(50)))));
    expect(fifty.length).toBe(one.length);
    expect(one.length).toBeLessThanOrEqual(9);
  });

  it('for a sub-account: two more, the acted-for account read and the parent row counted and charged', async () => {
    const sub = await newSubSender(service, sender.key);
    expectOk(await sendEmail(service, sender.key, receipt(sub.from), { account: sub.id }));
    const own = await statementsOf(async () => expectOk(await sendEmail(service, sender.key, receipt(sender.from))));
    const forSub = await statementsOf(async () => expectOk(await sendEmail(service, sender.key, receipt(sub.from, recipients(20)), { account: sub.id })));
    // The guard reads the sub-account the header names; the send updates the parent's row too (counted, charged). On
    // Postgres the guard reads the key's account too, which it does not for a send without the header.
    expect(forSub.length).toBe(own.length + (statementsAreRoundTrips(service.deps.db) ? 3 : 2));
  });

  it('after any key stops working: a known key is looked up once more, then kept under the new stamp', async () => {
    const before = await statementsOf(async () => expectOk(await sendEmail(service, sender.key, receipt(sender.from))));
    const other = await service.api('POST', '/keys', { key: sender.key, body: { name: 'moves the stamp' } });
    expect((await service.api('DELETE', `/keys/${other.body.id as string}`, { key: sender.key })).status).toBeLessThan(300);
    const once = await statementsOf(async () => expectOk(await sendEmail(service, sender.key, receipt(sender.from))));
    const after = await statementsOf(async () => expectOk(await sendEmail(service, sender.key, receipt(sender.from))));
    // On Postgres the send's transaction finds the stamp moved and looks the key up (the stamp, the key: two reads
    // more); on SQLite the guard, which reads the stamp anyway, looks the key up (one more). Either way the key is
    // then known under the new stamp, and the next send costs what it did before.
    expect(once.length).toBe(before.length + (statementsAreRoundTrips(service.deps.db) ? 2 : 1));
    expect(after.length).toBe(before.length);
  });

  it('with an Idempotency-Key: the claim, its check and its settle on top; once a minute, one more forgets the expired keys', async () => {
    const plain = await statementsOf(async () => expectOk(await sendEmail(service, sender.key, receipt(sender.from))));
    const keyedSend = (key: string) => async () =>
      expectOk(await sendEmail(service, sender.key, receipt(sender.from, recipients(10)), { headers: { 'idempotency-key': key } }));
    // The first keyed send of the minute forgets the keys past their window (server/core/idempotency.ts).
    service.clock.advance(FORGET_EVERY_MS + 1);
    expect((await statementsOf(keyedSend('round-trips-1'))).length).toBe(plain.length + 4);
    // The others within it do not.
    expect((await statementsOf(keyedSend('round-trips-2'))).length).toBe(plain.length + 3);
  });
});

/**
 * A key this process found live, revoked since: on Postgres the send's guard takes it unread (core/keys.ts KeyCheck),
 * so each way a send can be answered confirms it first, and every one of them is 401 invalid_key, as the spec orders
 * the key before everything else. Both engines, the same answers.
 */
describe('a send with a key found live before and revoked since', () => {
  /** A new key of the sender's account, used once (so the process knows it), then revoked with the sender's key. */
  async function revokedKnownKey(): Promise<string> {
    const minted = await service.api('POST', '/keys', { key: sender.key, body: { name: 'soon revoked' } });
    expect(minted.status).toBe(201);
    const key = minted.body.key as string;
    expectOk(await sendEmail(service, key, receipt(sender.from), { headers: { 'idempotency-key': `known-${minted.body.id as string}` } }));
    expect((await service.api('DELETE', `/keys/${minted.body.id as string}`, { key: sender.key })).status).toBeLessThan(300);
    return key;
  }

  async function emailCount(): Promise<number> {
    const res = await service.api('GET', '/emails?limit=100', { key: sender.key });
    expect(res.status).toBe(200);
    return (res.body.data as unknown[]).length;
  }

  it('is 401 invalid_key, and nothing is sent', async () => {
    const key = await revokedKnownKey();
    const before = await emailCount();
    expectError(await sendEmail(service, key, receipt(sender.from)), 401, 'invalid_key');
    expect(await emailCount()).toBe(before);
  });

  it('is 401 invalid_key before the body is judged: an invalid body, a body too large, a bad Idempotency-Key', async () => {
    const key = await revokedKnownKey();
    expectError(await service.api('POST', '/emails', { key, body: { from: 'nobody' } }), 401, 'invalid_key');
    expectError(
      await service.api('POST', '/emails', { key, rawBody: JSON.stringify({ pad: 'x'.repeat(1_100_000) }), headers: { 'content-type': 'application/json' } }),
      401,
      'invalid_key',
    );
    expectError(await sendEmail(service, key, receipt(sender.from), { headers: { 'idempotency-key': ' '.repeat(300) } }), 401, 'invalid_key');
  });

  it('is 401 invalid_key, not the stored answer, for an Idempotency-Key it sent with before', async () => {
    const minted = await service.api('POST', '/keys', { key: sender.key, body: { name: 'replayed' } });
    const key = minted.body.key as string;
    const request = receipt(sender.from);
    expectOk(await sendEmail(service, key, request, { headers: { 'idempotency-key': 'before-revoked' } }));
    expect((await service.api('DELETE', `/keys/${minted.body.id as string}`, { key: sender.key })).status).toBeLessThan(300);
    expectError(await sendEmail(service, key, request, { headers: { 'idempotency-key': 'before-revoked' } }), 401, 'invalid_key');
  });
});

describe('the statements an outcome costs', () => {
  it("reads the account's webhook endpoints and its customer database's owner in one statement on Postgres, two on SQLite", async () => {
    const sent = await sendEmail(service, sender.key, receipt(sender.from, ['outcome-reads@example.net']));
    expectOk(sent);
    const claimed = (await claimDueRecipients(service.deps.db, 'host-reads:1:a', service.clock.now(), 60_000, 1000)).filter(
      (job) => job.message.id === (sent.body.id as string),
    );
    expect(claimed).toHaveLength(1);
    const recorded = await statementsOf(async () => {
      expect(await recordOutcome(service.deps, claimed[0]!, { status: 'delivered', dsn: '2.0.0', detail: '250 ok' })).not.toBeNull();
    });
    const endpointReads = recorded.filter((s) => /^select .* from .*"webhook_endpoints"/s.test(s));
    const ownerReads = recorded.filter((s) => s.includes('customer_databases'));
    if (statementsAreRoundTrips(service.deps.db)) {
      expect(endpointReads).toHaveLength(1);
      expect(ownerReads).toEqual(endpointReads);
    } else {
      expect(endpointReads).toHaveLength(1);
      expect(ownerReads).toHaveLength(1);
      expect(ownerReads[0]).not.toBe(endpointReads[0]);
    }
  });
});

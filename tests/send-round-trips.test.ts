import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { statementsOf } from './helpers/statements.js';
import { type TestService, startService } from './helpers/service.js';
import { type Sender, expectOk, newSender, newSubSender, receipt, sendEmail } from './helpers/sending.js';

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

describe('the statements a send costs', () => {
  it('the key is not looked up again after a body that arrived with the headers; it is after one that came later', async () => {
    const body = JSON.stringify(receipt(sender.from));
    const whole = await statementsOf(async () => expect(await rawSend(sender.key, body)).toBe(200));
    expect(whole.filter(isStampRead)).toEqual([]);
    const later = await statementsOf(async () =>
      expect(await rawSend(sender.key, body, { head: 10, held: () => new Promise((resolve) => setTimeout(resolve, 50)) })).toBe(200),
    );
    expect(later.filter(isStampRead)).toHaveLength(1);
    expect(later.length).toBe(whole.length + 1);
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
    // The guard reads the sub-account the header names; the send updates the parent's row too (counted, charged).
    expect(forSub.length).toBe(own.length + 2);
  });

  it('with an Idempotency-Key: the claim, its check and its settle on top', async () => {
    const plain = await statementsOf(async () => expectOk(await sendEmail(service, sender.key, receipt(sender.from))));
    const keyed = await statementsOf(async () =>
      expectOk(await sendEmail(service, sender.key, receipt(sender.from, recipients(10)), { headers: { 'idempotency-key': 'round-trips-1' } })),
    );
    expect(keyed.length).toBe(plain.length + 3);
  });
});

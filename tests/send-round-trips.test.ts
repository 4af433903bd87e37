import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqliteConnection } from '../db/sqlite-connection.js';
import { type TestService, startService } from './helpers/service.js';
import { type Sender, expectOk, newSender, newSubSender, receipt, sendEmail } from './helpers/sending.js';

/**
 * A send costs a small, fixed number of statements on the state (on Postgres each is a round trip): the request's
 * guard reads its key's account, and the send's one transaction reads everything its checks need in one statement and
 * writes the log entry, the message, its recipients (in one statement however many) and the account's counters with
 * the charge. Counted at the state's one door on each engine: the pg client's `query`, SQLite's connection `runNow`.
 */
async function statementsOf(work: () => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  const pgQuery = pg.Client.prototype.query;
  const sqliteRun = SqliteConnection.prototype.runNow;
  (pg.Client.prototype as any).query = function (this: pg.Client, query: any, ...rest: unknown[]) {
    seen.push(typeof query === 'string' ? query : query.text);
    return (pgQuery as (...a: unknown[]) => unknown).call(this, query, ...rest);
  };
  SqliteConnection.prototype.runNow = function (this: SqliteConnection, sql, params, method) {
    seen.push(sql);
    return sqliteRun.call(this, sql, params, method);
  };
  try {
    await work();
  } finally {
    pg.Client.prototype.query = pgQuery;
    SqliteConnection.prototype.runNow = sqliteRun;
  }
  return seen;
}

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

describe('the statements a send costs', () => {
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

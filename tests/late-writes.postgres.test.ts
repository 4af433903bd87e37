import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type PgStore, connectionConfig } from '../db/pg/state.js';
import { utcDay } from '../server/shared/clock.js';
import { accountRow, emailRows, expectError, gateCommits, newSender, receipt, sendEmail, updateAccount } from './helpers/sending.js';
import { type ApiResponse, startService, type TestService } from './helpers/service.js';
import { stateOnPostgres } from './helpers/test-state.js';

/**
 * A send batch's account counters written late (db/late-writes.ts, server/core/sending-policy.ts COUNTED_LATE): the
 * batch reads the account unlocked and writes its counts with its COMMIT, under a guard that its decisions still hold.
 * Here another transaction holds the account's row while a batch of two sends reaches its late write, then changes
 * the row so that only one of them may still be sent: the guard refuses, the batch runs again on the locked path, and
 * the answers and the row end as if the change had come first. Postgres only: `npm run test:postgres`.
 */

let service: TestService;

beforeAll(async () => {
  if (!stateOnPostgres()) throw new Error('late-writes.postgres.test.ts runs on a Postgres run only (npm run test:postgres)');
  // No trial and no grace: a send costs a credit from the first, and none is allowed without one.
  service = await startService({ TRIAL_DAYS: '0', GRACE_EMAILS: '0', GRACE_DAYS: '0', DEFAULT_DAILY_QUOTA: '1000' });
});

afterAll(async () => {
  await service?.close();
});

/** A connection of its own to the service's Postgres, for a transaction the service does not run. */
async function otherConnection(): Promise<pg.Client> {
  const client = new pg.Client(connectionConfig((service.deps.store as PgStore).target));
  await client.connect();
  return client;
}

/** Resolves once a statement of the service waits for a row lock with `text` in it. */
async function waitingFor(watcher: pg.Client, text: string): Promise<void> {
  const deadline = Date.now() + 8_000;
  for (;;) {
    const { rows } = await watcher.query<{ n: string }>(
      `select count(*) as n from pg_stat_activity where wait_event_type = 'Lock' and application_name = 'mailstead' and position($1 in query) > 0`,
      [text],
    );
    if (Number(rows[0]!.n) > 0) return;
    if (Date.now() > deadline) {
      const all = await watcher.query(
        `select application_name, state, wait_event_type, left(query, 80) as q from pg_stat_activity where datname = current_database()`,
      );
      throw new Error(`no statement of the service waited for a lock with "${text}": ${JSON.stringify(all.rows)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * Two sends of `s` in one batch, while another transaction holds the account's row: once the batch's late write waits
 * for it, `change` runs in that transaction, which then commits. The two answers.
 */
async function twoSendsAcross(s: Awaited<ReturnType<typeof newSender>>, change: string, values: unknown[]): Promise<ApiResponse[]> {
  const holder = await otherConnection();
  const watcher = await otherConnection();
  try {
    await holder.query('begin');
    await holder.query('select id from accounts where id = $1 for no key update', [s.account.id]);
    const gate = gateCommits(service, 2);
    const answers = Promise.all([0, 1].map((i) => sendEmail(service, s.key, receipt(s.from, `buyer${i}@example.net`))));
    await gate.arrived(2);
    gate.release();
    // The batch read the row unlocked (the holder did not stop it) and reached its commit: its late write waits.
    await waitingFor(watcher, 'with counted as');
    await holder.query(change, values);
    await holder.query('commit');
    return await answers;
  } finally {
    await holder.end();
    await watcher.end();
  }
}

/** A sender whose lifetime total is past grading (so only the guard decides), with `credits`. */
async function gradedSender(credits: number) {
  const s = await newSender(service, { credits });
  await updateAccount(service, s.account.id, { totalSent: 100 });
  return s;
}

describe('a batch of sends writes its account counters late, under a guard', () => {
  it('credits spent by another transaction meanwhile: the guard refuses, one send is charged the last credit, the other 402', async () => {
    const s = await gradedSender(10);
    const before = await accountRow(service, s.account.id);
    const answers = await twoSendsAcross(s, 'update accounts set credits_balance = 1 where id = $1', [s.account.id]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 402]);
    expectError(answers.find((a) => a.status === 402)!, 402, 'no_credits');
    const row = await accountRow(service, s.account.id);
    expect([row.creditsBalance, row.creditsTotalUsed - before.creditsTotalUsed, row.totalSent]).toEqual([0, 1, 101]);
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
  });

  it("today's count raised by another transaction meanwhile: the guard refuses, one send fits the quota, the other 429", async () => {
    const s = await gradedSender(10);
    const day = utcDay(service.deps.clock.now());
    await updateAccount(service, s.account.id, { dailyQuota: 5 });
    const answers = await twoSendsAcross(s, `update accounts set sent_today_count = 4, sent_today_day = $2 where id = $1`, [s.account.id, day]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 429]);
    expectError(answers.find((a) => a.status === 429)!, 429, 'quota_exceeded');
    const row = await accountRow(service, s.account.id);
    expect([row.sentTodayCount, row.sentTodayDay, row.creditsBalance, row.totalSent]).toEqual([5, day, 9, 101]);
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
  });

  it('the account suspended by another transaction meanwhile: the guard refuses, both sends 403 suspended, nothing counted', async () => {
    const s = await gradedSender(10);
    const answers = await twoSendsAcross(s, `update accounts set suspended_by = 'operator', suspended_reason = 'Paused by the operator.' where id = $1`, [
      s.account.id,
    ]);
    for (const a of answers) expectError(a, 403, 'suspended');
    const row = await accountRow(service, s.account.id);
    expect([row.creditsBalance, row.totalSent, row.sentTodayCount]).toEqual([10, 100, 0]);
    expect(await emailRows(service, s.account.id)).toHaveLength(0);
  });

  it('a change that leaves room for both: the late write adds the counts to the row as it stands', async () => {
    const s = await gradedSender(10);
    const answers = await twoSendsAcross(
      s,
      'update accounts set credits_balance = credits_balance + 5, credits_total_purchased = credits_total_purchased + 5 where id = $1',
      [s.account.id],
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200]);
    const row = await accountRow(service, s.account.id);
    expect([row.creditsBalance, row.totalSent, row.sentTodayCount]).toEqual([13, 102, 2]);
    expect(await emailRows(service, s.account.id)).toHaveLength(2);
  });
});

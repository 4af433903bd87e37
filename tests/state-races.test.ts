import { eq } from 'drizzle-orm';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accounts, emailEvents, emails, outboundMessages, suppressions } from '../db/schema/index.js';
import { claimDueRecipients } from '../mta/delivery-queue.js';
import { recordOutcome } from '../server/core/outcomes.js';
import { claimIdempotencyKey, releaseClaim } from '../server/core/idempotency.js';
import { ApiError } from '../server/shared/errors.js';
import { accountRow, expectError, newSender, receipt, sendEmail, updateAccount } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';
import { statementsOf } from './helpers/statements.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';

/**
 * Credits, quota and idempotency stay exact under concurrent requests (docs/api/decisions.md section 11): each rule is
 * raced by requests sent at once, on SQLite and on a real Postgres with TLS, where the sends run side by side on the
 * pool's connections and only the rows they lock keep them apart (server/core/sending.ts loadSender, db/sql.ts
 * forUpdate).
 */

const AT_ONCE = 8;
const KEY = 'ab'.repeat(32);
/** No trial and no grace: a send costs a credit from the first, and none is allowed without one. */
const POLICY = { TRIAL_DAYS: '0', GRACE_EMAILS: '0', GRACE_DAYS: '0', DEFAULT_DAILY_QUOTA: '1000' };

let postgres: TestPostgres;
const services: Record<'sqlite' | 'postgres', TestService | null> = { sqlite: null, postgres: null };

beforeAll(async () => {
  postgres = await startPostgres({ certificate: 'trusted' });
  await postgres.admin('create database races');
  services.sqlite = await startService({ ...POLICY });
  services.postgres = await startService({
    ...POLICY,
    STATE_URL: `postgresql://${postgres.user}:${postgres.password}@localhost:${postgres.port}/races?sslmode=verify-full`,
    SECRET_KEY: KEY,
  });
}, 120_000);

afterAll(async () => {
  await services.sqlite?.close();
  await services.postgres?.close();
  await postgres?.stop();
});

const sendsAtOnce = (service: TestService, key: string, bodies: unknown[], headers: Record<string, string> = {}) =>
  Promise.all(bodies.map((body) => sendEmail(service, key, body, { headers })));

const emailCount = async (service: TestService, accountId: string) =>
  (await service.deps.db.select({ id: emails.id }).from(emails).where(eq(emails.accountId, accountId))).length;

describe.each(['sqlite', 'postgres'] as const)('on %s', (engine) => {
  const service = () => services[engine]!;

  it('the last credit is spent once: of sends at once, one is sent and every other is 402 no_credits', async () => {
    for (let round = 0; round < 3; round++) {
      const s = await newSender(service(), { credits: 1 });
      expect((await accountRow(service(), s.account.id)).creditsBalance).toBe(1);
      const answers = await sendsAtOnce(
        service(),
        s.key,
        Array.from({ length: AT_ONCE }, (_, i) => receipt(s.from, `buyer${i}@example.net`)),
      );
      const sent = answers.filter((a) => a.status === 200);
      expect(sent, JSON.stringify(answers.map((a) => a.body))).toHaveLength(1);
      for (const refused of answers.filter((a) => a.status !== 200)) expectError(refused, 402, 'no_credits');
      const row = await accountRow(service(), s.account.id);
      expect(row.creditsBalance).toBe(0);
      expect(row.creditsTotalUsed).toBe(1);
      expect(await emailCount(service(), s.account.id)).toBe(1);
    }
  });

  it('the daily quota is spent exactly: quota 3, sends at once of one recipient each, three sent', async () => {
    for (let round = 0; round < 3; round++) {
      const s = await newSender(service(), { credits: 100 });
      await updateAccount(service(), s.account.id, { dailyQuota: 3 });
      const answers = await sendsAtOnce(
        service(),
        s.key,
        Array.from({ length: AT_ONCE }, (_, i) => receipt(s.from, `buyer${i}@example.net`)),
      );
      expect(
        answers.filter((a) => a.status === 200),
        JSON.stringify(answers.map((a) => a.body)),
      ).toHaveLength(3);
      for (const refused of answers.filter((a) => a.status !== 200)) expectError(refused, 429, 'quota_exceeded');
      const row = await accountRow(service(), s.account.id);
      expect(row.sentTodayCount).toBe(3);
      expect(row.creditsBalance).toBe(97);
      expect(await emailCount(service(), s.account.id)).toBe(3);
    }
  });

  it('one Idempotency-Key sent at once: one email; every other answer is its replay or 409 idempotency_in_progress', async () => {
    for (let round = 0; round < 3; round++) {
      const s = await newSender(service(), { credits: 100 });
      const body = receipt(s.from, 'buyer@example.net');
      const answers = await sendsAtOnce(
        service(),
        s.key,
        Array.from({ length: AT_ONCE }, () => body),
        { 'idempotency-key': `order-${round}` },
      );
      const sent = answers.filter((a) => a.status === 200);
      expect(
        sent.length,
        JSON.stringify(
          service()
            .logger.entries.filter((e) => e.level === 'error')
            .slice(0, 2),
        ),
      ).toBeGreaterThanOrEqual(1);
      // Every 200 is the one send (the first, or its replay).
      expect(new Set(sent.map((a) => a.body.id)).size).toBe(1);
      for (const busy of answers.filter((a) => a.status !== 200)) expectError(busy, 409, 'idempotency_in_progress');
      expect(await emailCount(service(), s.account.id)).toBe(1);
      const row = await accountRow(service(), s.account.id);
      expect(row.creditsTotalUsed).toBe(1);
      expect((await service().deps.db.select().from(accounts).where(eq(accounts.id, s.account.id)))[0]?.sentTodayCount).toBe(1);
    }
  });

  it('a key released while another request claims it: that request claims it or is told why, never a 500', async () => {
    const s = await newSender(service(), { credits: 100 });
    const body = Buffer.from('{"the":"same body"}');
    const db = service().deps.db;
    const now = () => service().clock.now();
    let claims = 0;
    let refusals = 0;
    // A refusal comes back; anything else thrown fails the test.
    const attempt = () =>
      claimIdempotencyKey(db, s.account.id, 'churn', body, now()).catch((err: unknown) => {
        if (err instanceof ApiError) return err;
        throw err;
      });
    // One side claims the key and releases it at once, over and over; the other claims the same key meanwhile. Between
    // the other's upsert (which finds the key live) and its read of why, the key may have been released: it must then
    // claim again, not fail.
    const churn = async () => {
      for (let i = 0; i < 150; i++) {
        const r = await attempt();
        if (r instanceof ApiError) continue;
        if (r.kind === 'claimed') await releaseClaim(db, r.claim);
      }
    };
    const contend = async () => {
      for (let i = 0; i < 150; i++) {
        const r = await attempt();
        if (r instanceof ApiError) {
          expect(r.code).toBe('idempotency_in_progress');
          refusals++;
          continue;
        }
        expect(r.kind).toBe('claimed');
        claims++;
        if (r.kind === 'claimed') await releaseClaim(db, r.claim);
      }
    };
    await Promise.all([churn(), churn(), contend(), contend()]);
    expect(claims + refusals).toBe(300);
  });

  it('two recipients of one message given their outcomes at once: the last one closed deletes the content', async () => {
    for (let round = 0; round < 3; round++) {
      const s = await newSender(service(), { credits: 100 });
      const sent = await sendEmail(service(), s.key, receipt(s.from, ['one@example.net', 'two@example.net']));
      expect(sent.status).toBe(200);
      const jobs = await claimDueRecipients(service().deps.db, `host-race:${round}:a`, service().clock.now(), 60_000, 10_000);
      const ours = jobs.filter((j) => j.message.id && j.recipient.accountId === s.account.id);
      expect(ours).toHaveLength(2);
      const delivered = { status: 'delivered', dsn: '2.0.0', detail: '250 ok' } as const;
      const recorded = await Promise.all(ours.map((job) => recordOutcome(service().deps, job, delivered)));
      expect(recorded.map((r) => r?.status)).toEqual(['delivered', 'delivered']);
      const left = await service().deps.db.select({ id: outboundMessages.id }).from(outboundMessages).where(eq(outboundMessages.id, ours[0]!.message.id));
      expect(left).toEqual([]);
    }
  });
});

describe("outcomes on Postgres run at once with their batch's others when they write nothing a send reads", () => {
  it('deliveries of different messages at once (one savepoint for them), a hard bounce apart; each written once', async () => {
    const service = services.postgres!;
    const s = await newSender(service, { credits: 100 });
    for (const to of ['a@example.net', 'b@example.net', 'c@example.net', 'gone@example.net'])
      expect((await sendEmail(service, s.key, receipt(s.from, to))).status).toBe(200);
    const jobs = (await claimDueRecipients(service.deps.db, 'host-once:1:a', service.clock.now(), 60_000, 10_000)).filter(
      (j) => j.recipient.accountId === s.account.id,
    );
    expect(jobs).toHaveLength(4);
    let recorded: Awaited<ReturnType<typeof recordOutcome>>[] = [];
    const seen = await statementsOf(async () => {
      recorded = await Promise.all(
        jobs.map((job) =>
          recordOutcome(
            service.deps,
            job,
            job.recipient.recipient === 'gone@example.net'
              ? ({ status: 'bounced', dsn: '5.1.1', detail: '550 no such user' } as const)
              : ({ status: 'delivered', dsn: '2.0.0', detail: '250 ok' } as const),
          ),
        ),
      );
    });
    expect(recorded.map((r) => r?.status).sort()).toEqual(['bounced', 'delivered', 'delivered', 'delivered']);
    // The three deliveries ran at once in the batch; the bounce (a suppression, the account's counter) in its own savepoint.
    expect(seen.filter((q) => q === 'SAVEPOINT at_once')).toHaveLength(1);
    expect(seen.filter((q) => /^SAVEPOINT unit_/.test(q))).toHaveLength(1);
    const events = await service.deps.db.select().from(emailEvents).where(eq(emailEvents.accountId, s.account.id));
    expect(events.map((e) => `${e.recipient} ${e.status}`).sort()).toEqual([
      'a@example.net delivered',
      'b@example.net delivered',
      'c@example.net delivered',
      'gone@example.net bounced',
    ]);
    const listed = await service.deps.db.select().from(suppressions).where(eq(suppressions.accountId, s.account.id));
    expect(listed.map((r) => r.address)).toEqual(['gone@example.net']);
    expect((await accountRow(service, s.account.id)).totalBounced).toBe(1);
    // Every message closed: its content deleted.
    for (const job of jobs)
      expect(await service.deps.db.select({ id: outboundMessages.id }).from(outboundMessages).where(eq(outboundMessages.id, job.message.id))).toEqual([]);
  });
});

describe('the delivery claim on Postgres', () => {
  const pgService = () => services.postgres!;
  const ours = (claimed: Awaited<ReturnType<typeof claimDueRecipients>>, accountId: string) =>
    claimed.filter((j) => j.recipient.accountId === accountId).map((j) => j.recipient.id);

  it('passes over the recipients another transaction holds, without waiting for it, and takes them once it ends', async () => {
    const s = await newSender(pgService(), { credits: 100 });
    const to = Array.from({ length: 6 }, (_, i) => `held${i}@example.net`);
    expect((await sendEmail(pgService(), s.key, receipt(s.from, to))).status).toBe(200);
    const client = new pg.Client({ host: '127.0.0.1', port: postgres.port, user: postgres.user, password: postgres.password, database: 'races', ssl: false });
    await client.connect();
    try {
      await client.query('begin');
      const held = (
        await client.query<{ id: string }>('select id from outbound_recipients where account_id = $1 order by id limit 2 for update', [s.account.id])
      ).rows.map((r) => r.id);
      expect(held).toHaveLength(2);
      // SKIP LOCKED: the claim answers while the other transaction still holds its two rows.
      const claim = claimDueRecipients(pgService().deps.db, 'host-skip:1:a', pgService().clock.now(), 60_000, 10_000);
      const first = await Promise.race([claim, new Promise<'waited'>((r) => setTimeout(() => r('waited'), 5_000))]);
      expect(first).not.toBe('waited');
      const taken = ours(first as Awaited<typeof claim>, s.account.id);
      expect(taken).toHaveLength(4);
      expect(taken.filter((id) => held.includes(id))).toEqual([]);
      await client.query('commit');
      const rest = ours(await claimDueRecipients(pgService().deps.db, 'host-skip:1:b', pgService().clock.now(), 60_000, 10_000), s.account.id);
      expect(rest.sort()).toEqual([...held].sort());
    } finally {
      await client.end();
    }
  });

  it('claims at once on two workers take every due recipient once', async () => {
    const s = await newSender(pgService(), { credits: 100 });
    const to = Array.from({ length: 40 }, (_, i) => `both${i}@example.net`);
    expect((await sendEmail(pgService(), s.key, receipt(s.from, to))).status).toBe(200);
    const now = pgService().clock.now();
    const [a, b] = await Promise.all(
      ['host-two:1:a', 'host-two:1:b'].map(async (worker) => ours(await claimDueRecipients(pgService().deps.db, worker, now, 60_000, 10_000), s.account.id)),
    );
    expect(a!.filter((id) => b!.includes(id))).toEqual([]);
    expect(a!.length + b!.length).toBe(40);
  });
});

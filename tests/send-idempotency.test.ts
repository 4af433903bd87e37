import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { leaseNow } from '../server/shared/clock.js';
import {
  breakQueue,
  bulkRows,
  DAY,
  emailRows,
  expectError,
  expectOk,
  gateCommits,
  getAccount,
  idempotencyRow,
  insertRunningClaim,
  newSender,
  newSubSender,
  outboundMessagesOf,
  queuedRecipientsOf,
  rawRequest,
  receipt,
  sendEmail,
  setDomainState,
  expectPlanThroughIndex,
} from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';
import { FORGET_BATCH, FORGET_EVERY_MS, claimIdempotencyKey, forgetExpiredKeys, forgetStatement, settleClaim } from '../server/core/idempotency.js';
import { idempotencyKeys } from '../db/schema/index.js';
import { execute, queryRows } from '../db/sql.js';
import { sql } from 'drizzle-orm';
import { ApiError } from '../server/shared/errors.js';

/**
 * Idempotency rules of docs/api/contract.md for POST /emails (Errors; Limits; docs/api/decisions.md section 2): same key and
 * body within 24 h replays the first answer with `Idempotent-Replayed: true`; another body is `422
 * idempotency_mismatch`; a running first request is `409 idempotency_in_progress` and its claim is released after
 * 15 s; the key is 1 to 255 characters; only a 200 is stored; keys are per acting account.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(async () => {
  await service.close();
});

const withKey = (key: string) => ({ headers: { 'Idempotency-Key': key } });

describe('replay', () => {
  it('the same key and body returns the first answer with Idempotent-Replayed: true and sends once', async () => {
    const s = await newSender(service, { credits: 10 });
    const body = receipt(s.from, ['ann@example.net', 'bob@example.net']);
    const first = await sendEmail(service, s.key, body, withKey('order-1001'));
    expectOk(first);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    for (let i = 0; i < 3; i++) {
      const again = await sendEmail(service, s.key, body, withKey('order-1001'));
      expect(again.status).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body).toEqual(first.body);
    }
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
    expect(await outboundMessagesOf(service, s.account.id)).toHaveLength(1);
    expect(await queuedRecipientsOf(service, s.account.id)).toHaveLength(2);
    const account = await getAccount(service, s.key);
    expect(account.credits).toMatchObject({ balance: 9, totalUsed: 1 });
    expect(account.sending.sentToday).toBe(2);
  });

  it('replays the warning of a trial answer as it was', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    const first = await sendEmail(service, s.key, body, withKey('trial-1'));
    expect(first.body.warning).toMatchObject({ code: 'trial' });
    service.clock.advance(60_000);
    const again = await sendEmail(service, s.key, body, withKey('trial-1'));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
  });

  it('a sandbox answer is replayed too', async () => {
    const s = await newSender(service);
    const body = receipt(s.from, 'ann@example.net', { sandbox: true });
    const first = await sendEmail(service, s.key, body, withKey('sandbox-1'));
    expect(first.body.sandbox).toBe(true);
    const again = await sendEmail(service, s.key, body, withKey('sandbox-1'));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
  });

  it('replays within 24 hours; after 24 hours the key is a fresh attempt', async () => {
    const s = await newSender(service, { credits: 10 });
    const body = receipt(s.from);
    const first = await sendEmail(service, s.key, body, withKey('daily-report'));
    expectOk(first);
    service.clock.advance(DAY - 1);
    const within = await sendEmail(service, s.key, body, withKey('daily-report'));
    expect(within.headers.get('idempotent-replayed')).toBe('true');
    expect(within.body).toEqual(first.body);
    service.clock.advance(2);
    const after = await sendEmail(service, s.key, body, withKey('daily-report'));
    expectOk(after);
    expect(after.headers.get('idempotent-replayed')).toBeNull();
    expect(after.body.id).not.toBe(first.body.id);
    expect(await emailRows(service, s.account.id)).toHaveLength(2);
  });

  it('after 24 hours another body under the old key is no mismatch', async () => {
    const s = await newSender(service);
    expectOk(await sendEmail(service, s.key, receipt(s.from, 'ann@example.net'), withKey('weekly')));
    service.clock.advance(DAY + 1);
    expectOk(await sendEmail(service, s.key, receipt(s.from, 'bob@example.net'), withKey('weekly')));
  });

  it('a request without the header is never replayed', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    const a = await sendEmail(service, s.key, body);
    const b = await sendEmail(service, s.key, body);
    expectOk(a);
    expectOk(b);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    expect(a.body.id).not.toBe(b.body.id);
  });
});

describe('keys past their window are forgotten', () => {
  it('a settled key is deleted once its 24 h are over, by a claim a minute or more after the last forgetting; one within its window is kept', async () => {
    const s = await newSender(service, { credits: 10 });
    expectOk(await sendEmail(service, s.key, receipt(s.from), withKey('old-key')));
    service.clock.advance(DAY - 1);
    expectOk(await sendEmail(service, s.key, receipt(s.from), withKey('young-key')));
    // Within its window: kept, and replayed.
    expect(await idempotencyRow(service, s.account.id, 'old-key')).toMatchObject({ state: 'done' });
    service.clock.advance(FORGET_EVERY_MS + 1);
    expectOk(await sendEmail(service, s.key, receipt(s.from), withKey('another-key')));
    expect(await idempotencyRow(service, s.account.id, 'old-key')).toBeUndefined();
    expect(await idempotencyRow(service, s.account.id, 'young-key')).toMatchObject({ state: 'done' });
    // Forgotten is what a key past its window was already: a fresh attempt.
    const again = await sendEmail(service, s.key, receipt(s.from), withKey('old-key'));
    expectOk(again);
    expect(again.headers.get('idempotent-replayed')).toBeNull();
  });

  it('a backlog (a full batch forgotten) is worked through claim by claim, without waiting the minute', async () => {
    const s = await newSender(service, { credits: 10 });
    const db = service.deps.db;
    // One more than a batch, all past their window by a day.
    const old = service.clock.now() - 2 * DAY;
    await execute(
      db,
      sql`insert into idempotency_keys (account_id, key, fingerprint, claim_token, state, response, claimed_at, completed_at)
          select ${s.account.id}, 'backlog-' || g, 'f', 't', 'done', null, ${old}, ${old} from (${sql.raw(bulkRows(service, FORGET_BATCH + 1))}) as bulk`,
    );
    const backlog = async () =>
      Number(
        (await queryRows<{ n: number }>(db, sql`select count(*) as n from idempotency_keys where account_id = ${s.account.id} and key like 'backlog-%'`))[0]!.n,
      );
    expect(await backlog()).toBe(FORGET_BATCH + 1);
    service.clock.advance(FORGET_EVERY_MS + 1);
    expectOk(await sendEmail(service, s.key, receipt(s.from), withKey('first-after')));
    expect(await backlog()).toBe(1);
    // Within the same minute: the batch was full, so this claim forgets again.
    expectOk(await sendEmail(service, s.key, receipt(s.from), withKey('second-after')));
    expect(await backlog()).toBe(0);
  });

  it('at most the batch, oldest first; running claims and keys within their window are never touched', async () => {
    const s = await newSender(service);
    // Times long before the service clock's, so these rows are the oldest in the table.
    const BASE = 1_000_000;
    const row = (key: string, state: 'done' | 'running', at: number) => ({
      accountId: s.account.id,
      key,
      fingerprint: 'f',
      claimToken: `t-${key}`,
      state,
      response: state === 'done' ? { id: key } : null,
      claimedAt: at,
      completedAt: state === 'done' ? at : null,
    });
    await service.deps.db
      .insert(idempotencyKeys)
      .values([
        row('e3', 'done', BASE - 1),
        row('e1', 'done', BASE - 3),
        row('e2', 'done', BASE - 2),
        row('young', 'done', BASE + 1),
        row('lost', 'running', BASE - 100),
      ]);
    const keys = async () =>
      (await Promise.all(['e1', 'e2', 'e3', 'young', 'lost'].map(async (k) => ((await idempotencyRow(service, s.account.id, k)) ? k : null)))).filter(Boolean);
    const now = BASE + DAY;
    expect(await forgetExpiredKeys(service.deps.db, now, 2)).toBe(2);
    expect(await keys()).toEqual(['e3', 'young', 'lost']);
    expect(await forgetExpiredKeys(service.deps.db, now, 2)).toBe(1);
    expect(await forgetExpiredKeys(service.deps.db, now, 2)).toBe(0);
    expect(await keys()).toEqual(['young', 'lost']);
    // The window's end is exact: a key settled at BASE + 1 is forgotten at BASE + 1 + 24 h, not a millisecond before.
    expect(await forgetExpiredKeys(service.deps.db, now, 10)).toBe(0);
    expect(await forgetExpiredKeys(service.deps.db, now + 1, 10)).toBe(1);
    expect(await keys()).toEqual(['lost']);
  });

  it('finds them through the index on completed_at, never by reading every key (the plan of its statement)', async () => {
    const s = await newSender(service);
    const db = service.deps.db;
    const at = service.clock.now();
    await execute(
      db,
      sql`insert into idempotency_keys (account_id, key, fingerprint, claim_token, state, response, claimed_at, completed_at)
          select ${s.account.id}, 'bulk-' || g, 'f', 't', 'done', null, ${at}, ${at} from (${sql.raw(bulkRows(service, 5000))}) as bulk`,
    );
    await execute(db, sql`analyze idempotency_keys`);
    const statement = forgetStatement(db, at, 1000);
    await expectPlanThroughIndex(service, statement, 'idempotency_keys', 'idempotency_keys_completed_idx');
    await execute(db, sql`delete from idempotency_keys where account_id = ${s.account.id}`);
  });
});

describe('mismatch', () => {
  it('the same key with another body is 422 idempotency_mismatch and sends nothing more', async () => {
    const s = await newSender(service);
    expectOk(await sendEmail(service, s.key, receipt(s.from, 'ann@example.net'), withKey('order-7')));
    expectError(await sendEmail(service, s.key, receipt(s.from, 'bob@example.net'), withKey('order-7')), 422, 'idempotency_mismatch');
    expectError(await sendEmail(service, s.key, receipt(s.from, 'ann@example.net', { sandbox: true }), withKey('order-7')), 422, 'idempotency_mismatch');
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
  });

  it('a body that differs only in its bytes (key order, spacing) is another body', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    expectOk(await sendEmail(service, s.key, body, withKey('order-8')));
    const reordered = JSON.stringify({ template: body.template, to: body.to, from: body.from });
    const res = await service.api('POST', '/emails', {
      key: s.key,
      rawBody: reordered,
      headers: { 'content-type': 'application/json', 'Idempotency-Key': 'order-8' },
    });
    expectError(res, 422, 'idempotency_mismatch');
  });

  it('a running claim with another body is 422 idempotency_mismatch', async () => {
    const s = await newSender(service);
    await insertRunningClaim(service, s.account.id, 'order-9', receipt(s.from, 'ann@example.net'));
    expectError(await sendEmail(service, s.key, receipt(s.from, 'bob@example.net'), withKey('order-9')), 422, 'idempotency_mismatch');
  });
});

describe('the key itself: 1 to 255 characters', () => {
  it('an empty Idempotency-Key is 400 invalid_idempotency_key', async () => {
    const s = await newSender(service);
    const res = await rawRequest(service, 'POST', '/emails', {
      headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json', 'idempotency-key': '' },
      body: JSON.stringify(receipt(s.from)),
    });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: { code: 'invalid_idempotency_key', message: expect.any(String) } });
    expect(await emailRows(service, s.account.id)).toEqual([]);
  });

  it('256 characters is 400 invalid_idempotency_key; 255 and 1 are accepted', async () => {
    const s = await newSender(service);
    expectError(await sendEmail(service, s.key, receipt(s.from), withKey('k'.repeat(256))), 400, 'invalid_idempotency_key');
    expect(await emailRows(service, s.account.id)).toEqual([]);
    const long = await sendEmail(service, s.key, receipt(s.from), withKey('k'.repeat(255)));
    expectOk(long);
    const replay = await sendEmail(service, s.key, receipt(s.from), withKey('k'.repeat(255)));
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expectOk(await sendEmail(service, s.key, receipt(s.from), withKey('k')));
  });

  it('keys are compared exactly', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    const a = await sendEmail(service, s.key, body, withKey('Order-1'));
    const b = await sendEmail(service, s.key, body, withKey('order-1'));
    expectOk(a);
    expectOk(b);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
  });
});

describe('in progress', () => {
  it('two identical requests sent together over fetch send once', async () => {
    const s = await newSender(service);
    const body = receipt(s.from, 'ann@example.net');
    const init = () => ({
      method: 'POST',
      headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json', 'Idempotency-Key': 'concurrent-2' },
      body: JSON.stringify(body),
    });
    const responses = await Promise.all([fetch(`${service.base}/emails`, init()), fetch(`${service.base}/emails`, init())]);
    const answers = await Promise.all(
      responses.map(async (r) => ({
        status: r.status,
        replayed: r.headers.get('idempotent-replayed'),
        body: (await r.json()) as { id?: string; error?: { code: string } },
      })),
    );
    // Usually one finds the other running (409); if the first has already committed, the second is its replay.
    const fresh = answers.filter((a) => a.status === 200 && a.replayed === null);
    expect(fresh).toHaveLength(1);
    for (const other of answers.filter((a) => a !== fresh[0])) {
      if (other.status === 409) expect(other.body.error?.code).toBe('idempotency_in_progress');
      else expect(other).toEqual({ status: 200, replayed: 'true', body: fresh[0]!.body });
    }
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
    expect(await queuedRecipientsOf(service, s.account.id)).toHaveLength(1);
  });

  it('a claim nobody answered is 409 until 15 s have passed, then the request goes through', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    await insertRunningClaim(service, s.account.id, 'lost-1', body);
    expectError(await sendEmail(service, s.key, body, withKey('lost-1')), 409, 'idempotency_in_progress');
    service.clock.advance(14_999);
    expectError(await sendEmail(service, s.key, body, withKey('lost-1')), 409, 'idempotency_in_progress');
    expect(await emailRows(service, s.account.id)).toEqual([]);
    service.clock.advance(2);
    const res = await sendEmail(service, s.key, body, withKey('lost-1'));
    expectOk(res);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
    const replay = await sendEmail(service, s.key, body, withKey('lost-1'));
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(res.body);
  });
});

describe('the 15 s of a claim on the monotonic clock', () => {
  it('a claim nobody answered is released 15 s on even when the wall clock stepped back an hour meanwhile', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    await insertRunningClaim(service, s.account.id, 'lost-step', body, leaseNow(service.clock));
    service.clock.stepWall(-3_600_000);
    try {
      expectError(await sendEmail(service, s.key, body, withKey('lost-step')), 409, 'idempotency_in_progress');
      service.clock.advance(14_999);
      expectError(await sendEmail(service, s.key, body, withKey('lost-step')), 409, 'idempotency_in_progress');
      service.clock.advance(2);
      expectOk(await sendEmail(service, s.key, body, withKey('lost-step')));
    } finally {
      service.clock.stepWall(3_600_000);
    }
  });
});

describe('a claim is settled only while it is still held', () => {
  it('a request that stalls past 15 s before its commit, while another took the key, sends nothing and leaves the other’s claim', async () => {
    const s = await newSender(service, { credits: 10 });
    const body = receipt(s.from, ['ann@example.net', 'bob@example.net']);
    // The first request claims the key, passes every check, then stalls just before its commit.
    const gate = gateCommits(service, 1);
    const first = sendEmail(service, s.key, body, withKey('stalled-1'));
    let answer;
    try {
      await gate.arrived(1);
      const claimedAt = (await idempotencyRow(service, s.account.id, 'stalled-1'))!.claimedAt;
      // Past the 15 s claim release, a retry takes the key over and sends.
      service.clock.advance(16_000);
      const second = await sendEmail(service, s.key, body, withKey('stalled-1'));
      expectOk(second);
      expect(second.headers.get('idempotent-replayed')).toBeNull();
      const settled = (await idempotencyRow(service, s.account.id, 'stalled-1'))!;
      expect(settled).toMatchObject({ state: 'done', response: second.body });
      expect(settled.claimedAt).toBe(claimedAt + 16_000);
      gate.release();
      answer = await first;
      // The stalled request's commit finds the claim no longer its own: refused, rolled back whole.
      expectError(answer, 409, 'idempotency_in_progress');
      expect((await emailRows(service, s.account.id)).map((r) => r.id)).toEqual([second.body.id]);
      expect((await outboundMessagesOf(service, s.account.id)).map((m) => m.id)).toEqual([second.body.id]);
      expect(await queuedRecipientsOf(service, s.account.id)).toHaveLength(2);
      const account = await getAccount(service, s.key);
      expect(account.credits).toMatchObject({ balance: 9, totalUsed: 1 });
      expect(account.sending.sentToday).toBe(2);
      // The second request's settled answer is intact: a retry replays it.
      expect(await idempotencyRow(service, s.account.id, 'stalled-1')).toEqual(settled);
      const replay = await sendEmail(service, s.key, body, withKey('stalled-1'));
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body).toEqual(second.body);
    } finally {
      gate.release();
    }
  });

  it('the same for a sandbox send: the stalled one logs nothing', async () => {
    const s = await newSender(service);
    const body = receipt(s.from, 'ann@example.net', { sandbox: true });
    const gate = gateCommits(service, 1);
    try {
      const first = sendEmail(service, s.key, body, withKey('stalled-2'));
      await gate.arrived(1);
      service.clock.advance(16_000);
      const second = await sendEmail(service, s.key, body, withKey('stalled-2'));
      expectOk(second);
      gate.release();
      expectError(await first, 409, 'idempotency_in_progress');
      expect((await emailRows(service, s.account.id)).map((r) => r.id)).toEqual([second.body.id]);
      expect(await idempotencyRow(service, s.account.id, 'stalled-2')).toMatchObject({ state: 'done', response: second.body });
    } finally {
      gate.release();
    }
  });

  it('a request that stalls past 15 s while nobody took the key still commits: the claim is still its own', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    const gate = gateCommits(service, 1);
    try {
      const first = sendEmail(service, s.key, body, withKey('stalled-3'));
      await gate.arrived(1);
      service.clock.advance(16_000);
      gate.release();
      const res = await first;
      expectOk(res);
      expect(await idempotencyRow(service, s.account.id, 'stalled-3')).toMatchObject({ state: 'done', response: res.body });
    } finally {
      gate.release();
    }
  });
});

describe('only a settled 200 is stored', () => {
  it('a 422 is not stored: the same key with a corrected body succeeds', async () => {
    const s = await newSender(service);
    const bad = { ...receipt(s.from), template: { name: 'receipt' } };
    expectError(await sendEmail(service, s.key, bad, withKey('fix-me')), 422, 'invalid_request');
    expect(await idempotencyRow(service, s.account.id, 'fix-me')).toBeUndefined();
    expectError(await sendEmail(service, s.key, bad, withKey('fix-me')), 422, 'invalid_request');
    const fixed = await sendEmail(service, s.key, receipt(s.from), withKey('fix-me'));
    expectOk(fixed);
    expect(fixed.headers.get('idempotent-replayed')).toBeNull();
  });

  it('a 400 invalid_json is not stored', async () => {
    const s = await newSender(service);
    const res = await service.api('POST', '/emails', {
      key: s.key,
      rawBody: '{',
      headers: { 'content-type': 'application/json', 'Idempotency-Key': 'json-1' },
    });
    expectError(res, 400, 'invalid_json');
    expectOk(await sendEmail(service, s.key, receipt(s.from), withKey('json-1')));
  });

  it('a 403 is not stored: once the domain is ready the same request sends', async () => {
    const s = await newSender(service);
    await setDomainState(service, s.domainId, 'ownership');
    const body = receipt(s.from);
    expectError(await sendEmail(service, s.key, body, withKey('domain-1')), 403, 'domain_not_ready');
    await setDomainState(service, s.domainId, 'sending');
    const res = await sendEmail(service, s.key, body, withKey('domain-1'));
    expectOk(res);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
  });

  it('a 422 recipient_suppressed is not stored: after the address is removed the same request sends', async () => {
    const s = await newSender(service);
    expect((await service.api('POST', '/suppressions', { key: s.key, body: { address: 'ann@example.net' } })).status).toBe(201);
    const body = receipt(s.from, 'ann@example.net');
    expectError(await sendEmail(service, s.key, body, withKey('supp-1')), 422, 'recipient_suppressed');
    expect((await service.api('DELETE', '/suppressions/ann%40example.net', { key: s.key })).status).toBe(204);
    expectOk(await sendEmail(service, s.key, body, withKey('supp-1')));
  });

  it('a 502 is not stored: the same key and body succeed once the queue takes messages again', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    const restore = await breakQueue(service);
    let failed;
    try {
      failed = await sendEmail(service, s.key, body, withKey('retry-502'));
    } finally {
      await restore();
    }
    expectError(failed, 502, 'send_failed');
    expect(await idempotencyRow(service, s.account.id, 'retry-502')).toBeUndefined();
    const retry = await sendEmail(service, s.key, body, withKey('retry-502'));
    expectOk(retry);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect((await emailRows(service, s.account.id)).map((r) => r.status).sort()).toEqual(['failed', 'sent']);
  });
});

describe('per acting account', () => {
  it('the same key on another account is independent', async () => {
    const a = await newSender(service);
    const b = await newSender(service);
    const first = await sendEmail(service, a.key, receipt(a.from), withKey('shared-key'));
    const second = await sendEmail(service, b.key, receipt(b.from), withKey('shared-key'));
    expectOk(first);
    expectOk(second);
    expect(second.headers.get('idempotent-replayed')).toBeNull();
    expect(second.body.id).not.toBe(first.body.id);
  });

  it('the same key and body for a sub-account and for its parent are independent', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    // The same bytes from both: the sub-account's domain, which the parent does not hold, would fail for the parent.
    const body = receipt(sub.from);
    const viaSub = await sendEmail(service, parent.key, body, { account: sub.id, ...withKey('shared') });
    expectOk(viaSub);
    const asParent = await sendEmail(service, parent.key, body, withKey('shared'));
    expectError(asParent, 403, 'domain_not_yours');
    const parentOwn = await sendEmail(service, parent.key, receipt(parent.from), withKey('shared'));
    expectOk(parentOwn);
    expect(parentOwn.headers.get('idempotent-replayed')).toBeNull();
    const replaySub = await sendEmail(service, parent.key, body, { account: sub.id, ...withKey('shared') });
    expect(replaySub.headers.get('idempotent-replayed')).toBe('true');
    expect(replaySub.body).toEqual(viaSub.body);
  });

  it('a key minted for the sub-account shares the sub-account’s keys', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    const minted = await service.api('POST', '/keys', { key: parent.key, account: sub.id, body: { name: 'sub key' } });
    expect(minted.status).toBe(201);
    const body = receipt(sub.from);
    const first = await sendEmail(service, parent.key, body, { account: sub.id, ...withKey('sub-order') });
    expectOk(first);
    const again = await sendEmail(service, minted.body.key, body, withKey('sub-order'));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
  });
});

describe('settling a claim', () => {
  it('touches exactly this request’s running claim, or throws 409 idempotency_in_progress and changes nothing', async () => {
    const s = await newSender(service);
    const db = service.deps.db;
    const now = service.clock.now();
    const claimed = await claimIdempotencyKey(db, s.account.id, 'settle-1', Buffer.from('{}'), now);
    if (claimed.kind !== 'claimed') throw new Error('expected a fresh claim');
    const running = await idempotencyRow(service, s.account.id, 'settle-1');
    const refusal = async (f: () => unknown) => {
      try {
        await f();
      } catch (err) {
        if (err instanceof ApiError) return `${err.status} ${err.code}`;
        throw err;
      }
      return 'settled';
    };
    // Another request's token (the key taken over): no row is this claim's.
    expect(await refusal(() => settleClaim(db, { ...claimed.claim, token: 'someone-else' }, { id: 'x' }, now))).toBe('409 idempotency_in_progress');
    expect(await idempotencyRow(service, s.account.id, 'settle-1')).toEqual(running);
    expect(await refusal(() => settleClaim(db, claimed.claim, { id: 'mine' }, now))).toBe('settled');
    const done = await idempotencyRow(service, s.account.id, 'settle-1');
    expect(done).toMatchObject({ state: 'done', response: { id: 'mine' } });
    // Settled already: a second settle of the same claim touches no running row.
    expect(await refusal(() => settleClaim(db, claimed.claim, { id: 'again' }, now))).toBe('409 idempotency_in_progress');
    expect(await idempotencyRow(service, s.account.id, 'settle-1')).toEqual(done);
  });
});

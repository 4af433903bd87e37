import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grantCredits } from '../server/core/accounts.js';
import {
  accountRow,
  DAY,
  emailRows,
  exhaustCredits,
  expectError,
  expectOk,
  fillSandboxLog,
  gateCommits,
  getAccount,
  newSender,
  newSubSender,
  outboundMessagesOf,
  queued,
  queuedRecipientsOf,
  receipt,
  recipients,
  sendEmail,
  suspendByOperator,
  updateAccount,
} from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * Checks 3 and 4 of POST /emails with docs/api/decisions.md section 4: the daily quota counts
 * recipients per UTC day on the acting account and its parent, a tenth while throttled; credits go trial → ok →
 * grace → exhausted (`402 no_credits`) with the warning object, one credit per send from the paying account;
 * `403 suspended` with the reason; a sandbox send is not counted or charged; `429 sandbox_limit` after 1000 sandbox
 * sends in 24 h. Policy here: quota 5 recipients, trial 14 days, grace 3 days or 3 sends.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService({ DEFAULT_DAILY_QUOTA: '5', GRACE_EMAILS: '3', TRIAL_DAYS: '14', GRACE_DAYS: '3' });
});
afterAll(async () => {
  await service.close();
});

const REASON = 'Paused while we review a spike in bounces.';
const iso = (ms: number) => new Date(ms).toISOString();
/** Midnight UTC starting the day after `ms`. */
const nextMidnight = (ms: number) => {
  const d = new Date(ms);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1);
};

describe('daily quota: recipients per UTC day', () => {
  it('sentToday counts recipients, not sends, each unique recipient once', async () => {
    const s = await newSender(service);
    expectOk(await sendEmail(service, s.key, receipt(s.from, ['ann@example.net', 'bob@example.net', 'ANN@example.net'])));
    expectOk(await sendEmail(service, s.key, receipt(s.from, 'carl@example.net')));
    const account = await getAccount(service, s.key);
    expect(account.sending).toMatchObject({ sentToday: 3, totalSent: 3, dailyQuota: 5, effectiveQuota: 5 });
  });

  it('at the quota the next send is 429 quota_exceeded and nothing is sent or counted', async () => {
    const s = await newSender(service);
    expectOk(await sendEmail(service, s.key, receipt(s.from, recipients(5))));
    expectError(await sendEmail(service, s.key, receipt(s.from, 'one-more@example.net')), 429, 'quota_exceeded');
    expect((await getAccount(service, s.key)).sending.sentToday).toBe(5);
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
    expect(await queuedRecipientsOf(service, s.account.id)).toHaveLength(5);
  });

  it('a send with more recipients than the quota has left is 429 quota_exceeded; one that fits goes', async () => {
    const s = await newSender(service);
    expectOk(await sendEmail(service, s.key, receipt(s.from, recipients(3))));
    expectError(await sendEmail(service, s.key, receipt(s.from, recipients(3, 'example.org'))), 429, 'quota_exceeded');
    expect((await getAccount(service, s.key)).sending.sentToday).toBe(3);
    expectOk(await sendEmail(service, s.key, receipt(s.from, recipients(2, 'example.org'))));
    expect((await getAccount(service, s.key)).sending.sentToday).toBe(5);
  });

  it('the quota resets at midnight UTC', async () => {
    service.clock.set(nextMidnight(service.clock.now()) + DAY - 1000); // 23:59:59.000Z
    const s = await newSender(service);
    expectOk(await sendEmail(service, s.key, receipt(s.from, recipients(5))));
    expectError(await sendEmail(service, s.key, receipt(s.from)), 429, 'quota_exceeded');
    service.clock.advance(999); // 23:59:59.999Z
    expectError(await sendEmail(service, s.key, receipt(s.from)), 429, 'quota_exceeded');
    service.clock.advance(1); // 00:00:00.000Z
    expect((await getAccount(service, s.key)).sending).toMatchObject({ sentToday: 0, totalSent: 5 });
    expectOk(await sendEmail(service, s.key, receipt(s.from)));
    expect((await getAccount(service, s.key)).sending).toMatchObject({ sentToday: 1, totalSent: 6 });
  });

  it('a sub-account’s recipients count against its own quota and its parent’s', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    expectOk(await sendEmail(service, parent.key, receipt(sub.from, recipients(3)), { account: sub.id }));
    expect((await getAccount(service, parent.key, sub.id)).sending).toMatchObject({ sentToday: 3, totalSent: 3 });
    // The reputation counters stay the sub-account's own.
    expect((await getAccount(service, parent.key)).sending).toMatchObject({ sentToday: 3, totalSent: 0 });
    expectError(await sendEmail(service, parent.key, receipt(parent.from, recipients(3))), 429, 'quota_exceeded');
    expectOk(await sendEmail(service, parent.key, receipt(parent.from, recipients(2))));
    expect((await getAccount(service, parent.key)).sending.sentToday).toBe(5);
    // The sub-account has 2 of its own left, but its parent none.
    expectError(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }), 429, 'quota_exceeded');
  });

  it('the parent’s used-up quota stops the sub-account', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    expectOk(await sendEmail(service, parent.key, receipt(parent.from, recipients(5))));
    expectError(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }), 429, 'quota_exceeded');
    expect((await getAccount(service, parent.key, sub.id)).sending.sentToday).toBe(0);
  });

  it('a sub-account’s own used-up quota stops only the sub-account', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await updateAccount(service, sub.id, { dailyQuota: 2 });
    expectOk(await sendEmail(service, parent.key, receipt(sub.from, recipients(2)), { account: sub.id }));
    expectError(await sendEmail(service, parent.key, receipt(sub.from, 'x@example.org'), { account: sub.id }), 429, 'quota_exceeded');
    expectOk(await sendEmail(service, parent.key, receipt(parent.from, recipients(3))));
  });

  it('sends at the same moment cannot overrun the quota together', async () => {
    const s = await newSender(service);
    const answers = await Promise.all([
      sendEmail(service, s.key, receipt(s.from, recipients(3))),
      sendEmail(service, s.key, receipt(s.from, recipients(3, 'example.org'))),
    ]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 429]);
    expect(answers.find((a) => a.status === 429)!.body.error.code).toBe('quota_exceeded');
    expect((await getAccount(service, s.key)).sending.sentToday).toBe(3);
    expect(await queuedRecipientsOf(service, s.account.id)).toHaveLength(3);
  });

  it('while throttled the effective quota is a tenth of the daily quota', async () => {
    const s = await newSender(service);
    await updateAccount(service, s.account.id, { dailyQuota: 50, totalSent: 100, totalBounced: 5 });
    expect((await getAccount(service, s.key)).sending).toMatchObject({ tier: 'throttled', dailyQuota: 50, effectiveQuota: 5 });
    expectError(await sendEmail(service, s.key, receipt(s.from, recipients(6))), 429, 'quota_exceeded');
    expectOk(await sendEmail(service, s.key, receipt(s.from, recipients(5))));
  });

  it('a throttled account at its effective quota gets 429 quota_exceeded', async () => {
    const s = await newSender(service);
    await updateAccount(service, s.account.id, { dailyQuota: 50, totalSent: 100, totalBounced: 8 });
    expectOk(await sendEmail(service, s.key, receipt(s.from, recipients(5))));
    expect((await getAccount(service, s.key)).sending).toMatchObject({ tier: 'throttled', effectiveQuota: 5, sentToday: 5 });
    expectError(await sendEmail(service, s.key, receipt(s.from, 'one-more@example.net')), 429, 'quota_exceeded');
  });

  it('sandbox sends are not counted', async () => {
    const s = await newSender(service);
    expectOk(await sendEmail(service, s.key, receipt(s.from, recipients(5), { sandbox: true })));
    expectOk(await sendEmail(service, s.key, receipt(s.from, recipients(5), { sandbox: true })));
    expect((await getAccount(service, s.key)).sending).toMatchObject({ sentToday: 0, totalSent: 0 });
    expectOk(await sendEmail(service, s.key, receipt(s.from, recipients(5))));
  });
});

describe('credits: trial, ok, grace, exhausted', () => {
  it('on the trial a send is free and carries a trial warning with freeUntil', async () => {
    const s = await newSender(service);
    const freeUntil = iso(s.account.createdAt + 14 * DAY);
    const res = await sendEmail(service, s.key, receipt(s.from, recipients(3)));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id: expect.any(String), sandbox: false, warning: { code: 'trial', message: expect.any(String), freeUntil } });
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 0, state: 'trial', freeUntil, totalPurchased: 0, totalUsed: 0 });
  });

  it('with credits a send costs one credit, however many recipients, and carries no warning', async () => {
    const s = await newSender(service, { credits: 3 });
    const res = await sendEmail(service, s.key, receipt(s.from, recipients(4)));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id: expect.any(String), sandbox: false });
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 2, state: 'ok', totalPurchased: 3, totalUsed: 1 });
    expectOk(await sendEmail(service, s.key, receipt(s.from)));
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 1, totalUsed: 2 });
  });

  it('when the balance runs out: GRACE_EMAILS sends with a grace warning, then 402 no_credits', async () => {
    const s = await newSender(service, { credits: 2 });
    await updateAccount(service, s.account.id, { dailyQuota: 100 });
    for (let i = 0; i < 2; i++) {
      const paid = await sendEmail(service, s.key, receipt(s.from));
      expect(paid.status).toBe(200);
      expect(paid.body.warning).toBeUndefined();
    }
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 0, state: 'grace', totalUsed: 2, graceDaysLeft: 3, graceEmailsLeft: 3 });
    for (const left of [2, 1, 0]) {
      const res = await sendEmail(service, s.key, receipt(s.from));
      expect(res.status).toBe(200);
      expect(res.body.warning).toEqual({ code: 'grace', message: expect.any(String), graceDaysLeft: 3, graceEmailsLeft: left });
    }
    expectError(await sendEmail(service, s.key, receipt(s.from)), 402, 'no_credits');
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 0, state: 'exhausted', totalUsed: 2 });
    expect((await emailRows(service, s.account.id)).filter((r) => r.status === 'sent')).toHaveLength(5);
    expect(await outboundMessagesOf(service, s.account.id)).toHaveLength(5);
  });

  it('sends at the same moment spend each credit and each grace email once', async () => {
    const s = await newSender(service, { credits: 2 });
    await updateAccount(service, s.account.id, { dailyQuota: 100 });
    const answers = await Promise.all(Array.from({ length: 7 }, (_, i) => sendEmail(service, s.key, receipt(s.from, `c${i}@example.net`))));
    const ok = answers.filter((a) => a.status === 200);
    expect(ok).toHaveLength(5);
    expect(ok.filter((a) => a.body.warning === undefined)).toHaveLength(2);
    expect(
      ok
        .filter((a) => a.body.warning?.code === 'grace')
        .map((a) => a.body.warning.graceEmailsLeft)
        .sort(),
    ).toEqual([0, 1, 2]);
    expect(answers.filter((a) => a.status === 402).map((a) => a.body.error.code)).toEqual(['no_credits', 'no_credits']);
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 0, state: 'exhausted', totalUsed: 2 });
    expect(await outboundMessagesOf(service, s.account.id)).toHaveLength(5);
  });

  it('the grace window also closes after GRACE_DAYS', async () => {
    const s = await newSender(service, { credits: 1 });
    expectOk(await sendEmail(service, s.key, receipt(s.from)));
    service.clock.advance(DAY);
    const res = await sendEmail(service, s.key, receipt(s.from));
    expect(res.body.warning).toEqual({ code: 'grace', message: expect.any(String), graceDaysLeft: 2, graceEmailsLeft: 2 });
    service.clock.advance(2 * DAY - 1);
    expect((await sendEmail(service, s.key, receipt(s.from))).body.warning).toMatchObject({ code: 'grace', graceDaysLeft: 1, graceEmailsLeft: 1 });
    service.clock.advance(1);
    expectError(await sendEmail(service, s.key, receipt(s.from)), 402, 'no_credits');
    expect((await getAccount(service, s.key)).credits.state).toBe('exhausted');
  });

  it('a trial that ends with nothing purchased goes to grace, then to exhausted', async () => {
    const s = await newSender(service);
    const freeUntil = s.account.createdAt + 14 * DAY;
    service.clock.set(freeUntil - 1);
    expect((await sendEmail(service, s.key, receipt(s.from))).body.warning).toMatchObject({ code: 'trial' });
    service.clock.advance(1);
    const first = await sendEmail(service, s.key, receipt(s.from));
    expect(first.status).toBe(200);
    expect(first.body.warning).toEqual({ code: 'grace', message: expect.any(String), graceDaysLeft: 3, graceEmailsLeft: 2 });
    expect((await getAccount(service, s.key)).credits).toMatchObject({ state: 'grace', graceEmailsLeft: 2 });
    expect((await sendEmail(service, s.key, receipt(s.from))).body.warning).toMatchObject({ code: 'grace', graceEmailsLeft: 1 });
    expect((await sendEmail(service, s.key, receipt(s.from))).body.warning).toMatchObject({ code: 'grace', graceEmailsLeft: 0 });
    expectError(await sendEmail(service, s.key, receipt(s.from)), 402, 'no_credits');
  });

  it('a trial that ended GRACE_DAYS ago is 402 no_credits without any grace send', async () => {
    const s = await newSender(service);
    service.clock.set(s.account.createdAt + 14 * DAY + 3 * DAY - 1);
    expect((await sendEmail(service, s.key, receipt(s.from))).body.warning).toMatchObject({ code: 'grace', graceDaysLeft: 1 });
    service.clock.advance(1);
    expectError(await sendEmail(service, s.key, receipt(s.from)), 402, 'no_credits');
  });

  it('granting credits to an exhausted account returns it to ok', async () => {
    const s = await newSender(service);
    await exhaustCredits(service, s.account.id);
    expectError(await sendEmail(service, s.key, receipt(s.from)), 402, 'no_credits');
    await grantCredits(service.deps, s.account.id, 10);
    const res = await sendEmail(service, s.key, receipt(s.from));
    expect(res.status).toBe(200);
    expect(res.body.warning).toBeUndefined();
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 9, state: 'ok', totalPurchased: 10, totalUsed: 1 });
  });

  it('the parent pays for a sub-account’s send: one credit, the sub-account’s own record stays at zero', async () => {
    const parent = await newSender(service, { credits: 5 });
    const sub = await newSubSender(service, parent.key);
    const res = await sendEmail(service, parent.key, receipt(sub.from, recipients(3)), { account: sub.id });
    expect(res.status).toBe(200);
    expect(res.body.warning).toBeUndefined();
    expect((await getAccount(service, parent.key)).credits).toMatchObject({ balance: 4, state: 'ok', totalUsed: 1 });
    expect((await getAccount(service, parent.key, sub.id)).credits).toMatchObject({ balance: 0, totalPurchased: 0, totalUsed: 0 });
    expect(await accountRow(service, sub.id)).toMatchObject({ creditsBalance: 0, creditsTotalUsed: 0 });
  });

  it('a sub-account of a parent on its trial sends free with the parent’s trial warning', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    const res = await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id });
    expect(res.status).toBe(200);
    expect(res.body.warning).toEqual({ code: 'trial', message: expect.any(String), freeUntil: iso(parent.account.createdAt + 14 * DAY) });
  });

  it('a sub-account spends its parent’s grace and stops at 402 no_credits with it', async () => {
    const parent = await newSender(service, { credits: 1 });
    const sub = await newSubSender(service, parent.key);
    expectOk(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }));
    for (const left of [2, 1, 0]) {
      expect((await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id })).body.warning).toMatchObject({
        code: 'grace',
        graceEmailsLeft: left,
      });
    }
    expectError(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }), 402, 'no_credits');
    expectError(await sendEmail(service, parent.key, receipt(parent.from)), 402, 'no_credits');
  });

  it('a parent without credits stops its sub-account with 402 no_credits, though the sub-account has never sent', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await exhaustCredits(service, parent.account.id);
    expectError(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }), 402, 'no_credits');
  });

  it('sandbox sends are not charged, even in the grace window', async () => {
    const s = await newSender(service, { credits: 2 });
    const res = await sendEmail(service, s.key, receipt(s.from, recipients(2), { sandbox: true }));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ sandbox: true });
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 2, totalUsed: 0 });
    expectOk(await sendEmail(service, s.key, receipt(s.from)));
    expectOk(await sendEmail(service, s.key, receipt(s.from)));
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 0, state: 'grace', graceEmailsLeft: 3 });
    expectOk(await sendEmail(service, s.key, receipt(s.from, 'ann@example.net', { sandbox: true })));
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 0, state: 'grace', graceEmailsLeft: 3, totalUsed: 2 });
    expect(await queued(service, res.body.id)).toEqual({ message: undefined, recipients: [] });
  });
});

describe('credit is checked again inside the send’s commit', () => {
  /** One credit left and no grace after it (the grace emails are used up): the next send is the last. */
  async function lastCredit(accountId: string): Promise<void> {
    await updateAccount(service, accountId, { creditsBalance: 1, graceEmailsUsed: 3, dailyQuota: 100 });
  }

  it('two sends that both passed check 4 before either committed: one 200, one 402 no_credits, balance 0', async () => {
    const s = await newSender(service, { credits: 5 });
    await lastCredit(s.account.id);
    const gate = gateCommits(service, 2);
    let answers;
    try {
      const pending = [sendEmail(service, s.key, receipt(s.from, 'ann@example.net')), sendEmail(service, s.key, receipt(s.from, 'bob@example.net'))];
      // Both hold at their commit: each has passed the early credit check on a balance of 1.
      await gate.arrived(2);
      gate.release();
      answers = await Promise.all(pending);
    } finally {
      gate.release();
    }
    expect(answers.map((a) => a.status).sort()).toEqual([200, 402]);
    expectError(answers.find((a) => a.status === 402)!, 402, 'no_credits', 'This account has no credits left and its grace window has closed.');
    expect(answers.find((a) => a.status === 200)!.body.warning).toBeUndefined();
    expect(await accountRow(service, s.account.id)).toMatchObject({ creditsBalance: 0, creditsTotalUsed: 1 });
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 0, state: 'exhausted', totalUsed: 1 });
    expect((await emailRows(service, s.account.id)).map((r) => r.status)).toEqual(['sent']);
    expect(await queuedRecipientsOf(service, s.account.id)).toHaveLength(1);
  });

  it('the same through a sub-account: the parent’s last credit pays once, the other send is 402 no_credits', async () => {
    const parent = await newSender(service, { credits: 5 });
    await lastCredit(parent.account.id);
    const sub = await newSubSender(service, parent.key);
    const gate = gateCommits(service, 2);
    let answers;
    try {
      const pending = [
        sendEmail(service, parent.key, receipt(sub.from, 'ann@example.net'), { account: sub.id }),
        sendEmail(service, parent.key, receipt(parent.from, 'bob@example.net')),
      ];
      await gate.arrived(2);
      gate.release();
      answers = await Promise.all(pending);
    } finally {
      gate.release();
    }
    expect(answers.map((a) => a.status).sort()).toEqual([200, 402]);
    expect(answers.find((a) => a.status === 402)!.body.error.code).toBe('no_credits');
    expect(await accountRow(service, parent.account.id)).toMatchObject({ creditsBalance: 0, creditsTotalUsed: 1 });
  });

  it('a sandbox send whose payer ran out of credit between its check and its commit is refused too, and logs nothing', async () => {
    const s = await newSender(service, { credits: 5 });
    const gate = gateCommits(service, 1);
    let res;
    try {
      const pending = sendEmail(service, s.key, receipt(s.from, 'ann@example.net', { sandbox: true }));
      await gate.arrived(1);
      await exhaustCredits(service, s.account.id);
      gate.release();
      res = await pending;
    } finally {
      gate.release();
    }
    expectError(res, 402, 'no_credits');
    expect(await emailRows(service, s.account.id)).toEqual([]);
  });

  it('a sandbox send racing the last ordinary send: refused when it commits after it, answered when it commits first (it spends no credit)', async () => {
    const s = await newSender(service, { credits: 5 });
    await lastCredit(s.account.id);
    const gate = gateCommits(service, 2);
    let answers;
    try {
      const real = sendEmail(service, s.key, receipt(s.from, 'ann@example.net'));
      await gate.arrived(1);
      const sandbox = sendEmail(service, s.key, receipt(s.from, 'bob@example.net', { sandbox: true }));
      await gate.arrived(2);
      gate.release();
      answers = await Promise.all([real, sandbox]);
    } finally {
      gate.release();
    }
    const [real, sandbox] = answers;
    // The ordinary send always has the credit: a sandbox send spends none, so whichever commits first leaves it there.
    expectOk(real);
    if (sandbox.status === 200) {
      // On Postgres each send is its own transaction, and the sandbox send may lock the account's row first. SQLite's
      // group commit commits in arrival order: the ordinary send, first to arrive, always commits first.
      expect(service.deps.store.engine).toBe('postgres');
      expect((await emailRows(service, s.account.id)).map((r) => r.status).sort()).toEqual(['sandboxed', 'sent']);
    } else {
      // Committed second, the sandbox send reads the spent credit inside its commit.
      expectError(sandbox, 402, 'no_credits');
      expect((await emailRows(service, s.account.id)).map((r) => r.status)).toEqual(['sent']);
    }
    expect(await accountRow(service, s.account.id)).toMatchObject({ creditsBalance: 0, creditsTotalUsed: 1 });
  });
});

describe('suspension: 403 suspended, the reason as the message', () => {
  it('a sub-account suspended through the API answers with its reason; lifting the suspension lets it send', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    const suspend = await service.api('POST', `/accounts/${sub.id}/suspend`, { key: parent.key, body: { suspended: true, reason: REASON } });
    expect(suspend.status).toBe(200);
    expectError(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }), 403, 'suspended', REASON);
    expectError(await sendEmail(service, parent.key, receipt(sub.from, 'ann@example.net', { sandbox: true }), { account: sub.id }), 403, 'suspended', REASON);
    // The parent itself is not paused.
    expectOk(await sendEmail(service, parent.key, receipt(parent.from)));
    expect((await service.api('POST', `/accounts/${sub.id}/suspend`, { key: parent.key, body: { suspended: false } })).status).toBe(200);
    expectOk(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }));
  });

  it('an account suspended by the operator answers with the operator’s reason', async () => {
    const s = await newSender(service);
    await suspendByOperator(service, s.account.id, REASON);
    expectError(await sendEmail(service, s.key, receipt(s.from)), 403, 'suspended', REASON);
    expect(await emailRows(service, s.account.id)).toEqual([]);
  });

  it('a suspended parent stops its sub-accounts: the reason prefixed by “The parent account cannot send.”', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await suspendByOperator(service, parent.account.id, REASON);
    expectError(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }), 403, 'suspended', `The parent account cannot send. ${REASON}`);
    expectError(await sendEmail(service, parent.key, receipt(parent.from)), 403, 'suspended', REASON);
  });

  it('a sub-account’s own suspension answers before its parent’s', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    const own = 'Your sub-account is paused by the shop owner.';
    expect((await service.api('POST', `/accounts/${sub.id}/suspend`, { key: parent.key, body: { suspended: true, reason: own } })).status).toBe(200);
    await suspendByOperator(service, parent.account.id, REASON);
    expectError(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }), 403, 'suspended', own);
  });
});

describe('429 sandbox_limit: 1000 sandbox sends in 24 hours, per acting account', () => {
  it('the 1001st sandbox send is refused; ordinary sends and other accounts go on; the window slides', async () => {
    const parent = await newSender(service, { credits: 100 });
    const sub = await newSubSender(service, parent.key);
    const sandbox = receipt(parent.from, 'ann@example.net', { sandbox: true });
    for (let batch = 0; batch < 10; batch++) {
      const answers = await Promise.all(Array.from({ length: 100 }, () => sendEmail(service, parent.key, sandbox)));
      expect(answers.filter((a) => a.status === 200)).toHaveLength(100);
    }
    expectError(await sendEmail(service, parent.key, sandbox), 429, 'sandbox_limit');
    expect((await emailRows(service, parent.account.id)).filter((r) => r.status === 'sandboxed')).toHaveLength(1000);
    expectOk(await sendEmail(service, parent.key, receipt(parent.from)));
    expectOk(await sendEmail(service, parent.key, receipt(sub.from, 'ann@example.net', { sandbox: true }), { account: sub.id }));
    service.clock.advance(DAY - 1);
    expectError(await sendEmail(service, parent.key, sandbox), 429, 'sandbox_limit');
    service.clock.advance(2);
    expectOk(await sendEmail(service, parent.key, sandbox));
  }, 60_000);

  it('sandbox sends at the same moment cannot overrun the limit together', async () => {
    const s = await newSender(service);
    await fillSandboxLog(service, s.account.id, 998);
    const answers = await Promise.all(Array.from({ length: 5 }, (_, i) => sendEmail(service, s.key, receipt(s.from, `s${i}@example.net`, { sandbox: true }))));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 429, 429, 429]);
    for (const a of answers.filter((x) => x.status === 429)) expect(a.body.error.code).toBe('sandbox_limit');
    expect((await emailRows(service, s.account.id)).filter((r) => r.status === 'sandboxed')).toHaveLength(1000);
  });
});

import { describe, expect, it } from 'vitest';
import { DAY_MS } from '../server/shared/clock.js';
import { type CreditPolicy, type CreditRecord, creditStatus } from '../server/core/credits.js';
import { effectiveQuota, sentToday } from '../server/core/quota.js';
import { type Tier, gradeTier } from '../server/core/tiers.js';
import { isUuid, newId } from '../server/shared/ids.js';
import type { AccountRow } from '../db/schema/index.js';
import { type SendCount, afterSend } from '../server/core/sending-policy.js';

/**
 * The policy tables of docs/api/decisions.md section 4 (tiers, quota, credits) and the id rule of section 1, as tables.
 */

describe('gradeTier: paused >= 10% (10 bounces) / 0.5% (3 complaints), throttled and warning >= 5% / 0.1% and >= 2% / 0.05% (5 bounces / 2 complaints), graded from 50 sent', () => {
  const cases: [string, number, number, number, Tier][] = [
    // label, totalSent, totalBounced, totalComplained, tier
    ['nothing sent', 0, 0, 0, 'healthy'],
    ['49 sent, all bounced: not graded yet', 49, 49, 0, 'healthy'],
    ['49 sent, all complained: not graded yet', 49, 0, 49, 'healthy'],
    ['50 sent, clean', 50, 0, 0, 'healthy'],
    ['50 sent, 5 bounced (10%): under 10 bounces, throttled', 50, 5, 0, 'throttled'],
    ['50 sent, 4 bounced (8%): under 5 bounces, healthy', 50, 4, 0, 'healthy'],
    ['100 sent, 10 bounced (10%): paused', 100, 10, 0, 'paused'],
    ['100 sent, 9 bounced (9%): throttled', 100, 9, 0, 'throttled'],
    ['51 sent, 1 complaint (1.96%): one report grades nothing', 51, 0, 1, 'healthy'],
    ['50 sent, 2 complaints (4%): throttled, under 3 complaints', 50, 0, 2, 'throttled'],
    ['50 sent, 3 complaints (6%): paused', 50, 0, 3, 'paused'],
    ['600 sent, 3 complaints (0.5%): paused', 600, 0, 3, 'paused'],
    ['10000 sent, 4 bounced, 1 complaint: under every count', 10000, 4, 1, 'healthy'],

    ['bounce 10% exactly', 1000, 100, 0, 'paused'],
    ['bounce 100%', 1000, 1000, 0, 'paused'],
    ['bounce 9.9%', 1000, 99, 0, 'throttled'],
    ['bounce 5% exactly', 1000, 50, 0, 'throttled'],
    ['bounce 4.9%', 1000, 49, 0, 'warning'],
    ['bounce 2% exactly', 1000, 20, 0, 'warning'],
    ['bounce 1.9%', 1000, 19, 0, 'healthy'],

    ['complaint 0.5% exactly', 10000, 0, 50, 'paused'],
    ['complaint 0.49%', 10000, 0, 49, 'throttled'],
    ['complaint 0.1% exactly', 10000, 0, 10, 'throttled'],
    ['complaint 0.09%', 10000, 0, 9, 'warning'],
    ['complaint 0.05% exactly', 10000, 0, 5, 'warning'],
    ['complaint 0.04%', 10000, 0, 4, 'healthy'],
    ['complaint 0.05% at 4000 sent', 4000, 0, 2, 'warning'],
    ['complaint just under 0.05% at 4001 sent', 4001, 0, 2, 'healthy'],
    ['complaint 0.05% at 2000 sent, but 1 complaint', 2000, 0, 1, 'healthy'],

    ['the worse of the two decides: warning bounce, paused complaint', 10000, 200, 50, 'paused'],
    ['the worse of the two decides: paused bounce, healthy complaint', 10000, 1000, 0, 'paused'],
    ['the worse of the two decides: throttled complaint, warning bounce', 10000, 300, 10, 'throttled'],
    ['both just under warning', 10000, 199, 4, 'healthy'],
  ];

  it.each(cases)('%s (%i sent, %i bounced, %i complained) is %s', (_label, totalSent, totalBounced, totalComplained, tier) => {
    expect(gradeTier({ totalSent, totalBounced, totalComplained })).toBe(tier);
  });
});

describe('effectiveQuota: dailyQuota, or floor(dailyQuota / 10) while throttled', () => {
  it.each([
    [10000, 'healthy', 10000],
    [10000, 'warning', 10000],
    [10000, 'throttled', 1000],
    [10000, 'paused', 10000],
    [1005, 'throttled', 100],
    [19, 'throttled', 1],
    [9, 'throttled', 0],
    [1, 'healthy', 1],
  ] as [number, Tier, number][])('dailyQuota %i while %s is %i', (dailyQuota, tier, expected) => {
    expect(effectiveQuota(dailyQuota, tier)).toBe(expected);
  });
});

describe('sentToday: recipients since midnight UTC', () => {
  const at = (iso: string) => Date.parse(iso);
  it.each([
    ['the same UTC day', '2026-03-10', 7, '2026-03-10T12:00:00.000Z', 7],
    ['the first millisecond of that day', '2026-03-10', 7, '2026-03-10T00:00:00.000Z', 7],
    ['the last millisecond of that day', '2026-03-10', 7, '2026-03-10T23:59:59.999Z', 7],
    ['midnight UTC after', '2026-03-10', 7, '2026-03-11T00:00:00.000Z', 0],
    ['a later day', '2026-03-10', 7, '2026-04-02T08:00:00.000Z', 0],
    ['a day stored for the future (clock stepped back)', '2026-03-11', 7, '2026-03-10T23:00:00.000Z', 0],
    ['never sent', null, 0, '2026-03-10T12:00:00.000Z', 0],
  ] as [string, string | null, number, string, number][])('%s', (_label, sentTodayDay, sentTodayCount, now, expected) => {
    expect(sentToday({ sentTodayDay, sentTodayCount }, at(now))).toBe(expected);
  });

  it('midnight is UTC, not local: 23:30 at -05:00 is already the next UTC day', () => {
    expect(sentToday({ sentTodayDay: '2026-03-10', sentTodayCount: 3 }, at('2026-03-10T23:30:00.000-05:00'))).toBe(0);
    expect(sentToday({ sentTodayDay: '2026-03-11', sentTodayCount: 3 }, at('2026-03-10T23:30:00.000-05:00'))).toBe(3);
  });
});

describe('creditStatus: trial, ok, grace by days or by emails, exhausted', () => {
  const policy: CreditPolicy = { trialDays: 14, graceDays: 3, graceEmails: 100 };
  const created = Date.parse('2026-01-01T00:00:00.000Z');
  const freeUntil = created + 14 * DAY_MS;

  const record = (over: Partial<CreditRecord> = {}): CreditRecord => ({
    createdAt: created,
    creditsBalance: 0,
    creditsTotalPurchased: 0,
    creditsTotalUsed: 0,
    freeUntil,
    graceStartedAt: null,
    graceEmailsUsed: 0,
    ...over,
  });

  describe('trial', () => {
    it('while now < freeUntil and nothing was ever purchased', () => {
      expect(creditStatus(record(), policy, created).state).toBe('trial');
      expect(creditStatus(record(), policy, freeUntil - 1).state).toBe('trial');
    });

    it('ends at freeUntil exactly', () => {
      expect(creditStatus(record(), policy, freeUntil).state).not.toBe('trial');
    });

    it('a purchase during the trial makes the account ok', () => {
      expect(creditStatus(record({ creditsBalance: 10, creditsTotalPurchased: 10 }), policy, created + DAY_MS).state).toBe('ok');
    });

    it('a purchase used up during the trial window is not a trial again', () => {
      const r = record({ creditsBalance: 0, creditsTotalPurchased: 10, creditsTotalUsed: 10, graceStartedAt: created + DAY_MS });
      expect(creditStatus(r, policy, created + 2 * DAY_MS).state).toBe('grace');
    });
  });

  describe('ok', () => {
    it.each([1, 5, 1_000_000])('with a balance of %i', (balance) => {
      expect(creditStatus(record({ creditsBalance: balance, creditsTotalPurchased: balance }), policy, freeUntil + 100 * DAY_MS).state).toBe('ok');
    });

    it('a balance after grace (credits granted) is ok', () => {
      const r = record({ creditsBalance: 5, creditsTotalPurchased: 15, graceStartedAt: null, graceEmailsUsed: 0 });
      expect(creditStatus(r, policy, freeUntil + 30 * DAY_MS)).toEqual({ state: 'ok', graceDaysLeft: 3, graceEmailsLeft: 100 });
    });
  });

  describe('grace after the trial ends with nothing purchased (from freeUntil)', () => {
    it.each([
      [0, 'grace', 3, 100],
      [DAY_MS / 2, 'grace', 3, 100],
      [DAY_MS, 'grace', 2, 100],
      [2 * DAY_MS + 1, 'grace', 1, 100],
      [3 * DAY_MS - 1, 'grace', 1, 100],
      [3 * DAY_MS, 'exhausted', 0, 0],
      [30 * DAY_MS, 'exhausted', 0, 0],
    ] as [number, string, number, number][])('%i ms after freeUntil: %s', (after, state, graceDaysLeft, graceEmailsLeft) => {
      expect(creditStatus(record(), policy, freeUntil + after)).toEqual({ state, graceDaysLeft, graceEmailsLeft });
    });
  });

  describe('grace after the balance runs out (from graceStartedAt)', () => {
    const ranOut = freeUntil + 40 * DAY_MS;
    const spent = (over: Partial<CreditRecord> = {}) =>
      record({ creditsBalance: 0, creditsTotalPurchased: 50, creditsTotalUsed: 50, graceStartedAt: ranOut, ...over });

    it('grace with the full window when it starts', () => {
      expect(creditStatus(spent(), policy, ranOut)).toEqual({ state: 'grace', graceDaysLeft: 3, graceEmailsLeft: 100 });
    });

    it('days count down, rounded up', () => {
      expect(creditStatus(spent(), policy, ranOut + 1.5 * DAY_MS)).toEqual({ state: 'grace', graceDaysLeft: 2, graceEmailsLeft: 100 });
    });

    it('ends by days: exhausted after graceDays even with emails left', () => {
      expect(creditStatus(spent({ graceEmailsUsed: 10 }), policy, ranOut + 3 * DAY_MS)).toEqual({ state: 'exhausted', graceDaysLeft: 0, graceEmailsLeft: 0 });
    });

    it.each([
      [0, 'grace', 100],
      [1, 'grace', 99],
      [99, 'grace', 1],
      [100, 'exhausted', 0],
      [150, 'exhausted', 0],
    ] as [number, string, number][])('ends by emails: %i grace sends used is %s', (graceEmailsUsed, state, graceEmailsLeft) => {
      const status = creditStatus(spent({ graceEmailsUsed }), policy, ranOut + DAY_MS);
      expect(status.state).toBe(state);
      expect(status.graceEmailsLeft).toBe(graceEmailsLeft);
      if (state === 'exhausted') expect(status.graceDaysLeft).toBe(0);
    });

    it('whichever ends first: emails used up on the first day', () => {
      expect(creditStatus(spent({ graceEmailsUsed: 100 }), policy, ranOut + 1000).state).toBe('exhausted');
    });
  });

  describe('the policy comes from config', () => {
    it('TRIAL_DAYS=0: no trial at all, grace from creation', () => {
      const r = record({ freeUntil: created });
      expect(creditStatus(r, { ...policy, trialDays: 0 }, created).state).toBe('grace');
    });

    it('GRACE_DAYS=0: exhausted as soon as the trial ends', () => {
      expect(creditStatus(record(), { ...policy, graceDays: 0 }, freeUntil).state).toBe('exhausted');
    });

    it('GRACE_EMAILS=0: exhausted as soon as the trial ends', () => {
      expect(creditStatus(record(), { ...policy, graceEmails: 0 }, freeUntil).state).toBe('exhausted');
    });

    it('GRACE_EMAILS=5: the count follows it', () => {
      expect(creditStatus(record({ graceEmailsUsed: 2 }), { ...policy, graceEmails: 5 }, freeUntil)).toEqual({
        state: 'grace',
        graceDaysLeft: 3,
        graceEmailsLeft: 3,
      });
    });
  });
});

describe('afterSend: the account rows as a send leaves them (what recordSend writes)', () => {
  const now = Date.parse('2026-11-30T12:00:00Z');
  const row = (over: Partial<AccountRow> = {}): AccountRow => ({
    id: 'acc-a',
    parentId: null,
    name: 'a',
    createdAt: 0,
    dailyQuota: 100,
    sentTodayDay: '2026-11-30',
    sentTodayCount: 7,
    totalSent: 70,
    totalBounced: 1,
    totalComplained: 0,
    suspendedAt: null,
    suspendedBy: null,
    suspendedReason: null,
    creditsBalance: 5,
    creditsTotalPurchased: 10,
    creditsTotalUsed: 5,
    freeUntil: null,
    graceStartedAt: null,
    graceEmailsUsed: 0,
    ...over,
  });
  const send = (over: Partial<SendCount> = {}): SendCount => ({ recipients: 3, reputed: 2, charge: 'credit', now, ...over });

  it("counts today's recipients, the reputed ones in the lifetime total, and one credit on the payer", () => {
    expect(afterSend({ acting: row(), parent: null }, send()).acting).toMatchObject({
      sentTodayDay: '2026-11-30',
      sentTodayCount: 10,
      totalSent: 72,
      creditsBalance: 4,
      creditsTotalUsed: 6,
      graceStartedAt: null,
      graceEmailsUsed: 0,
    });
  });

  it("starts today's count again on another day", () => {
    expect(afterSend({ acting: row({ sentTodayDay: '2026-11-29' }), parent: null }, send()).acting).toMatchObject({
      sentTodayDay: '2026-11-30',
      sentTodayCount: 3,
    });
    expect(afterSend({ acting: row({ sentTodayDay: null, sentTodayCount: 0 }), parent: null }, send()).acting.sentTodayCount).toBe(3);
  });

  it('opens the grace window with the last credit; a grace send counts a grace email; a trial send costs nothing', () => {
    expect(afterSend({ acting: row({ creditsBalance: 1 }), parent: null }, send()).acting).toMatchObject({ creditsBalance: 0, graceStartedAt: now });
    const inGrace = row({ creditsBalance: 0, graceStartedAt: now - 1000, graceEmailsUsed: 2 });
    expect(afterSend({ acting: inGrace, parent: null }, send({ charge: 'grace' })).acting).toMatchObject({
      creditsBalance: 0,
      creditsTotalUsed: 5,
      graceStartedAt: now - 1000,
      graceEmailsUsed: 3,
    });
    expect(afterSend({ acting: row(), parent: null }, send({ charge: 'none' })).acting).toMatchObject({ creditsBalance: 5, creditsTotalUsed: 5 });
  });

  it("a sub-account's send: both counted today, the sub-account's reputation, the parent's credit", () => {
    const after = afterSend({ acting: row({ id: 'acc-sub', parentId: 'acc-a' }), parent: row() }, send());
    expect(after.acting).toMatchObject({ id: 'acc-sub', sentTodayCount: 10, totalSent: 72, creditsBalance: 5, creditsTotalUsed: 5 });
    expect(after.parent).toMatchObject({ id: 'acc-a', sentTodayCount: 10, totalSent: 70, creditsBalance: 4, creditsTotalUsed: 6 });
  });

  it('leaves the rows it is given as they were', () => {
    const acting = row();
    afterSend({ acting, parent: null }, send());
    expect(acting).toEqual(row());
  });
});

describe('newId: UUIDv7, strictly increasing', () => {
  const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
  /** The millisecond timestamp in the first 48 bits. */
  const msOf = (id: string) => parseInt(id.replace(/-/g, '').slice(0, 12), 16);
  // newId keeps state across calls: each test starts past every time an earlier test used.
  let base = Date.parse('2030-01-01T00:00:00.000Z');
  const nextBase = () => (base += DAY_MS);

  it('is UUID-shaped, version 7, RFC 4122 variant, and carries the time', () => {
    const now = nextBase();
    const id = newId(now);
    expect(id).toMatch(UUID_V7);
    expect(isUuid(id)).toBe(true);
    expect(msOf(id)).toBe(now);
  });

  it('is strictly increasing for many ids in the same millisecond', () => {
    const now = nextBase();
    const ids = Array.from({ length: 10_000 }, () => newId(now));
    for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!, `${ids[i - 1]} then ${ids[i]}`).toBe(true);
    for (const id of ids) expect(id).toMatch(UUID_V7);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('is strictly increasing when the clock steps backwards', () => {
    const now = nextBase();
    const ids = [newId(now), newId(now - 1), newId(now - 60_000), newId(now - DAY_MS), newId(now - 1)];
    for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!, `${ids[i - 1]} then ${ids[i]}`).toBe(true);
    // Time moving forward again is followed.
    const later = newId(now + 5000);
    expect(later > ids[ids.length - 1]!).toBe(true);
    expect(msOf(later)).toBe(now + 5000);
  });

  it('is increasing along a clock that moves forward and back in small steps', () => {
    let now = nextBase();
    let prev = newId(now);
    for (let i = 0; i < 5000; i++) {
      now += (i % 7) - 3;
      const id = newId(now);
      expect(id > prev).toBe(true);
      prev = id;
    }
  });

  it('sorts as text in the order of creation across milliseconds', () => {
    const start = nextBase();
    const ids = Array.from({ length: 100 }, (_, i) => newId(start + Math.floor(i / 10)));
    expect([...ids].sort()).toEqual(ids);
  });
});

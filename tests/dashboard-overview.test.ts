import { eq } from 'drizzle-orm';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accounts, customerDatabases, webhookEndpoints } from '../db/schema/index.js';
import { createDeliveryEngine, type DeliveryEngine } from '../mta/delivery-engine.js';
import { SIMULATOR_DOMAIN } from '../server/core/simulator.js';
import { setDailyQuota } from '../server/core/accounts.js';
import { scansOn } from '../db/scans.js';
import { expectAccessible, horizontalOverflow, launchBrowser, newPage, pageProblems, screenshot, signIn } from './helpers/browser.js';
import { storeDatabaseRow } from './helpers/customer-db.js';
import { adminTokenFor, dashboardClient } from './helpers/dashboard.js';
import { seedEndpoint } from './helpers/outcomes.js';
import { DAY, newSender, receipt, updateAccount, useQuota } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * The overview: mail flow per UTC day over the last 30 days, from real sends through the API and real
 * outcomes recorded by the delivery engine (capture mode, with the mailbox simulator's bounce@, defer@ and
 * complaint@), the clock moved day by day; the outbound queue; and the endpoints, databases and accounts that need
 * the operator. The service captures its mail, so an email's page links to its captured messages.
 */

let service: TestService;
let engine: DeliveryEngine;
let browser: Browser;
let token: string;

const HOUR = 3_600_000;
const sim = (local: string) => `${local}@${SIMULATOR_DOMAIN}`;

beforeAll(async () => {
  service = await startService({ DELIVERY_MODE: 'capture' });
  engine = createDeliveryEngine(service.deps);
  token = await adminTokenFor(service);
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await service?.close();
});

async function send(key: string, from: string, to: string[], extra: Record<string, unknown> = {}): Promise<string> {
  const res = await service.api('POST', '/emails', { key, body: receipt(from, to, extra) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

/** The numbers table's cells, by day and series. */
async function tableRow(page: Page, day: string): Promise<Record<string, number>> {
  const cells = page.locator(`#volume-table tbody tr[data-day="${day}"] td`);
  const out: Record<string, number> = {};
  for (let i = 0; i < (await cells.count()); i++) out[(await cells.nth(i).getAttribute('data-series'))!] = Number(await cells.nth(i).textContent());
  return out;
}

describe('the overview', () => {
  let captured: string;

  it('charts sends and outcomes per UTC day, with a zero day, and lists the queue, failing endpoints, databases and accounts', async () => {
    const s = await newSender(service, { name: 'Chart shop' });
    // 2026-03-10, 12:00: five recipients sent (and a sandbox send, which sends nothing); the engine delivers three
    // (one of them then complains), bounces one and defers one.
    await send(s.key, s.from, [sim('delivered'), sim('bounce'), sim('complaint'), sim('defer')]);
    captured = await send(s.key, s.from, ['alice@example.net']);
    await send(s.key, s.from, ['sandboxed@example.net'], { sandbox: true });
    expect(await engine.runOnce()).toBe(5);
    // 2026-03-11: nothing at all. 2026-03-12, 12:00: two more sent, one delivered and one bounced; defer@ is
    // deferred again.
    service.clock.advance(2 * DAY);
    await send(s.key, s.from, [sim('delivered+2'), sim('bounce+2')]);
    expect(await engine.runOnce()).toBe(3);
    // 2026-03-13, 10:00: defer@ delivered at its third attempt; one more send waits in the queue for 90 minutes.
    service.clock.advance(22 * HOUR);
    expect(await engine.runOnce()).toBe(1);
    await send(s.key, s.from, ['later@example.net']);
    service.clock.advance(90 * 60_000);

    // What needs the operator: a switched-off endpoint and a failing one, an unreachable database, an account at 80%
    // of its quota and one throttled by its bounce rate; and one at half its quota, which is fine.
    const hooks = (await service.newAccount({ name: 'Hook owner' })).account;
    const disabled = await seedEndpoint(service, hooks.id, ['email.delivered'], { active: false });
    const failing = await seedEndpoint(service, hooks.id, ['email.bounced']);
    await service.deps.db.update(webhookEndpoints).set({ failureCount: 3 }).where(eq(webhookEndpoints.id, failing));
    const dbOwner = (await service.newAccount({ name: 'Database owner' })).account;
    await storeDatabaseRow(service, dbOwner.id, 'postgresql://app:secret@db.owner.example:5432/mail');
    await service.deps.db
      .update(customerDatabases)
      .set({ state: 'unreachable', lastError: 'connect ECONNREFUSED 203.0.113.7:5432' })
      .where(eq(customerDatabases.accountId, dbOwner.id));
    const busy = (await service.newAccount({ name: 'Nearly full' })).account;
    await setDailyQuota(service.deps, busy.id, 10);
    await useQuota(service, busy.id, 2);
    const calm = (await service.newAccount({ name: 'Half way' })).account;
    await setDailyQuota(service.deps, calm.id, 10);
    await useQuota(service, calm.id, 5);
    const bouncy = (await service.newAccount({ name: 'Bouncy' })).account;
    await updateAccount(service, bouncy.id, { totalSent: 100, totalBounced: 6 });

    const page = await newPage(browser);
    await signIn(page, service.url, token);
    expect(new URL(page.url()).pathname).toBe('/dashboard');
    const days = page.locator('#volume-table tbody tr');
    expect(await days.count()).toBe(30);
    expect(await days.first().getAttribute('data-day')).toBe('2026-03-13');
    expect(await days.last().getAttribute('data-day')).toBe('2026-02-12');
    expect(await tableRow(page, '2026-03-10')).toEqual({ emails: 2, sent: 5, delivered: 3, bounced: 1, deferred: 1, complained: 1 });
    expect(await tableRow(page, '2026-03-11')).toEqual({ emails: 0, sent: 0, delivered: 0, bounced: 0, deferred: 0, complained: 0 });
    expect(await tableRow(page, '2026-03-12')).toEqual({ emails: 1, sent: 2, delivered: 1, bounced: 1, deferred: 1, complained: 0 });
    expect(await tableRow(page, '2026-03-13')).toEqual({ emails: 1, sent: 1, delivered: 1, bounced: 0, deferred: 0, complained: 0 });
    expect(await tableRow(page, '2026-02-12')).toEqual({ emails: 0, sent: 0, delivered: 0, bounced: 0, deferred: 0, complained: 0 });
    expect(await page.locator('#volume-table tfoot').textContent()).toBe('Total485221');
    // Emails and recipients each labelled, each its own true count: 4 emails to 8 recipients (and the sandboxed one
    // in neither).
    expect(await page.locator('#volume-table thead th').allTextContents()).toEqual([
      'Day (UTC)',
      'Emails sent',
      'Sent (recipients)',
      'Delivered (recipients)',
      'Bounced (recipients)',
      'Deferred (recipients)',
      'Complained (recipients)',
    ]);
    expect(await page.locator('.legend li').allTextContents()).toEqual([
      'Sent (8 recipients, 4 emails)',
      'Delivered (5 recipients)',
      'Bounced (2 recipients)',
      'Deferred (2 recipients)',
      'Complained (1 recipient)',
    ]);
    // The chart has an accessible name saying the same, and a line per series.
    const chart = page.getByRole('img', {
      name: /Mail flow per UTC day from 2026-02-12 to 2026-03-13, in recipients: 4 emails sent to 8 recipients; 5 delivered, 2 bounced, 2 deferred, 1 complained/,
    });
    expect(await chart.count()).toBe(1);
    expect(await chart.locator('polyline').count()).toBe(5);

    expect(await page.locator('#queue-depth').textContent()).toBe('1');
    expect(await page.locator('#queue-oldest').textContent()).toBe('1 h 30 min');
    const webhooks = page.locator('#webhooks li');
    expect(await webhooks.count()).toBe(2);
    // Switched off first, then failing; each says why, as the webhooks pages do, and links to its endpoint.
    expect(await webhooks.nth(0).textContent()).toContain('Disabled');
    expect(await webhooks.nth(0).textContent()).toContain('Hook owner: Switched off by the service after 10 consecutive failed attempts');
    expect(await webhooks.nth(1).textContent()).toContain('Failing');
    expect(await webhooks.nth(1).textContent()).toContain('Hook owner: 3 consecutive failed attempts');
    expect(await webhooks.nth(0).getByRole('link').getAttribute('href')).toBe(`/dashboard/webhooks/${disabled}`);
    expect(await webhooks.nth(1).getByRole('link').getAttribute('href')).toBe(`/dashboard/webhooks/${failing}`);
    const databases = (await page.locator('#databases').textContent()) ?? '';
    expect(databases).toContain('unreachable');
    expect(databases).toContain('Database owner: mail on db.owner.example');
    expect(databases).toContain('connect ECONNREFUSED 203.0.113.7:5432');
    const accounts = page.locator('#accounts');
    const accountsText = (await accounts.textContent()) ?? '';
    expect(accountsText).toContain('near quota');
    expect(accountsText).toContain('8 of 10 recipients today');
    expect(accountsText).toContain('6 bounced and 0 complained of 100 recipients sent to');
    expect(accountsText).toContain('throttled');
    expect(accountsText).not.toContain('Half way');
    expect(await accounts.getByRole('link', { name: 'Nearly full' }).getAttribute('href')).toBe(`/dashboard/accounts/${busy.id}`);
    expect(await accounts.getByRole('link', { name: 'Bouncy' }).count()).toBe(1);

    // The numbers open for axe to read them too; the screenshot shows the chart with them folded.
    await page.locator('details.numbers summary').click();
    await expectAccessible(page, 'overview');
    await page.locator('details.numbers summary').click();
    await screenshot(page, 'overview');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('fits a phone: the chart scales down and nothing scrolls sideways', async () => {
    const page = await newPage(browser, 390);
    await signIn(page, service.url, token);
    await page.locator('details.numbers summary').click();
    expect(await horizontalOverflow(page)).toBe(0);
    const chart = await page.locator('svg.chart').boundingBox();
    expect(chart!.width).toBeLessThanOrEqual(390);
    await expectAccessible(page, 'overview at phone width');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('keeps the chart’s axis labels apart and readable at 375 px', async () => {
    const page = await newPage(browser, 375);
    await signIn(page, service.url, token);
    const boxes = await page.locator('svg.chart text.tick').evaluateAll((els) =>
      els
        .map((el) => {
          const r = (
            el as unknown as { getBoundingClientRect(): { left: number; right: number; top: number; bottom: number; height: number } }
          ).getBoundingClientRect();
          return { text: (el as unknown as { textContent: string }).textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom, height: r.height };
        })
        .filter((b) => b.height > 0),
    );
    // Days along the bottom, counts up the side: at least the first and last day and the top of the scale.
    expect(boxes.length).toBeGreaterThanOrEqual(4);
    const overlaps: string[] = [];
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i]!;
        const b = boxes[j]!;
        if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) overlaps.push(`${a.text} / ${b.text}`);
      }
    }
    expect(overlaps).toEqual([]);
    // Readable: drawn at least 9 px tall on the phone, not shrunk with the rest of the chart.
    for (const b of boxes) expect(b.height, b.text).toBeGreaterThanOrEqual(9);
    await screenshot(page, 'i33-chart-375');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('says all clear once nothing waits and nothing fails', async () => {
    const quiet = await startService({ DELIVERY_MODE: 'capture' });
    try {
      const client = await dashboardClient(quiet);
      const html = await (await client.get('/dashboard')).text();
      expect(html).toContain('All clear: the delivery engine has nothing left to attempt.');
      // No endpoint and no database at all: nothing to call all clear.
      expect(html).not.toContain('All clear: every endpoint is on');
      expect(html).not.toContain('All clear: every customer database');
      expect(html).toContain('No customer database yet: no account has connected one.');
      expect(html).toContain('All clear: no account has used 80% of today');
      expect(html).toContain('<div class="value" id="queue-oldest">none</div>');
    } finally {
      await quiet.close();
    }
  });

  it('says there is no webhook endpoint rather than all clear, and all clear once there are endpoints and none fails', async () => {
    const quiet = await startService({ DELIVERY_MODE: 'capture' });
    try {
      const page = await newPage(browser);
      await signIn(page, quiet.url, await adminTokenFor(quiet));
      const panel = page.locator('#webhooks');
      const text = (await panel.textContent()) ?? '';
      expect(text).toContain('No webhook endpoint yet: no account has one, so no event is posted anywhere.');
      expect(text).not.toContain('All clear');
      expect(await panel.getByRole('link', { name: 'Webhooks page' }).getAttribute('href')).toBe('/dashboard/webhooks');
      await expectAccessible(page, 'overview with no endpoint');
      await screenshot(page, 'i33-overview-no-endpoint');
      // One healthy endpoint: now every endpoint is on, and the page may say so.
      await seedEndpoint(quiet, (await quiet.newAccount({ name: 'Healthy hooks' })).account.id, ['email.delivered']);
      await storeDatabaseRow(quiet, (await quiet.newAccount({ name: 'Healthy db' })).account.id, 'postgresql://app:secret@db.healthy.example:5432/mail');
      await page.reload();
      expect(await panel.textContent()).toContain('All clear: every endpoint is on and its last post succeeded.');
      expect(await page.locator('#databases').textContent()).toContain('All clear: every customer database is reachable and has no writes waiting.');
      expect(pageProblems(page)).toEqual([]);
      await page.context().close();
    } finally {
      await quiet.close();
    }
  }, 60_000);

  it('reads the chart and the queue where deps.scans says (on SQLite main puts them on the checkpoint thread: dashboard-overview.sqlite)', async () => {
    const seen: string[] = [];
    const quiet = await startService(
      { DELIVERY_MODE: 'capture' },
      {
        scans: (store) => {
          // The store's own connection (the pool on Postgres, where main leaves them), every statement recorded.
          const on = scansOn(store.db);
          return {
            first: (query, params) => (seen.push(query), on.first(query, params)),
            all: (query, params) => (seen.push(query), on.all(query, params)),
          };
        },
      },
    );
    try {
      const s = await newSender(quiet, { name: 'Chart shop' });
      const res = await quiet.api('POST', '/emails', { key: s.key, body: receipt(s.from, ['ana@example.net', 'ben@example.net']) });
      expect(res.status).toBe(200);
      const html = await (await (await dashboardClient(quiet)).get('/dashboard')).text();
      const today = new Date(quiet.clock.now()).toISOString().slice(0, 10);
      expect(html).toMatch(
        new RegExp(`<tr data-day="${today}"><th scope="row">${today}</th><td class="num" data-series="emails">1</td><td class="num" data-series="sent">2</td>`),
      );
      expect(html).toMatch(/<div class="value" id="queue-depth">2<\/div>/);
      for (const table of ['emails', 'email_events', 'outbound_recipients']) expect(seen.some((q) => new RegExp(`from ${table}\\b`).test(q))).toBe(true);
    } finally {
      await quiet.close();
    }
  });

  it('lists a reachable customer database with writes waiting', async () => {
    const s = await newSender(service, { name: 'Waiting shop' });
    await storeDatabaseRow(service, s.account.id, 'postgresql://app:secret@db.waiting.example:5432/mail');
    // No writer runs here: the send's content write waits in the outbox.
    await send(s.key, s.from, ['bo@example.net']);
    const html = await (await (await dashboardClient(service, token)).get('/dashboard')).text();
    expect(html).toContain(
      '<span class="badge warn">writes waiting</span><a href="/dashboard/database"><bdi>Waiting shop</bdi>: mail on db.waiting.example</a>',
    );
    expect(html).toContain('1 write waiting');
  });

  it('links an email’s page to its captured messages in capture mode', async () => {
    const client = await dashboardClient(service, token);
    const res = await client.get(`/dashboard/emails/${captured}`);
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain(`<a href="/dashboard/captured/${captured}?recipient=alice%40example.net">Open the captured message of alice@example.net</a>`);
    // The capture store's outcome, as GET /emails/{id} lists it.
    expect(html).toContain('<code class="reply">captured</code>');
  });
});

/** The few parts of the DOM the check below uses in the page (the tests are compiled without the DOM's types). */
interface PageText {
  textContent: string;
}
interface PageDocument {
  createTreeWalker(root: unknown, whatToShow: number): { nextNode(): PageText | null };
  createRange(): { setStart(node: PageText, offset: number): void; setEnd(node: PageText, offset: number): void; getBoundingClientRect(): { left: number } };
}

/**
 * A tenant's name is drawn isolated (`<bdi>`) where the dashboard's own words follow it on a line: a name holding a
 * bidi override (the API refuses one now, tests/input-text.test.ts, but a database may hold one from before) must not
 * reverse the service's explanation drawn after it.
 */
describe('a name holding a bidi override', () => {
  it("does not reverse the overview's explanation that follows it", async () => {
    const { key } = await service.newAccount({ name: 'Parent Co' });
    const sub = await service.api('POST', '/accounts', { key, body: { name: 'Acme Shop' } });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    await service.deps.db.update(accounts).set({ name: 'Acme Shop\u202e' }).where(eq(accounts.id, sub.body.id));
    await seedEndpoint(service, sub.body.id, ['email.delivered'], { active: false });
    const page = await newPage(browser);
    try {
      await signIn(page, service.url, token);
      const why = page.locator('#webhooks .why', { hasText: 'Acme Shop' });
      expect(await why.count()).toBe(1);
      // Where the words "Switched" and "off" are drawn: in reading order, "Switched" is left of "off".
      // Run in the page, on the parts of the DOM typed above.
      const x = await why.evaluate((el) => {
        const doc = (el as unknown as { ownerDocument: PageDocument }).ownerDocument;
        const walker = doc.createTreeWalker(el, 4 /* NodeFilter.SHOW_TEXT */);
        let node = walker.nextNode();
        while (node && !node.textContent.includes('Switched off')) node = walker.nextNode();
        const text = node!;
        const at = (word: string) => {
          const r = doc.createRange();
          const i = text.textContent.indexOf(word);
          r.setStart(text, i);
          r.setEnd(text, i + word.length);
          return r.getBoundingClientRect().left;
        };
        return { switched: at('Switched'), off: at(' off ') };
      });
      expect(x.switched, 'the words after the name are drawn right-to-left (reversed)').toBeLessThan(x.off);
    } finally {
      await page.context().close();
    }
  });
});

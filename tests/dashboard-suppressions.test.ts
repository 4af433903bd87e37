import { eq } from 'drizzle-orm';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { suppressions } from '../db/schema/index.js';
import { suppress } from '../server/core/suppressions.js';
import { expectAccessible, flashText, horizontalOverflow, newPage, pageProblems, screenshot, signIn } from './helpers/browser.js';
import { type DashboardClient, openDashboard } from './helpers/dashboard.js';
import { type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { newSender, newSubSender, receipt } from './helpers/sending.js';

/**
 * The dashboard's suppressions page: every account's list, searched and filtered; an address added and
 * removed through the functions POST and DELETE /suppressions call, so the API sees exactly what the page did. The
 * bounces come from real deliveries refused by the SMTP sink.
 */

let rig: DeliveryRig;
let browser: Browser;
let token: string;
let http: DashboardClient;

beforeAll(async () => {
  rig = await startDeliveryRig();
  ({ browser, token, client: http } = await openDashboard(rig.service));
});
afterAll(async () => {
  await browser?.close();
  await stopDeliveryRig(rig);
});
beforeEach(() => resetDeliveryRig(rig));

const listed = async (key: string, account?: string) => {
  const res = await rig.service.api('GET', '/suppressions', { key, account });
  expect(res.status).toBe(200);
  return (res.body.data as { address: string; reason: string }[]).map((s) => `${s.address} ${s.reason}`);
};

describe('the suppressions page in the browser', () => {
  it('add and remove a suppression', async () => {
    const { service } = rig;
    const northwind = await service.newAccount({ name: 'Northwind Traders' });
    const contoso = await service.newAccount({ name: 'Contoso' });
    const page = await newPage(browser);
    await signIn(page, service.url, token, '/dashboard/suppressions');

    const add = page.getByRole('region', { name: 'Add an address' });
    await add.getByLabel('Account').selectOption({ label: 'Northwind Traders' });
    await add.getByLabel('Address').fill('Ann.Lee@Example.ORG');
    await add.getByRole('button', { name: 'Add to the list' }).click();
    await page.waitForURL('**/dashboard/suppressions');
    expect(await flashText(page)).toContain("ann.lee@example.org is on Northwind Traders's suppression list (manual).");

    const search = page.getByRole('form', { name: 'Search suppressions' });
    await search.getByLabel('Address').fill('ANN.L');
    await search.getByLabel('Account').selectOption({ label: 'Northwind Traders' });
    await search.getByRole('button', { name: 'Search' }).click();
    await page.waitForURL(/q=ANN\.L/);
    const rows = page.getByRole('table', { name: /Suppressed addresses/ }).locator('tbody tr');
    expect(await rows.count()).toBe(1);
    const cells = await rows.first().locator('td').allTextContents();
    expect(cells.slice(0, 4)).toEqual(['ann.lee@example.org', 'Northwind Traders', 'Manual', '-']);
    await expectAccessible(page, 'suppressions');
    await screenshot(page, 'suppressions');

    // The API's list for that account holds it (the same function wrote it); the other account's does not.
    expect(await listed(northwind.key)).toEqual(['ann.lee@example.org manual']);
    expect(await listed(contoso.key)).toEqual([]);

    page.once('dialog', (d) => void d.accept());
    await rows.first().getByRole('button', { name: "Remove ann.lee@example.org from Northwind Traders's list" }).click();
    await page.waitForURL(/q=ANN\.L/);
    expect(await flashText(page)).toContain('ann.lee@example.org is off Northwind Traders');
    expect(await page.getByText('No suppressed address matches.').count()).toBe(1);
    expect(await listed(northwind.key)).toEqual([]);

    // A bad address is an error flash, and nothing is listed.
    await add.getByLabel('Address').fill('not an address');
    await add.getByRole('button', { name: 'Add to the list' }).click();
    await page.waitForURL(/q=ANN\.L/);
    expect(await page.getByRole('alert').textContent()).toMatch(/^address: /);
    expect(await listed(northwind.key)).toEqual([]);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('fits a phone-width screen', async () => {
    const { account } = await rig.service.newAccount({ name: 'Phone Width Co' });
    await suppress(rig.service.deps.db, account.id, 'someone.with.a.rather.long.address@subdomain.example.org', 'manual', '', rig.service.clock.now());
    const page = await newPage(browser, 390);
    await signIn(page, rig.service.url, token, '/dashboard/suppressions');
    expect(await horizontalOverflow(page)).toBe(0);
    await expectAccessible(page, 'suppressions at phone width');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

describe('the suppressions page over HTTP', () => {
  it('lists a bounce with the email that caused it, on the account’s list and its parent’s', async () => {
    const { service } = rig;
    const parent = await newSender(service, { name: 'Bounce Parent' });
    const sub = await newSubSender(service, parent.key, 'Bounce Child');
    rig.sink.rcpt = (to) => (to.startsWith('gone') ? { code: 550, message: '5.1.1 No such user' } : 'accept');
    const sent = await service.api('POST', '/emails', { key: parent.key, account: sub.id, body: receipt(sub.from, 'gone@example.net') });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    await rig.engine.runOnce();
    expect(await listed(parent.key, sub.id)).toEqual(['gone@example.net bounce']);
    expect(await listed(parent.key)).toEqual(['gone@example.net bounce']);

    const html = await (await http.get('/dashboard/suppressions?q=gone@example.net')).text();
    const rows = html.split('<tr>').filter((r) => r.includes('<code>gone@example.net</code>'));
    expect(rows).toHaveLength(2);
    for (const row of rows) {
      expect(row).toContain('Bounce');
      expect(row).toContain('5.1.1 No such user');
      expect(row).toContain(`href="/dashboard/emails/${sent.body.id}"`);
    }
  });

  it('searches by address, exact or prefix in any case, and filters by account', async () => {
    const { service, clock } = { service: rig.service, clock: rig.service.clock };
    const a = await service.newAccount({ name: 'Search A' });
    const b = await service.newAccount({ name: 'Search B' });
    for (const addr of ['zed.one@search.test', 'zed.two@search.test', 'zedd@search.test'])
      await suppress(service.deps.db, a.account.id, addr, 'manual', '', clock.now());
    await suppress(service.deps.db, b.account.id, 'zed.one@search.test', 'manual', '', clock.now());
    const found = async (query: string) => {
      const html = await (await http.get(`/dashboard/suppressions?${query}`)).text();
      return [...html.matchAll(/<td><code>([^<]+)<\/code><\/td><td>([^<]+)<\/td>/g)].map((m) => `${m[1]} ${m[2]}`).sort();
    };
    expect(await found('q=ZED.')).toEqual(['zed.one@search.test Search A', 'zed.one@search.test Search B', 'zed.two@search.test Search A']);
    expect(await found('q=Zed.One@Search.Test')).toEqual(['zed.one@search.test Search A', 'zed.one@search.test Search B']);
    expect(await found(`q=zed&account=${a.account.id}`)).toEqual(['zed.one@search.test Search A', 'zed.two@search.test Search A', 'zedd@search.test Search A']);
    // LIKE wildcards mean nothing here.
    expect(await found('q=zed%25')).toEqual([]);
    expect(await found('q=z_d')).toEqual([]);
    // Bad parameters are error pages, never a 500.
    expect((await http.get(`/dashboard/suppressions?q=${'a'.repeat(321)}`)).status).toBe(422);
    expect((await http.get('/dashboard/suppressions?account=nope')).status).toBe(404);
  });

  it('pages the list, 50 at a time, newest first', async () => {
    const { account } = await rig.service.newAccount({ name: 'Paged' });
    for (let i = 0; i < 55; i++)
      await suppress(rig.service.deps.db, account.id, `p${String(i).padStart(2, '0')}@paged.test`, 'manual', '', rig.service.clock.now());
    const addresses = (html: string) => [...html.matchAll(/<code>(p\d\d@paged\.test)<\/code>/g)].map((m) => m[1]);
    const first = await (await http.get(`/dashboard/suppressions?account=${account.id}`)).text();
    expect(addresses(first)).toHaveLength(50);
    expect(addresses(first)[0]).toBe('p54@paged.test');
    const next = /href="(\/dashboard\/suppressions\?[^"]*after=[^"]+)">Next page/.exec(first)?.[1]?.replaceAll('&amp;', '&');
    expect(next).toBeDefined();
    const second = await (await http.get(next!)).text();
    expect(addresses(second)).toEqual(['p04@paged.test', 'p03@paged.test', 'p02@paged.test', 'p01@paged.test', 'p00@paged.test']);
    expect(second).not.toContain('Next page');
  });

  it('answers a bad address, an unknown account and an address not listed with an error flash', async () => {
    const { account, key } = await rig.service.newAccount({ name: 'Flash Co' });
    const bad = await http.follow(await http.post('/dashboard/suppressions', { account: account.id, address: 'no at sign' }));
    expect(bad).toContain('role="alert"');
    expect(bad).toMatch(/address: /);
    const nobody = await http.follow(await http.post('/dashboard/suppressions', { account: '0190a000-0000-7000-8000-000000000000', address: 'x@example.org' }));
    expect(nobody).toContain('There is no account with that id.');
    const missing = await http.follow(await http.post('/dashboard/suppressions/remove', { account: account.id, address: 'never@example.org' }));
    expect(missing).toContain('never@example.org is not on this account');
    expect(await listed(key)).toEqual([]);
    // Adding twice keeps one entry and says so.
    await http.follow(await http.post('/dashboard/suppressions', { account: account.id, address: 'twice@example.org' }));
    expect(await http.follow(await http.post('/dashboard/suppressions', { account: account.id, address: 'TWICE@example.org' }))).toContain(
      'was already on Flash Co',
    );
    expect(await listed(key)).toEqual(['twice@example.org manual']);
  });

  it('refuses an add or a remove without the CSRF token with 403, and changes nothing', async () => {
    const { account, key } = await rig.service.newAccount({ name: 'Csrf Co' });
    expect((await http.post('/dashboard/suppressions', { _csrf: '', account: account.id, address: 'csrf@example.org' })).status).toBe(403);
    expect(await listed(key)).toEqual([]);
    await suppress(rig.service.deps.db, account.id, 'kept@example.org', 'manual', '', rig.service.clock.now());
    expect((await http.post('/dashboard/suppressions/remove', { _csrf: 'forged', account: account.id, address: 'kept@example.org' })).status).toBe(403);
    expect(await rig.service.deps.db.select().from(suppressions).where(eq(suppressions.accountId, account.id))).toHaveLength(1);
  });

  it('sends a form back only to the suppressions list', async () => {
    const { account } = await rig.service.newAccount({ name: 'Back Co' });
    const res = await http.post('/dashboard/suppressions', {
      account: account.id,
      address: 'back@example.org',
      back: 'https://evil.example/dashboard/suppressions?q=x',
    });
    expect(res.headers.get('location')).toBe('/dashboard/suppressions?q=x');
  });

  it.each(['http://[', '//[', 'http://a b/'])('a back field that is no URL (%s) goes back to the plain list, never a 500', async (back) => {
    const { account } = await rig.service.newAccount({ name: 'Tampered Co' });
    for (const path of ['/dashboard/suppressions', '/dashboard/suppressions/remove']) {
      const res = await http.post(path, { account: account.id, address: 'tampered@example.org', back });
      expect(res.status).toBe(303);
      expect(res.headers.get('location')).toBe('/dashboard/suppressions');
    }
  });
});

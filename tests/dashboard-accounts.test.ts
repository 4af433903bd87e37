import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { count, eq } from 'drizzle-orm';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accounts, apiKeys } from '../db/schema/index.js';
import { createTopLevelAccount, findAccount } from '../server/core/accounts.js';
import { SCOPES } from '../server/core/scopes.js';
import { PAGE_SIZE } from '../dashboard/queries/id-pages.js';
import { expectAccessible, flashText, horizontalOverflow, newPage, pageProblems, screenshot, signIn, submit } from './helpers/browser.js';
import { type DashboardClient, UUID, openDashboard, refusalOf } from './helpers/dashboard.js';
import { type TestService, startService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * The dashboard's accounts pages (list and search, create, grant credits, set quota, suspend and lift,
 * sub-accounts, keys shown once and revoked), driven in Chromium against the real service, and checked through the
 * API they must agree with.
 */

let service: TestService;
let browser: Browser;
let token: string;
let client: DashboardClient;

beforeAll(async () => {
  service = await startService();
  ({ browser, token, client } = await openDashboard(service));
});
afterAll(async () => {
  await browser?.close();
  await service?.close();
});

async function signedInPage(path: string, width = 1280): Promise<Page> {
  const page = await newPage(browser, width);
  await signIn(page, service.url, token, path);
  return page;
}

/** A send as the API takes it; a suspended account is refused before the body is even looked at. */
const sendBody = { from: 'billing@nowhere.example', to: 'someone@example.org', subject: 'Hello', text: 'Hi' };

describe('accounts in the browser', () => {
  it('creates an account and a key: the key is shown once, works against the API, and stops when revoked', async () => {
    await service.newAccount({ name: 'Existing Co', credits: 10 });
    const page = await signedInPage('/dashboard/accounts');
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Accounts');
    await expectAccessible(page, 'accounts list');

    await page.getByLabel('Name', { exact: true }).fill('Globex Mail');
    await page.getByLabel('Credits').fill('500');
    await page.getByLabel('Daily quota').fill('2000');
    await submit(page, 'Create account');
    expect(new URL(page.url()).pathname).toMatch(new RegExp(`^/dashboard/accounts/${UUID.source}$`));
    const accountId = new URL(page.url()).pathname.split('/').pop()!;
    expect(await flashText(page, 'ok')).toContain('Account Globex Mail created.');
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Globex Mail');
    // What the page shows is what createTopLevelAccount stored, as the API's account view presents it.
    const row = (await findAccount(service.deps.db, accountId))!;
    expect(row).toMatchObject({ name: 'Globex Mail', parentId: null, creditsBalance: 500, dailyQuota: 2000 });
    expect(await page.locator('dl.facts').textContent()).toContain('0 / 2,000');
    await screenshot(page, 'accounts-created');
    await expectAccessible(page, 'new account page');

    // A key without webhooks:write: the checkboxes decide its scopes.
    await page.getByLabel("New key's name").fill('ci-deploy');
    await page.getByLabel('webhooks:write').uncheck();
    await submit(page, 'Create key');
    const flash = page.locator('.flash.ok');
    expect(await flash.textContent()).toContain('shown only this once');
    const secret = (await page.locator('#flash-secret').textContent())!;
    expect(secret).toMatch(/^ms_[A-Za-z0-9]{40}$/);
    expect(await flash.getByRole('button', { name: 'Copy' }).count()).toBe(1);
    await screenshot(page, 'accounts-key-created');
    await expectAccessible(page, 'account page with a new key');
    // The copy button puts the full key on the clipboard.
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: service.url });
    await flash.getByRole('button', { name: 'Copy' }).click();
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(secret);
    // While it says "Copied", its accessible name says so too.
    expect(await flash.getByRole('button', { name: 'Copied' }).count()).toBe(1);
    await expectAccessible(page, 'account page, key just copied');

    const keyRow = page.getByRole('row').filter({ hasText: 'ci-deploy' });
    expect(await keyRow.textContent()).toContain(secret.slice(0, 11));
    const stored = await service.deps.db.select().from(apiKeys).where(eq(apiKeys.accountId, accountId));
    expect(stored).toHaveLength(1);
    expect(stored[0]!.scopes).toEqual(SCOPES.filter((s) => s !== 'webhooks:write'));
    expect(JSON.stringify(stored)).not.toContain(secret);
    // Nor is it anywhere on disk: the flash that showed it held it in memory only (the database and its WAL, bytes).
    for (const file of ['mailstead.db', 'mailstead.db-wal']) {
      const path = join(service.dataDir, file);
      if (existsSync(path)) expect(readFileSync(path).includes(secret), file).toBe(false);
    }

    // The key works for that account.
    const me = await service.api('GET', '/account', { key: secret });
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ id: accountId, name: 'Globex Mail', credits: { balance: 500 }, sending: { dailyQuota: 2000 } });
    expect((await service.api('POST', '/webhooks', { key: secret, body: { url: 'https://hooks.example.com/x', events: ['email.sent'] } })).status).toBe(403);

    // Shown once: a reload no longer has it anywhere in the page.
    await page.reload();
    expect(await page.locator('#flash-secret').count()).toBe(0);
    expect(await page.content()).not.toContain(secret);
    expect(await page.getByRole('row').filter({ hasText: 'ci-deploy' }).count()).toBe(1);

    // Revoked: the API refuses it at once, and the list says so.
    page.once('dialog', (d) => void d.accept());
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Revoke key ci-deploy' }).click()]);
    expect(await flashText(page, 'ok')).toContain('Key revoked');
    expect(await page.getByRole('row').filter({ hasText: 'ci-deploy' }).textContent()).toContain('revoked');
    expect(await page.getByRole('button', { name: 'Revoke key ci-deploy' }).count()).toBe(0);
    expect((await service.api('GET', '/account', { key: secret })).status).toBe(401);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('grants credits, sets the quota, suspends (the API refuses sends with the reason) and lifts; opens a sub-account', async () => {
    const { account, key } = await service.newAccount({ name: 'Initech' });
    const page = await signedInPage(`/dashboard/accounts/${account.id}`);

    await page.getByLabel('Credits to grant').fill('250');
    await submit(page, 'Grant credits');
    expect(await flashText(page, 'ok')).toContain('Granted 250 credits; the balance is now 250.');
    expect((await service.api('GET', '/account', { key })).body.credits).toMatchObject({ balance: 250, state: 'ok', totalPurchased: 250 });

    await page.getByLabel('Daily quota').fill('1234');
    await submit(page, 'Set quota');
    expect(await flashText(page, 'ok')).toContain('Daily quota set to 1,234.');
    expect((await service.api('GET', '/account', { key })).body.sending).toMatchObject({ dailyQuota: 1234, effectiveQuota: 1234 });

    const reason = 'Paused by the operator after an abuse report.';
    await page.getByLabel('Reason for suspending').fill(reason);
    await submit(page, 'Suspend sending');
    expect(await flashText(page, 'ok')).toContain('Initech is suspended');
    expect(await page.locator('dl.facts').textContent()).toContain('by the operator');
    const refused = await service.api('POST', '/emails', { key, body: sendBody });
    expect(refused.status).toBe(403);
    expect(refused.body.error).toEqual({ code: 'suspended', message: reason });
    await expectAccessible(page, 'suspended account page');

    await submit(page, 'Lift suspension');
    expect(await flashText(page, 'ok')).toContain('Initech may send again.');
    expect((await service.api('GET', '/account', { key })).body.sending.suspended).toBe(false);
    const again = await service.api('POST', '/emails', { key, body: sendBody });
    expect(again.body.error?.code).not.toBe('suspended');

    await page.getByLabel("New sub-account's name").fill('Initech EU');
    await submit(page, 'Create sub-account');
    expect(await flashText(page, 'ok')).toContain('Sub-account Initech EU created.');
    const subLink = page.getByRole('region', { name: 'Sub-accounts' }).getByRole('link', { name: 'Initech EU' });
    expect(await subLink.count()).toBe(1);
    // The API sees the same sub-account under the same parent.
    const subs = await service.api('GET', '/accounts', { key });
    expect(subs.body.data.map((a: { name: string }) => a.name)).toEqual(['Initech EU']);
    await expectAccessible(page, 'account page with a sub-account');

    await Promise.all([page.waitForEvent('load'), subLink.click()]);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Initech EU');
    expect(await page.locator('main').textContent()).toContain('sub-account of Initech');
    // A sub-account pays through its parent and opens no sub-accounts of its own: neither form is offered.
    expect(await page.getByLabel('Credits to grant').count()).toBe(0);
    expect(await page.getByLabel("New sub-account's name").count()).toBe(0);
    await expectAccessible(page, 'sub-account page');

    // The list finds both by name, and one by its id.
    await page.goto(`${service.url}/dashboard/accounts`);
    await page.getByLabel('Search by name or id').fill('initech');
    await submit(page, 'Search');
    const names = await page.locator('tbody tr td:first-child > a').allTextContents();
    expect(names).toEqual(['Initech EU', 'Initech']);
    await page.getByLabel('Search by name or id').fill(account.id);
    await submit(page, 'Search');
    expect(await page.locator('tbody tr td:first-child > a').allTextContents()).toEqual(['Initech']);
    await expectAccessible(page, 'accounts search');
    await page.getByLabel('Search by name or id').fill('');
    await submit(page, 'Search');
    await screenshot(page, 'accounts-list');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('shows the account page at phone width without scrolling sideways', async () => {
    const { account } = await service.newAccount({ name: 'Phone Width Co' });
    await service.newKey(account.id, SCOPES, 'phone-key');
    const page = await signedInPage(`/dashboard/accounts/${account.id}`, 390);
    expect(await horizontalOverflow(page)).toBe(0);
    await screenshot(page, 'account-phone');
    await expectAccessible(page, 'account page at phone width');
    await page.goto(`${service.url}/dashboard/accounts`);
    expect(await horizontalOverflow(page)).toBe(0);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

describe('accounts over HTTP', () => {
  const accountCount = async () => (await one(service.deps.db.select({ n: count() }).from(accounts)))!.n;
  const keyCount = async (accountId: string) => (await one(service.deps.db.select({ n: count() }).from(apiKeys).where(eq(apiKeys.accountId, accountId))))!.n;

  it('refuses bad input with an error flash (never a 500) and changes nothing', async () => {
    const before = await accountCount();
    expect(await refusalOf(client, '/dashboard/accounts', { name: '' }, '/dashboard/accounts')).toBe('name: must be 2 to 80 characters');
    expect(await refusalOf(client, '/dashboard/accounts', { name: 'Valid Name', credits: 'abc' }, '/dashboard/accounts')).toBe(
      'credits: must be a whole number of at least 0',
    );
    expect(await refusalOf(client, '/dashboard/accounts', { name: 'Valid Name', dailyQuota: '0' }, '/dashboard/accounts')).toBe(
      'dailyQuota: must be a whole number of at least 1',
    );
    expect(await accountCount()).toBe(before);

    const { account } = await service.newAccount({ name: 'Bad Input Co' });
    const page = `/dashboard/accounts/${account.id}`;
    expect(await refusalOf(client, `${page}/quota`, { dailyQuota: '-1' }, page)).toBe('dailyQuota: must be a whole number of at least 1');
    expect(await refusalOf(client, `${page}/quota`, { dailyQuota: '1.5' }, page)).toContain('dailyQuota');
    expect(await refusalOf(client, `${page}/credits`, { amount: 'abc' }, page)).toBe('amount: must be a whole number of at least 1');
    expect(await refusalOf(client, `${page}/credits`, { amount: '0' }, page)).toContain('amount');
    expect(await refusalOf(client, `${page}/suspend`, { reason: '   ' }, page)).toBe('reason: must not be empty');
    expect(await refusalOf(client, `${page}/sub-accounts`, { name: 'x' }, page)).toBe('name: must be 2 to 80 characters');
    expect(await refusalOf(client, `${page}/keys`, { name: '', 'scope.emails:send': 'on' }, page)).toBe('name: must be 1 to 60 characters');
    expect(await refusalOf(client, `${page}/keys`, { name: 'no scopes' }, page)).toBe('scopes: must name at least one scope');
    const row = (await findAccount(service.deps.db, account.id))!;
    expect(row).toMatchObject({ dailyQuota: service.deps.config.defaultDailyQuota, creditsBalance: 0, creditsTotalPurchased: 0, suspendedBy: null });
    expect(await keyCount(account.id)).toBe(1); // the helper's own key, nothing more
    expect((await one(service.deps.db.select({ n: count() }).from(accounts).where(eq(accounts.parentId, account.id))))!.n).toBe(0);

    // A sub-account's credits are its parent's: refused, as the CLI refuses it.
    const sub = (await service.api('POST', '/accounts', { key: (await service.newAccount({ name: 'Parent Co' })).key, body: { name: 'Child Co' } })).body;
    expect(await refusalOf(client, `/dashboard/accounts/${sub.id}/credits`, { amount: '5' }, `/dashboard/accounts/${sub.id}`)).toContain('top-level account');
    // A key of another account cannot be revoked from this one.
    const other = await service.newAccount({ name: 'Other Co' });
    const otherKey = (await one(service.deps.db.select().from(apiKeys).where(eq(apiKeys.accountId, other.account.id))))!;
    expect(await refusalOf(client, `${page}/keys/${otherKey.id}/revoke`, {}, page)).toBe('No key with that id on this account.');
    expect((await service.api('GET', '/account', { key: other.key })).status).toBe(200);
  });

  it('answers the 404 page for unknown ids, on pages and on their forms', async () => {
    const unknown = '01900000-0000-7000-8000-000000000000';
    for (const path of [`/dashboard/accounts/${unknown}`, '/dashboard/accounts/not-an-id']) {
      const res = await client.get(path);
      expect(res.status).toBe(404);
      expect(await res.text()).toContain('There is no account with that id.');
    }
    for (const action of ['quota', 'credits', 'suspend', 'unsuspend', 'sub-accounts', 'keys', `keys/${unknown}/revoke`]) {
      const res = await client.post(`/dashboard/accounts/${unknown}/${action}`, { dailyQuota: '5', amount: '5', reason: 'because', name: 'x y' });
      expect(res.status, action).toBe(404);
    }
    expect((await client.get('/dashboard/accounts?after=not-a-cursor')).status).toBe(422);
  });

  it('refuses a key-creating POST without the CSRF token (403) and mints nothing', async () => {
    const { account } = await service.newAccount({ name: 'Csrf Co' });
    const before = await keyCount(account.id);
    const fields = { name: 'sneaky', 'scope.emails:send': 'on' };
    expect((await client.post(`/dashboard/accounts/${account.id}/keys`, { ...fields, _csrf: '' })).status).toBe(403);
    expect((await client.post(`/dashboard/accounts/${account.id}/keys`, fields, { origin: 'http://evil.example' })).status).toBe(403);
    expect(await keyCount(account.id)).toBe(before);
    // The same form with the token does mint: the 403 was the token, not the form.
    expect((await client.post(`/dashboard/accounts/${account.id}/keys`, fields)).status).toBe(303);
    expect(await keyCount(account.id)).toBe(before + 1);
  });

  it('pages the list newest first, and keeps the search across pages', async () => {
    const made: string[] = [];
    for (let i = 0; i < PAGE_SIZE + 5; i++) made.push((await createTopLevelAccount(service.deps, { name: `Paged ${String(i).padStart(2, '0')}` })).id);
    const namesOn = (html: string) => [...html.matchAll(/<td><a href="\/dashboard\/accounts\/[^"]+">(Paged \d+)<\/a>/g)].map((m) => m[1]!);
    const first = await (await client.get('/dashboard/accounts?q=paged')).text();
    expect(namesOn(first)).toHaveLength(PAGE_SIZE);
    expect(namesOn(first)[0]).toBe(`Paged ${PAGE_SIZE + 4}`);
    const older = /<a class="button secondary" href="([^"]+)">Older<\/a>/.exec(first)![1]!.replaceAll('&amp;', '&');
    expect(older).toContain('q=paged');
    const second = await (await client.get(older)).text();
    expect(namesOn(second)).toEqual(['Paged 04', 'Paged 03', 'Paged 02', 'Paged 01', 'Paged 00']);
    expect(second).not.toContain('>Older<');
    const newer = /<a class="button secondary" href="([^"]+)">Newer<\/a>/.exec(second)![1]!.replaceAll('&amp;', '&');
    expect(namesOn(await (await client.get(newer)).text())).toEqual(namesOn(first));
  });

  it("pages an account's keys as GET /keys does, revoked ones included", async () => {
    const { account } = await service.newAccount({ name: 'Many Keys' });
    for (let i = 1; i < 50; i++) await service.newKey(account.id, SCOPES, `key ${String(i).padStart(2, '0')}`);
    await service.deps.db.update(apiKeys).set({ revokedAt: service.clock.now() }).where(eq(apiKeys.accountId, account.id));
    for (let i = 50; i < 60; i++) await service.newKey(account.id, SCOPES, `key ${i}`);
    const keyNames = (html: string) => [...html.matchAll(/<tr><td>(key \d+|operator)<\/td>/g)].map((m) => m[1]!);
    const first = await (await client.get(`/dashboard/accounts/${account.id}`)).text();
    expect(keyNames(first)).toHaveLength(50);
    expect(keyNames(first)[0]).toBe('key 59');
    const older = /<nav class="pager" aria-label="Key pages"><a class="button secondary" href="([^"]+)">Older<\/a>/.exec(first)![1]!.replaceAll('&amp;', '&');
    const second = await (await client.get(older)).text();
    expect(keyNames(second)).toEqual(['key 09', 'key 08', 'key 07', 'key 06', 'key 05', 'key 04', 'key 03', 'key 02', 'key 01', 'operator']);
    expect(second).toContain('>Newest</a>');
    expect(second).not.toMatch(/aria-label="Key pages">.*>Older</);
  });
});

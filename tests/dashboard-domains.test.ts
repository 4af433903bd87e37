import { count, eq } from 'drizzle-orm';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { domains } from '../db/schema/index.js';
import { expectAccessible, horizontalOverflow, newPage, pageProblems, screenshot, signIn, submit } from './helpers/browser.js';
import { storeDatabaseRow } from './helpers/customer-db.js';
import { type DashboardClient, UUID, adminTokenFor, openDashboard, refusalOf } from './helpers/dashboard.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { type TestService, startService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * The dashboard's domains pages (the records to publish with copy buttons, "verify now" showing each check,
 * status badges), in Chromium against the real service reading a real DNS server on loopback (DNS_SERVERS), the
 * way tests/domains.test.ts checks the API.
 */

interface RecordBody {
  record: string;
  type: 'TXT' | 'MX';
  name: string;
  value: string;
  status: string;
}

let dns: TestDnsServer;
let service: TestService;
let browser: Browser;
let token: string;
let client: DashboardClient;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  service = await startService({ DNS_SERVERS: dns.address });
  ({ browser, token, client } = await openDashboard(service));
});
afterAll(async () => {
  await browser?.close();
  await service?.close();
  await dns?.stop();
});

/** Publishes the records as the customer would copy them into their zone (a DKIM value split into 255-octet strings). */
function publish(records: RecordBody[]): void {
  for (const r of records) {
    if (r.type === 'MX') {
      const [priority, exchange] = r.value.split(' ');
      dns.add(r.name, { type: 'MX', priority: Number(priority), exchange: exchange! });
    } else {
      dns.add(r.name, { type: 'TXT', data: r.value.match(/[^]{1,255}/g)! });
    }
  }
}

/** The "Last verification" table as { record: check value }. */
async function checksShown(page: Page): Promise<Record<string, string>> {
  const rows = page.getByRole('region', { name: 'Last verification' }).locator('tbody tr');
  const out: Record<string, string> = {};
  for (let i = 0; i < (await rows.count()); i++) {
    const row = rows.nth(i);
    out[(await row.locator('th').textContent())!] = (await row.locator('.badge').textContent())!;
  }
  return out;
}

/** The records table as { record: status }. */
async function recordStatuses(page: Page): Promise<Record<string, string>> {
  const rows = page.getByRole('region', { name: 'Records to publish' }).locator('tbody tr');
  const out: Record<string, string> = {};
  for (let i = 0; i < (await rows.count()); i++) out[(await rows.nth(i).locator('th').textContent())!] = (await rows.nth(i).locator('.badge').textContent())!;
  return out;
}

const statusBadges = (page: Page) => page.locator('main > .panel .badges .badge').allTextContents();

describe('domains in the browser', () => {
  it('connects a domain, shows its records with copy buttons, verifies it against the test DNS server, and deletes it', async () => {
    const { account, key } = await service.newAccount({ name: 'Umbrella' });
    const name = 'umbrella-mail.example.com';
    const page = await newPage(browser);
    await signIn(page, service.url, token, '/dashboard/domains');
    await expectAccessible(page, 'domains list, empty');

    await page.getByLabel('Account').selectOption(account.id);
    await page.getByLabel('Domain name', { exact: true }).fill(name.toUpperCase());
    await submit(page, 'Connect domain');
    expect(new URL(page.url()).pathname).toMatch(new RegExp(`^/dashboard/domains/${UUID.source}$`));
    const domainId = new URL(page.url()).pathname.split('/').pop()!;
    expect(await page.locator('.flash.ok').textContent()).toContain(`Connected ${name} to Umbrella.`);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe(name);

    // The records are the API's, each name and value with its copy button.
    const api = await service.api('GET', `/domains/${domainId}`, { key });
    expect(api.status).toBe(200);
    const records: RecordBody[] = api.body.records;
    const table = page.getByRole('region', { name: 'Records to publish' });
    for (const r of records) {
      const row = table.getByRole('row').filter({ has: page.getByRole('rowheader', { name: r.record, exact: true }) });
      expect(await row.locator('td').first().textContent()).toBe(r.type);
      expect(await row.locator('code').allTextContents()).toEqual([r.name, r.value]);
      expect(await row.getByRole('button', { name: `Copy ${r.record} record name` }).count()).toBe(1);
      expect(await row.getByRole('button', { name: `Copy ${r.record} record value` }).count()).toBe(1);
    }
    expect(await recordStatuses(page)).toEqual({ Ownership: 'pending', SPF: 'pending', Receiving: 'pending', Signing: 'pending' });
    expect(await statusBadges(page)).toEqual(['pending', 'not sending', 'not receiving']);
    await screenshot(page, 'domain-records');
    await expectAccessible(page, 'domain page, pending');
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: service.url });
    await table.getByRole('button', { name: 'Copy Signing record value' }).click();
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(records.find((r) => r.record === 'Signing')!.value);
    // For a moment the button says "Copied", and its accessible name with it (axe: label-content-name-mismatch).
    expect(await table.getByRole('button', { name: 'Copied', exact: true }).count()).toBe(1);
    await expectAccessible(page, 'domain page, a value just copied');

    // Nothing published: every check fails, and the page says so.
    await submit(page, 'Verify now');
    expect(await page.locator('.flash.error').textContent()).toContain(`Checked DNS for ${name}: 0 of 4 records found. The domain is pending.`);
    expect(await checksShown(page)).toEqual({ Ownership: 'missing', SPF: 'missing', Receiving: 'missing', Signing: 'missing' });
    expect(await page.getByRole('region', { name: 'Last verification' }).textContent()).toContain('Not found: DNS answered without this value.');
    expect(await page.getByRole('region', { name: 'Last verification' }).textContent()).toContain(
      'It is optional: needed only to receive mail at this domain.',
    );
    expect(await statusBadges(page)).toEqual(['pending', 'not sending', 'not receiving']);

    // Published as the page shows them: every check passes, and the badges change.
    publish(records);
    await submit(page, 'Verify now');
    expect(await page.locator('.flash.ok').textContent()).toContain(`Checked DNS for ${name}: 4 of 4 records found. The domain is verified.`);
    expect(await checksShown(page)).toEqual({ Ownership: 'proven', SPF: 'published', Receiving: 'published', Signing: 'published' });
    expect(await page.getByRole('region', { name: 'Last verification' }).textContent()).toContain('Found, with the expected value.');
    expect(await page.locator('#without-dns').count()).toBe(0);
    expect(await recordStatuses(page)).toEqual({ Ownership: 'published', SPF: 'published', Receiving: 'published', Signing: 'published' });
    expect(await statusBadges(page)).toEqual(['verified', 'sending direct', 'receiving']);
    expect((await service.api('GET', `/domains/${domainId}`, { key })).body).toMatchObject({
      status: 'verified',
      sending: true,
      receiving: true,
      direct: true,
    });
    await screenshot(page, 'domain-verified');
    await expectAccessible(page, 'domain page, verified');

    // The list across accounts shows it with its account and badges; so does the account's page.
    await page.goto(`${service.url}/dashboard/domains`);
    const listRow = page.getByRole('row').filter({ has: page.getByRole('link', { name }) });
    expect(await listRow.getByRole('link', { name: 'Umbrella', exact: true }).getAttribute('href')).toBe(`/dashboard/accounts/${account.id}`);
    expect(await listRow.locator('.badge').allTextContents()).toEqual([
      'verified',
      'sending direct',
      'receiving',
      'Ownership: published',
      'SPF: published',
      'Receiving: published',
      'Signing: published',
    ]);
    await expectAccessible(page, 'domains list');
    await screenshot(page, 'domains-list');
    await page.goto(`${service.url}/dashboard/accounts/${account.id}`);
    expect(await page.getByRole('region', { name: 'Domains' }).getByRole('link', { name }).count()).toBe(1);

    // Deleted after a confirmation: gone from the API too.
    await page.goto(`${service.url}/dashboard/domains/${domainId}`);
    page.once('dialog', (d) => void d.accept());
    await submit(page, 'Delete domain');
    expect(await page.locator('.flash.ok').textContent()).toContain(`Deleted ${name} from Umbrella.`);
    expect(new URL(page.url()).pathname).toBe('/dashboard/domains');
    expect((await service.api('GET', `/domains/${domainId}`, { key })).status).toBe(404);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('keeps a domain when the confirmation is dismissed', async () => {
    const { key } = await service.newAccount({ name: 'Careful Co' });
    const created = await service.api('POST', '/domains', { key, body: { name: 'careful.example.com' } });
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/domains/${created.body.id}`);
    let asked = '';
    page.once('dialog', (d) => {
      asked = d.message();
      void d.dismiss();
    });
    await page.getByRole('button', { name: 'Delete domain' }).click();
    expect(asked).toContain('Delete careful.example.com from Careful Co?');
    expect((await service.api('GET', `/domains/${created.body.id}`, { key })).status).toBe(200);
    await page.context().close();
  });

  it('shows the domains list and a domain page at phone width without scrolling sideways', async () => {
    const { key } = await service.newAccount({ name: 'Narrow Co' });
    const created = await service.api('POST', '/domains', { key, body: { name: 'narrow.example.com' } });
    const page = await newPage(browser, 390);
    await signIn(page, service.url, token, `/dashboard/domains/${created.body.id}`);
    expect(await horizontalOverflow(page)).toBe(0);
    await screenshot(page, 'domain-phone');
    await expectAccessible(page, 'domain page at phone width');
    await page.goto(`${service.url}/dashboard/domains`);
    expect(await horizontalOverflow(page)).toBe(0);
    await expectAccessible(page, 'domains list at phone width');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

describe('a domain verified without DNS (capture mode, a reserved name) in the browser', () => {
  let capture: TestService;
  let captureToken: string;

  beforeAll(async () => {
    capture = await startService({ DELIVERY_MODE: 'capture' });
    captureToken = await adminTokenFor(capture);
  });
  afterAll(async () => {
    await capture?.close();
  });

  it('says DNS was not looked up, marks the MX record optional with what it does, and says receiving needs a database', async () => {
    const { account, key } = await capture.newAccount({ name: 'Test Shop' });
    const created = await capture.api('POST', '/domains', { key, body: { name: 'shop.test' } });
    expect(created.status).toBe(201);
    const page = await newPage(browser);
    await signIn(page, capture.url, captureToken, `/dashboard/domains/${created.body.id}`);

    // The MX record: optional, and what it does, in its own row.
    const mxRow = page
      .getByRole('region', { name: 'Records to publish' })
      .getByRole('row')
      .filter({ has: page.getByRole('rowheader', { name: 'Receiving' }) });
    const mxNote = (await mxRow.locator('#mx-note').textContent()) ?? '';
    expect(mxNote).toContain('Optional.');
    expect(mxNote).toContain('Only needed to receive mail at shop.test');
    expect(mxNote).toContain('sends all of the domain’s mail to Mailstead: it replaces the domain’s current mail host');
    for (const other of ['Ownership', 'SPF', 'Signing']) {
      const row = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: other, exact: true }) });
      expect(await row.first().locator('#mx-note').count()).toBe(0);
    }

    // Verified without DNS: the flash and each check say so, never that DNS held the record.
    await submit(page, 'Verify now');
    expect(await page.locator('.flash.ok').textContent()).toContain(
      'Verified shop.test without asking DNS: in capture mode, names under .test count every record as found. The domain is verified.',
    );
    const checks = page.getByRole('region', { name: 'Last verification' });
    const checksText = (await checks.textContent()) ?? '';
    expect(checksText).toContain('Verified without asking DNS');
    expect(checksText).not.toContain('Found, with the expected value');
    expect(checksText).not.toContain('Found, with this domain’s token');
    expect(await checks.locator('tbody tr').count()).toBe(4);
    for (const text of await checks.locator('tbody td.result .small').allTextContents()) {
      expect(text).toBe('Not looked up: in capture mode, names under .test are verified without DNS, every record counted as found.');
    }
    expect(await page.locator('#without-dns').textContent()).toContain('names under .test are verified without asking DNS');
    expect(await statusBadges(page)).toEqual(['verified', 'sending direct', 'receiving']);

    // Receiving, but the account has no database: the page says its mail is refused, and links the Database page.
    const note = page.locator('.receiving-note');
    expect(await note.textContent()).toContain('shop.test is receiving, but its mail is refused until Test Shop has a database');
    expect(await note.getByRole('link', { name: 'Database page' }).getAttribute('href')).toBe('/dashboard/database');
    await expectAccessible(page, 'domain verified without DNS');
    await screenshot(page, 'i33-domain-records');
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await horizontalOverflow(page)).toBe(0);
    await page.setViewportSize({ width: 1280, height: 900 });

    // The list and the account page say it where the badge is, too.
    await page.goto(`${capture.url}/dashboard/domains`);
    const listRow = page.getByRole('row').filter({ has: page.getByRole('link', { name: 'shop.test' }) });
    expect(await listRow.locator('.receiving-note').textContent()).toBe('Mail refused: no database');
    expect(await listRow.locator('.receiving-note a').getAttribute('href')).toBe('/dashboard/database');
    await page.goto(`${capture.url}/dashboard/accounts/${account.id}`);
    expect(await page.getByRole('region', { name: 'Domains' }).locator('.receiving-note').textContent()).toBe('Mail refused: no database');

    // Once the account has a database, nothing more to say.
    await storeDatabaseRow(capture, account.id, 'postgresql://app:secret@db.shop.example:5432/mail');
    await page.goto(`${capture.url}/dashboard/domains/${created.body.id}`);
    expect(await page.locator('.receiving-note').count()).toBe(0);
    await page.goto(`${capture.url}/dashboard/domains`);
    expect(await page.locator('.receiving-note').count()).toBe(0);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

describe('domains over HTTP', () => {
  const domainCount = async () => (await one(service.deps.db.select({ n: count() }).from(domains)))!.n;

  it('refuses a bad connection with the API error message as a flash, creating nothing', async () => {
    const { account, key } = await service.newAccount({ name: 'Connect Co' });
    await service.api('POST', '/domains', { key, body: { name: 'taken.example.com' } });
    const before = await domainCount();
    // Back to the connect form of the account it was for (the account page's link opens it so).
    const backTo = (id: string) => `/dashboard/domains?account=${id}#connect`;
    expect(await refusalOf(client, '/dashboard/domains', { accountId: account.id, name: 'not a domain' }, backTo(account.id))).toMatch(/^name: /);
    expect(await refusalOf(client, '/dashboard/domains', { accountId: '', name: 'fine.example.com' }, '/dashboard/domains')).toBe(
      'Choose the account the domain belongs to.',
    );
    expect(await refusalOf(client, '/dashboard/domains', { accountId: 'x', name: 'fine.example.com' }, '/dashboard/domains')).toBe(
      'Choose the account the domain belongs to.',
    );
    expect(await refusalOf(client, '/dashboard/domains', { accountId: account.id, name: 'taken.example.com' }, backTo(account.id))).toBe(
      'The domain taken.example.com is already connected to this account.',
    );
    // Another account's fresh claim: refused without saying who holds it, as the API refuses it.
    const other = await service.newAccount({ name: 'Other Co' });
    expect(await refusalOf(client, '/dashboard/domains', { accountId: other.account.id, name: 'taken.example.com' }, backTo(other.account.id))).toBe(
      'The domain taken.example.com cannot be connected to this account.',
    );
    expect(await domainCount()).toBe(before);
  });

  it('answers the 404 page for unknown domains and accounts', async () => {
    const unknown = '01900000-0000-7000-8000-000000000000';
    for (const path of [`/dashboard/domains/${unknown}`, '/dashboard/domains/nope']) {
      const res = await client.get(path);
      expect(res.status).toBe(404);
      expect(await res.text()).toContain('There is no domain with that id.');
    }
    expect((await client.post(`/dashboard/domains/${unknown}/verify`)).status).toBe(404);
    expect((await client.post(`/dashboard/domains/${unknown}/delete`)).status).toBe(404);
    expect((await client.get(`/dashboard/domains?account=${unknown}`)).status).toBe(404);
    expect((await client.get('/dashboard/domains?before=zzz')).status).toBe(422);
  });

  it('refuses a POST without the CSRF token (403): nothing connected, verified or deleted', async () => {
    const { account, key } = await service.newAccount({ name: 'Csrf Domains' });
    const before = await domainCount();
    expect((await client.post('/dashboard/domains', { accountId: account.id, name: 'csrf.example.com', _csrf: '' })).status).toBe(403);
    expect(await domainCount()).toBe(before);
    const created = await service.api('POST', '/domains', { key, body: { name: 'kept.example.com' } });
    expect((await client.post(`/dashboard/domains/${created.body.id}/delete`, { _csrf: '' })).status).toBe(403);
    expect((await client.post(`/dashboard/domains/${created.body.id}/verify`, {}, { origin: 'http://evil.example' })).status).toBe(403);
    const row = (await one(service.deps.db.select().from(domains).where(eq(domains.id, created.body.id))))!;
    expect(row.checks).toBeNull();
  });

  it('filters the list by account', async () => {
    const a = await service.newAccount({ name: 'Filter A' });
    const b = await service.newAccount({ name: 'Filter B' });
    await service.api('POST', '/domains', { key: a.key, body: { name: 'a-only.example.com' } });
    await service.api('POST', '/domains', { key: b.key, body: { name: 'b-only.example.com' } });
    const html = await (await client.get(`/dashboard/domains?account=${a.account.id}`)).text();
    expect(html).toContain('a-only.example.com');
    expect(html).not.toContain('b-only.example.com');
    // The connect form has that account chosen.
    expect(html).toMatch(new RegExp(`<option value="${a.account.id}" selected="">`));
    const searched = await (await client.get('/dashboard/domains?q=b-only')).text();
    expect(searched).toContain('b-only.example.com');
    expect(searched).not.toContain('a-only.example.com');
  });
});

import { CUSTOMER_SCHEMA_VERSION } from '../db/customer/schema.js';
import { eq } from 'drizzle-orm';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PAGE_SIZE } from '../dashboard/queries/id-pages.js';
import { customerDatabases } from '../db/schema/index.js';
import { RECONNECT_GAPS_MS } from '../server/core/customer-db-status.js';
import { type CustomerDbWriter, createCustomerDbWriter } from '../server/customer-db/writer.js';
import { newId } from '../server/shared/ids.js';
import { expectAccessible, horizontalOverflow, newPage, pageProblems, screenshot, signIn } from './helpers/browser.js';
import { storeDatabaseRow } from './helpers/customer-db.js';
import { type DashboardClient, openDashboard } from './helpers/dashboard.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { type Sender, newSender, receipt } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * The Database page against a real Postgres with TLS: an account's database connected through the API, seen
 * connected; the server killed, a send's write waiting, the writer failing: the page shows the outage, the pending
 * write and the last error, and its Test button (the API's testDatabase) reports the failure; the server back, the
 * writer drains and the page shows it. Over HTTP: CSRF, 404s, paging and the state filter, and no password anywhere.
 */

let dns: TestDnsServer;
let pgServer: TestPostgres;
let service: TestService;
let browser: Browser;
let token: string;
let client: DashboardClient;
let writer: CustomerDbWriter;

beforeAll(async () => {
  [dns, pgServer] = await Promise.all([TestDnsServer.start(), startPostgres({ certificate: 'trusted' })]);
  // The trusted certificate names db.pg.test; loopback is allowed as a target for the test only.
  dns.add('db.pg.test', { type: 'A', address: '127.0.0.1' });
  service = await startService({ DNS_SERVERS: dns.address, ALLOW_PRIVATE_TARGETS: 'true' });
  writer = createCustomerDbWriter(service.deps);
  ({ browser, token, client } = await openDashboard(service));
}, 120_000);

afterAll(async () => {
  await writer?.stop();
  await browser?.close();
  await service?.close();
  await dns?.stop();
  await pgServer?.stop();
});

async function connectDatabase(s: Sender): Promise<void> {
  const res = await service.api('POST', '/database', { key: s.key, body: { url: pgServer.url('db.pg.test') } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

async function send(s: Sender): Promise<void> {
  const res = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

const rowOf = (page: Page, accountName: string) => page.locator('tbody tr', { hasText: accountName });
const cell = (page: Page, accountName: string, column: number) => rowOf(page, accountName).locator('td').nth(column);
const stored = async (accountId: string) => (await one(service.deps.db.select().from(customerDatabases).where(eq(customerDatabases.accountId, accountId))))!;

describe('the database page in the browser', () => {
  let shop: Sender;

  beforeAll(async () => {
    shop = await newSender(service, { name: 'Orbit Shop' });
    await connectDatabase(shop);
  });

  it('shows an outage: unreachable, the write waiting, the last error; Test reports the failure; back up, the writer drains', { timeout: 90_000 }, async () => {
    const page = await newPage(browser);
    await signIn(page, service.url, token, '/dashboard/database');
    expect(await cell(page, 'Orbit Shop', 2).textContent()).toBe('connected');
    expect(await cell(page, 'Orbit Shop', 3).textContent()).toBe('0');
    expect(await cell(page, 'Orbit Shop', 1).textContent()).toContain(`db.pg.test:${pgServer.port}/${pgServer.database}`);

    // The writer has a pool open on the database when it goes away.
    await send(shop);
    await writer.runOnce();
    expect((await stored(shop.account.id)).state).toBe('connected');
    await pgServer.kill();
    try {
      await send(shop);
      await writer.runOnce();
      expect((await stored(shop.account.id)).state).toBe('unreachable');

      await page.reload();
      expect(await cell(page, 'Orbit Shop', 2).textContent()).toBe('unreachable');
      expect(Number(await cell(page, 'Orbit Shop', 3).textContent())).toBeGreaterThan(0);
      expect(await cell(page, 'Orbit Shop', 3).textContent()).toBe('1');
      expect(await cell(page, 'Orbit Shop', 4).textContent()).toMatch(/connect|connection|terminat/i);
      expect(await page.locator('.card', { hasText: 'Unreachable' }).locator('.value').textContent()).toBe('1');

      await page.getByRole('button', { name: 'Test the database of Orbit Shop' }).click();
      await page.waitForURL((u) => u.pathname === '/dashboard/database');
      const alert = await page.getByRole('alert').textContent();
      expect(alert).toContain('Testing the database of Orbit Shop failed: The database could not be used:');
      expect(await cell(page, 'Orbit Shop', 2).textContent()).toBe('unreachable');
      expect(await cell(page, 'Orbit Shop', 3).textContent()).toBe('1');
      await expectAccessible(page, 'database page during an outage');
      await screenshot(page, 'database-outage');
    } finally {
      await pgServer.restart();
    }

    // Back: once the writer's gap has passed, it writes what waited.
    service.clock.advance(RECONNECT_GAPS_MS[RECONNECT_GAPS_MS.length - 1]!);
    await writer.runOnce();
    await page.reload();
    expect(await cell(page, 'Orbit Shop', 2).textContent()).toBe('connected');
    expect(await cell(page, 'Orbit Shop', 3).textContent()).toBe('0');
    expect(await cell(page, 'Orbit Shop', 4).textContent()).toBe('none');

    await page.getByRole('button', { name: 'Test the database of Orbit Shop' }).click();
    await page.waitForURL((u) => u.pathname === '/dashboard/database');
    expect(await page.getByRole('status').textContent()).toBe(
      `The database of Orbit Shop answered: connected, schema version ${CUSTOMER_SCHEMA_VERSION}, 0 writes waiting.`,
    );
    expect(await cell(page, 'Orbit Shop', 5).textContent()).toBe(`${new Date(service.clock.now()).toISOString().replace('T', ' ').slice(0, 19)} UTC`);
    await expectAccessible(page, 'database page');
    expect(pageProblems(page)).toEqual([]);
    await screenshot(page, 'database-ok');
    await page.context().close();
  });

  it('works at phone width', { timeout: 30_000 }, async () => {
    const page = await newPage(browser, 390);
    await signIn(page, service.url, token, '/dashboard/database');
    expect(await horizontalOverflow(page)).toBe(0);
    await expectAccessible(page, 'database page at phone width');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

describe('the database page over HTTP', () => {
  it('never shows the URL or its password', async () => {
    const html = await (await client.get('/dashboard/database')).text();
    expect(html).toContain('Orbit Shop');
    expect(html).not.toContain(pgServer.password);
    expect(html).not.toContain('postgresql://');
  });

  it('refuses a Test without the CSRF token (403) and tests nothing', async () => {
    const { account } = await service.newAccount({ name: 'Guarded' });
    await storeDatabaseRow(service, account.id, 'postgresql://app:secret@db.pg.test:1/app');
    const before = await stored(account.id);
    const res = await client.post(`/dashboard/database/${account.id}/test`, { _csrf: '' });
    expect(res.status).toBe(403);
    expect(await stored(account.id)).toEqual(before);
    // With it, the same request does test (and fails: nothing listens on port 1).
    const ok = await client.post(`/dashboard/database/${account.id}/test`);
    expect(ok.status).toBe(303);
    expect(await stored(account.id)).toMatchObject({ state: 'unreachable', failures: 1 });
  });

  it('answers a Test of an unknown account with the 404 page, and of an account without a database with an error flash', async () => {
    const unknown = await client.post(`/dashboard/database/${newId(service.clock.now())}/test`);
    expect(unknown.status).toBe(404);
    expect(await unknown.text()).toContain('<h1>Not found</h1>');
    const { account } = await service.newAccount({ name: 'No Database' });
    const res = await client.post(`/dashboard/database/${account.id}/test`, { state: 'unreachable' });
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe('/dashboard/database?state=unreachable');
    const page = await client.follow(res);
    expect(page).toContain('<div class="flash error" role="alert"><div>Testing the database of No Database failed: No database is set on this account.</div>');
  });

  it(`filters by state and pages ${PAGE_SIZE} databases at a time`, async () => {
    const unreachable = await (await client.get('/dashboard/database?state=unreachable')).text();
    expect(unreachable).toContain('Guarded');
    expect(unreachable).not.toContain('Orbit Shop');

    for (let i = 0; i < PAGE_SIZE + 3; i++) {
      const { account } = await service.newAccount({ name: `Paged ${i}` });
      await storeDatabaseRow(service, account.id, `postgresql://app:secret@db${i}.example.com:5432/app`);
    }
    const total = (await service.deps.db.select().from(customerDatabases)).length;
    const rows = (html: string) => [...html.matchAll(/aria-label="Test the database of /g)].length;
    const first = await (await client.get('/dashboard/database')).text();
    expect(rows(first)).toBe(PAGE_SIZE);
    const next = /href="(\/dashboard\/database\?after=[0-9a-f-]+)">Next page</.exec(first)![1]!;
    const second = await (await client.get(next)).text();
    expect(rows(second)).toBe(total - PAGE_SIZE);
    expect(second).not.toContain('>Next page<');
    expect(second).toContain('>First page<');
  });
});

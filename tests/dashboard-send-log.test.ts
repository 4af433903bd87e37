import { eq } from 'drizzle-orm';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { customerDbWrites, emails } from '../db/schema/index.js';
import { type QueuedWrite, deleteWrites, openWrite, recordRefusedWrite } from '../server/core/customer-db-outbox.js';
import { attachmentRecords } from '../server/core/attachments.js';
import { newId } from '../server/shared/ids.js';
import { createWebhookDispatcher } from '../server/webhooks/dispatcher.js';
import { expectAccessible, horizontalOverflow, launchBrowser, newPage, pageProblems, screenshot, signIn } from './helpers/browser.js';
import { storeDatabaseRow } from './helpers/customer-db.js';
import { type DashboardClient, adminTokenFor, dashboardClient } from './helpers/dashboard.js';
import { type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { HttpsReceiver } from './helpers/https-receiver.js';
import { DAY, newSender, receipt } from './helpers/sending.js';
import { startSubmission } from './helpers/submission.js';
import nodemailer from 'nodemailer';

/**
 * The send log: an email sent through the API, delivered by the real engine to a loopback SMTP sink (one
 * recipient refused with 550), found in the browser by its recipient, and followed to its timeline with the sink's
 * replies and the webhook posts its outcomes caused; then the filters, paging and bad input over HTTP.
 */

let rig: DeliveryRig;
let receiver: HttpsReceiver;
let browser: Browser;
let token: string;
/** A signed-in client, fresh at the clock's current time (the session ends after 30 idle minutes of that clock). */
const signedIn = (): Promise<DashboardClient> => dashboardClient(rig.service, token);

beforeAll(async () => {
  rig = await startDeliveryRig();
  receiver = await HttpsReceiver.start();
  receiver.respond({ status: 200 });
  token = await adminTokenFor(rig.service);
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await receiver?.close();
  await stopDeliveryRig(rig);
});

beforeEach(() => {
  resetDeliveryRig(rig);
  rig.dns.add('hooks.webhooks.test', { type: 'A', address: '127.0.0.1' });
});

/** The email ids of a send log page, in the order shown. */
const idsOn = (html: string) => [...html.matchAll(/data-email-id="([^"]+)"/g)].map((m) => m[1]!);

/** A send log row written as a send logs it, at `at`, for the filter and paging checks. */
async function logEmail(accountId: string, opts: { to: string[]; status?: 'sent' | 'failed' | 'sandboxed'; at: number; subject?: string }): Promise<string> {
  const id = newId(opts.at);
  await rig.service.deps.db.insert(emails).values({
    id,
    accountId,
    fromAddress: 'billing@shop.example.com',
    to: opts.to,
    subject: opts.subject ?? 'Your receipt',
    template: 'receipt',
    status: opts.status ?? 'sent',
    sandbox: opts.status === 'sandboxed',
    createdAt: opts.at,
  });
  return id;
}

describe('the send log in the browser', () => {
  /** The email followed in the first test: it has webhook posts, for the phone check. */
  let followed = '';

  it('finds an email sent through the API by its recipient and shows each recipient’s timeline, DSN and reply, and the webhook posts', async () => {
    const { service, engine, sink } = rig;
    const s = await newSender(service, { name: 'Timeline Shop' });
    const hook = await service.api('POST', '/webhooks', {
      key: s.key,
      body: { url: `https://hooks.webhooks.test:${receiver.port}/in`, events: ['email.delivered', 'email.bounced'] },
    });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    sink.rcpt = (address) => (address === 'gone@example.net' ? { code: 550, message: '5.1.1 No such user here' } : 'accept');
    const sent = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, ['Dana@example.net', 'gone@example.net']) });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const id = sent.body.id as string;
    followed = id;
    await engine.runOnce();
    expect(await createWebhookDispatcher(service.deps).runOnce()).toBe(2);
    const api = (await service.api('GET', `/emails/${id}`, { key: s.key })).body;
    const delivered = api.events.find((e: { status: string }) => e.status === 'delivered');
    const bounced = api.events.find((e: { status: string }) => e.status === 'bounced');
    expect(delivered.detail).toMatch(/^250 /);
    expect(bounced).toMatchObject({ dsn: '5.1.1', detail: expect.stringContaining('No such user here') });

    const page = await newPage(browser);
    await signIn(page, service.url, token, '/dashboard/emails');
    await page.getByLabel('Recipient').fill('DANA@EXAMPLE.NET');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/recipient=DANA/);
    const rows = page.locator('#send-log tbody tr');
    expect(await rows.count()).toBe(1);
    expect(await rows.first().getAttribute('data-email-id')).toBe(id);
    expect(await rows.first().textContent()).toContain('Timeline Shop');
    expect(await rows.first().textContent()).toContain('bounced');
    await expectAccessible(page, 'send log');
    await screenshot(page, 'send-log');

    await rows.first().getByRole('link', { name: api.subject }).click();
    await page.waitForURL(`${service.url}/dashboard/emails/${id}`);
    expect(await page.locator('h1').textContent()).toBe(`Email: ${api.subject}`);
    const facts = (await page.locator('dl.facts').textContent()) ?? '';
    for (const value of [id, api.from, api.template, 'sent', api.createdAt.replace('T', ' ').slice(0, 19)]) expect(facts).toContain(value);

    const dana = page.locator('section[data-recipient="Dana@example.net"]');
    const danaTimeline = (await dana.locator('.timeline').textContent()) ?? '';
    expect(danaTimeline).toContain('delivered');
    expect(danaTimeline).toContain(delivered.dsn);
    expect(danaTimeline).toContain(delivered.detail);
    const danaPost = dana.locator('table.webhook-posts tbody tr');
    expect(await danaPost.count()).toBe(1);
    const postText = (await danaPost.textContent()) ?? '';
    expect(postText).toContain('email.delivered');
    expect(postText).toContain(`https://hooks.webhooks.test:${receiver.port}/in`);
    expect(postText).toContain('HTTP 200');
    expect(postText).toContain('Delivered');
    // Each post links to its page in the webhooks section, with its attempts.
    const postLink = await danaPost.getByRole('link', { name: 'email.delivered' }).getAttribute('href');
    expect(postLink).toMatch(new RegExp(`^/dashboard/webhooks/${hook.body.id}/deliveries/[0-9a-f-]{36}$`));

    const gone = page.locator('section[data-recipient="gone@example.net"]');
    const goneItem = gone.locator('.timeline li');
    expect(await goneItem.getAttribute('class')).toBe('bad');
    expect(await goneItem.locator('code.dsn').textContent()).toBe('5.1.1');
    expect(await goneItem.locator('code.reply').textContent()).toBe(bounced.detail);
    expect(await gone.locator('table.webhook-posts tbody tr').textContent()).toContain('email.bounced');
    // This install delivers (not capture mode): no captured message to open.
    expect(await page.getByRole('link', { name: /captured message/ }).count()).toBe(0);
    expect(await page.locator('#customer-db-heading + p').textContent()).toContain('Neither this account nor its parent has a customer database');

    await expectAccessible(page, 'email page');
    await screenshot(page, 'email-timeline');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('a message submitted over SMTP: in the log like API mail, its page says how it came in, its timeline shows its delivery', async () => {
    const { service, engine } = rig;
    const s = await newSender(service, { name: 'SMTP Shop' });
    const submission = await startSubmission(service);
    try {
      const transport = nodemailer.createTransport({
        host: '127.0.0.1',
        port: submission.port,
        auth: { user: 'wordpress', pass: s.key },
        tls: { rejectUnauthorized: false },
      });
      const info = await transport.sendMail({ from: `SMTP Shop <${s.from}>`, to: 'ruth@example.net', subject: 'Order shipped', text: 'On its way.' });
      transport.close();
      const id = /queued as (\S+)/.exec(info.response)?.[1];
      expect(id, info.response).toBeDefined();
      await engine.runOnce();

      const page = await newPage(browser);
      await signIn(page, service.url, token, '/dashboard/emails');
      await page.getByLabel('Recipient').fill('ruth@example.net');
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.waitForURL(/recipient=ruth/);
      const rows = page.locator('#send-log tbody tr');
      expect(await rows.count()).toBe(1);
      expect(await rows.first().getAttribute('data-email-id')).toBe(id);
      expect(await rows.first().textContent()).toContain('delivered');
      await rows.first().getByRole('link', { name: 'Order shipped' }).click();
      await page.waitForURL(`${service.url}/dashboard/emails/${id}`);
      const facts = (await page.locator('dl.facts').textContent()) ?? '';
      expect(facts).toContain('SMTP submission');
      expect(facts).toMatch(/Template\s*none/);
      const timeline = (await page.locator('section[data-recipient="ruth@example.net"] .timeline').textContent()) ?? '';
      expect(timeline).toContain('delivered');
      await expectAccessible(page, 'email page of a submitted message');
      expect(pageProblems(page)).toEqual([]);
      await page.context().close();
    } finally {
      await submission.close();
    }
  }, 60_000);

  it('fits a phone: the send log and an email page scroll only inside their tables', async () => {
    const s = await newSender(rig.service, { name: 'A shop with a rather long name for a narrow screen' });
    const sent = await rig.service.api('POST', '/emails', {
      key: s.key,
      body: receipt(s.from, ['someone.with.a.long.address@example.net', 'second@example.net', 'third@example.net']),
    });
    await rig.engine.runOnce();
    const page = await newPage(browser, 390);
    await signIn(page, rig.service.url, token, '/dashboard/emails');
    for (const path of ['/dashboard/emails', `/dashboard/emails/${sent.body.id}`, `/dashboard/emails/${followed}`]) {
      await page.goto(`${rig.service.url}${path}`);
      expect(await horizontalOverflow(page), path).toBe(0);
      await expectAccessible(page, `${path} at phone width`);
    }
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('shows what the log keeps of an email’s attachments: name, type, size, a short SHA-256 with the whole one to copy, inline parts marked', async () => {
    const { service } = rig;
    const s = await newSender(service, { name: 'Attachment Shop' });
    // The log row is written directly with the records a send keeps (tests/own-content-delivery.test.ts sends them).
    const records = attachmentRecords([
      { filename: 'Rechnung März 2026.pdf', contentType: 'application/pdf', content: Buffer.alloc(5000, 7), contentId: null },
      { filename: 'logo.png', contentType: 'image/png', content: Buffer.alloc(812, 1), contentId: 'logo' },
    ]);
    const id = await logEmail(s.account.id, { to: ['ivy@example.net'], at: service.clock.now(), subject: 'Your invoice' });
    await service.deps.db.update(emails).set({ attachments: records, template: 'invoice', templateVersion: 3 }).where(eq(emails.id, id));
    const plain = await logEmail(s.account.id, { to: ['ivy@example.net'], at: service.clock.now(), subject: 'No files' });

    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/emails/${id}`);
    // An own template's send names the version sent, linked to the template's versions.
    const version = page.getByRole('link', { name: 'invoice, version 3' });
    expect(await version.getAttribute('href')).toBe(`/dashboard/templates/${s.account.id}/versions/invoice`);
    const rows = page.locator('#email-attachments tbody tr');
    expect(await rows.count()).toBe(2);
    const [pdf, png] = records;
    const first = rows.nth(0);
    expect(await first.locator('td').nth(0).textContent()).toBe('Rechnung März 2026.pdf');
    expect(await first.locator('td').nth(1).textContent()).toBe('application/pdf');
    expect(await first.locator('td').nth(2).textContent()).toBe('4.9 KB');
    expect(await first.locator('td').nth(2).locator('span').getAttribute('title')).toBe('5,000 bytes');
    const short = first.locator('code[title]');
    expect(await short.textContent()).toBe(`${pdf!.sha256.slice(0, 12)}…`);
    expect(await short.getAttribute('title')).toBe(pdf!.sha256);
    // The Copy button copies the whole value.
    const copy = first.getByRole('button', { name: 'Copy the SHA-256 of Rechnung März 2026.pdf' });
    expect(await page.locator(`#${await copy.getAttribute('data-copy')}`).textContent()).toBe(pdf!.sha256);
    const second = rows.nth(1);
    expect(await second.locator('td').nth(0).textContent()).toBe('logo.png inline cid:logo');
    expect(await second.locator('td').nth(2).textContent()).toBe('812 bytes');
    expect(await second.getAttribute('data-sha256')).toBe(png!.sha256);
    await expectAccessible(page, 'email page with attachments');

    await page.goto(`${service.url}/dashboard/emails/${plain}`);
    expect(await page.getByRole('heading', { name: 'Attachments' }).count()).toBe(0);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  }, 60_000);
});

describe('the send log’s filters and pages', () => {
  it('narrows by account, status, UTC day range and recipient (exact, any case)', async () => {
    const { service } = rig;
    const a = (await service.newAccount({ name: 'Filter A' })).account;
    const b = (await service.newAccount({ name: 'Filter B' })).account;
    const day = Date.parse('2026-03-10T00:00:00Z');
    service.clock.set(day + 3 * DAY + 12 * 3_600_000);
    const a1 = await logEmail(a.id, { to: ['Ann@example.net', 'bob@example.net'], at: day + 3_600_000 });
    const a2 = await logEmail(a.id, { to: ['carl@example.net'], status: 'sandboxed', at: day + DAY + 3_600_000 });
    const a3 = await logEmail(a.id, { to: ['ann@example.net'], status: 'failed', at: day + 2 * DAY + 3_600_000 });
    const b1 = await logEmail(b.id, { to: ['ann@example.net'], at: day + 2 * DAY + 7_200_000 });

    const client = await signedIn();
    const ids = async (q: string) => {
      const res = await client.get(`/dashboard/emails?${q}`);
      expect(res.status, q).toBe(200);
      return idsOn(await res.text());
    };
    expect(await ids(`account=${a.id}`)).toEqual([a3, a2, a1]);
    expect(await ids(`account=${b.id}`)).toEqual([b1]);
    expect(await ids(`account=${a.id}&status=sandboxed`)).toEqual([a2]);
    expect(await ids(`account=${a.id}&status=failed`)).toEqual([a3]);
    expect(await ids(`account=${a.id}&from=2026-03-11`)).toEqual([a3, a2]);
    expect(await ids(`account=${a.id}&to=2026-03-11`)).toEqual([a2, a1]);
    expect(await ids(`account=${a.id}&from=2026-03-11&to=2026-03-11`)).toEqual([a2]);
    expect(await ids('from=2026-03-12&to=2026-03-12&recipient=ANN%40example.net')).toEqual([b1, a3]);
    expect(await ids(`account=${a.id}&recipient=ann%40example.net`)).toEqual([a3, a1]);
    expect(await ids(`account=${a.id}&recipient=bob%40example.net`)).toEqual([a1]);
    // Exact: part of an address matches nothing.
    expect(await ids(`account=${a.id}&recipient=nn%40example.net`)).toEqual([]);
    // Empty fields are no filter; the form keeps what was asked.
    const page = await (await client.get(`/dashboard/emails?account=${a.id}&status=&from=&to=2026-03-11&recipient=`)).text();
    expect(idsOn(page)).toEqual([a2, a1]);
    expect(page).toContain('<input id="filter-to" name="to" type="date" value="2026-03-11"');
    expect(page).toMatch(new RegExp(`<option value="${a.id}" selected="">Filter A</option>`));
  });

  it('answers a malformed date, an unknown status or a bad account with a clear message, not a 500', async () => {
    const cases: [string, string][] = [
      ['from=2026-13-45', 'From date: is not a real date.'],
      ['to=10%2F03%2F2026', 'To date: must be a date such as 2026-03-10.'],
      ['status=delivered', 'Status: must be one of sent, failed, sandboxed.'],
      ['account=acme', 'Account: is not an account id.'],
      ['recipient=not-an-address', 'Recipient: must be one email address, such as alice@example.com.'],
      ['from=2026-03-12&to=2026-03-11', 'To date: must be on or after the from date.'],
    ];
    const client = await signedIn();
    for (const [q, message] of cases) {
      const res = await client.get(`/dashboard/emails?${q}`);
      expect(res.status, q).toBe(400);
      const html = await res.text();
      expect(html, q).toContain('role="alert"');
      expect(html, q).toContain(message);
      expect(idsOn(html), q).toEqual([]);
      // The form is still there to correct it.
      expect(html).toContain('<form method="get" action="/dashboard/emails"');
    }
    // A page link that is no id is the dashboard's bad-page-link page.
    const res = await client.get('/dashboard/emails?after=zzz');
    expect(res.status).toBe(422);
    expect(await res.text()).toContain('That page link is not valid; start again from the first page.');
  });

  it('pages newest first, 50 to a page, keeping the filters', async () => {
    const { service } = rig;
    const acct = (await service.newAccount({ name: 'Busy shop' })).account;
    const start = service.clock.now();
    const made: string[] = [];
    for (let i = 0; i < 62; i++) made.push(await logEmail(acct.id, { to: [`r${i}@example.net`], at: start + i * 1000 }));
    made.reverse();
    const client = await signedIn();
    const first = await (await client.get(`/dashboard/emails?account=${acct.id}`)).text();
    expect(idsOn(first)).toEqual(made.slice(0, 50));
    /** The pager's link with this label, as a path. */
    const link = (html: string, label: string) =>
      [...html.matchAll(/<a class="button secondary" href="([^"]+)">([^<]+)<\/a>/g)].find((m) => m[2] === label)?.[1]?.replaceAll('&amp;', '&');
    expect(link(first, 'Newer')).toBeUndefined();
    const older = link(first, 'Older')!;
    expect(older).toBe(`/dashboard/emails?account=${acct.id}&after=${made[49]}`);
    const second = await (await client.get(older)).text();
    expect(idsOn(second)).toEqual(made.slice(50));
    expect(link(second, 'Older')).toBeUndefined();
    const newer = link(second, 'Newer')!;
    expect(newer).toBe(`/dashboard/emails?account=${acct.id}&before=${made[50]}`);
    expect(idsOn(await (await client.get(newer)).text())).toEqual(made.slice(0, 50));
  });

  it('shows the 404 page for an unknown email id, uuid-shaped or not', async () => {
    const client = await signedIn();
    for (const id of [newId(rig.service.clock.now()), 'not-an-id', '../accounts']) {
      const res = await client.get(`/dashboard/emails/${encodeURIComponent(id)}`);
      expect(res.status, id).toBe(404);
      expect(await res.text()).toContain('There is no email with that id in the send log.');
    }
  });
});

describe('an email’s customer-database writes', () => {
  it('shows each write pending while the database is away, failed once set aside with its error, written once gone from the outbox', {
    timeout: 60_000,
  }, async () => {
    const { service, engine, sink } = rig;
    const s = await newSender(service, { name: 'Database shop' });
    // A database stored as POST /database leaves it; no writer runs in this test, so its writes wait in the outbox.
    await storeDatabaseRow(service, s.account.id, 'postgresql://mailstead:secret@db.shop.example:5432/shop');
    sink.rcpt = (address) => (address === 'nobody@example.net' ? { code: 550, message: '5.1.1 Unknown user' } : 'accept');
    const sent = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, ['kim@example.net', 'nobody@example.net']) });
    await engine.runOnce();
    let client = await signedIn();
    const states = async () => {
      const html = await (await client.get(`/dashboard/emails/${sent.body.id}`)).text();
      // The two recipients' outcomes are recorded in whichever order their replies came.
      return [...html.matchAll(/<tr data-write-state="([^"]+)"><td>([^<]+)<\/td><td class="cell-wrap">([^<]+)</g)]
        .map((m) => `${m[2]} ${m[3]}: ${m[1]}`)
        .sort();
    };
    expect(await states()).toEqual([
      'Email content all recipients: pending',
      'Outcome: bounced nobody@example.net: pending',
      'Outcome: delivered kim@example.net: pending',
    ]);

    const rows = await service.deps.db.select().from(customerDbWrites).where(eq(customerDbWrites.accountId, s.account.id));
    expect(rows).toHaveLength(3);
    const rowOf = (what: (w: QueuedWrite) => boolean) => rows.find((r) => what(openWrite(service.deps.secretKey!, r).write!))!;
    const content = rowOf((w) => w.kind === 'email');
    const kim = rowOf((w) => w.kind === 'event' && w.recipient === 'kim@example.net');
    const nobody = rowOf((w) => w.kind === 'event' && w.recipient === 'nobody@example.net');
    // The writer's own steps: the content write refused for good, kim's outcome written (gone from the outbox).
    await recordRefusedWrite(service.deps.db, content, 'value too long for type character varying(998)', service.clock.now(), { final: true });
    await deleteWrites(service.deps.db, [kim.id]);
    expect(await states()).toEqual([
      'Email content all recipients: failed',
      'Outcome: bounced nobody@example.net: pending',
      'Outcome: delivered kim@example.net: written',
    ]);
    const html = await (await client.get(`/dashboard/emails/${sent.body.id}`)).text();
    expect(html).toContain('last error: value too long for type character varying(998)');
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/emails/${sent.body.id}`);
    expect(await page.locator('#customer-db-writes tbody tr').count()).toBe(3);
    await expectAccessible(page, 'email page with customer-database writes');
    await screenshot(page, 'email-customer-db-writes');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
    // A write older than the outbox keeps them cannot be told from one written.
    service.clock.advance(8 * DAY);
    client = await signedIn();
    await deleteWrites(service.deps.db, [nobody.id]);
    expect(await states()).toContain('Outcome: bounced nobody@example.net: written-or-dropped');
  });
});

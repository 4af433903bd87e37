import { type Server, createServer } from 'node:http';
import { eq } from 'drizzle-orm';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PAGE_SIZE } from '../dashboard/queries/id-pages.js';
import { domainKeys, emails, outboundMessages } from '../db/schema/index.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { readCapture, sealCapture, storeCapture } from '../server/core/capture-store.js';
import { newId } from '../server/shared/ids.js';
import { expectAccessible, horizontalOverflow, newPage, pageProblems, screenshot, signIn } from './helpers/browser.js';
import { type DashboardClient, dashboardClient, openDashboard } from './helpers/dashboard.js';
import { FAST_TIMEOUTS } from './helpers/delivery-rig.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { type Sender, newSender } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * Captured mail in the dashboard: a service in capture mode, sends through the API captured by the real
 * delivery engine, then the list and one message in Chromium: headers, text part, the HTML part in a sandboxed frame
 * (a script in it does not run, an external image is not fetched), the DKIM verdict against the test DNS server's
 * key, the raw source and its download. Over HTTP: the frame's own policy, 404s, search, paging, and a server that
 * does not capture.
 */

let dns: TestDnsServer;
let service: TestService;
let browser: Browser;
let token: string;
let client: DashboardClient;
/** A local HTTP server standing for a tracking pixel and a script's beacon: it must never be asked anything. */
let pixel: Server;
let pixelPort: number;
const pixelRequests: string[] = [];

beforeAll(async () => {
  dns = await TestDnsServer.start();
  pixel = createServer((req, res) => {
    pixelRequests.push(req.url ?? '');
    res.writeHead(200, { 'content-type': 'image/gif' }).end(Buffer.from('R0lGODlhAQABAAAAACw=', 'base64'));
  });
  await new Promise<void>((resolve) => pixel.listen(0, '127.0.0.1', resolve));
  pixelPort = (pixel.address() as { port: number }).port;
  service = await startService({ DELIVERY_MODE: 'capture', DNS_SERVERS: dns.address });
  ({ browser, token, client } = await openDashboard(service));
});

afterAll(async () => {
  await browser?.close();
  await service?.close();
  await dns?.stop();
  await new Promise((resolve) => pixel?.close(resolve));
});

/** Publishes the sender's DKIM key in the test DNS, as the domain's owner would. */
async function publishKey(s: Sender): Promise<void> {
  const key = (await one(service.deps.db.select().from(domainKeys).where(eq(domainKeys.accountId, s.account.id))))!;
  dns.add(`${key.selector}._domainkey.${s.domain}`, { type: 'TXT', data: `v=DKIM1; h=sha256; k=rsa; p=${key.dkimPublicKey}`.match(/.{1,255}/g)! });
}

/**
 * A notification sent through the API and captured by the delivery engine. The API's templates escape every value,
 * so no send can carry markup of its own: `extraHtml` is put into the queued message before the engine builds and
 * signs it, standing for hostile HTML (what a raw-HTML send, or a bug in a template, would bring).
 */
async function sendCaptured(s: Sender, to: string | string[], subject: string, body: string, extraHtml?: string): Promise<string> {
  const res = await service.api('POST', '/emails', { key: s.key, body: { from: s.from, to, template: { name: 'notification', subject, body } } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const id = res.body.id as string;
  if (extraHtml) {
    const queued = (await one(service.deps.db.select().from(outboundMessages).where(eq(outboundMessages.id, id))))!;
    await service.deps.db
      .update(outboundMessages)
      .set({ html: queued.html.replace('</body>', `${extraHtml}</body>`) })
      .where(eq(outboundMessages.id, id));
  }
  await createDeliveryEngine(service.deps, { timeouts: FAST_TIMEOUTS }).runOnce();
  return id;
}

/**
 * What the page reported that is not the captured frame's own policy at work (its script blocked by the sandbox, its
 * image by the CSP): those refusals are the point, anything else is a fault of the page.
 */
const problemsBesidesTheFrame = (page: Page) =>
  pageProblems(page).filter((p) => !/Blocked script execution in .*sandboxed|(Refused to load|Loading) the image 'http:\/\/127\.0\.0\.1:\d+\/pixel'/.test(p));

describe('captured mail in the browser', () => {
  let shop: Sender;
  let shippedId: string;
  const hostile = () =>
    `<p id="marker">the script did not run</p>` +
    `<script>document.getElementById('marker').textContent = 'the script ran'; fetch('http://127.0.0.1:${pixelPort}/beacon');</script>` +
    `<img src="http://127.0.0.1:${pixelPort}/pixel" alt="tracking pixel" width="1" height="1">`;

  beforeAll(async () => {
    shop = await newSender(service, { name: 'Shop' });
    await publishKey(shop);
    shippedId = await sendCaptured(shop, 'ada@example.net', 'Your order has shipped', 'Parcel 42 is on its way.\nTrack it from your account.', hostile());
  });

  it('opens a captured message: headers, text part, HTML in a sandboxed frame (no script, no network), DKIM pass, raw source', {
    timeout: 60_000,
  }, async () => {
    const page = await newPage(browser);
    await signIn(page, service.url, token, '/dashboard/captured');
    expect(new URL(page.url()).pathname).toBe('/dashboard/captured');
    expect(await page.locator('main').textContent()).toContain('DELIVERY_MODE=capture');
    const row = page.locator('tbody tr', { hasText: 'ada@example.net' });
    expect(await row.count()).toBe(1);
    expect(await row.textContent()).toContain('Shop');
    expect(await row.textContent()).toContain(shop.from);
    await expectAccessible(page, 'captured list');
    await screenshot(page, 'captured-list');

    await row.getByRole('link', { name: 'Your order has shipped' }).click();
    await page.waitForURL((u) => u.pathname === `/dashboard/captured/${shippedId}`);
    expect(new URL(page.url()).searchParams.get('recipient')).toBe('ada@example.net');
    await page.waitForLoadState('load');
    expect(await page.locator('h1').textContent()).toBe('Your order has shipped');

    const header = (name: string) =>
      page
        .locator('table.message-headers tr')
        .filter({ has: page.locator('th', { hasText: new RegExp(`^${name}$`) }) })
        .locator('td');
    expect(await header('Subject').textContent()).toBe('Your order has shipped');
    expect(await header('To').textContent()).toBe('ada@example.net');
    expect(await header('From').textContent()).toBe(shop.from);
    expect(await header('DKIM-Signature').textContent()).toContain(`d=${shop.domain};`);
    expect(await page.locator('pre.text-part').textContent()).toContain('Parcel 42 is on its way.\nTrack it from your account.');
    expect(await page.locator('pre.raw-source').textContent()).toMatch(/^DKIM-Signature: v=1; a=rsa-sha256;/);
    expect(await page.locator('#dkim ~ .panel .badge').first().textContent()).toBe('pass');
    expect(await page.locator('#dkim ~ .panel .key-source').first().textContent()).toBe('(DNS)');
    expect(await page.locator('#dkim ~ .panel').textContent()).toContain(shop.domain);

    // The HTML part, rendered inside its frame: the content is there, the script did not run, nothing was fetched.
    const frame = page.frameLocator('iframe.message-frame');
    expect(await frame.locator('body').textContent()).toContain('Parcel 42 is on its way.');
    expect(await frame.locator('#marker').textContent()).toBe('the script did not run');
    expect(await page.locator('iframe.message-frame').getAttribute('sandbox')).toBe('');
    await new Promise((r) => setTimeout(r, 300));
    expect(pixelRequests).toEqual([]);

    await expectAccessible(page, 'captured message');
    expect(problemsBesidesTheFrame(page)).toEqual([]);
    await screenshot(page, 'captured-message');

    // The download link serves the same bytes as the store holds.
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Download .eml' }).click()]);
    expect(download.suggestedFilename()).toBe(`${shippedId}-ada@example.net.eml`);
    await page.context().close();
  });

  it('works at phone width without scrolling the page sideways', { timeout: 60_000 }, async () => {
    const page = await newPage(browser, 390);
    await signIn(page, service.url, token, `/dashboard/captured/${shippedId}?recipient=ada%40example.net`);
    await page.waitForLoadState('load');
    expect(await page.locator('h1').textContent()).toBe('Your order has shipped');
    expect(await page.frameLocator('iframe.message-frame').locator('body').textContent()).toContain('Parcel 42 is on its way.');
    expect(await horizontalOverflow(page)).toBe(0);
    await expectAccessible(page, 'captured message at phone width');
    // The frame is painted once it has been in view (Chromium skips out-of-view frames in a full-page capture).
    await page.locator('iframe.message-frame').scrollIntoViewIfNeeded();
    await screenshot(page, 'captured-message-phone');
    await page.goto(`${service.url}/dashboard/captured`);
    expect(await horizontalOverflow(page)).toBe(0);
    expect(problemsBesidesTheFrame(page)).toEqual([]);
    await page.context().close();
  });

  it('checks a signature against the key Mailstead holds when DNS has none, says so, and still fails a message altered after signing', {
    timeout: 60_000,
  }, async () => {
    // The sender's key is not in DNS (as shop.test's never is under `npm run dev`): the held key verifies it.
    const unpublished = await newSender(service, { name: 'Unpublished' });
    const id = await sendCaptured(unpublished, 'bob@example.net', 'No key in DNS', 'Hello from the held key.');
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/captured/${id}?recipient=bob%40example.net`);
    const verdict = page.locator('#dkim ~ .panel .dkim-verdicts li');
    expect(await verdict.locator('.badge').textContent()).toBe('pass');
    expect(await verdict.locator('.key-source').textContent()).toBe('(verified against the key Mailstead holds; DNS has none)');
    expect(await verdict.textContent()).toContain(unpublished.domain);
    await expectAccessible(page, 'captured message verified against the held key');
    await screenshot(page, 'i33-captured-dkim');

    // The same message with its (signed) subject changed after signing, stored as another email's capture: the held
    // key does not verify it, and the page says fail.
    const db = service.deps.db;
    const secret = service.deps.secretKey!;
    const raw = (await readCapture(db, secret, { accountId: unpublished.account.id, emailId: id, recipient: 'bob@example.net' }))!.toString('utf8');
    const altered = raw.replace('\r\nSubject: No key in DNS\r\n', '\r\nSubject: Pay this invoice now\r\n');
    expect(altered).not.toBe(raw);
    const at = service.clock.now();
    const alteredId = newId(at);
    await db.insert(emails).values({
      id: alteredId,
      accountId: unpublished.account.id,
      fromAddress: unpublished.from,
      to: ['bob@example.net'],
      subject: 'No key in DNS',
      template: 'notification',
      status: 'sent',
      sandbox: false,
      createdAt: at,
    });
    await storeCapture(
      db,
      sealCapture(secret, {
        emailId: alteredId,
        accountId: unpublished.account.id,
        recipient: 'bob@example.net',
        message: Buffer.from(altered),
        capturedAt: at,
      }),
    );
    await page.goto(`${service.url}/dashboard/captured/${alteredId}?recipient=bob%40example.net`);
    expect(await verdict.locator('.badge').textContent()).toBe('fail');
    expect(await verdict.textContent()).toContain('(bad signature)');
    expect(await verdict.locator('.key-source').textContent()).toBe('(verified against the key Mailstead holds; DNS has none)');
    expect(problemsBesidesTheFrame(page)).toEqual([]);
    await page.context().close();
  });

  it('says neutral (no key) when neither DNS nor Mailstead holds the signing key', async () => {
    const orphan = await newSender(service, { name: 'Orphan key' });
    const id = await sendCaptured(orphan, 'eve@example.net', 'Key gone', 'Hello.');
    // The account no longer holds a key for that selector (as after a key change): nothing to check against.
    await service.deps.db.update(domainKeys).set({ selector: 'rotated' }).where(eq(domainKeys.accountId, orphan.account.id));
    const html = await (await client.get(`/dashboard/captured/${id}?recipient=eve%40example.net`)).text();
    const badge = /<h2 id="dkim">DKIM<\/h2><div class="panel"><ul class="plain-list dkim-verdicts"><li><span class="badge[^"]*">([a-z]+)<\/span>/.exec(html);
    expect(badge?.[1]).toBe('neutral');
    expect(html).toContain('no key in DNS, and Mailstead holds none for this domain and selector');
    expect(html).toContain('(no key)');
  });

  it('lists a captured message’s attachments parsed from its bytes: name, type, readable size, inline parts marked with their id', {
    timeout: 60_000,
  }, async () => {
    const res = await service.api('POST', '/emails', {
      key: shop.key,
      body: { from: shop.from, to: 'ivy@example.net', template: { name: 'notification', subject: 'Your invoice', body: 'Attached.' } },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const id = res.body.id as string;
    // POST /emails takes `attachments` on the lead's branch: here the queued message is given them as the send stores them.
    const attachments = [
      { filename: 'Rechnung März 2026.pdf', contentType: 'application/pdf', content: Buffer.alloc(5000, 7).toString('base64'), contentId: null },
      { filename: 'logo.png', contentType: 'image/png', content: Buffer.alloc(812, 1).toString('base64'), contentId: 'logo' },
    ];
    await service.deps.db.update(outboundMessages).set({ attachments }).where(eq(outboundMessages.id, id));
    await createDeliveryEngine(service.deps, { timeouts: FAST_TIMEOUTS }).runOnce();

    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/captured/${id}?recipient=ivy%40example.net`);
    const items = page.locator('section[aria-labelledby="attachments"] li');
    expect(await items.count()).toBe(2);
    const inline = page.locator('section[aria-labelledby="attachments"] li[data-attachment="inline"]');
    expect(await inline.textContent()).toBe('logo.png (image/png, 812 bytes) inline cid:logo');
    const attached = page.locator('section[aria-labelledby="attachments"] li[data-attachment="attachment"]');
    expect(await attached.textContent()).toBe('Rechnung März 2026.pdf (application/pdf, 4.9 KB)');
    expect(await attached.locator('span[title]').getAttribute('title')).toBe('5,000 bytes');
    // Signed with its attachments: the verdict still passes.
    expect(await page.locator('#dkim ~ .panel .badge').first().textContent()).toBe('pass');
    await expectAccessible(page, 'captured message with attachments');
    expect(problemsBesidesTheFrame(page)).toEqual([]);
    await page.context().close();
  });
});

describe('captured mail over HTTP', () => {
  let shop: Sender;
  let id: string;

  beforeAll(async () => {
    shop = await newSender(service, { name: 'Headers' });
    await publishKey(shop);
    id = await sendCaptured(shop, ['cy@example.net', 'dee@example.net'], 'Invoice 7 is ready', 'See you.');
  });

  it('serves the HTML part under its own policy: sandbox, no script, no network, framed by the dashboard only (never DENY)', async () => {
    const res = await client.get(`/dashboard/captured/${id}/html?recipient=cy%40example.net`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const csp = res.headers.get('content-security-policy')!;
    expect(csp.split('; ')).toEqual(expect.arrayContaining(['sandbox', "default-src 'none'", "frame-ancestors 'self'"]));
    expect(csp).not.toContain('script-src');
    expect(csp).not.toContain("frame-ancestors 'none'");
    expect(res.headers.get('x-frame-options')).not.toBe('DENY');
    expect(await res.text()).toContain('See you.');
    // The page that frames it keeps the dashboard's own headers.
    const page = await client.get(`/dashboard/captured/${id}?recipient=cy%40example.net`);
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    expect(page.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
  });

  it('serves the raw message as a message/rfc822 attachment, the bytes the store holds', async () => {
    const res = await client.get(`/dashboard/captured/${id}/raw?recipient=DEE%40example.net`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('message/rfc822');
    expect(res.headers.get('content-disposition')).toBe(`attachment; filename="${id}-dee@example.net.eml"`);
    const stored = (await readCapture(service.deps.db, service.deps.secretKey, { accountId: shop.account.id, emailId: id, recipient: 'dee@example.net' }))!;
    expect(Buffer.from(await res.arrayBuffer()).equals(stored)).toBe(true);
  });

  it('opens the address the send log links to, and an email alone at its first captured recipient', async () => {
    const res = await client.get(`/dashboard/captured/${id}?recipient=dee%40example.net`);
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain('<h1>Invoice 7 is ready</h1>');
    // The other recipient's copy is a link away.
    expect(html).toContain(`href="/dashboard/captured/${id}?recipient=cy%40example.net"`);
    const bare = await client.get(`/dashboard/captured/${id}`);
    expect(bare.status).toBe(302);
    expect(bare.headers.get('location')).toBe(`/dashboard/captured/${id}?recipient=cy%40example.net`);
  });

  it('answers the 404 page for an unknown email, a recipient it was not captured for, or a malformed id', async () => {
    for (const path of [
      `/dashboard/captured/${newId(service.clock.now())}?recipient=cy%40example.net`,
      `/dashboard/captured/${newId(service.clock.now())}`,
      `/dashboard/captured/${id}?recipient=nobody%40example.net`,
      `/dashboard/captured/${id}?recipient=`,
      `/dashboard/captured/not-an-id?recipient=cy%40example.net`,
      `/dashboard/captured/${id}/html?recipient=nobody%40example.net`,
      `/dashboard/captured/${id}/raw`,
    ]) {
      const res = await client.get(path);
      expect(res.status, path).toBe(404);
      expect(await res.text(), path).toContain('<h1>Not found</h1>');
    }
  });

  it('searches by recipient or subject', async () => {
    const other = await sendCaptured(shop, 'finn@example.net', 'Password changed', 'It was you.');
    const byRecipient = await (await client.get('/dashboard/captured?q=FINN%40example')).text();
    expect(byRecipient).toContain(`/dashboard/captured/${other}?recipient=finn%40example.net`);
    expect(byRecipient).not.toContain('Invoice 7 is ready');
    const bySubject = await (await client.get('/dashboard/captured?q=invoice+7')).text();
    expect(bySubject).toContain('Invoice 7 is ready');
    expect(bySubject).not.toContain('finn@example.net');
    const none = await (await client.get('/dashboard/captured?q=100%25_match')).text();
    expect(none).toContain('No captured message matches “100%_match”.');
  });

  it(`pages the list newest first, ${PAGE_SIZE} to a page`, async () => {
    const db = service.deps.db;
    const at = service.clock.now();
    const emailId = newId(at);
    await db.insert(emails).values({
      id: emailId,
      accountId: shop.account.id,
      fromAddress: shop.from,
      to: [],
      subject: 'Paged',
      template: 'notification',
      status: 'sent',
      sandbox: false,
      createdAt: at,
    });
    const total = PAGE_SIZE + 5;
    await db.transaction(async () => {
      for (let i = 0; i < total; i++) {
        await storeCapture(
          db,
          sealCapture(service.deps.secretKey!, {
            emailId,
            accountId: shop.account.id,
            recipient: `pager-${String(i).padStart(3, '0')}@example.net`,
            message: Buffer.from('Subject: x\r\n\r\nx\r\n'),
            capturedAt: at,
          }),
        );
      }
    });
    const recipientsOf = (html: string) => [...html.matchAll(/<td>(pager-\d+@example\.net)<\/td>/g)].map((m) => m[1]);
    const first = await (await client.get('/dashboard/captured?q=pager-')).text();
    const newest = Array.from({ length: PAGE_SIZE }, (_, i) => `pager-${String(total - 1 - i).padStart(3, '0')}@example.net`);
    expect(recipientsOf(first)).toEqual(newest);
    const older = /href="(\/dashboard\/captured\?q=pager-&amp;before=\d+)">Older</.exec(first)![1]!.replace(/&amp;/g, '&');
    const second = await (await client.get(older)).text();
    expect(recipientsOf(second)).toEqual([
      'pager-004@example.net',
      'pager-003@example.net',
      'pager-002@example.net',
      'pager-001@example.net',
      'pager-000@example.net',
    ]);
    expect(second).not.toContain('>Older<');
    expect(second).toContain('>Newest<');
  });
});

describe('a server that does not capture', () => {
  it('says so plainly, lists what an earlier capture run kept, and opens none of it (as the API answers)', async () => {
    const direct = await startService();
    try {
      const { account } = await direct.newAccount({ name: 'Earlier' });
      const db = direct.deps.db;
      const at = direct.clock.now();
      const emailId = newId(at);
      await db.insert(emails).values({
        id: emailId,
        accountId: account.id,
        fromAddress: 'a@shop.example.com',
        to: ['old@example.net'],
        subject: 'Kept from before',
        template: 'notification',
        status: 'sent',
        sandbox: false,
        createdAt: at,
      });
      await storeCapture(
        db,
        sealCapture(direct.deps.secretKey!, {
          emailId,
          accountId: account.id,
          recipient: 'old@example.net',
          message: Buffer.from('Subject: Kept from before\r\n\r\nold\r\n'),
          capturedAt: at,
        }),
      );
      const c = await dashboardClient(direct);
      const list = await (await c.get('/dashboard/captured')).text();
      expect(list).toContain('This server delivers mail (<code>DELIVERY_MODE=direct</code>): it captures nothing');
      expect(list).toContain('1 message was captured by an earlier run in capture mode');
      expect(list).toContain('<td>old@example.net</td>');
      expect(list).not.toContain(`href="/dashboard/captured/${emailId}`);
      const opened = await c.get(`/dashboard/captured/${emailId}?recipient=old%40example.net`);
      expect(opened.status).toBe(404);
      expect(await opened.text()).toContain('Messages are kept only in capture mode');
    } finally {
      await direct.close();
    }
  });
});

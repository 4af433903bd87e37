import { type Server, createServer } from 'node:http';
import { desc } from 'drizzle-orm';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PAGE_SIZE } from '../dashboard/queries/id-pages.js';
import { operatorMessages } from '../db/schema/index.js';
import { prepareOperatorMessage, readOperatorMessage, storeOperatorMessage } from '../server/core/operator-mail.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { newId } from '../server/shared/ids.js';
import { expectAccessible, horizontalOverflow, newPage, pageProblems, screenshot, signIn } from './helpers/browser.js';
import { type DashboardClient, openDashboard } from './helpers/dashboard.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { type TestService, startService } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * Postmaster mail in the dashboard (docs/api/decisions.md section 13): a message sent over real SMTP to
 * postmaster@MAIL_HOSTNAME, written by a hostile stranger (markup in its Subject, From and text, an HTML part with a
 * script and a tracking image), is listed and opened in Chromium as text: nothing of it runs, nothing is fetched, and
 * the page is the dashboard's own (navigation, policy, sign-in). Over HTTP: escaping, the download, 404s, paging.
 */

const HOST = 'mx.mailstead.test';

let service: TestService;
let inbound: InboundServer;
let smtpPort: number;
let browser: Browser;
let token: string;
let client: DashboardClient;
/** A local HTTP server standing for a tracking pixel and a script's beacon: it must never be asked anything. */
let pixel: Server;
let pixelPort: number;
const pixelRequests: string[] = [];

beforeAll(async () => {
  pixel = createServer((req, res) => {
    pixelRequests.push(req.url ?? '');
    res.writeHead(200, { 'content-type': 'image/gif' }).end(Buffer.from('R0lGODlhAQABAAAAACw=', 'base64'));
  });
  await new Promise<void>((resolve) => pixel.listen(0, '127.0.0.1', resolve));
  pixelPort = (pixel.address() as { port: number }).port;
  service = await startService({ MAIL_HOSTNAME: HOST });
  inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
  smtpPort = await inbound.listen('127.0.0.1', 0);
  ({ browser, token, client } = await openDashboard(service));
});

afterAll(async () => {
  await browser?.close();
  await inbound?.close();
  await service?.close();
  await new Promise((resolve) => pixel?.close(resolve));
});

/** Sends `message` (LF line ends, sent as CRLF) over SMTP; expects the 250 and returns the id it was queued as. */
async function deliver(from: string, to: string, message: string): Promise<string> {
  const { client: smtp } = await RawSmtp.connect(smtpPort);
  try {
    expect((await smtp.envelope(from, [to], 'mail.isp.example'))[2]).toMatch(/^250 /);
    expect(await smtp.command('DATA')).toMatch(/^354 /);
    smtp.write(`${message.replace(/\r?\n/g, '\r\n')}\r\n.\r\n`);
    const reply = await smtp.reply();
    expect(reply).toMatch(/^250 2\.0\.0 Ok: queued as /);
    return reply.slice('250 2.0.0 Ok: queued as '.length);
  } finally {
    smtp.close();
  }
}

const HOSTILE_SUBJECT = '<script>alert("subject")</script> Spam from your server';

function hostileMessage(): string {
  return `From: "<img src=x onerror=alert(1)>" <reports@isp.example>
To: postmaster@${HOST}
Subject: ${HOSTILE_SUBJECT}
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="b1"

--b1
Content-Type: text/plain; charset=utf-8

Your server 198.51.100.7 sent spam to our traps.
<script>alert("text")</script> is just text here.

--b1
Content-Type: text/html; charset=utf-8

<p id="marker">html part</p><script>alert("html")</script><img src="http://127.0.0.1:${pixelPort}/pixel" alt="">
--b1--`;
}

describe('postmaster mail in the browser', () => {
  let id: string;

  beforeAll(async () => {
    id = await deliver('reports@isp.example', `postmaster@${HOST}`, hostileMessage());
  });

  it('lists it newest first and opens it as text: nothing in it runs or is fetched', { timeout: 60_000 }, async () => {
    const page = await newPage(browser);
    const dialogs: string[] = [];
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    await signIn(page, service.url, token);
    await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name: 'Postmaster mail' }).click();
    await page.waitForURL((u) => u.pathname === '/dashboard/postmaster');
    expect(await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name: 'Postmaster mail' }).getAttribute('aria-current')).toBe('page');
    expect(await page.locator('main').textContent()).toContain(`postmaster@${HOST}`);
    const row = page.locator('tbody tr', { hasText: HOSTILE_SUBJECT });
    expect(await row.count()).toBe(1);
    expect(await row.textContent()).toContain('"<img src=x onerror=alert(1)>" <reports@isp.example>');
    expect(await row.textContent()).toContain(`postmaster@${HOST}`);
    await expectAccessible(page, 'postmaster list');
    await screenshot(page, 'postmaster-list');

    await row.getByRole('link', { name: HOSTILE_SUBJECT }).click();
    await page.waitForURL((u) => u.pathname === `/dashboard/postmaster/${id}`);
    await page.waitForLoadState('load');
    expect(await page.locator('h1').textContent()).toBe(HOSTILE_SUBJECT);
    expect(await page.locator('pre.text-part').textContent()).toContain(
      'Your server 198.51.100.7 sent spam to our traps.\n<script>alert("text")</script> is just text here.',
    );
    expect(await page.locator('dl.facts').textContent()).toContain('reports@isp.example');
    expect(await page.locator('dl.facts').textContent()).toContain('mail.isp.example');
    const header = (name: string) =>
      page
        .locator('table.message-headers tr')
        .filter({ has: page.locator('th', { hasText: new RegExp(`^${name}$`) }) })
        .locator('td');
    expect(await header('Subject').textContent()).toBe(HOSTILE_SUBJECT);
    expect(await page.locator('pre.raw-source').textContent()).toContain(`<img src="http://127.0.0.1:${pixelPort}/pixel" alt="">`);
    // Nothing of the message became markup: no frame, no image, no script of its own.
    expect(await page.locator('main img, main iframe, main script, #marker').count()).toBe(0);
    await new Promise((r) => setTimeout(r, 300));
    expect(dialogs).toEqual([]);
    expect(pixelRequests).toEqual([]);
    expect(pageProblems(page)).toEqual([]);
    await expectAccessible(page, 'postmaster message');
    await screenshot(page, 'postmaster-message');

    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Download .eml' }).click()]);
    expect(download.suggestedFilename()).toBe(`postmaster-${id}.eml`);
    await page.context().close();
  });

  it('works at phone width without scrolling the page sideways', { timeout: 60_000 }, async () => {
    const page = await newPage(browser, 390);
    await signIn(page, service.url, token, `/dashboard/postmaster/${id}`);
    expect(await page.locator('h1').textContent()).toBe(HOSTILE_SUBJECT);
    expect(await horizontalOverflow(page)).toBe(0);
    await expectAccessible(page, 'postmaster message at phone width');
    await page.goto(`${service.url}/dashboard/postmaster`);
    expect(await horizontalOverflow(page)).toBe(0);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

describe('postmaster mail over HTTP', () => {
  let id: string;

  beforeAll(async () => {
    id = await deliver('', `abuse@${HOST}`, `From: Abuse Desk <abuse@isp.example>\nSubject: ${HOSTILE_SUBJECT}\n\n<b>complaint</b> & more`);
  });

  it('escapes what the sender wrote, under the same policy and frame refusal as every dashboard page', async () => {
    for (const path of ['/dashboard/postmaster', `/dashboard/postmaster/${id}`]) {
      const res = await client.get(path);
      expect(res.status, path).toBe(200);
      const html = await res.text();
      expect(html, path).toContain('&lt;script&gt;alert(&quot;subject&quot;)&lt;/script&gt; Spam from your server');
      expect(html, path).not.toContain('<script>alert');
      const other = await client.get('/dashboard/captured');
      expect(res.headers.get('content-security-policy'), path).toBe(other.headers.get('content-security-policy'));
      expect(res.headers.get('x-frame-options'), path).toBe('DENY');
    }
    const opened = await (await client.get(`/dashboard/postmaster/${id}`)).text();
    expect(opened).toContain('&lt;b&gt;complaint&lt;/b&gt; &amp; more');
    expect(opened).toContain(`abuse@${HOST}`);
    expect(opened).toContain('&lt;&gt; (null sender)');
  });

  it('needs a signed-in session, for the list, a message and its download', async () => {
    for (const path of ['/dashboard/postmaster', `/dashboard/postmaster/${id}`, `/dashboard/postmaster/${id}/raw`]) {
      const res = await fetch(`${service.url}${path}`, { redirect: 'manual' });
      expect(res.status, path).toBe(303);
      expect(res.headers.get('location'), path).toBe(`/dashboard/sign-in?next=${encodeURIComponent(path)}`);
    }
  });

  it('serves the kept bytes as a message/rfc822 download', async () => {
    const res = await client.get(`/dashboard/postmaster/${id}/raw`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('message/rfc822');
    expect(res.headers.get('content-disposition')).toBe(`attachment; filename="postmaster-${id}.eml"`);
    const kept = (await readOperatorMessage(service.deps.db, service.deps.secretKey, id))!.raw;
    expect(Buffer.from(await res.arrayBuffer()).equals(kept)).toBe(true);
  });

  it('answers the 404 page for an id it does not keep or that is no id', async () => {
    for (const path of [
      `/dashboard/postmaster/${newId(service.clock.now())}`,
      '/dashboard/postmaster/not-an-id',
      `/dashboard/postmaster/${newId(service.clock.now())}/raw`,
      "/dashboard/postmaster/'%3Cx%3E",
    ]) {
      const res = await client.get(path);
      expect(res.status, path).toBe(404);
      expect(await res.text(), path).toContain('<h1>Not found</h1>');
    }
  });

  it(`pages the list newest first, ${PAGE_SIZE} to a page`, async () => {
    const db = service.deps.db;
    const at = service.clock.now();
    const total = PAGE_SIZE + 5;
    await db.transaction(async () => {
      for (let i = 0; i < total; i++) {
        const raw = Buffer.from(`Subject: paged-${String(i).padStart(3, '0')}\r\n\r\nx\r\n`);
        await storeOperatorMessage(
          db,
          prepareOperatorMessage(service.deps.secretKey!, {
            id: newId(at + i),
            recipients: [`postmaster@${HOST}`],
            mailFrom: 'p@isp.example',
            remoteAddress: '192.0.2.1',
            helo: 'h',
            size: raw.length,
            raw,
            truncated: false,
            receivedAt: at + i,
          }),
        );
      }
    });
    const subjectsOf = (html: string) => [...html.matchAll(/<bdi>(paged-\d+)<\/bdi>/g)].map((m) => m[1]);
    const first = await (await client.get('/dashboard/postmaster')).text();
    expect(subjectsOf(first)).toEqual(Array.from({ length: PAGE_SIZE }, (_, i) => `paged-${String(total - 1 - i).padStart(3, '0')}`));
    const older = /href="(\/dashboard\/postmaster\?before=\d+)">Older</.exec(first)![1]!;
    const second = await (await client.get(older)).text();
    // The rest of the paged ones, then the two sent over SMTP before them.
    expect(subjectsOf(second)).toEqual(['paged-004', 'paged-003', 'paged-002', 'paged-001', 'paged-000']);
    expect(second).toContain(HOSTILE_SUBJECT.replace('<script>', '&lt;script&gt;').replace('</script>', '&lt;/script&gt;').replace(/"/g, '&quot;'));
    expect(second).not.toContain('>Older<');
    expect(second).toContain('>Newest<');
    const newest = (await one(db.select({ seq: operatorMessages.seq }).from(operatorMessages).orderBy(desc(operatorMessages.seq))))!.seq;
    expect(first).toContain(`href="/dashboard/postmaster?before=${newest - PAGE_SIZE + 1}"`);
  });
});

import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { webhookDeliveries } from '../db/schema/index.js';
import { newId } from '../server/shared/ids.js';
import { chromiumPath, launchBrowser, newPage, screenshot, signIn } from './helpers/browser.js';
import { type DashboardClient, adminTokenFor, dashboardClient } from './helpers/dashboard.js';
import { seedEndpoint } from './helpers/outcomes.js';
import { newSender, receipt, sendEmail } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * The dashboard behaving as the API and its own docs (docs/operating/dashboard.md) say, where it once did not: copy buttons over plain http at a
 * host name, the send log's account filter and IDN recipient search, a refused domain connection returning to its
 * account, the add-suppression form making the operator choose, an endpoint's latest answer, sign-in returning to a
 * searched page, and a server that cannot keep secrets refusing with a flash rather than the 500 page.
 */

let service: TestService;
let client: DashboardClient;
let token: string;

beforeAll(async () => {
  service = await startService();
  token = await adminTokenFor(service);
  client = await dashboardClient(service, token);
});
afterAll(async () => {
  await service?.close();
});

const flashOf = (html: string) => /<div class="flash (ok|error)" role="(?:alert|status)"><div>([^<]*)<\/div>/.exec(html);

describe('dashboard behaviour', () => {
  it('keeps filter, search and form buttons at their natural width, on a wide screen and a phone', async () => {
    await service.newAccount({ name: 'Button Co' });
    const forms: [string, string][] = [
      ['/dashboard/emails', 'Filter'],
      ['/dashboard/suppressions', 'Search'],
      ['/dashboard/suppressions', 'Add to the list'],
      ['/dashboard/webhooks', 'Filter'],
      ['/dashboard/captured', 'Search'],
      ['/dashboard/domains', 'Search'],
      ['/dashboard/domains', 'Connect domain'],
      ['/dashboard/accounts', 'Search'],
      ['/dashboard/database', 'Show'],
    ];
    const browser = await launchBrowser();
    const stretched: string[] = [];
    try {
      for (const width of [1280, 375]) {
        const page = await newPage(browser, width);
        await signIn(page, service.url, token);
        for (const [path, name] of forms) {
          await page.goto(`${service.url}${path}`);
          const button = page.getByRole('button', { name, exact: true });
          // The button's box against what it holds: its text's width, its padding and its border.
          const { box, natural } = await button.evaluate((el) => {
            type Box = { width: number };
            const e = el as unknown as {
              getBoundingClientRect(): Box;
              ownerDocument: { createRange(): { selectNodeContents(n: unknown): void; getBoundingClientRect(): Box } };
            };
            const range = e.ownerDocument.createRange();
            range.selectNodeContents(el);
            const style = (globalThis as unknown as { getComputedStyle(n: unknown): Record<string, string> }).getComputedStyle(el);
            const px = (k: string) => Number.parseFloat(style[k] ?? '0');
            return {
              box: e.getBoundingClientRect().width,
              natural: range.getBoundingClientRect().width + px('paddingLeft') + px('paddingRight') + px('borderLeftWidth') + px('borderRightWidth'),
            };
          });
          if (box > natural + 2) stretched.push(`${path} "${name}" at ${width} px: ${Math.round(box)} px wide for ${Math.round(natural)} px of content`);
        }
        if (width === 375) {
          await page.goto(`${service.url}/dashboard/emails`);
          await screenshot(page, 'i33-filters-375');
        } else {
          await page.goto(`${service.url}/dashboard/suppressions`);
          await screenshot(page, 'i33-filters');
        }
        await page.context().close();
      }
    } finally {
      await browser.close();
    }
    expect(stretched).toEqual([]);
  }, 60_000);

  it("copy buttons work on a plain-http address that is not localhost (docs/operating/dashboard.md's http://<host>:8080/dashboard)", async () => {
    const { account } = await service.newAccount({ name: 'Copy Co' });
    const port = new URL(service.url).port;
    // The operator's browser reaches the server by its host name over http: not a secure context, so
    // navigator.clipboard does not exist there. The script's own fallback (select the text) must still run.
    const browser = await chromium.launch({
      executablePath: chromiumPath(),
      headless: true,
      args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--host-resolver-rules=MAP mail-admin.internal 127.0.0.1'],
    });
    try {
      const page = await newPage(browser);
      await signIn(page, `http://mail-admin.internal:${port}`, token, `/dashboard/accounts/${account.id}`);
      expect(await page.evaluate('window.isSecureContext')).toBe(false);
      await page.getByRole('button', { name: 'Copy account id' }).click();
      await page.waitForTimeout(200);
      // Either copied, or selected for the operator to copy: never nothing at all.
      const label = await page.locator('button[data-copy="account-id"]').textContent();
      const selected = (await page.evaluate('String(window.getSelection())')) as string;
      expect({ label, selected }).toEqual({ label: 'Selected', selected: account.id });
    } finally {
      await browser.close();
    }
  });

  it('the send log filtered by an account that does not exist (or was deleted) is refused, like every other list, not shown as an empty "All accounts" log', async () => {
    const parent = await service.newAccount({ name: 'Parent of a deleted sub' });
    const sub = (await service.api('POST', '/accounts', { key: parent.key, body: { name: 'Deleted sub' } })).body;
    expect((await service.api('DELETE', `/accounts/${sub.id}`, { key: parent.key })).status).toBe(204);
    // The other lists' account filters answer the 404 page for it (on-behalf.ts accountFilter).
    expect((await client.get(`/dashboard/domains?account=${sub.id}`)).status).toBe(404);
    expect((await client.get(`/dashboard/webhooks?account=${sub.id}`)).status).toBe(404);
    expect((await client.get(`/dashboard/suppressions?account=${sub.id}`)).status).toBe(404);
    const res = await client.get(`/dashboard/emails?account=${sub.id}`);
    expect([400, 404]).toContain(res.status);
  });

  it('the send log finds an email by the recipient address it was sent to when the domain is an IDN (as the suppressions search does)', async () => {
    const s = await newSender(service, { credits: 10, name: 'IDN sender' });
    const sent = await sendEmail(service, s.key, { ...receipt(s.from, 'alice@bücher.example'), sandbox: true });
    expect(sent.status).toBe(200);
    const html = await (await client.get(`/dashboard/emails?recipient=${encodeURIComponent('Alice@Bücher.example')}`)).text();
    expect(html).toContain(`data-email-id="${sent.body.id}"`);
  });

  it('a refused domain connection goes back to the connect form of the account it was made for', async () => {
    const { account } = await service.newAccount({ name: 'Connect Again Co' });
    // The account page's "Connect a domain" link opens /dashboard/domains?account=<id>#connect.
    const res = await client.post('/dashboard/domains', { accountId: account.id, name: 'https://shop.example.com' });
    expect(res.status).toBe(303);
    const back = new URL(res.headers.get('location')!, service.url);
    expect(back.pathname).toBe('/dashboard/domains');
    expect(back.searchParams.get('account')).toBe(account.id);
  });

  it('the add-suppression form does not preselect an account the operator never chose', async () => {
    await service.newAccount({ name: 'Aardvark Ltd' });
    await service.newAccount({ name: 'Zebra Ltd' });
    const html = await (await client.get('/dashboard/suppressions')).text();
    const select = /<select id="add-account"[^>]*>([\s\S]*?)<\/select>/.exec(html)![1]!;
    // As the connect-domain form does: a blank first choice, so a required select makes the operator pick one.
    expect(/<option([^>]*)>/.exec(select)![1]).toContain('value=""');
  });

  it("an endpoint's Last delivered is the latest 2xx, also when an older delivery's retry succeeded after a newer one", async () => {
    const { account } = await service.newAccount({ name: 'Retry Co' });
    const endpoint = await seedEndpoint(service, account.id, ['email.delivered']);
    const t0 = service.clock.now();
    const data = (recipient: string) =>
      JSON.stringify({
        messageId: newId(t0),
        recipient,
        status: 'delivered',
        dsn: '2.0.0',
        detail: '250 OK',
        occurredAt: new Date(t0).toISOString(),
        from: 'a@b.example',
      });
    const row = (id: string, recipient: string, attempts: number, deliveredAt: number) => ({
      id,
      endpointId: endpoint,
      accountId: account.id,
      eventType: 'email.delivered' as const,
      data: data(recipient),
      attempts,
      lastStatus: 200,
      lastError: null,
      deliveredAt,
      nextAttemptAt: null,
      createdAt: t0,
    });
    // A (older) failed its first attempt, B (newer) was delivered at once, A's retry succeeded 12 hours later.
    const a = newId(t0);
    const b = newId(t0);
    await service.deps.db.insert(webhookDeliveries).values([row(a, 'a@x.example', 2, t0 + 12 * 3_600_000), row(b, 'b@x.example', 1, t0 + 1_000)]);
    const html = await (await client.get(`/dashboard/webhooks/${endpoint}`)).text();
    const shown = /<dt>Last delivered<\/dt><dd><time datetime="([^"]+)"/.exec(html)![1];
    expect(shown).toBe(new Date(t0 + 12 * 3_600_000).toISOString());
  });

  it('after a session ends, signing in again returns to a searched page whose query holds a space', async () => {
    const res = await fetch(`${service.url}/dashboard/accounts?q=Globex+Mail`, { redirect: 'manual' });
    expect(res.status).toBe(303);
    const signInPage = await (await fetch(new URL(res.headers.get('location')!, service.url))).text();
    expect(/name="next" value="([^"]*)"/.exec(signInPage)![1]).toBe('/dashboard/accounts?q=Globex+Mail');
  });
});

describe('a server that cannot store secrets (SECRET_KEY=off)', () => {
  let noSecrets: TestService;
  let noSecretsClient: DashboardClient;
  beforeAll(async () => {
    noSecrets = await startService({ SECRET_KEY: 'off' });
    noSecretsClient = await dashboardClient(noSecrets);
  });
  afterAll(async () => {
    await noSecrets?.close();
  });

  it('connecting a domain answers an error flash saying why (the API answers 503 not_configured), not the 500 page', async () => {
    const { account, key } = await noSecrets.newAccount({ name: 'No Secrets Co' });
    const api = await noSecrets.api('POST', '/domains', { key, body: { name: 'nosecrets.example.com' } });
    expect(api.status).toBe(503);
    expect(api.body.error.code).toBe('not_configured');
    const res = await noSecretsClient.post('/dashboard/domains', { accountId: account.id, name: 'nosecrets.example.com' });
    expect(res.status).toBe(303);
    const flash = flashOf(await noSecretsClient.follow(res));
    expect(flash?.[1]).toBe('error');
    expect(flash?.[2]).toContain('SECRET_KEY');
  });
});

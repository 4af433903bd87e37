import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { suspendByOperator } from '../server/core/accounts.js';
import { expectAccessible, flashText, horizontalOverflow, newPage, pageProblems, screenshot, signIn, submit } from './helpers/browser.js';
import { type DashboardClient, UUID, dashboardClient, openDashboard, refusalOf } from './helpers/dashboard.js';
import { type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { connectDomain, newSender, uniqueDomain } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * The domain page's "Send a test email": the notification template from the domain through POST /emails's own path,
 * delivered (direct mode, a real SMTP sink on loopback), captured (capture mode, the real delivery engine), or run as a
 * sandbox send while the domain cannot send; each refusal is the one POST /emails gives, word for word.
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

const SIM = 'simulator.mailstead.test';

/** The refusal flash of a test send, with the API's answer to the same request. */
function refusalText(sandbox: boolean, domain: string, api: { status: number; body: { error: { code: string; message: string } } }): string {
  const as = sandbox ? `The sandbox send (${domain} cannot send yet)` : 'The test email';
  return `${as} was refused as POST /emails refuses it: ${api.status} ${api.body.error.code}: ${api.body.error.message}`;
}

const htmlText = (html: string) => html.replaceAll('&#39;', "'").replaceAll('&quot;', '"').replaceAll('&amp;', '&');

describe('a domain that can send, DELIVERY_MODE=direct', () => {
  it('sends the test email through POST /emails, says so, and links the email, whose delivery the send log shows', async () => {
    const { service } = rig;
    const s = await newSender(service, { name: 'Test Mail Co' });
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/domains/${s.domainId}`);
    const section = page.getByRole('region', { name: 'Send a test email' });
    expect(await section.textContent()).toContain('will be delivered');
    expect(await section.textContent()).toContain(`sent from test@${s.domain} through the checks of POST /emails and delivered`);
    // The mailbox simulator by default: accepted without leaving this server.
    expect(await section.getByLabel('To').inputValue()).toBe(`delivered@${SIM}`);
    await expectAccessible(page, 'domain page with the test email form');
    await screenshot(page, 'i33-domain-test-email');
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await horizontalOverflow(page)).toBe(0);
    await page.setViewportSize({ width: 1280, height: 900 });

    await section.getByLabel('To').fill('dana@example.net');
    await submit(page, 'Send test email');
    expect(new URL(page.url()).pathname).toBe(`/dashboard/domains/${s.domainId}`);
    expect(await flashText(page, 'ok')).toContain('Sent: the test email to dana@example.net is queued; the send log shows each delivery attempt.');
    const link = page.locator('.flash').getByRole('link', { name: 'Open the email in the send log' });
    const id = UUID.exec((await link.getAttribute('href'))!)![0];
    // The API's Email: the send the test made, from test@ the domain, the template's subject.
    const email = await service.api('GET', `/emails/${id}`, { key: s.key });
    expect(email.body).toMatchObject({
      from: `test@${s.domain}`,
      to: ['dana@example.net'],
      subject: `Test email from ${s.domain}`,
      template: 'notification',
      status: 'sent',
      sandbox: false,
    });
    await screenshot(page, 'i33-domain-test-email-sent');

    // Delivered to the recipient's MX (the sink), signed by the domain.
    await rig.engine.runOnce();
    expect(rig.sink.received).toHaveLength(1);
    expect(rig.sink.received[0]!.raw.toString()).toContain(`Subject: Test email from ${s.domain}`);
    expect(rig.sink.received[0]!.raw.toString()).toMatch(new RegExp(`DKIM-Signature:[^]*d=${s.domain.replaceAll('.', '\\.')}`));
    await Promise.all([page.waitForEvent('load'), link.click()]);
    expect(new URL(page.url()).pathname).toBe(`/dashboard/emails/${id}`);
    expect(await page.locator('main').textContent()).toContain('dana@example.net');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('refuses what POST /emails refuses, with its status, code and message, and sends nothing', async () => {
    const { service } = rig;
    const s = await newSender(service, { name: 'Refused Test Mail' });
    const back = `/dashboard/domains/${s.domainId}#test-email`;
    const from = `Mailstead test <test@${s.domain}>`;
    const template = { name: 'notification', subject: `Test email from ${s.domain}`, body: 'x' };
    for (const to of ['not an address', `suppressed@${SIM}`]) {
      const api = await service.api('POST', '/emails', { key: s.key, body: { from, to, template } });
      expect(api.status).toBe(422);
      expect(htmlText(await refusalOf(http, `/dashboard/domains/${s.domainId}/test-email`, { to }, back))).toBe(refusalText(false, s.domain, api));
    }
    // Check 3 before anything else: a suspended account sends nothing, from the dashboard either.
    await suspendByOperator(service.deps, s.account.id, 'Paused while we look at a complaint.');
    const suspended = await service.api('POST', '/emails', { key: s.key, body: { from, to: `delivered@${SIM}`, template } });
    expect([suspended.status, suspended.body.error.code]).toEqual([403, 'suspended']);
    expect(htmlText(await refusalOf(http, `/dashboard/domains/${s.domainId}/test-email`, { to: `delivered@${SIM}` }, back))).toBe(
      refusalText(false, s.domain, suspended),
    );
    expect((await service.api('GET', '/emails', { key: s.key })).body.data).toEqual([]);
    // Without the CSRF token: refused before anything is sent.
    expect((await http.post(`/dashboard/domains/${s.domainId}/test-email`, { to: `delivered@${SIM}`, _csrf: '' })).status).toBe(403);
    expect((await http.post('/dashboard/domains/0190a000-0000-7000-8000-000000000000/test-email', { to: `delivered@${SIM}` })).status).toBe(404);
  });
});

describe('a domain that cannot send yet', () => {
  it('runs the test as a sandbox send, whose from-domain check answers what is missing, as POST /emails does', async () => {
    const { service } = rig;
    const { key } = await service.newAccount({ name: 'Not Yet Verified' });
    const domain = uniqueDomain('pending');
    const domainId = await connectDomain(service, key, domain, { state: 'pending' });
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/domains/${domainId}`);
    const section = page.getByRole('region', { name: 'Send a test email' });
    expect(await section.textContent()).toContain('will be a sandbox send');
    expect(await section.textContent()).toContain(`${domain} cannot send yet, so the test is a sandbox send`);
    await submit(page, 'Send test email');
    const api = await service.api('POST', '/emails', {
      key,
      body: { from: `Mailstead test <test@${domain}>`, to: `delivered@${SIM}`, template: { name: 'notification', subject: 's', body: 'b' }, sandbox: true },
    });
    expect([api.status, api.body.error.code]).toEqual([403, 'domain_not_ready']);
    expect(await flashText(page, 'error')).toBe(refusalText(true, domain, api));
    await expectAccessible(page, 'sandbox refusal');
    await screenshot(page, 'i33-domain-test-email-sandbox');
    expect((await service.api('GET', '/emails', { key })).body.data).toEqual([]);
    expect(rig.sink.received).toEqual([]);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

describe('DELIVERY_MODE=capture', () => {
  let service: TestService;
  let capture: Browser;
  let captureToken: string;
  beforeAll(async () => {
    service = await startService({ DELIVERY_MODE: 'capture', DNS_SERVERS: rig.dns.address });
    ({ browser: capture, token: captureToken } = await openDashboard(service));
  });
  afterAll(async () => {
    await capture?.close();
    await service?.close();
  });

  it('captures the test email, says so, and links the captured message', async () => {
    const { key } = await service.newAccount({ name: 'Capture Shop' });
    const domain = `shop-${process.pid}.test`;
    // A reserved name verifies without DNS in capture mode.
    const created = await service.api('POST', '/domains', { key, body: { name: domain } });
    expect((await service.api('POST', `/domains/${created.body.id}/verify`, { key })).body).toMatchObject({ sending: true });
    const page = await newPage(capture);
    await signIn(page, service.url, captureToken, `/dashboard/domains/${created.body.id}`);
    const section = page.getByRole('region', { name: 'Send a test email' });
    expect(await section.textContent()).toContain('will be captured, not delivered');
    expect(await section.getByLabel('To').inputValue()).toBe('you@example.com');
    await submit(page, 'Send test email');
    expect(await flashText(page, 'ok')).toContain(
      'Captured: the test email to you@example.com was signed and kept on this server (capture mode), not delivered.',
    );
    await screenshot(page, 'i33-domain-test-email-captured');
    // The engine beside the dashboard captures it (here run by hand).
    await createDeliveryEngine(service.deps).runOnce();
    await Promise.all([page.waitForEvent('load'), page.locator('.flash').getByRole('link', { name: 'Open the captured message' }).click()]);
    expect(new URL(page.url()).pathname).toMatch(/^\/dashboard\/captured\//);
    expect(await page.locator('main').textContent()).toContain(`Test email from ${domain}`);
    await screenshot(page, 'i33-domain-test-email-captured-message');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
    // The simulator is answered by the simulator even in capture mode: the flash links the email only.
    const client = await dashboardClient(service, captureToken);
    const res = await client.post(`/dashboard/domains/${created.body.id}/test-email`, { to: `delivered@${SIM}` });
    const html = await client.follow(res);
    expect(html).toContain('Open the email in the send log');
    expect(html).not.toContain('Open the captured message');
  });
});

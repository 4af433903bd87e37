import { createHmac, timingSafeEqual } from 'node:crypto';
import { asc, eq } from 'drizzle-orm';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { webhookDeliveries } from '../db/schema/index.js';
import { MAX_PENDING_PER_ENDPOINT } from '../server/core/webhook-replay.js';
import { newId } from '../server/shared/ids.js';
import { createWebhookDispatcher } from '../server/webhooks/dispatcher.js';
import { expectAccessible, flashText, horizontalOverflow, newPage, pageProblems, screenshot, signIn } from './helpers/browser.js';
import { type DashboardClient, UUID, dashboardClient, openDashboard, refusalOf } from './helpers/dashboard.js';
import { type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { HttpsReceiver, type ReceivedRequest } from './helpers/https-receiver.js';
import { onQueueMarked } from '../db/queue-wake.js';
import { newSender, receipt, type Sender } from './helpers/sending.js';
import { startService } from './helpers/service.js';

/**
 * The dashboard's webhook pages against the real service, a real SMTP sink and DNS server (the outcomes
 * come from real deliveries) and a real HTTPS receiver: a delivery's failed attempt, its payload, its replay, a test
 * ping, and an endpoint the service switched off, re-enabled by the operator.
 */

let rig: DeliveryRig;
let receiver: HttpsReceiver;
let browser: Browser;
let token: string;
let http: DashboardClient;

beforeAll(async () => {
  rig = await startDeliveryRig();
  receiver = await HttpsReceiver.start();
  ({ browser, token, client: http } = await openDashboard(rig.service));
});
afterAll(async () => {
  await browser?.close();
  await receiver?.close();
  await stopDeliveryRig(rig);
});
beforeEach(async () => {
  resetDeliveryRig(rig);
  rig.dns.add('hooks.webhooks.test', { type: 'A', address: '127.0.0.1' });
  // What an earlier test left due goes out now (and is taken), so each test counts only its own posts.
  receiver.reset();
  await createWebhookDispatcher(rig.service.deps).runOnce();
  receiver.reset();
});

/** The spec's X-Service-Signature, checked as a receiver would: HMAC-SHA256 of `<t>.<raw body>` with the secret. */
function verifyServiceSignature(req: ReceivedRequest, secret: string): boolean {
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(req.headers['x-service-signature'] ?? ''));
  if (!m) return false;
  const expected = createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${m[1]}.`).update(req.body).digest();
  return timingSafeEqual(expected, Buffer.from(m[2]!, 'hex'));
}

const bodyOf = (req: ReceivedRequest) =>
  JSON.parse(req.body.toString('utf8')) as { id: string; type: string; createdAt: string; data: Record<string, unknown> };

async function newEndpoint(key: string, path: string, events = ['email.delivered']) {
  const res = await rig.service.api('POST', '/webhooks', { key, body: { url: `https://hooks.webhooks.test:${receiver.port}${path}`, events } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body as { id: string; url: string; secret: string };
}

/** Sends through the API and lets the delivery engine deliver it to the sink: one outcome per recipient. */
async function sendAndDeliver(s: Sender, to: string | string[]): Promise<string> {
  const sent = await rig.service.api('POST', '/emails', { key: s.key, body: receipt(s.from, to) });
  expect(sent.status, JSON.stringify(sent.body)).toBe(200);
  await rig.engine.runOnce();
  return sent.body.id as string;
}

const dispatch = () => createWebhookDispatcher(rig.service.deps).runOnce();

const deliveriesOf = async (endpointId: string) =>
  await rig.service.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, endpointId)).orderBy(asc(webhookDeliveries.id));

/** The first (newest) delivery row of an endpoint page. */
const firstDeliveryRow = (page: Page) =>
  page
    .getByRole('table', { name: /Deliveries/ })
    .locator('tbody tr')
    .first();

describe('the webhook pages in the browser', () => {
  it('see a webhook delivery and replay it; send a test ping', async () => {
    const { service } = rig;
    const s = await newSender(service, { name: 'Harbor Supplies' });
    const endpoint = await newEndpoint(s.key, '/harbor');
    const emailId = await sendAndDeliver(s, 'dana@example.net');
    // The receiver fails the first post, then takes everything.
    receiver.enqueue({ status: 503 });
    expect(await dispatch()).toBe(1);
    const failedPost = receiver.requests[0]!;
    const originalId = String(failedPost.headers['x-service-delivery']);

    const page = await newPage(browser);
    await signIn(page, service.url, token, '/dashboard/webhooks');
    const row = page.locator('tr', { hasText: endpoint.url });
    expect(await row.textContent()).toContain('Harbor Supplies');
    expect(await row.textContent()).toContain('Failing');
    expect(await row.textContent()).toContain('HTTP 503');
    await expectAccessible(page, 'webhook list');

    await row.getByRole('link', { name: endpoint.url }).click();
    await page.waitForURL(`**/dashboard/webhooks/${endpoint.id}`);
    expect(await page.locator('main').textContent()).not.toContain(endpoint.secret);
    const first = firstDeliveryRow(page);
    const cells = await first.locator('td').allTextContents();
    expect(cells).toEqual([
      expect.any(String),
      'email.delivered',
      emailId,
      'dana@example.net',
      '1',
      '503',
      'HTTP 503',
      expect.stringContaining('UTC'),
      'Retrying',
    ]);
    expect(await first.getByRole('link', { name: emailId }).getAttribute('href')).toBe(`/dashboard/emails/${emailId}`);
    await expectAccessible(page, 'endpoint page');

    await first.getByRole('link', { name: `delivery ${originalId}` }).click();
    await page.waitForURL(`**/deliveries/${originalId}`);
    // The payload is the body that was posted, byte for byte once parsed.
    expect(JSON.parse((await page.getByLabel('Payload JSON').textContent()) ?? '')).toEqual(bodyOf(failedPost));
    const attempts = await page.getByRole('region', { name: 'Attempts' }).textContent();
    expect(attempts).toMatch(/Attempt 1 of 6: failed, HTTP 503 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
    expect(attempts).toContain('Next attempt');
    await expectAccessible(page, 'delivery detail');
    await screenshot(page, 'webhook-delivery');

    await page.getByRole('button', { name: 'Replay this event as a new delivery' }).click();
    await page.waitForURL(`**/dashboard/webhooks/${endpoint.id}`);
    expect(await flashText(page)).toContain('Replay queued a new delivery of this email.delivered event');
    expect(await dispatch()).toBe(1); // the replay, due now; the original's retry is a minute away
    const replayed = receiver.requests[1]!;
    expect(verifyServiceSignature(replayed, endpoint.secret)).toBe(true);
    const replayedId = String(replayed.headers['x-service-delivery']);
    expect(replayedId).not.toBe(originalId);
    expect(bodyOf(replayed)).toEqual({ ...bodyOf(failedPost), id: replayedId, createdAt: expect.any(String) });

    await page.reload();
    const newest = await firstDeliveryRow(page).locator('td').allTextContents();
    expect(newest).toEqual([expect.any(String), 'email.delivered', emailId, 'dana@example.net', '1', '200', '-', '-', 'Delivered']);
    expect(
      await firstDeliveryRow(page)
        .getByRole('link', { name: `delivery ${replayedId}` })
        .count(),
    ).toBe(1);
    await screenshot(page, 'webhook-replayed');

    await page.getByRole('button', { name: 'Send test ping' }).click();
    await page.waitForURL(`**/dashboard/webhooks/${endpoint.id}`);
    expect(await flashText(page)).toContain('The test ping was delivered: the receiver answered 200.');
    const ping = receiver.requests[2]!;
    expect(verifyServiceSignature(ping, endpoint.secret)).toBe(true);
    expect(bodyOf(ping)).toMatchObject({ type: 'ping', data: { endpointId: endpoint.id } });
    expect((await firstDeliveryRow(page).locator('td').allTextContents())[1]).toBe('ping');
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('shows an endpoint the service switched off, and why; Re-enable switches it on and its deliveries go out', async () => {
    const { service } = rig;
    const s = await newSender(service, { name: 'Flaky Receiver Ltd' });
    const endpoint = await newEndpoint(s.key, '/flaky');
    receiver.respond({ status: 500 });
    // Ten outcomes, ten failed posts: the tenth consecutive failure switches the endpoint off.
    await sendAndDeliver(
      s,
      Array.from({ length: 10 }, (_, i) => `r${i}@example.net`),
    );
    expect(await dispatch()).toBe(10);
    expect((await service.api('GET', `/webhooks/${endpoint.id}`, { key: s.key })).body).toMatchObject({ active: false, failureCount: 10 });

    const page = await newPage(browser);
    await signIn(page, service.url, token, '/dashboard/webhooks?status=disabled');
    const rows = page.getByRole('table', { name: /Webhook endpoints/ }).locator('tbody tr');
    expect(await rows.count()).toBe(1);
    expect(await rows.first().textContent()).toContain('Disabled');
    await rows.first().getByRole('link', { name: endpoint.url }).click();
    await page.waitForURL(`**/dashboard/webhooks/${endpoint.id}`);
    const facts = await page.getByRole('region', { name: 'Endpoint' }).textContent();
    expect(facts).toContain('Switched off by the service after 10 consecutive failed attempts');
    expect(facts).toContain('The last failure: HTTP 500.');
    expect(await firstDeliveryRow(page).locator('td').last().textContent()).toBe('Waiting');
    await screenshot(page, 'webhook-endpoint-disabled');

    receiver.respond({ status: 200 });
    let pokes = 0;
    const unsubscribe = onQueueMarked(service.deps.db, 'webhooks', () => pokes++);
    page.once('dialog', (d) => void d.accept());
    await page.getByRole('button', { name: 'Re-enable' }).click();
    await page.waitForURL(`**/dashboard/webhooks/${endpoint.id}`).finally(unsubscribe);
    // The dispatcher beside the dashboard is told to look now, as after a successful ping.
    expect(pokes).toBe(1);
    expect(await flashText(page)).toContain('switched back on');
    expect(await page.getByRole('region', { name: 'Endpoint' }).textContent()).toContain('Enabled');
    expect(await page.getByRole('button', { name: 'Re-enable' }).count()).toBe(0);
    expect((await service.api('GET', `/webhooks/${endpoint.id}`, { key: s.key })).body).toMatchObject({ active: true, failureCount: 0, disabledAt: null });
    // Its waiting deliveries are due at once, not at their retry times.
    expect(await dispatch()).toBe(10);
    expect((await deliveriesOf(endpoint.id)).every((d) => d.deliveredAt !== null)).toBe(true);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('fits a phone-width screen on every webhook page', async () => {
    const s = await newSender(rig.service, { name: 'Phone Co' });
    const endpoint = await newEndpoint(s.key, '/phone');
    await sendAndDeliver(s, 'pat@example.net');
    expect(await dispatch()).toBe(1);
    const [delivery] = await deliveriesOf(endpoint.id);
    const page = await newPage(browser, 390);
    await signIn(page, rig.service.url, token, '/dashboard/webhooks');
    for (const path of ['/dashboard/webhooks', `/dashboard/webhooks/${endpoint.id}`, `/dashboard/webhooks/${endpoint.id}/deliveries/${delivery!.id}`]) {
      await page.goto(`${rig.service.url}${path}`);
      expect(await horizontalOverflow(page), path).toBe(0);
      await expectAccessible(page, `${path} at phone width`);
    }
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });
});

describe('the webhook pages over HTTP', () => {
  it('filters the list by account and by status', async () => {
    const a = await newSender(rig.service, { name: 'Filter A' });
    const b = await newSender(rig.service, { name: 'Filter B' });
    const ea = await newEndpoint(a.key, '/a');
    const eb = await newEndpoint(b.key, '/b');
    const byAccount = await (await http.get(`/dashboard/webhooks?account=${a.account.id}`)).text();
    expect(byAccount).toContain(`/dashboard/webhooks/${ea.id}"`);
    expect(byAccount).not.toContain(`/dashboard/webhooks/${eb.id}"`);
    const enabled = await (await http.get(`/dashboard/webhooks?account=${a.account.id}&status=enabled`)).text();
    expect(enabled).toContain(`/dashboard/webhooks/${ea.id}"`);
    const disabled = await (await http.get(`/dashboard/webhooks?account=${a.account.id}&status=disabled`)).text();
    expect(disabled).toContain('No webhook endpoint matches.');
    // A bad filter is an error page, never a 500.
    expect((await http.get('/dashboard/webhooks?status=broken')).status).toBe(422);
    expect((await http.get('/dashboard/webhooks?account=00000000-0000-7000-8000-000000000000')).status).toBe(404);
    expect((await http.get('/dashboard/webhooks?after=nope')).status).toBe(422);
  });

  it('pages the endpoint list, 50 at a time, newest first', async () => {
    const s = await newSender(rig.service, { name: 'Many Hooks' });
    // More than a page, across accounts (20 endpoints is the per-account limit).
    const others = await Promise.all([1, 2].map((i) => newSender(rig.service, { name: `Many Hooks ${i}` })));
    const ids: string[] = [];
    for (const who of [s, ...others]) for (let i = 0; i < 20; i++) ids.push((await newEndpoint(who.key, `/many-${i}`)).id);
    const first = await (await http.get('/dashboard/webhooks')).text();
    const next = /href="\/dashboard\/webhooks\?after=([0-9a-f-]+)">Next page/.exec(first)?.[1];
    expect(next).toBeDefined();
    const listed = (html: string) => [...html.matchAll(/href="\/dashboard\/webhooks\/([0-9a-f-]{36})"/g)].map((m) => m[1]);
    expect(listed(first)).toHaveLength(50);
    expect(listed(first).slice(0, 10)).toEqual([...ids].reverse().slice(0, 10));
    const second = await (await http.get(`/dashboard/webhooks?after=${next}`)).text();
    expect(listed(second).length).toBeGreaterThanOrEqual(10);
    expect(listed(second).some((id) => listed(first).includes(id))).toBe(false);
    expect(second).toContain('First page');
  });

  it('pages an endpoint’s deliveries, 50 at a time, newest first', async () => {
    const s = await newSender(rig.service, { name: 'Many Deliveries' });
    const endpoint = await newEndpoint(s.key, '/history');
    const now = rig.service.clock.now();
    // A delivered history, written as the dispatcher leaves it (nothing left to post).
    const ids = Array.from({ length: 55 }, () => newId(now));
    for (const id of ids) {
      await rig.service.deps.db.insert(webhookDeliveries).values({
        id,
        endpointId: endpoint.id,
        accountId: s.account.id,
        eventType: 'ping',
        data: JSON.stringify({ endpointId: endpoint.id }),
        attempts: 1,
        lastStatus: 200,
        deliveredAt: now,
        nextAttemptAt: null,
        createdAt: now,
      });
    }
    const listed = (html: string) => [...html.matchAll(/\/deliveries\/([0-9a-f-]{36})"/g)].map((m) => m[1]);
    const first = await (await http.get(`/dashboard/webhooks/${endpoint.id}`)).text();
    expect(listed(first)).toEqual([...ids].reverse().slice(0, 50));
    const next = /href="([^"]+)">Next page/.exec(first)?.[1];
    expect(next).toBe(`/dashboard/webhooks/${endpoint.id}?after=${ids[5]}`);
    expect(listed(await (await http.get(next!)).text())).toEqual([...ids].reverse().slice(50));
  });

  it('answers unknown endpoints and deliveries with the 404 page', async () => {
    const s = await newSender(rig.service, { name: 'Not Found Co' });
    const mine = await newEndpoint(s.key, '/mine');
    const other = await newEndpoint(s.key, '/other');
    await sendAndDeliver(s, 'nf@example.net');
    await dispatch();
    const [delivery] = await deliveriesOf(mine.id);
    expect(delivery).toBeDefined();
    for (const path of [
      '/dashboard/webhooks/0190a000-0000-7000-8000-000000000000',
      '/dashboard/webhooks/not-an-id',
      `/dashboard/webhooks/${mine.id}/deliveries/0190a000-0000-7000-8000-000000000000`,
      // A delivery exists only under its own endpoint.
      `/dashboard/webhooks/${other.id}/deliveries/${delivery!.id}`,
    ]) {
      const res = await http.get(path);
      expect(res.status, path).toBe(404);
      expect(await res.text()).toContain('Not found');
    }
    expect((await http.post('/dashboard/webhooks/0190a000-0000-7000-8000-000000000000/test')).status).toBe(404);
  });

  it('refuses a replay without the CSRF token with 403, and queues nothing', async () => {
    const s = await newSender(rig.service, { name: 'Csrf Co' });
    const endpoint = await newEndpoint(s.key, '/csrf');
    await sendAndDeliver(s, 'csrf@example.net');
    await dispatch();
    const [delivery] = await deliveriesOf(endpoint.id);
    const path = `/dashboard/webhooks/${endpoint.id}/deliveries/${delivery!.id}/replay`;
    const refused = await http.post(path, { _csrf: '' });
    expect(refused.status).toBe(403);
    const wrong = await http.post(path, { _csrf: `${http.csrf}x` });
    expect(wrong.status).toBe(403);
    expect(await deliveriesOf(endpoint.id)).toHaveLength(1);
    // With the token, the same request queues one.
    expect((await http.post(path)).status).toBe(303);
    expect(await deliveriesOf(endpoint.id)).toHaveLength(2);
  });

  it('replays exactly the delivery’s outcome, not the other recipients’ of the same moment', async () => {
    const s = await newSender(rig.service, { name: 'Two Recipients' });
    const endpoint = await newEndpoint(s.key, '/two');
    // One email, two recipients, delivered in one session at the same (fake) instant.
    await sendAndDeliver(s, ['ana@example.net', 'ben@example.net']);
    expect(await dispatch()).toBe(2);
    const [, ben] = (await deliveriesOf(endpoint.id)).map((d) => ({ id: d.id, data: JSON.parse(d.data) as { recipient: string; occurredAt: string } }));
    expect(ben!.data.recipient).toBe('ben@example.net');
    const res = await http.post(`/dashboard/webhooks/${endpoint.id}/deliveries/${ben!.id}/replay`);
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`/dashboard/webhooks/${endpoint.id}`);
    expect(await http.follow(res)).toContain('Replay queued a new delivery');
    const after = await deliveriesOf(endpoint.id);
    expect(after).toHaveLength(3);
    expect(JSON.parse(after[2]!.data)).toEqual(JSON.parse(after[1]!.data));
  });

  it('refuses a replay past the endpoint’s 10,000 pending deliveries as the API does, with the 409’s message, and queues nothing', async () => {
    const s = await newSender(rig.service, { name: 'Backlog Co' });
    const endpoint = await newEndpoint(s.key, '/backlog');
    await sendAndDeliver(s, 'backlog@example.net');
    expect(await dispatch()).toBe(1);
    const [delivered] = await deliveriesOf(endpoint.id);
    // A receiver that has not taken anything for a while: 10,000 waiting for their retry.
    const now = rig.service.clock.now();
    const waiting = Array.from({ length: MAX_PENDING_PER_ENDPOINT }, () => ({
      id: newId(now),
      endpointId: endpoint.id,
      accountId: s.account.id,
      eventType: 'email.delivered' as const,
      data: '{}',
      attempts: 1,
      nextAttemptAt: now + 60_000,
      createdAt: now,
    }));
    await rig.service.deps.db.transaction(async (tx) => {
      for (let i = 0; i < waiting.length; i += 500) await tx.insert(webhookDeliveries).values(waiting.slice(i, i + 500));
    });

    const res = await http.post(`/dashboard/webhooks/${endpoint.id}/deliveries/${delivered!.id}/replay`);
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`/dashboard/webhooks/${endpoint.id}/deliveries/${delivered!.id}`);
    const page = await http.follow(res);
    expect(page).toContain('role="alert"');
    expect(page).toContain(`${MAX_PENDING_PER_ENDPOINT} deliveries are pending for this endpoint and this replay would add 1`);
    expect(await deliveriesOf(endpoint.id)).toHaveLength(MAX_PENDING_PER_ENDPOINT + 1);
  });

  it('answers a ping’s replay and a second ping within ten seconds with an error flash', async () => {
    const s = await newSender(rig.service, { name: 'Ping Co' });
    const endpoint = await newEndpoint(s.key, '/ping', ['ping']);
    expect((await http.post(`/dashboard/webhooks/${endpoint.id}/test`)).status).toBe(303);
    const again = await http.post(`/dashboard/webhooks/${endpoint.id}/test`);
    expect(again.status).toBe(303);
    const page = await http.follow(again);
    expect(page).toContain('role="alert"');
    expect(page).toContain('A test ping was sent to this endpoint in the last ten seconds');
    expect(receiver.requests).toHaveLength(1);

    const [ping] = await deliveriesOf(endpoint.id);
    const replay = await http.post(`/dashboard/webhooks/${endpoint.id}/deliveries/${ping!.id}/replay`);
    expect(replay.headers.get('location')).toBe(`/dashboard/webhooks/${endpoint.id}/deliveries/${ping!.id}`);
    expect(await http.follow(replay)).toContain('A test ping is never replayed');
    expect(await deliveriesOf(endpoint.id)).toHaveLength(1);
  });
});

describe('adding, testing and deleting an endpoint from the dashboard', () => {
  it('adds an endpoint for an account and shows its signing secret once; the test ping shows the answer; delete asks first', async () => {
    const { service } = rig;
    const s = await newSender(service, { name: 'Console Hooks Ltd' });
    const url = `https://hooks.webhooks.test:${receiver.port}/console`;
    const page = await newPage(browser);
    await signIn(page, service.url, token, `/dashboard/webhooks?account=${s.account.id}`);
    const form = page.getByRole('region', { name: 'Add an endpoint' });
    expect(await form.getByLabel('Account').inputValue()).toBe(s.account.id);
    await form.getByLabel('URL').fill(url);
    await form.getByLabel('email.deferred').uncheck();
    await form.getByRole('button', { name: 'Add endpoint' }).click();
    await page.waitForURL(/\/dashboard\/webhooks\/[0-9a-f-]{36}$/);
    const id = UUID.exec(new URL(page.url()).pathname)![0];
    expect(await flashText(page, 'ok')).toContain(`Endpoint ${url} added for Console Hooks Ltd. Copy its signing secret now: it is shown only this once.`);
    const secret = (await page.locator('#flash-secret').textContent())!;
    expect(secret).toMatch(/^whsec_/);
    // What the API answers for it: the account's endpoint, the events as chosen, never the secret.
    const got = await service.api('GET', `/webhooks/${id}`, { key: s.key });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ id, url, events: ['email.delivered', 'email.bounced', 'email.complained'], active: true });
    expect(JSON.stringify(got.body)).not.toContain(secret);
    await expectAccessible(page, 'endpoint created');
    await screenshot(page, 'i33-webhook-created');

    // The test ping of POST /webhooks/{id}/test, signed with the secret shown; its answer is on the page.
    await page.getByRole('button', { name: 'Send test ping' }).click();
    await page.waitForURL(`**/dashboard/webhooks/${id}`);
    expect(await flashText(page, 'ok')).toContain('The test ping was delivered: the receiver answered 200.');
    expect(await page.locator('#flash-secret').count()).toBe(0);
    expect(await page.locator('main').textContent()).not.toContain(secret);
    const ping = receiver.requests.at(-1)!;
    expect(verifyServiceSignature(ping, secret)).toBe(true);
    expect(bodyOf(ping)).toMatchObject({ type: 'ping', data: { endpointId: id } });
    await screenshot(page, 'i33-webhook-test-result');

    // A failing receiver: the status it answered is shown as an error (after the ping's ten-second cooldown).
    service.clock.advance(10_000);
    receiver.enqueue({ status: 503 });
    await page.getByRole('button', { name: 'Send test ping' }).click();
    await page.waitForURL(`**/dashboard/webhooks/${id}`);
    expect(await flashText(page, 'error')).toContain('The test ping failed: HTTP 503.');
    await screenshot(page, 'i33-webhook-test-failed');

    // Delete asks first: a dismissed question deletes nothing.
    page.once('dialog', (d) => void d.dismiss());
    await page.getByRole('button', { name: 'Delete endpoint' }).click();
    expect((await service.api('GET', `/webhooks/${id}`, { key: s.key })).status).toBe(200);
    const question = new Promise<string>((resolve) =>
      page.once('dialog', (d) => {
        resolve(d.message());
        void d.accept();
      }),
    );
    await page.getByRole('button', { name: 'Delete endpoint' }).click();
    expect(await question).toContain(`Delete the endpoint ${url}?`);
    await page.waitForURL(`**/dashboard/webhooks?account=${s.account.id}`);
    expect(await flashText(page, 'ok')).toContain(`Endpoint ${url} deleted from Console Hooks Ltd`);
    const gone = await service.api('GET', `/webhooks/${id}`, { key: s.key });
    expect([gone.status, gone.body.error.code]).toEqual([404, 'webhook_not_found']);
    expect(await deliveriesOf(id)).toHaveLength(0);
    expect(pageProblems(page)).toEqual([]);
    await page.context().close();
  });

  it('refuses what the API refuses, with the API’s message, and adds nothing', async () => {
    const s = await newSender(rig.service, { name: 'Refused Hooks' });
    const back = `/dashboard/webhooks?account=${s.account.id}#create`;
    const good = `https://hooks.webhooks.test:${receiver.port}/ok`;
    const cases: { fields: Record<string, string>; body: unknown; code: string; status: number }[] = [
      {
        fields: { url: `http://hooks.webhooks.test:${receiver.port}/x`, 'event.email.delivered': 'on' },
        body: { url: `http://hooks.webhooks.test:${receiver.port}/x`, events: ['email.delivered'] },
        code: 'invalid_url',
        status: 422,
      },
      {
        fields: { url: 'https://user:pw@hooks.webhooks.test/x', 'event.email.delivered': 'on' },
        body: { url: 'https://user:pw@hooks.webhooks.test/x', events: ['email.delivered'] },
        code: 'invalid_url',
        status: 422,
      },
      {
        fields: { url: 'https://nowhere.webhooks.test/x', 'event.ping': 'on' },
        body: { url: 'https://nowhere.webhooks.test/x', events: ['ping'] },
        code: 'invalid_url',
        status: 422,
      },
      { fields: { url: 'not a url', 'event.ping': 'on' }, body: { url: 'not a url', events: ['ping'] }, code: 'invalid_request', status: 422 },
      { fields: { url: good }, body: { url: good, events: [] }, code: 'invalid_request', status: 422 },
    ];
    for (const { fields, body, code, status } of cases) {
      const api = await rig.service.api('POST', '/webhooks', { key: s.key, body });
      expect([api.status, api.body.error.code], JSON.stringify(body)).toEqual([status, code]);
      const shown = await refusalOf(http, '/dashboard/webhooks', { accountId: s.account.id, ...fields }, back);
      expect(shown.replaceAll('&#39;', "'")).toBe(api.body.error.message);
    }
    expect(await refusalOf(http, '/dashboard/webhooks', { url: good, 'event.ping': 'on' }, '/dashboard/webhooks#create')).toBe(
      'Choose the account the endpoint belongs to.',
    );
    expect((await rig.service.api('GET', '/webhooks', { key: s.key })).body.data).toEqual([]);
    // Twenty is the limit, as in the API.
    for (let i = 0; i < 20; i++) await newEndpoint(s.key, `/full-${i}`);
    const full = await refusalOf(http, '/dashboard/webhooks', { accountId: s.account.id, url: good, 'event.ping': 'on' }, back);
    expect(full).toBe('This account already has 20 webhook endpoints; delete one first.');
    // Without the CSRF token nothing is added.
    expect((await http.post('/dashboard/webhooks', { accountId: s.account.id, url: good, 'event.ping': 'on', _csrf: '' })).status).toBe(403);
    expect((await rig.service.api('GET', '/webhooks?limit=100', { key: s.key })).body.data).toHaveLength(20);
  });

  it('refuses a private target unless ALLOW_PRIVATE_TARGETS, as the API does', async () => {
    // The rig allows private targets (its receiver is on loopback); a service with the default does not.
    const strict = await startService({ DNS_SERVERS: rig.dns.address });
    try {
      const s = await newSender(strict, { name: 'Private Hooks' });
      const client = await dashboardClient(strict);
      const url = `https://hooks.webhooks.test:${receiver.port}/private`;
      const api = await strict.api('POST', '/webhooks', { key: s.key, body: { url, events: ['ping'] } });
      expect([api.status, api.body.error.code]).toEqual([422, 'invalid_url']);
      const shown = await refusalOf(
        client,
        '/dashboard/webhooks',
        { accountId: s.account.id, url, 'event.ping': 'on' },
        `/dashboard/webhooks?account=${s.account.id}#create`,
      );
      expect(shown).toBe('The URL host resolves to a private, loopback or reserved address.');
      expect(shown).toBe(api.body.error.message);
      // The same form on the rig, which allows them, adds it.
      const allowed = await http.post('/dashboard/webhooks', { accountId: s.account.id, url, 'event.ping': 'on' });
      expect(allowed.status).toBe(303);
    } finally {
      await strict.close();
    }
  });
});

import { and, asc, count, eq } from 'drizzle-orm';
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { capturedMessages, customerDbWrites, domainKeys, emails, outboundMessages, webhookDeliveries } from '../db/schema/index.js';
import { CAPTURE_LIMIT, readCapture, sealCapture, storeCapture } from '../server/core/capture-store.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { RESERVED_TLDS, isUnderReservedTld } from '../server/core/domain-checks.js';
import { newId } from '../server/shared/ids.js';
import { storeDatabaseRow } from './helpers/customer-db.js';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { FAST_TIMEOUTS, resetDeliveryRig } from './helpers/delivery-rig.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { expectDocumented } from './helpers/openapi.js';
import { seedEndpoint } from './helpers/outcomes.js';
import { parsePrometheusText, sampleValue } from './helpers/prometheus-text.js';
import { connectDomain, expectError, newSender, receipt, uniqueDomain } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';
import { SmtpSink } from './helpers/smtp-sink.js';
import { one } from '../db/sql.js';

/**
 * DELIVERY_MODE=capture: the engine builds and signs every message as it would send it, keeps it
 * in the capture store and records it `delivered` `2.0.0` `captured` through the usual outcome path, and never opens a
 * connection: an SMTP sink standing for port 25 (SMTP_DELIVERY_PORT, and SMTP_RELAY_URL) counts none, while the same
 * sends in direct mode reach it. Reserved-TLD domains verify without DNS in capture mode only.
 */

let dns: TestDnsServer;
let sink: SmtpSink;
let capture: TestService;
let captureWithRelay: TestService;
let direct: TestService;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  sink = await SmtpSink.start();
  const toSink = { DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port), ALLOW_PRIVATE_TARGETS: 'true' };
  capture = await startService({ ...toSink, DELIVERY_MODE: 'capture' });
  captureWithRelay = await startService({ ...toSink, DELIVERY_MODE: 'capture', SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}` });
  direct = await startService(toSink);
});

afterAll(async () => {
  await capture?.close();
  await captureWithRelay?.close();
  await direct?.close();
  await sink?.stop();
  await dns?.stop();
});

beforeEach(() => {
  // example.net's MX is the sink: a direct delivery there connects to it.
  resetDeliveryRig({ dns, sink });
  sink.resetConnections();
});

const engineOf = (service: TestService) => createDeliveryEngine(service.deps, { timeouts: FAST_TIMEOUTS });

async function send(service: TestService, key: string, body: Record<string, unknown>): Promise<string> {
  const res = await service.api('POST', '/emails', { key, body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

async function events(service: TestService, key: string, id: string): Promise<{ recipient: string; status: string; dsn: string; detail: string }[]> {
  const res = await service.api('GET', `/emails/${id}`, { key });
  expect(res.status).toBe(200);
  return res.body.events;
}

async function metric(service: TestService, status: string): Promise<number> {
  const families = parsePrometheusText(await (await fetch(`${service.url}/metrics`)).text());
  return sampleValue(families, 'mailstead_delivery_outcomes_total', { status });
}

describe('capture mode never opens a connection', () => {
  it('the control: in direct mode the same send reaches the sink, which counts the connection', async () => {
    const s = await newSender(direct);
    const id = await send(direct, s.key, receipt(s.from, 'alice@example.net'));
    await engineOf(direct).runOnce();
    expect(sink.connections).toBeGreaterThan(0);
    expect(sink.deliveredTo()).toEqual(['alice@example.net']);
    expect((await events(direct, s.key, id))[0]).toMatchObject({ status: 'delivered', dsn: '2.0.0' });
  });

  it('capture: no connection to the sink and no DNS for recipients; every recipient delivered 2.0.0 `captured`, with webhooks, database writes and metrics as usual', async () => {
    const s = await newSender(capture);
    const endpoint = await seedEndpoint(capture, s.account.id, ['email.delivered']);
    await storeDatabaseRow(capture, s.account.id, 'postgresql://app:secret@db.example.com:5432/app');
    const before = await metric(capture, 'delivered');
    dns.queries = [];
    const to = ['alice@example.net', 'bob@nowhere.example', 'carol@gmail.com'];
    const id = await send(capture, s.key, receipt(s.from, to));
    await engineOf(capture).runOnce();

    expect(sink.connections).toBe(0);
    expect(sink.received).toEqual([]);
    expect(dns.queries).toEqual([]);
    const got = await events(capture, s.key, id);
    expect(got.map((e) => [e.recipient, e.status, e.dsn, e.detail]).sort()).toEqual(to.map((r) => [r, 'delivered', '2.0.0', 'captured']).sort());
    const email = (await one(capture.deps.db.select().from(emails).where(eq(emails.id, id))))!;
    expect(email.deliveredAt).toBe(capture.clock.now());
    // Done with, like any delivered message: the queued content is gone, the capture stays.
    expect(await capture.deps.db.select().from(outboundMessages).where(eq(outboundMessages.id, id))).toEqual([]);
    expect((await one(capture.deps.db.select({ n: count() }).from(capturedMessages).where(eq(capturedMessages.emailId, id))))!.n).toBe(3);

    const posts = await capture.deps.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, endpoint));
    expect(posts.map((p) => [p.eventType, JSON.parse(p.data).detail]).sort()).toEqual(to.map(() => ['email.delivered', 'captured']));
    const writes = await capture.deps.db
      .select()
      .from(customerDbWrites)
      .where(and(eq(customerDbWrites.accountId, s.account.id), eq(customerDbWrites.kind, 'event')));
    expect(writes).toHaveLength(3);
    expect(await metric(capture, 'delivered')).toBe(before + 3);
  });

  it('capture with SMTP_RELAY_URL set: the relay (the sink) is never connected to either', async () => {
    const s = await newSender(captureWithRelay);
    const id = await send(captureWithRelay, s.key, receipt(s.from, 'dave@example.net'));
    await engineOf(captureWithRelay).runOnce();
    expect(sink.connections).toBe(0);
    expect((await events(captureWithRelay, s.key, id))[0]).toMatchObject({ status: 'delivered', dsn: '2.0.0', detail: 'captured' });
  });
});

describe('the captured message', () => {
  it('is the message as it would go out, signed: DKIM passes with mailauth against the stored public key, and it is stored sealed', async () => {
    const s = await newSender(capture);
    const id = await send(capture, s.key, receipt(`Shop <${s.from}>`, ['erin@example.net', 'Frank@Example.net'], { replyTo: `help@${s.domain}` }));
    await engineOf(capture).runOnce();
    const raw = (await readCapture(capture.deps.db, capture.deps.secretKey, { accountId: s.account.id, emailId: id, recipient: 'erin@example.net' }))!;
    const text = raw.toString('latin1');
    expect(text).toMatch(/^DKIM-Signature: /);
    expect(text).not.toMatch(/[^\r]\n|\r(?!\n)/);
    expect(text).toContain(`From: "Shop" <${s.from}>\r\n`);
    expect(text).toContain(`Reply-To: help@${s.domain}\r\n`);
    expect(text).toContain(`Message-ID: <${id}@mx.mailstead.test>`);
    expect(text).toContain('Subject: Your receipt R-1001');

    const key = (await one(capture.deps.db.select().from(domainKeys).where(eq(domainKeys.accountId, s.account.id))))!;
    const verdict = await dkimVerify(raw, {
      resolver: async (name: string, type: string) => {
        if (type === 'TXT' && name === `${key.selector}._domainkey.${s.domain}`) return [[`v=DKIM1; h=sha256; k=rsa; p=${key.dkimPublicKey}`]];
        throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
      },
    });
    expect(verdict.results[0]?.status.result).toBe('pass');
    expect(verdict.results[0]?.signingDomain).toBe(s.domain);

    // At rest it is sealed with the secret key: neither the subject nor the recipient is readable in the row.
    const rows = await capture.deps.db.select().from(capturedMessages).where(eq(capturedMessages.emailId, id)).orderBy(asc(capturedMessages.recipient));
    expect(rows.map((r) => r.recipient)).toEqual(['erin@example.net', 'frank@example.net']);
    for (const row of rows) {
      expect(row.messageSealed.toString('latin1')).not.toContain('Your receipt');
      expect(row.messageSealed.toString('latin1')).not.toContain('DKIM-Signature');
    }
  });

  it(`the store keeps the newest ${CAPTURE_LIMIT}: each new capture drops the oldest beyond; a recipient captured again is replaced in place`, async () => {
    const { account } = await capture.newAccount({ name: 'Bound' });
    const db = capture.deps.db;
    const key = capture.deps.secretKey!;
    const at = capture.clock.now();
    const emailId = newId(at);
    await db.insert(emails).values({
      id: emailId,
      accountId: account.id,
      fromAddress: 'a@shop.test',
      to: [],
      subject: 's',
      template: 'notification',
      status: 'sent',
      sandbox: false,
      createdAt: at,
    });
    const total = async () => (await one(db.select({ n: count() }).from(capturedMessages)))!.n;
    // Whatever other tests captured is older than these: it goes first.
    const capture1 = (i: number) =>
      storeCapture(
        db,
        sealCapture(key, { emailId, accountId: account.id, recipient: `r${i}@example.net`, message: Buffer.from(`message ${i}\r\n`), capturedAt: at }),
      );
    await db.transaction(async () => {
      for (let i = 0; i < CAPTURE_LIMIT; i++) await capture1(i);
    });
    expect(await total()).toBe(CAPTURE_LIMIT);
    const read = async (i: number) => (await readCapture(db, key, { accountId: account.id, emailId, recipient: `r${i}@example.net` }))?.toString();
    expect(await read(0)).toBe('message 0\r\n');

    await db.transaction(async () => {
      for (let i = CAPTURE_LIMIT; i < CAPTURE_LIMIT + 5; i++) await capture1(i);
    });
    expect(await total()).toBe(CAPTURE_LIMIT);
    expect(await Promise.all([0, 1, 2, 3, 4].map(read))).toEqual([undefined, undefined, undefined, undefined, undefined]);
    expect(await read(5)).toBe('message 5\r\n');
    expect(await read(CAPTURE_LIMIT + 4)).toBe(`message ${CAPTURE_LIMIT + 4}\r\n`);

    await storeCapture(
      db,
      sealCapture(key, { emailId, accountId: account.id, recipient: 'R5@example.net', message: Buffer.from('again\r\n'), capturedAt: at }),
    );
    expect(await total()).toBe(CAPTURE_LIMIT);
    expect(await read(5)).toBe('again\r\n');
    expect(await read(6)).toBe('message 6\r\n');
  }, 60_000); // ten thousand captures stored one by one: on Postgres a round trip each, 15-20 s on a 2-core machine
});

describe('the capture store by itself (server/core/capture-store.ts)', () => {
  it('refuses another account’s capture: read for any account but the one that sent it, it gives nothing', async () => {
    const owner = (await capture.newAccount({ name: 'Capture owner' })).account;
    const other = (await capture.newAccount({ name: 'Capture stranger' })).account;
    const db = capture.deps.db;
    const key = capture.deps.secretKey!;
    const at = capture.clock.now();
    const emailId = newId(at);
    await db.insert(emails).values({
      id: emailId,
      accountId: owner.id,
      fromAddress: 'a@shop.test',
      to: ['dee@example.net'],
      subject: 's',
      template: 'notification',
      status: 'sent',
      sandbox: false,
      createdAt: at,
    });
    await storeCapture(
      db,
      sealCapture(key, { emailId, accountId: owner.id, recipient: 'dee@example.net', message: Buffer.from('the owner’s message\r\n'), capturedAt: at }),
    );
    // The store's own check, with no route before it: the right email id and recipient are not enough.
    expect(await readCapture(db, key, { accountId: other.id, emailId, recipient: 'dee@example.net' })).toBeNull();
    expect(await readCapture(db, key, { accountId: other.id, emailId, recipient: 'DEE@example.net' })).toBeNull();
    expect((await readCapture(db, key, { accountId: owner.id, emailId, recipient: 'dee@example.net' }))?.toString()).toBe('the owner’s message\r\n');
  });
});

describe('GET /emails/{id}/message', () => {
  runCommonAuthTests(() => capture, {
    method: 'GET',
    path: '/emails/01a00000-0000-7000-8000-000000000000/message?recipient=a@example.net',
    scope: 'emails:read',
  });

  it('answers the raw signed message as message/rfc822, for each recipient (any case of the address)', async () => {
    const s = await newSender(capture);
    const id = await send(capture, s.key, receipt(s.from, ['gina@example.net', 'hank@example.net']));
    await engineOf(capture).runOnce();
    for (const recipient of ['gina@example.net', 'HANK@example.net']) {
      const res = await capture.api('GET', `/emails/${id}/message?recipient=${encodeURIComponent(recipient)}`, { key: s.key });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('message/rfc822');
      expectDocumented(res);
      const stored = (await readCapture(capture.deps.db, capture.deps.secretKey, { accountId: s.account.id, emailId: id, recipient }))!;
      expect(res.body).toBe(stored.toString('utf8'));
      expect(res.body).toMatch(/^DKIM-Signature: /);
    }
  });

  it("a key with only emails:read reads it; acting for a sub-account reads the sub-account's mail, and only with its header", async () => {
    const parent = await newSender(capture);
    const sub = await capture.api('POST', '/accounts', { key: parent.key, body: { name: 'Sub shop' } });
    expect(sub.status).toBe(201);
    const subDomain = uniqueDomain('sub');
    await connectDomain(capture, parent.key, subDomain, { account: sub.body.id });
    const res = await capture.api('POST', '/emails', { key: parent.key, account: sub.body.id, body: receipt(`orders@${subDomain}`, 'ivy@example.net') });
    expect(res.status).toBe(200);
    await engineOf(capture).runOnce();
    const reader = await capture.newKey(parent.account.id, ['emails:read']);
    const path = `/emails/${res.body.id}/message?recipient=ivy@example.net`;
    const asSub = await capture.api('GET', path, { key: reader, account: sub.body.id });
    expect(asSub.status).toBe(200);
    expect(asSub.body).toContain(`From: orders@${subDomain}`);
    const asParent = await capture.api('GET', path, { key: reader });
    expectError(asParent, 404, 'email_not_found');
    expectDocumented(asParent);
  });

  it("404 email_not_found: no such email, another account's email, a recipient it was not sent to, a sandboxed send", async () => {
    const s = await newSender(capture);
    const other = await newSender(capture);
    const id = await send(capture, s.key, receipt(s.from, 'jack@example.net'));
    const sandboxed = await send(capture, s.key, receipt(s.from, 'jack@example.net', { sandbox: true }));
    await engineOf(capture).runOnce();
    const cases = [
      await capture.api('GET', `/emails/01a00000-0000-7000-8000-000000000000/message?recipient=jack@example.net`, { key: s.key }),
      await capture.api('GET', `/emails/${id}/message?recipient=jack@example.net`, { key: other.key }),
      await capture.api('GET', `/emails/${id}/message?recipient=jill@example.net`, { key: s.key }),
      await capture.api('GET', `/emails/${sandboxed}/message?recipient=jack@example.net`, { key: s.key }),
    ];
    for (const res of cases) {
      expectError(res, 404, 'email_not_found');
      expectDocumented(res);
    }
    expect((await capture.api('GET', `/emails/${id}/message?recipient=jack@example.net`, { key: s.key })).status).toBe(200);
  });

  it('422 invalid_request without a recipient, or with an unknown query field', async () => {
    const s = await newSender(capture);
    const id = await send(capture, s.key, receipt(s.from, 'kim@example.net'));
    for (const query of ['', '?recipient=', `?recipient=kim@example.net&raw=1`]) {
      const res = await capture.api('GET', `/emails/${id}/message${query}`, { key: s.key });
      expectError(res, 422, 'invalid_request');
      expectDocumented(res);
    }
  });

  it('in direct mode there is no captured mail: 404 email_not_found, even for one an earlier capture run on this DATA_DIR kept', async () => {
    const s = await newSender(direct);
    const id = await send(direct, s.key, receipt(s.from, 'lee@example.net'));
    await engineOf(direct).runOnce();
    expect((await events(direct, s.key, id))[0]).toMatchObject({ status: 'delivered' });
    expect((await one(direct.deps.db.select({ n: count() }).from(capturedMessages)))!.n).toBe(0);
    const path = `/emails/${id}/message?recipient=lee@example.net`;
    expectError(await direct.api('GET', path, { key: s.key }), 404, 'email_not_found', /capture mode/);

    // A capture left by an earlier DELIVERY_MODE=capture run of the same DATA_DIR is not shown by a server that delivers.
    const message = Buffer.from('Subject: kept from a capture run\r\n\r\nhello\r\n');
    await storeCapture(
      direct.deps.db,
      sealCapture(direct.deps.secretKey!, { emailId: id, accountId: s.account.id, recipient: 'lee@example.net', message, capturedAt: direct.clock.now() }),
    );
    const res = await direct.api('GET', path, { key: s.key });
    expectError(res, 404, 'email_not_found', /capture mode/);
    expectDocumented(res);
  });
});

describe('reserved-TLD domains verify without DNS in capture mode only', () => {
  it.each([
    ['shop.test', true],
    ['mail.shop.example', true],
    ['a.invalid', true],
    ['app.localhost', true],
    ['shop.TEST.', true],
    ['shop.example.com', false],
    ['test.com', false],
    ['testing', false],
    ['example.org', false],
  ])('%s is under a reserved TLD: %s', (name, reserved) => {
    expect(isUnderReservedTld(name)).toBe(reserved);
  });

  it('the reserved TLDs are those of RFC 2606 and RFC 6761', () => {
    expect([...RESERVED_TLDS].sort()).toEqual(['example', 'invalid', 'localhost', 'test']);
  });

  it('capture: a .test, .example, .invalid and .localhost domain verifies with every record published, DNS never asked; then sends', async () => {
    const { key } = await capture.newAccount({ name: 'Local shop' });
    for (const name of [`shop-${process.pid}.test`, `shop-${process.pid}.example`, `shop-${process.pid}.invalid`, `shop-${process.pid}.localhost`]) {
      dns.queries = [];
      const created = await capture.api('POST', '/domains', { key, body: { name } });
      expect(created.status).toBe(201);
      const verified = await capture.api('POST', `/domains/${created.body.id}/verify`, { key });
      expect(verified.status).toBe(200);
      expectDocumented(verified);
      expect(verified.body).toMatchObject({
        name,
        status: 'verified',
        ownershipVerified: true,
        sending: true,
        receiving: true,
        direct: true,
        checks: { ownership: 'proven', receiving: 'published', signing: 'published', spf: 'published' },
      });
      expect(verified.body.records.map((r: { status: string }) => r.status)).toEqual(['published', 'published', 'published', 'published']);
      expect(dns.queries).toEqual([]);
      expect((await capture.api('POST', '/emails', { key, body: receipt(`billing@${name}`, 'mia@example.net') })).status).toBe(200);
    }
  });

  it('capture: any other name is still read from DNS', async () => {
    const { key } = await capture.newAccount({ name: 'Real shop' });
    const name = uniqueDomain('real');
    dns.queries = [];
    const created = await capture.api('POST', '/domains', { key, body: { name } });
    const verified = await capture.api('POST', `/domains/${created.body.id}/verify`, { key });
    expect(verified.body).toMatchObject({
      status: 'pending',
      sending: false,
      checks: { ownership: 'missing', spf: 'missing', receiving: 'missing', signing: 'missing' },
    });
    expect(dns.queries.map((q) => q.name)).toContain(`_service-verify.${name}`);
  });

  it('direct: a .test name is read from DNS like any other, so without records it stays pending and cannot send', async () => {
    const { key } = await direct.newAccount({ name: 'Direct shop' });
    const name = `shop-${process.pid}-direct.test`;
    dns.queries = [];
    const created = await direct.api('POST', '/domains', { key, body: { name } });
    const verified = await direct.api('POST', `/domains/${created.body.id}/verify`, { key });
    expect(verified.status).toBe(200);
    expect(verified.body).toMatchObject({
      status: 'pending',
      ownershipVerified: false,
      sending: false,
      checks: { ownership: 'missing', signing: 'missing', spf: 'missing' },
    });
    expect(dns.queries.map((q) => q.name)).toContain(`_service-verify.${name}`);
    expectError(await direct.api('POST', '/emails', { key, body: receipt(`billing@${name}`, 'ned@example.net') }), 403, 'domain_not_ready');

    // What verifies it is DNS: once its records are published there, it does.
    const records = created.body.records as { type: string; name: string; value: string }[];
    for (const r of records) {
      if (r.type === 'TXT') dns.add(r.name, { type: 'TXT', data: r.value.match(/.{1,255}/g)! });
    }
    const again = await direct.api('POST', `/domains/${created.body.id}/verify`, { key });
    expect(again.body).toMatchObject({ status: 'verified', sending: true, checks: { ownership: 'proven', signing: 'published', spf: 'published' } });
  });
});

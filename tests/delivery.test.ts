import { eq } from 'drizzle-orm';
import { dkimVerify } from 'mailauth/lib/dkim/verify.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { accounts, domainKeys, outboundRecipients, suppressions } from '../db/schema/index.js';
import type { DeliveryEngine } from '../mta/delivery-engine.js';
import { RETRY_GAPS_MS } from '../server/core/delivery-schedule.js';
import { resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import type { TestDnsServer } from './helpers/dns-server.js';
import { connectDomain } from './helpers/sending.js';
import type { TestService } from './helpers/service.js';
import type { SmtpSink } from './helpers/smtp-sink.js';
import { one } from '../db/sql.js';

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;
let engine: DeliveryEngine;

beforeAll(async () => {
  ({ dns, sink, service, engine } = await startDeliveryRig());
});
afterAll(() => stopDeliveryRig({ dns, sink, service }));
beforeEach(() => {
  resetDeliveryRig({ dns, sink });
});

async function sender(opts: { credits?: number } = {}) {
  const { account, key } = await service.newAccount({ credits: opts.credits ?? 100 });
  const name = `shop-${Math.random().toString(36).slice(2, 8)}.example.com`;
  await connectDomain(service, key, name);
  return { account, key, name };
}

async function send(key: string, from: string, to: string | string[], extra: Record<string, unknown> = {}) {
  const res = await service.api('POST', '/emails', { key, body: { from, to, template: { name: 'receipt', receiptNumber: 'R-1', total: '$10.00' }, ...extra } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
}

const events = async (key: string, id: string) => (await service.api('GET', `/emails/${id}`, { key })).body;

describe('delivery to the recipient MX', () => {
  it('delivers to the MX host, DKIM-signed with the from-domain key, with a delivered event carrying the server reply', async () => {
    const { key, name, account } = await sender();
    const id = await send(key, `Shop <billing@${name}>`, ['alice@example.net', 'bob@example.net']);
    await engine.runOnce();
    expect(sink.deliveredTo().sort()).toEqual(['alice@example.net', 'bob@example.net']);
    const email = await events(key, id);
    expect(email.events.map((e: { recipient: string; status: string; dsn: string }) => [e.recipient, e.status, e.dsn]).sort()).toEqual([
      ['alice@example.net', 'delivered', '2.0.0'],
      ['bob@example.net', 'delivered', '2.0.0'],
    ]);
    expect(email.deliveredAt).toBe(new Date(service.clock.now()).toISOString());

    // One transaction per recipient, each with its own VERP envelope sender on MAIL_HOSTNAME.
    expect(sink.received.every((r) => r.to.length === 1)).toBe(true);
    expect(sink.received.map((r) => r.from)).toEqual(
      expect.arrayContaining([expect.stringMatching(/^bounce\+[0-9a-f]{32}\.[01]\.[0-9a-f]{10}@mx\.mailstead\.test$/)]),
    );

    const raw = sink.received[0]!.raw;
    expect(raw.toString('latin1')).not.toMatch(/[^\r]\n|\r(?!\n)/);
    const key_ = (await one(service.deps.db.select().from(domainKeys).where(eq(domainKeys.accountId, account.id))))!;
    // Published as real DNS holds it: a long TXT record in strings of at most 255 characters.
    const record = `v=DKIM1; h=sha256; k=rsa; p=${key_.dkimPublicKey}`;
    dns.add(`${key_.selector}._domainkey.${name}`, { type: 'TXT', data: record.match(/.{1,255}/g)! });
    const result = await dkimVerify(raw, {
      resolver: async (n: string, type: string) => {
        const r = await service.deps.resolver.txt(n);
        if (type !== 'TXT' || r.status !== 'found') throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
        return r.records;
      },
    });
    expect(result.results[0]?.status.result).toBe('pass');
    expect(result.results[0]?.signingDomain).toBe(name);
  });

  it('records each recipient from its own reply: 550 5.1.1 bounces and suppresses, 450 defers and retries on schedule', async () => {
    const { key, name, account } = await sender();
    sink.rcpt = (address, attempt) => {
      if (address === 'gone@example.net') return { code: 550, message: '5.1.1 No such user here' };
      if (address === 'busy@example.net' && attempt === 1) return { code: 450, message: '4.2.1 Mailbox busy, try later' };
      return 'accept';
    };
    const id = await send(key, `billing@${name}`, ['ok@example.net', 'gone@example.net', 'busy@example.net']);
    await engine.runOnce();
    let email = await events(key, id);
    const byRcpt = Object.fromEntries(email.events.map((e: { recipient: string }) => [e.recipient, e]));
    expect(byRcpt['ok@example.net']).toMatchObject({ status: 'delivered' });
    expect(byRcpt['gone@example.net']).toMatchObject({ status: 'bounced', dsn: '5.1.1', detail: expect.stringContaining('No such user here') });
    expect(byRcpt['busy@example.net']).toMatchObject({ status: 'deferred', dsn: '4.2.1', detail: expect.stringContaining('Mailbox busy') });
    expect(email.bouncedAt).not.toBeNull();
    const listed = await service.deps.db.select().from(suppressions).where(eq(suppressions.accountId, account.id));
    expect(listed.map((s) => [s.address, s.reason])).toEqual([['gone@example.net', 'bounce']]);
    expect((await one(service.deps.db.select().from(accounts).where(eq(accounts.id, account.id))))!.totalBounced).toBe(1);

    // Not due before the first gap.
    service.clock.advance(RETRY_GAPS_MS[0]! - 1);
    expect(await engine.runOnce()).toBe(0);
    service.clock.advance(1);
    expect(await engine.runOnce()).toBe(1);
    email = await events(key, id);
    expect(email.events.filter((e: { recipient: string }) => e.recipient === 'busy@example.net').map((e: { status: string }) => e.status)).toEqual([
      'deferred',
      'delivered',
    ]);
    expect((await service.deps.db.select().from(outboundRecipients)).filter((r) => r.messageId === id)).toEqual([]);
  });

  it('defers on a refused connection and bounces 4.4.7 without suppression after 5 days', async () => {
    const { key, name, account } = await sender();
    dns.add('down.example', { type: 'MX', priority: 10, exchange: 'mx.down.example' });
    dns.add('mx.down.example', { type: 'A', address: '127.0.0.2' });
    const id = await send(key, `billing@${name}`, 'x@down.example');
    let rounds = 0;
    for (;;) {
      await engine.runOnce();
      rounds++;
      const next = await one(service.deps.db.select().from(outboundRecipients).where(eq(outboundRecipients.messageId, id)));
      if (!next) break;
      service.clock.set(next.nextAttemptAt);
      if (rounds > 100) throw new Error('never expired');
    }
    const email = await events(key, id);
    const statuses = email.events.map((e: { status: string }) => e.status);
    expect(statuses.slice(0, -1).every((s: string) => s === 'deferred')).toBe(true);
    expect(email.events.at(-1)).toMatchObject({ status: 'bounced', dsn: '4.4.7' });
    expect(email.events[0].dsn).toBe('4.4.1');
    expect(await service.deps.db.select().from(suppressions).where(eq(suppressions.accountId, account.id))).toEqual([]);
  });

  it('bounces a null MX with 5.1.10 and a name that does not exist with 5.1.2; defers a DNS failure', async () => {
    const { key, name } = await sender();
    dns.add('nullmx.example', { type: 'MX', priority: 0, exchange: '.' });
    dns.fail('broken.example');
    const a = await send(key, `billing@${name}`, 'a@nullmx.example');
    const b = await send(key, `billing@${name}`, 'b@nowhere.example');
    const c = await send(key, `billing@${name}`, 'c@broken.example');
    await engine.runOnce();
    expect((await events(key, a)).events[0]).toMatchObject({ status: 'bounced', dsn: '5.1.10' });
    expect((await events(key, b)).events[0]).toMatchObject({ status: 'bounced', dsn: '5.1.2' });
    expect((await events(key, c)).events[0]).toMatchObject({ status: 'deferred', dsn: '4.4.3' });
  });
});

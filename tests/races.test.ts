import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accounts, emails } from '../db/schema/index.js';
import { createDeliveryEngine } from '../mta/delivery-engine.js';
import { type Signer, createSigner } from '../mta/signer.js';
import type { InboundServer } from '../mta/inbound/server.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { verpAddress } from '../mta/verp.js';
import { resetAdminToken } from '../server/core/admin-token.js';
import { findAccount } from '../server/core/accounts.js';
import type { RequestContext } from '../server/core/context.js';
import { deleteDatabase } from '../server/core/customer-db.js';
import { testDatabase } from '../server/customer-db/operations.js';
import { SCOPES } from '../server/core/scopes.js';
import { newId } from '../server/shared/ids.js';
import { dashboardClient } from './helpers/dashboard.js';
import { FAST_TIMEOUTS } from './helpers/delivery-rig.js';
import { TestDnsServer } from './helpers/dns-server.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { newSender, newSubSender, receipt } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { SmtpSink } from './helpers/smtp-sink.js';
import { sendInHalves } from './helpers/split-body.js';
import { one } from '../db/sql.js';

/**
 * Interleavings, each forced deterministically (a held signing build, a request body split in two, a half-sent DATA,
 * a delete between a call and its first await), and what docs/api/behaviour.md and docs/api/contract.md promise for each: a sub-account
 * deleted while its message was built is not sent; a dashboard session ended while a form's body arrived changes
 * nothing; an inbound report is dated when it is recorded, so GET /events?since= finds it; POST /database/test for a
 * database deleted meanwhile is 404 database_not_connected.
 */

/** The signing thread's build, held by the test when `hold` is set (a busy signer, as under load). */
const signerGate = { hold: null as Promise<void> | null, requested: 0 };
function gatedSigner(): Signer {
  const signer = createSigner();
  return {
    ...signer,
    build: async (...b: Parameters<Signer['build']>) => {
      signerGate.requested++;
      if (signerGate.hold) await signerGate.hold;
      return signer.build(...b);
    },
  };
}

const HOST = 'mx.mailstead.test';

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;
let inbound: InboundServer;
let inboundPort: number;

beforeAll(async () => {
  [dns, sink] = await Promise.all([TestDnsServer.start(), SmtpSink.start()]);
  dns.add('example.net', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
  dns.add('mx.example.net', { type: 'A', address: '127.0.0.1' });
  dns.add('db.pg.test', { type: 'A', address: '127.0.0.1' });
  service = await startService({ DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port), ALLOW_PRIVATE_TARGETS: 'true', MAIL_HOSTNAME: HOST });
  inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
  inboundPort = await inbound.listen('127.0.0.1', 0);
}, 120_000);

afterAll(async () => {
  await inbound?.close();
  await service?.close();
  await sink?.stop();
  await dns?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not reached');
    await sleep(10);
  }
}

describe('dashboard: a session ended while a POST form was still arriving', () => {
  it('an admin-token reset (every session ends) before the form body is in: the action does not run, the request goes to sign-in', async () => {
    const client = await dashboardClient(service);
    const { account } = await service.newAccount({ name: 'Grantee', credits: 5 });
    const form = new URLSearchParams({ _csrf: client.csrf, amount: '1000' }).toString();
    const res = await sendInHalves(
      service.url,
      {
        method: 'POST',
        path: `/dashboard/accounts/${account.id}/credits`,
        headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: client.cookie, origin: service.url },
        body: form,
      },
      async () => {
        // What `npm run -s cli -- admin-token reset` does (docs/operating/dashboard.md: "signs every session out").
        await resetAdminToken(service.deps.db);
      },
    );
    // The session was gone before the request was complete: it is refused as any request of an ended session is.
    expect((await findAccount(service.deps.db, account.id))!.creditsBalance).toBe(5);
    expect(String(res.headers.location ?? '')).toMatch(/^\/dashboard\/sign-in/);
  });
});

describe('delivery engine: a sub-account deleted while its message was being built and signed', () => {
  it('is not sent (docs/api/behaviour.md: "A recipient whose account was deleted after the engine claimed it is not sent")', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    const res = await service.api('POST', '/emails', { key: parent.key, account: sub.id, body: receipt(sub.from, 'signed-late@example.net') });
    expect(res.status).toBe(200);
    sink.received = [];
    sink.resetConnections();
    let release!: () => void;
    signerGate.requested = 0;
    signerGate.hold = new Promise<void>((r) => (release = r));
    const signer = gatedSigner();
    const engine = createDeliveryEngine(service.deps, { timeouts: { ...FAST_TIMEOUTS, socketTimeoutMs: 10_000 } }, { signer });
    const run = engine.runOnce();
    try {
      // The signer is busy with this message while the lane has its connection open and waits for it.
      await until(() => signerGate.requested >= 1 && sink.connections >= 1);
      await sleep(300);
      expect((await service.api('DELETE', `/accounts/${sub.id}`, { key: parent.key })).status).toBe(204);
    } finally {
      signerGate.hold = null;
      release();
    }
    await run;
    await signer.close();
    expect(sink.received.flatMap((r) => r.to)).not.toContain('signed-late@example.net');
  });
});

describe('GET /events: an inbound bounce committed after later outcomes', () => {
  function dsn(emailId: string, recipient: string): string {
    return `Return-Path: <>
From: MAILER-DAEMON@mail.example.net (Mail Delivery System)
To: ${verpAddress(emailId, 0, HOST, service.deps.secretKey)}
Subject: Undelivered Mail Returned to Sender
Message-ID: <${emailId}.dsn@mail.example.net>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
\tboundary="B1.1763805600/mail.example.net"

--B1.1763805600/mail.example.net
Content-Type: text/plain; charset=us-ascii

Your message could not be delivered.

--B1.1763805600/mail.example.net
Content-Type: message/delivery-status

Reporting-MTA: dns; mail.example.net

Final-Recipient: rfc822; ${recipient}
Action: failed
Status: 5.1.1
Diagnostic-Code: smtp; 550 5.1.1 <${recipient}>: User unknown

--B1.1763805600/mail.example.net--
`.replace(/\r?\n/g, '\r\n');
  }

  it('is dated when it is recorded: a consumer following the recipe of docs/api/behaviour.md (since=<last seen occurredAt>) sees it', async () => {
    const sender = await newSender(service);
    const sentEmail = async (to: string) => {
      const id = newId(service.clock.now());
      await service.deps.db.insert(emails).values({
        id,
        accountId: sender.account.id,
        fromAddress: sender.from,
        to: [to],
        subject: 's',
        template: 'receipt',
        status: 'sent',
        sandbox: false,
        createdAt: service.clock.now(),
      });
      return id;
    };
    const slow = await sentEmail('slow@example.net');
    const fast = await sentEmail('fast@example.net');

    // A slow client starts sending the first bounce (a large DSN, a slow link)...
    const { client: a } = await RawSmtp.connect(inboundPort);
    const replies = await a.envelope('', [verpAddress(slow, 0, HOST, service.deps.secretKey)]);
    expect(replies[2]).toMatch(/^250 /);
    expect(await a.command('DATA')).toMatch(/^354 /);
    const first = dsn(slow, 'slow@example.net');
    a.write(first.slice(0, 200));
    await sleep(200);

    // ...a minute later another bounce arrives whole and is recorded.
    service.clock.advance(60_000);
    const { client: b } = await RawSmtp.connect(inboundPort);
    await b.envelope('', [verpAddress(fast, 0, HOST, service.deps.secretKey)]);
    expect(await b.command('DATA')).toMatch(/^354 /);
    b.write(`${dsn(fast, 'fast@example.net')}\r\n.\r\n`);
    expect(await b.reply()).toMatch(/^250 /);
    b.close();

    // The consumer reconciles: it has seen everything up to the newest outcome.
    const seen = await service.api('GET', '/events', { key: sender.key });
    expect(seen.status).toBe(200);
    expect(seen.body.data.map((e: { emailId: string }) => e.emailId)).toEqual([fast]);
    const lastSeen = seen.body.data[0].occurredAt as string;

    // The slow bounce completes and is recorded now.
    service.clock.advance(1_000);
    a.write(`${first.slice(200)}\r\n.\r\n`);
    expect(await a.reply()).toMatch(/^250 /);
    a.close();

    // docs/api/behaviour.md, Event feed: "walk GET /events?since=<last seen occurredAt> and skip ids already handled".
    const next = await service.api('GET', `/events?since=${encodeURIComponent(lastSeen)}`, { key: sender.key });
    expect(next.status).toBe(200);
    expect(next.body.data.map((e: { emailId: string }) => e.emailId)).toContain(slow);
  });
});

describe('POST /database/test: the database deleted while the test connected', () => {
  let pgServer: TestPostgres;
  beforeAll(async () => {
    pgServer = await startPostgres({ certificate: 'trusted' });
  }, 120_000);
  afterAll(async () => {
    await pgServer?.stop();
  });

  it('answers 404 database_not_connected, never a fresh "connected" status of a database that is gone', async () => {
    const { account, key } = await service.newAccount();
    const res = await service.api('POST', '/database', { key, body: { url: pgServer.url('db.pg.test') } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const ctx: RequestContext = {
      keyId: 'k',
      keyAccount: account,
      scopes: SCOPES,
      account: (await findAccount(service.deps.db, account.id))!,
      viaHeader: false,
    };
    // DELETE /database lands while the test is connecting (the webhook ping's sibling: 404 once deleted meanwhile):
    // the test has found the database and looks its host up; the lookup waits until the delete has committed.
    let connecting!: () => void;
    const lookingUp = new Promise<void>((resolve) => (connecting = resolve));
    let deleted!: () => void;
    const deletion = new Promise<void>((resolve) => (deleted = resolve));
    const resolver = new Proxy(service.deps.resolver, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver);
        if (typeof value !== 'function') return value;
        return async (...args: unknown[]) => {
          connecting();
          await deletion;
          return value.apply(target, args);
        };
      },
    });
    const pending = testDatabase({ deps: { ...service.deps, resolver }, ctx });
    await lookingUp;
    await deleteDatabase({ deps: service.deps, ctx });
    deleted();
    const outcome = await pending.then(
      (status) => ({ ok: true as const, status }),
      (err: { code?: string }) => ({ ok: false as const, code: err.code }),
    );
    expect((await service.api('GET', '/database', { key })).body.connected).toBe(false);
    expect(outcome).toEqual({ ok: false, code: 'database_not_connected' });
    expect(await one(service.deps.db.select().from(accounts).where(eq(accounts.id, account.id)))).toBeDefined();
  });
});

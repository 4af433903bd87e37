import { randomUUID } from 'node:crypto';
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDeliveryEngine, type DeliveryEngine } from '../mta/delivery-engine.js';
import { FAST_TIMEOUTS, resetDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { TestDnsServer } from './helpers/dns-server.js';
import {
  connectDomain,
  emailRows,
  exhaustCredits,
  getAccount,
  newSender,
  newSubSender,
  outboundMessagesOf,
  queuedRecipientsOf,
  receipt,
  recipients,
  type Sender,
  sendEmail,
  suspendByOperator,
  uniqueDomain,
  useQuota,
} from './helpers/sending.js';
import { onOtherConnection, startService, type TestService } from './helpers/service.js';
import { SmtpSink } from './helpers/smtp-sink.js';
import { startSubmission, type SubmissionRig } from './helpers/submission.js';
import { message, SubmissionClient } from './helpers/submission-client.js';

/**
 * Issue 35's refusals on the submission ports, from outside: each refusal answers its reply code and enhanced code
 * (decisions.md section 10), and leaves the state as it was: no Email in `GET /emails`, the credits and `sentToday`
 * of `GET /account` unchanged, nothing in the outbound queue, and nothing at the SMTP sink after a delivery run.
 * Where a refusal is of one recipient or one header, the rest of the message goes on: the sink receives it for the
 * others only, and without the header.
 *
 * Every connection comes from a loopback address of its own (127.0.x.y): the server counts failed authentications
 * per address, and the lock-out of one test must not reach another.
 */

/** Small, so a message over it is quick to write; every other message of the file is far under it. */
const MAX_BYTES = 32_768;
const MINUTE = 60_000;

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;
let engine: DeliveryEngine;
let submission: SubmissionRig;

beforeAll(async () => {
  // The delivery rig of tests/helpers/delivery-rig.ts, with the message size limit of this file.
  dns = await TestDnsServer.start();
  sink = await SmtpSink.start();
  service = await startService({
    DNS_SERVERS: dns.address,
    SMTP_DELIVERY_PORT: String(sink.port),
    ALLOW_PRIVATE_TARGETS: 'true',
    SUBMISSION_MAX_MESSAGE_BYTES: String(MAX_BYTES),
  });
  engine = createDeliveryEngine(service.deps, { timeouts: FAST_TIMEOUTS });
  submission = await startSubmission(service);
});

afterAll(async () => {
  await submission?.close();
  await stopDeliveryRig({ dns, sink, service });
});

beforeEach(async () => {
  // Whatever a failed test left queued is delivered now, not into the next test's sink.
  await engine.runOnce();
  resetDeliveryRig({ dns, sink });
});

let addressCounter = 0;
/** A loopback source address no other connection of this file has used. */
function freshAddress(): string {
  const n = addressCounter++;
  return `127.0.${10 + Math.floor(n / 250)}.${(n % 250) + 1}`;
}

/** A connection greeted with 220, on the STARTTLS port or (secure) the implicit-TLS one. */
async function open(opts: { secure?: boolean; from?: string } = {}): Promise<SubmissionClient> {
  const { client, banner } = await SubmissionClient.connect(opts.secure ? submission.securePort : submission.port, {
    tls: opts.secure,
    localAddress: opts.from ?? freshAddress(),
  });
  expect(banner).toMatch(/^220 /);
  return client;
}

/** On the STARTTLS port: EHLO, STARTTLS, EHLO again; the second EHLO's reply is `ehlo`. */
async function secured(from?: string): Promise<{ client: SubmissionClient; ehlo: string }> {
  const client = await open({ from });
  expect(await client.command('EHLO app.example')).toMatch(/^250[ -]/);
  expect(await client.startTls()).toMatch(/^220 /);
  const ehlo = await client.command('EHLO app.example');
  expect(ehlo).toMatch(/^250[ -]/);
  return { client, ehlo };
}

/** Secured and authenticated with `key` as the password and `user` as the user name. */
async function authed(key: string, user = 'wordpress', from?: string): Promise<SubmissionClient> {
  const { client } = await secured(from);
  expect(await client.authPlain(user, key)).toMatch(/^235 /);
  return client;
}

/**
 * The first reply on the way from connecting on the STARTTLS port (or the implicit-TLS one) to AUTH PLAIN that is not a step forward (220, 250,
 * 235 for the AUTH): the 421 of a locked-out address may come at the banner or at any later step.
 */
async function firstRefusal(from: string, key: string, secure = false): Promise<{ reply: string; client: SubmissionClient }> {
  const { client, banner } = await SubmissionClient.connect(secure ? submission.securePort : submission.port, { tls: secure, localAddress: from });
  const steps = secure
    ? [async () => banner, () => client.command('EHLO app.example')]
    : [async () => banner, () => client.command('EHLO app.example'), () => client.startTls(), () => client.command('EHLO app.example')];
  for (const step of steps) {
    const reply = await step();
    if (!/^(220|250)[ -]/.test(reply)) return { reply, client };
  }
  return { reply: await client.authPlain('wordpress', key), client };
}

/** A message as an application writes it, From and To as given. */
const mail = (from: string, to: string[], extra: Record<string, string> = {}): string =>
  message({ From: from, To: to.join(', '), Subject: 'Your receipt', ...extra });

/** MAIL FROM, each RCPT TO and DATA with `msg`: every reply, `data` being the reply to the message (or to DATA). */
async function transaction(client: SubmissionClient, from: string, to: string[], msg: string): Promise<{ mail: string; rcpt: string[]; data: string }> {
  const mailReply = await client.command(`MAIL FROM:<${from}>`);
  const rcpt: string[] = [];
  for (const r of to) rcpt.push(await client.command(`RCPT TO:<${r}>`));
  return { mail: mailReply, rcpt, data: await client.data(msg) };
}

/** The email id of `250 2.0.0 Ok: queued as <id>`. */
function queuedId(reply: string): string {
  const m = /^250 2\.0\.0 Ok: queued as (\S+)$/.exec(reply);
  expect(m, reply).not.toBeNull();
  return m![1]!;
}

interface State {
  emails: string[];
  logged: number;
  balance: number;
  sentToday: number;
  queuedMessages: number;
  queuedRecipients: number;
}

/** What a refusal must leave as it was, for the key's account or (account) the sub-account it acts for. */
async function stateOf(key: string, accountId: string, account?: string): Promise<State> {
  const list = await service.api('GET', '/emails?limit=100', { key, account });
  expect(list.status).toBe(200);
  const acc = await getAccount(service, key, account);
  return {
    emails: list.body.data.map((e: { id: string }) => e.id),
    logged: (await emailRows(service, accountId)).length,
    balance: acc.credits.balance,
    sentToday: acc.sending.sentToday,
    queuedMessages: (await outboundMessagesOf(service, accountId)).length,
    queuedRecipients: (await queuedRecipientsOf(service, accountId)).length,
  };
}

const senderState = (s: Sender) => stateOf(s.key, s.account.id);

/** After a delivery run, the state is `before` and the sink has received nothing. */
async function expectNothingSent(s: Sender, before: State): Promise<void> {
  await engine.runOnce();
  expect(await senderState(s)).toEqual(before);
  expect(sink.received).toEqual([]);
}

/** The recipients the sink received messages for, sorted. */
const deliveredTo = () => sink.received.flatMap((r) => r.to).sort();

describe('TLS before AUTH', () => {
  it('on the STARTTLS port, EHLO offers STARTTLS and no AUTH before TLS; AUTH in plain text is 538 5.7.11 and MAIL before AUTH 530 5.7.0', async () => {
    const s = await newSender(service);
    const before = await senderState(s);
    const client = await open();
    const plainEhlo = await client.command('EHLO app.example');
    expect(plainEhlo).toMatch(/^250[- ]STARTTLS$/m);
    expect(plainEhlo).not.toMatch(/AUTH/);
    // A good key sent in plain text, by either mechanism, is refused and does not authenticate.
    expect(await client.authPlain('wordpress', s.key)).toMatch(/^538 5\.7\.11 Encryption required for requested authentication mechanism/);
    expect(await client.command('AUTH LOGIN')).toMatch(/^538 5\.7\.11 /);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^530 5\.7\.0 Authentication required/);

    expect(await client.startTls()).toMatch(/^220 /);
    const tlsEhlo = await client.command('EHLO app.example');
    expect(tlsEhlo).toMatch(/^250[- ]AUTH PLAIN LOGIN$/m);
    expect(tlsEhlo).not.toMatch(/STARTTLS/);
    // Still not authenticated after TLS: MAIL is refused until AUTH.
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^530 5\.7\.0 Authentication required/);
    expect(await client.authPlain('wordpress', s.key)).toMatch(/^235 /);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^250 /);
    client.close();
    await expectNothingSent(s, before);
  });

  it('on the implicit-TLS port AUTH is offered at once and works; MAIL before it is 530 5.7.0', async () => {
    const s = await newSender(service);
    const client = await open({ secure: true });
    const ehlo = await client.command('EHLO app.example');
    expect(ehlo).toMatch(/^250[- ]AUTH PLAIN LOGIN$/m);
    expect(ehlo).not.toMatch(/STARTTLS/);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^530 5\.7\.0 /);
    expect(await client.authLogin('wordpress', s.key)).toMatch(/^235 /);
    const r = await transaction(client, s.from, ['ada@example.net'], mail(s.from, ['ada@example.net']));
    const id = queuedId(r.data);
    client.close();
    await engine.runOnce();
    expect(deliveredTo()).toEqual(['ada@example.net']);
    expect((await service.api('GET', `/emails/${id}`, { key: s.key })).body).toMatchObject({ id, source: 'smtp', to: ['ada@example.net'] });
  });

  it('refuses mechanisms other than PLAIN and LOGIN, and they do not authenticate', async () => {
    const s = await newSender(service);
    const before = await senderState(s);
    const { client, ehlo } = await secured();
    expect(ehlo).not.toMatch(/CRAM-MD5|XOAUTH2/);
    expect(await client.command('AUTH CRAM-MD5')).toMatch(/^504 /);
    expect(await client.command(`AUTH XOAUTH2 ${Buffer.from(`user=wordpress\x01auth=Bearer ${s.key}\x01\x01`).toString('base64')}`)).toMatch(/^504 /);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^530 5\.7\.0 /);
    client.close();
    await expectNothingSent(s, before);
  });
});

describe('the key', () => {
  const mint = async (s: Sender, scopes?: string[]): Promise<{ id: string; key: string }> => {
    const res = await service.api('POST', '/keys', { key: s.key, body: { name: 'wordpress', ...(scopes ? { scopes } : {}) } });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return { id: res.body.id, key: res.body.key };
  };
  const revoke = async (s: Sender, id: string) => expect((await service.api('DELETE', `/keys/${id}`, { key: s.key })).status).toBe(204);

  it('a wrong key is 535 5.7.8 by PLAIN and by LOGIN, and does not authenticate', async () => {
    const s = await newSender(service);
    const before = await senderState(s);
    const { client } = await secured();
    expect(await client.authPlain('wordpress', `${s.key}x`)).toMatch(/^535 5\.7\.8 /);
    expect(await client.authLogin('wordpress', 'not-a-key-at-all')).toMatch(/^535 5\.7\.8 /);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^530 5\.7\.0 /);
    client.close();
    await expectNothingSent(s, before);
  });

  it('a revoked key is 535 5.7.8', async () => {
    const s = await newSender(service);
    const minted = await mint(s);
    // It works until revoked.
    (await authed(minted.key)).close();
    await revoke(s, minted.id);
    const before = await senderState(s);
    const { client } = await secured();
    expect(await client.authPlain('wordpress', minted.key)).toMatch(/^535 5\.7\.8 /);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^530 5\.7\.0 /);
    client.close();
    await expectNothingSent(s, before);
  });

  it('a key without emails:send is 535 5.7.8', async () => {
    const s = await newSender(service);
    const minted = await mint(s, ['emails:read', 'domains:read']);
    const before = await senderState(s);
    const { client } = await secured();
    expect(await client.authPlain('wordpress', minted.key)).toMatch(/^535 5\.7\.8 /);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^530 5\.7\.0 /);
    client.close();
    await expectNothingSent(s, before);
  });

  it('a key revoked after a successful AUTH is refused at the next MAIL FROM with 535 5.7.8', async () => {
    const s = await newSender(service);
    const minted = await mint(s);
    const client = await authed(minted.key);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^250 /);
    expect(await client.command('RSET')).toMatch(/^250 /);
    const before = await senderState(s);
    await revoke(s, minted.id);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^535 5\.7\.8 /);
    client.close();
    await expectNothingSent(s, before);
  });

  it('nothing of a key appears in the logs', async () => {
    const s = await newSender(service);
    const minted = await mint(s);
    const wrong = `${minted.key.slice(0, -4)}zzzz`;
    const { client } = await secured();
    expect(await client.authPlain('wordpress', wrong)).toMatch(/^535 /);
    expect(await client.authLogin('wordpress', minted.key)).toMatch(/^235 /);
    client.close();
    await client.closedByServer();
    const logs = JSON.stringify(service.logger.entries);
    for (const secret of [
      minted.key,
      wrong,
      minted.key.slice(-20),
      Buffer.from(`\0wordpress\0${wrong}`).toString('base64'),
      Buffer.from(minted.key).toString('base64'),
    ])
      expect(logs).not.toContain(secret);
  });
});

describe('the lock-out after failed authentications', () => {
  /** A failed AUTH from `from`: every third on the implicit-TLS port (both ports count together), PLAIN and LOGIN in turn. */
  const fail = async (from: string, key: string, i: number): Promise<string> => {
    const client = i % 3 === 0 ? await open({ secure: true, from }) : (await secured(from)).client;
    if (i % 3 === 0) expect(await client.command('EHLO app.example')).toMatch(/^250[ -]/);
    const reply = i % 2 === 0 ? await client.authPlain('wordpress', `${key}x`) : await client.authLogin('wordpress', `${key}x`);
    if (reply.startsWith('535')) client.close();
    else await client.closedByServer(2000);
    return reply;
  };

  it('the 10th failure from one address in 15 minutes is 421 4.7.0 and closes; a good key from it is 421 until 15 minutes have passed', async () => {
    const s = await newSender(service);
    const before = await senderState(s);
    const locked = freshAddress();
    for (let i = 1; i <= 9; i++) expect(await fail(locked, s.key, i)).toMatch(/^535 5\.7\.8 /);
    {
      const { client } = await secured(locked);
      expect(await client.authPlain('wordpress', `${s.key}x`)).toMatch(/^421 4\.7\.0 Too many failed authentications/);
      expect(await client.closedByServer()).toBe(true);
    }
    // Every connection from that address, a good key included.
    for (const [key, secure] of [
      [s.key, false],
      [s.key, true],
      [`${s.key}x`, false],
    ] as const) {
      const { reply, client } = await firstRefusal(locked, key, secure);
      expect(reply).toMatch(/^421 4\.7\.0 /);
      expect(await client.closedByServer()).toBe(true);
    }
    // Another address is not locked out.
    (await authed(s.key)).close();
    await expectNothingSent(s, before);

    service.clock.advance(15 * MINUTE - 1000);
    {
      const { reply, client } = await firstRefusal(locked, s.key);
      expect(reply).toMatch(/^421 4\.7\.0 /);
      expect(await client.closedByServer()).toBe(true);
    }
    service.clock.advance(2000);
    const client = await authed(s.key, 'wordpress', locked);
    const r = await transaction(client, s.from, ['ada@example.net'], mail(s.from, ['ada@example.net']));
    queuedId(r.data);
    client.close();
    await engine.runOnce();
    expect(deliveredTo()).toEqual(['ada@example.net']);
  });

  it('failures more than 15 minutes apart do not add up', async () => {
    const s = await newSender(service);
    const from = freshAddress();
    for (let i = 1; i <= 9; i++) expect(await fail(from, s.key, i)).toMatch(/^535 5\.7\.8 /);
    service.clock.advance(15 * MINUTE + 1000);
    expect(await fail(from, s.key, 10)).toMatch(/^535 5\.7\.8 /);
    (await authed(s.key, 'wordpress', from)).close();
  });
});

describe('the From header', () => {
  const cases: {
    name: string;
    from: (s: Sender, other: Sender) => Promise<string | null>;
    /** A second From field, after the first. */
    second?: (s: Sender) => string;
    text?: (domain: string) => string;
  }[] = [
    {
      name: 'on a domain not connected to any account',
      from: async () => `billing@${uniqueDomain('nobody')}`,
      text: (d) => `The domain ${d} is not connected to this account.`,
    },
    {
      name: "on another account's domain",
      from: async (_s, other) => other.from,
      text: (d) => `The domain ${d} is not connected to this account.`,
    },
    {
      name: 'on a domain whose ownership is not proven',
      from: async (s) => {
        const d = uniqueDomain('pending');
        await connectDomain(service, s.key, d, { state: 'pending' });
        return `billing@${d}`;
      },
      text: (d) => `The domain ${d} is not verified yet: publish its records and call verify.`,
    },
    {
      name: 'on a domain that is not ready to send',
      from: async (s) => {
        const d = uniqueDomain('owned');
        await connectDomain(service, s.key, d, { state: 'ownership' });
        return `billing@${d}`;
      },
      text: (d) => `Sending is not enabled for ${d}: publish its Signing and SPF records and call verify.`,
    },
    { name: 'missing', from: async () => null },
    { name: 'with two mailboxes', from: async (s) => `${s.from}, other@${s.domain}` },
    { name: 'with two mailboxes in a group', from: async (s) => `Team: ${s.from}, other@${s.domain};` },
    { name: 'given twice', from: async (s) => s.from, second: (s) => `other@${s.domain}` },
  ];

  for (const c of cases) {
    it(`${c.name}: 550 5.7.1 at the end of DATA, nothing sent; the session goes on`, async () => {
      const s = await newSender(service);
      const other = await newSender(service);
      const from = await c.from(s, other);
      const before = await senderState(s);
      const client = await authed(s.key);
      const msg =
        from === null
          ? message({ To: 'ada@example.net', Subject: 'Your receipt' })
          : message({ From: from, To: 'ada@example.net', Subject: 'Your receipt', ...(c.second ? { from: c.second(s) } : {}) });
      const r = await transaction(client, s.from, ['ada@example.net'], msg);
      expect(r.mail).toMatch(/^250 /);
      expect(r.rcpt).toEqual([expect.stringMatching(/^250 /)]);
      expect(r.data).toMatch(/^550 5\.7\.1 /);
      if (c.text && from) expect(r.data).toBe(`550 5.7.1 ${c.text(from.split('@')[1]!)}`);
      await expectNothingSent(s, before);

      // The refusal was of that message: a good one in the same session is accepted.
      const ok = await transaction(client, s.from, ['ada@example.net'], mail(s.from, ['ada@example.net']));
      queuedId(ok.data);
      client.close();
      await engine.runOnce();
      expect(deliveredTo()).toEqual(['ada@example.net']);
    });
  }
});

describe('recipients', () => {
  it('a suppressed recipient among good ones is refused alone at RCPT; the message goes to the others', async () => {
    const s = await newSender(service);
    const added = await service.api('POST', '/suppressions', { key: s.key, body: { address: 'blocked@example.net' } });
    expect(added.status, JSON.stringify(added.body)).toBe(201);
    const before = await senderState(s);
    const client = await authed(s.key);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^250 /);
    expect(await client.command('RCPT TO:<ada@example.net>')).toMatch(/^250 /);
    const refused = await client.command('RCPT TO:<blocked@example.net>');
    expect(refused).toMatch(/^550 5\.7\.1 /);
    expect(refused).toContain('blocked@example.net is on the suppression list');
    // Compared lower-cased, as the API compares.
    expect(await client.command('RCPT TO:<Blocked@EXAMPLE.net>')).toMatch(/^550 5\.7\.1 /);
    expect(await client.command('RCPT TO:<cy@example.net>')).toMatch(/^250 /);
    const id = queuedId(await client.data(mail(s.from, ['ada@example.net', 'blocked@example.net', 'cy@example.net'])));
    client.close();

    await engine.runOnce();
    expect(deliveredTo()).toEqual(['ada@example.net', 'cy@example.net']);
    const email = await service.api('GET', `/emails/${id}`, { key: s.key });
    expect(email.body).toMatchObject({ id, source: 'smtp', to: ['ada@example.net', 'cy@example.net'] });
    const after = await senderState(s);
    expect(after.sentToday).toBe(before.sentToday + 2);
    expect(after.emails).toEqual([id, ...before.emails]);
  });

  describe('a recipient suppressed between its RCPT and the end of DATA refuses the message whole: 550 5.7.1 naming it, nothing sent', () => {
    const cases: { name: string; suppress: (s: Sender) => Promise<void> }[] = [
      {
        name: 'by POST /suppressions',
        async suppress(s) {
          const added = await service.api('POST', '/suppressions', { key: s.key, body: { address: 'later@example.net' } });
          expect(added.status, JSON.stringify(added.body)).toBe(201);
        },
      },
      {
        name: 'by another connection to the database (the CLI, sqlite3)',
        async suppress(s) {
          await onOtherConnection(service, `insert into suppressions (id, account_id, address, reason, detail, created_at) values (?, ?, ?, 'manual', '', ?)`, [
            randomUUID(),
            s.account.id,
            'later@example.net',
            service.clock.now(),
          ]);
        },
      },
    ];
    for (const c of cases) {
      it(c.name, async () => {
        const s = await newSender(service);
        const client = await authed(s.key);
        expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^250 /);
        expect(await client.command('RCPT TO:<ada@example.net>')).toMatch(/^250 /);
        expect(await client.command('RCPT TO:<later@example.net>')).toMatch(/^250 /);
        await c.suppress(s);
        const before = await senderState(s);
        expect(await client.data(mail(s.from, ['ada@example.net', 'later@example.net']))).toBe(
          '550 5.7.1 Suppressed recipients, nothing was sent: later@example.net.',
        );
        client.close();
        await expectNothingSent(s, before);
      });
    }
  });

  it("a sub-account's session refuses at RCPT what its parent's list holds, naming the sub-account's own reason first when both lists hold it", async () => {
    const parent = await newSender(service);
    const child = await newSubSender(service, parent.key);
    for (const address of ['parents@example.net', 'both@example.net']) {
      const added = await service.api('POST', '/suppressions', { key: parent.key, body: { address } });
      expect(added.status, JSON.stringify(added.body)).toBe(201);
    }
    await onOtherConnection(
      service,
      `insert into suppressions (id, account_id, address, reason, detail, created_at) values (?, ?, 'both@example.net', 'complaint', '', ?)`,
      [randomUUID(), child.id, service.clock.now()],
    );
    const client = await authed(parent.key, child.id);
    expect(await client.command(`MAIL FROM:<${child.from}>`)).toMatch(/^250 /);
    expect(await client.command('RCPT TO:<parents@example.net>')).toBe('550 5.7.1 parents@example.net is on the suppression list (manual); not sent to it.');
    expect(await client.command('RCPT TO:<both@example.net>')).toBe('550 5.7.1 both@example.net is on the suppression list (complaint); not sent to it.');
    expect(await client.command('RCPT TO:<ada@example.net>')).toMatch(/^250 /);
    queuedId(await client.data(mail(child.from, ['ada@example.net'])));
    client.close();
  });

  it('the 51st recipient is 452 4.5.3; the first 50 are accepted and receive the message', async () => {
    const s = await newSender(service);
    const before = await senderState(s);
    const to = recipients(52);
    const client = await authed(s.key);
    const r = await transaction(client, s.from, to, mail(s.from, ['list@example.net']));
    expect(r.mail).toMatch(/^250 /);
    expect(r.rcpt.slice(0, 50)).toEqual(Array.from({ length: 50 }, () => expect.stringMatching(/^250 /)));
    expect(r.rcpt[50]).toMatch(/^452 4\.5\.3 /);
    expect(r.rcpt[51]).toMatch(/^452 4\.5\.3 /);
    const id = queuedId(r.data);
    client.close();

    await engine.runOnce();
    expect(deliveredTo()).toEqual(to.slice(0, 50).sort());
    const email = await service.api('GET', `/emails/${id}`, { key: s.key });
    expect(email.body.to).toEqual(to.slice(0, 50));
    expect((await senderState(s)).sentToday).toBe(before.sentToday + 50);
  });
});

describe('the message size', () => {
  it(`EHLO advertises SIZE ${MAX_BYTES}; a message over it is 552 5.3.4 at the end of DATA, nothing sent; the session goes on`, async () => {
    const s = await newSender(service);
    const before = await senderState(s);
    const { client, ehlo } = await secured();
    expect(ehlo).toMatch(new RegExp(`^250[- ]SIZE ${MAX_BYTES}$`, 'm'));
    expect(await client.authPlain('wordpress', s.key)).toMatch(/^235 /);
    const big = message({ From: s.from, To: 'ada@example.net', Subject: 'Too big' }, `${'x'.repeat(76)}\n`.repeat(Math.ceil(MAX_BYTES / 76) + 60));
    expect(big.length).toBeGreaterThan(MAX_BYTES);
    const r = await transaction(client, s.from, ['ada@example.net'], big);
    expect(r.mail).toMatch(/^250 /);
    expect(r.data).toMatch(/^552 5\.3\.4 /);
    await expectNothingSent(s, before);

    const ok = await transaction(client, s.from, ['ada@example.net'], mail(s.from, ['ada@example.net']));
    queuedId(ok.data);
    client.close();
    await engine.runOnce();
    expect(deliveredTo()).toEqual(['ada@example.net']);
  });

  it('a MAIL FROM declaring a SIZE over it is 552 5.3.4, as the end of DATA words it; at the limit it is taken', async () => {
    const s = await newSender(service);
    const before = await senderState(s);
    const client = await authed(s.key);
    expect(await client.command(`MAIL FROM:<${s.from}> SIZE=${MAX_BYTES + 1}`)).toMatch(/^552 5\.3\.4 /);
    expect(await client.command(`MAIL FROM:<${s.from}> SIZE=${MAX_BYTES}`)).toMatch(/^250 /);
    client.close();
    await expectNothingSent(s, before);
  });
});

describe('the account', () => {
  const atData: { name: string; set: (s: Sender) => void; reply: RegExp }[] = [
    {
      name: 'over the quota',
      set: (s) => useQuota(service, s.account.id, 0),
      reply: /^451 4\.7\.1 The daily quota of this account has 0 recipients left today/,
    },
    {
      name: 'without credits',
      set: (s) => exhaustCredits(service, s.account.id),
      reply: /^550 5\.7\.1 This account has no credits left and its grace window has closed\./,
    },
    {
      name: 'suspended',
      set: (s) => suspendByOperator(service, s.account.id, 'Suspended by support: unpaid invoices.'),
      reply: /^550 5\.7\.1 Suspended by support: unpaid invoices\./,
    },
  ];

  // Judged at the end of DATA, after the Message-ID (a retry of a message that spent the last credit or quota is
  // answered with its id, as an Idempotency-Key replay is): MAIL FROM and RCPT are taken.
  for (const c of atData) {
    it(`${c.name}: refused at the end of DATA with its code, nothing sent`, async () => {
      const s = await newSender(service, { credits: 10 });
      c.set(s);
      const before = await senderState(s);
      const client = await authed(s.key);
      const r = await transaction(client, s.from, ['ada@example.net'], mail(s.from, ['ada@example.net']));
      expect(r.mail).toMatch(/^250 /);
      expect(r.data).toMatch(c.reply);
      client.close();
      await expectNothingSent(s, before);
      // The same refusal through the API, as a control that the account is in the state meant.
      expect((await sendEmail(service, s.key, receipt(s.from))).status).not.toBe(200);
    });
  }

  it('suspended between MAIL FROM and the end of DATA: 550 5.7.1 at the end of DATA, nothing sent', async () => {
    const s = await newSender(service, { credits: 10 });
    const client = await authed(s.key);
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^250 /);
    expect(await client.command('RCPT TO:<ada@example.net>')).toMatch(/^250 /);
    await suspendByOperator(service, s.account.id, 'Suspended by support: unpaid invoices.');
    const before = await senderState(s);
    expect(await client.data(mail(s.from, ['ada@example.net']))).toMatch(/^550 5\.7\.1 Suspended by support: unpaid invoices\./);
    client.close();
    await expectNothingSent(s, before);
  });

  it('with fewer recipients left in the quota than RCPTs: 451 4.7.1 at the end of DATA, nothing sent; within it, accepted', async () => {
    const s = await newSender(service, { credits: 10 });
    await useQuota(service, s.account.id, 1);
    const before = await senderState(s);
    const client = await authed(s.key);
    const r = await transaction(client, s.from, ['ada@example.net', 'cy@example.net'], mail(s.from, ['ada@example.net', 'cy@example.net']));
    expect(r.mail).toMatch(/^250 /);
    expect(r.data).toMatch(/^451 4\.7\.1 The daily quota of this account has 1 recipients left today/);
    await expectNothingSent(s, before);

    const ok = await transaction(client, s.from, ['ada@example.net'], mail(s.from, ['ada@example.net']));
    queuedId(ok.data);
    client.close();
    await engine.runOnce();
    expect(deliveredTo()).toEqual(['ada@example.net']);
    const after = await senderState(s);
    expect({ balance: after.balance, sentToday: after.sentToday }).toEqual({ balance: before.balance - 1, sentToday: before.sentToday + 1 });
  });
});

describe('the user name', () => {
  it('the id of a sub-account acts for it: the Email is logged on the sub-account and the parent is charged as by the API', async () => {
    const parent = await newSender(service, { credits: 100 });
    const child = await newSubSender(service, parent.key);
    const both = async () => ({ parent: await senderState(parent), child: await stateOf(parent.key, child.id, child.id) });
    const delta = (a: Awaited<ReturnType<typeof both>>, b: Awaited<ReturnType<typeof both>>) => ({
      parentBalance: b.parent.balance - a.parent.balance,
      parentSentToday: b.parent.sentToday - a.parent.sentToday,
      parentEmails: b.parent.emails.length - a.parent.emails.length,
      childSentToday: b.child.sentToday - a.child.sentToday,
      childEmails: b.child.emails.length - a.child.emails.length,
    });

    const s0 = await both();
    expect((await sendEmail(service, parent.key, receipt(child.from, 'ada@example.net'), { account: child.id })).status).toBe(200);
    const s1 = await both();
    const client = await authed(parent.key, child.id);
    // The session acts for the sub-account: the parent's domain is not its own.
    const refused = await transaction(client, parent.from, ['cy@example.net'], mail(parent.from, ['cy@example.net']));
    expect(refused.data).toBe(`550 5.7.1 The domain ${parent.domain} is not connected to this account.`);
    const r = await transaction(client, child.from, ['cy@example.net'], mail(child.from, ['cy@example.net']));
    const id = queuedId(r.data);
    client.close();
    const s2 = await both();
    expect(delta(s1, s2)).toEqual(delta(s0, s1));
    expect(delta(s1, s2)).toMatchObject({ parentBalance: -1, parentEmails: 0, childEmails: 1, childSentToday: 1 });
    expect(s2.child.emails[0]).toBe(id);

    expect((await service.api('GET', `/emails/${id}`, { key: parent.key, account: child.id })).body).toMatchObject({
      id,
      source: 'smtp',
      from: child.from,
      to: ['cy@example.net'],
    });
    expect((await service.api('GET', `/emails/${id}`, { key: parent.key })).status).toBe(404);
    await engine.runOnce();
    expect(deliveredTo()).toEqual(['ada@example.net', 'cy@example.net']);
  });

  it("a UUID that is not a sub-account of the key's account is 535 5.7.8", async () => {
    const s = await newSender(service);
    const stranger = await newSender(service);
    const strangersChild = await newSubSender(service, stranger.key);
    const before = await senderState(s);
    for (const user of ['0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', strangersChild.id, stranger.account.id]) {
      const { client } = await secured();
      expect(await client.authPlain(user, s.key), user).toMatch(/^535 5\.7\.8 /);
      expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^530 5\.7\.0 /);
      client.close();
    }
    await expectNothingSent(s, before);
  });

  it("any other user name is ignored: the session acts for the key's account", async () => {
    const s = await newSender(service);
    const ids: string[] = [];
    for (const user of ['apikey', 'wordpress@blog.example', 'not-a-uuid-0190a1b2']) {
      const client = await authed(s.key, user);
      ids.push(queuedId((await transaction(client, s.from, ['ada@example.net'], mail(s.from, ['ada@example.net']))).data));
      client.close();
    }
    // And an empty one, by PLAIN (as Python's smtplib sends `login('', key)`).
    const { client } = await secured();
    expect(await client.authPlain('', s.key)).toMatch(/^235 /);
    ids.push(queuedId((await transaction(client, s.from, ['ada@example.net'], mail(s.from, ['ada@example.net']))).data));
    client.close();
    expect((await senderState(s)).emails.sort()).toEqual(ids.sort());
    await engine.runOnce();
    expect(sink.received).toHaveLength(4);
  });
});

describe('Bcc', () => {
  it('is removed from every copy the sink receives; a Bcc address that is a RCPT still receives the message', async () => {
    const s = await newSender(service);
    const client = await authed(s.key);
    const msg = message({
      From: s.from,
      To: 'ada@example.net',
      Bcc: 'hidden@example.net,\r\n\tsecret-other@example.org',
      Subject: 'Your receipt',
      bcc: 'lower@example.org',
    });
    const r = await transaction(client, s.from, ['ada@example.net', 'hidden@example.net'], msg);
    const id = queuedId(r.data);
    client.close();
    await engine.runOnce();
    expect(deliveredTo()).toEqual(['ada@example.net', 'hidden@example.net']);
    for (const copy of sink.received) {
      const text = copy.raw.toString('latin1');
      expect(text).not.toMatch(/^bcc:/im);
      expect(text).not.toContain('secret-other@example.org');
      expect(text).not.toContain('lower@example.org');
      const parsed = await simpleParser(copy.raw);
      expect(parsed.bcc).toBeUndefined();
      expect(parsed.subject).toBe('Your receipt');
      expect(parsed.text?.trim()).toBe('Hello from an application that only speaks SMTP.');
    }
    expect((await service.api('GET', `/emails/${id}`, { key: s.key })).body.to).toEqual(['ada@example.net', 'hidden@example.net']);
  });
});

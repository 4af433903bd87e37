import { randomBytes } from 'node:crypto';
import { simpleParser } from 'mailparser';
import MailComposer from 'nodemailer/lib/mail-composer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { verpAddress } from '../mta/verp.js';
import { commitSubmission } from '../server/core/submission.js';
import { authenticateSubmission } from '../server/core/submission-auth.js';
import { createCustomerDbWriter } from '../server/customer-db/writer.js';
import { createWebhookDispatcher } from '../server/webhooks/dispatcher.js';
import { type DeliveryRig, resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { publishSigningRecord, verifyDkim } from './helpers/dkim-check.js';
import { HttpsReceiver } from './helpers/https-receiver.js';
import { startPostgres, type TestPostgres } from './helpers/postgres.js';
import { accountRow, DAY, emailRows, exhaustCredits, expectError, useQuota, newSender, receipt, type Sender } from './helpers/sending.js';
import { plainSubmission, startSubmission } from './helpers/submission.js';
import {
  type Envelope,
  fieldName,
  fieldValue,
  nodemailerSubmit,
  type PythonMessage,
  pythonSubmit,
  queuedId,
  type SubmissionMode,
  splitMessage,
} from './helpers/submit-clients.js';

/**
 * Issue 35's whole path, from outside: the two clients most applications stand for, nodemailer and Python's smtplib,
 * submit over the STARTTLS port (the 587 role) and the implicit-TLS port (465) with an API key as the password, and
 * each message reaches a real SMTP sink DKIM-signed (verified by mailauth), with the VERP return path as envelope
 * sender, one transaction per RCPT address, the client's header and body byte for byte (only the DKIM-Signature
 * prepended, and Message-ID and Date added when the client left them out), and the email id of the `250` reply logged
 * with `source: "smtp"`, its events, and a webhook post. Then the Message-ID de-duplication of decisions.md section 10:
 * a retry after a lost reply gets the same id and is sent once; another account, or the same one 24 hours later, sends
 * anew.
 */

let rig: DeliveryRig;
let submission: Awaited<ReturnType<typeof startSubmission>>;
let receiver: HttpsReceiver;

beforeAll(async () => {
  rig = await startDeliveryRig();
  submission = await startSubmission(rig.service);
  receiver = await HttpsReceiver.start();
});

afterAll(async () => {
  await submission?.close();
  await receiver?.close();
  await stopDeliveryRig(rig);
});

beforeEach(() => {
  resetDeliveryRig(rig);
  rig.dns.add('hooks.webhooks.test', { type: 'A', address: '127.0.0.1' });
  receiver.respond({ status: 200 });
});

const HOST = 'mx.mailstead.test';

/** Bytes that are not text, so any re-encoding of an attachment would show. */
const BLOB = Buffer.from(Array.from({ length: 2500 }, (_, i) => (i * 131 + 7) % 256));

/** A sender with its Signing record published and a webhook endpoint for `email.delivered`. */
async function prepared(): Promise<{ s: Sender; auth: { user: string; pass: string } }> {
  const s = await newSender(rig.service);
  await publishSigningRecord(rig.service, rig.dns, s);
  const hook = await rig.service.api('POST', '/webhooks', {
    key: s.key,
    body: { url: `https://hooks.webhooks.test:${receiver.port}/mailstead`, events: ['email.delivered'] },
  });
  expect(hook.status, JSON.stringify(hook.body)).toBe(201);
  // The user name is anything an application's form wants filled in.
  return { s, auth: { user: 'wordpress', pass: s.key } };
}

interface Expected {
  s: Sender;
  id: string;
  /** The exact bytes the client gave to DATA. */
  sent: Buffer;
  envelope: Envelope;
  /** The subject as GET /emails/{id} shows it, decoded. */
  subject: string;
  /** Whether the client wrote Message-ID and Date itself (kept) or left them out (added by the service). */
  clientIds: boolean;
}

/**
 * Delivers, then checks everything the issue promises of one submitted message: at the sink, in the log, in the
 * events and at the webhook receiver.
 */
async function expectDelivered(x: Expected): Promise<void> {
  const { service, sink, engine } = rig;
  await engine.runOnce();

  // One transaction per RCPT address, each with its own VERP return path naming this email and the recipient's place.
  const arrived = sink.received.filter((r) => x.envelope.to.includes(r.to[0]!));
  expect(arrived.map((r) => r.to)).toEqual(expect.arrayContaining(x.envelope.to.map((t) => [t])));
  expect(arrived).toHaveLength(x.envelope.to.length);
  for (const r of arrived) {
    const index = x.envelope.to.indexOf(r.to[0]!);
    expect(r.from, `the return path of ${r.to[0]}`).toBe(verpAddress(x.id, index, HOST, service.deps.secretKey));
    expect(r.from).not.toBe(x.envelope.from);
  }

  const email = await service.api('GET', `/emails/${x.id}`, { key: x.s.key });
  expect(email.status, JSON.stringify(email.body)).toBe(200);

  const sentParts = splitMessage(x.sent);
  for (const r of arrived) {
    const dkim = await verifyDkim(service, r.raw);
    expect(
      dkim.results.map((d: { status: { result: string }; signingDomain: string }) => [d.status.result, d.signingDomain]),
      `DKIM of the copy to ${r.to[0]}`,
    ).toEqual([['pass', x.s.domain]]);

    const got = splitMessage(r.raw);
    // The body byte for byte: the MIME parts and their encodings as the client wrote them.
    expect(got.body.equals(sentParts.body), 'the body as the client sent it').toBe(true);
    // The header: the DKIM-Signature prepended, and nothing else changed but Message-ID and Date added when missing.
    expect(fieldName(got.fields[0]!)).toBe('dkim-signature');
    const rest = got.fields.slice(1);
    if (x.clientIds) {
      expect(rest).toEqual(sentParts.fields);
    } else {
      const added = rest.filter((f) => ['message-id', 'date'].includes(fieldName(f)));
      expect(added.map(fieldName).sort()).toEqual(['date', 'message-id']);
      expect(rest.filter((f) => !added.includes(f))).toEqual(sentParts.fields);
      expect(fieldValue(added.find((f) => fieldName(f) === 'message-id')!)).toBe(`<${x.id}@${HOST}>`);
      const date = fieldValue(added.find((f) => fieldName(f) === 'date')!);
      expect(date).toMatch(/^(?:[A-Z][a-z]{2}, )?\d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}$/);
      // The service's (injected) clock at acceptance, not some other time.
      expect(Math.abs(Date.parse(date) - Date.parse(email.body.createdAt))).toBeLessThan(1000);
    }
  }

  const parsed = await simpleParser(arrived[0]!.raw);
  expect(parsed.subject).toBe(x.subject);

  expect(email.body).toMatchObject({
    id: x.id,
    source: 'smtp',
    template: null,
    templateVersion: null,
    subject: x.subject,
    from: x.s.from,
    to: x.envelope.to,
    status: 'sent',
    sandbox: false,
  });
  const delivered = (email.body.events as { recipient: string; status: string }[]).filter((e) => e.status === 'delivered');
  expect(delivered.map((e) => e.recipient).sort()).toEqual([...x.envelope.to].sort());

  // Nothing of the key in the log (debug level included): neither the key nor the AUTH exchange that carried it.
  const logged = JSON.stringify(service.logger.entries);
  for (const secret of [x.s.key, Buffer.from(`\0wordpress\0${x.s.key}`).toString('base64'), Buffer.from(x.s.key).toString('base64')]) {
    expect(logged.includes(secret), 'the key, or the AUTH line carrying it, in the log').toBe(false);
  }

  // The webhook endpoint hears of each delivery of this email.
  const before = receiver.requests.length;
  await createWebhookDispatcher(service.deps).runOnce();
  const posts = receiver.requests.slice(before).map((req) => JSON.parse(req.body.toString('utf8')));
  const mine = posts.filter((p) => p.data?.messageId === x.id);
  expect(mine.map((p) => [p.type, p.data.recipient]).sort()).toEqual(x.envelope.to.map((t) => ['email.delivered', t]).sort());
}

/**
 * What nodemailer sends for a message object: its own composer's boundaries, encodings and folding, with the line
 * endings its SMTP transport writes (CRLF throughout; `newline: 'windows'` is that conversion).
 */
function composed(mail: ConstructorParameters<typeof MailComposer>[0]): Promise<Buffer> {
  return new MailComposer({ ...mail, newline: 'windows' }).compile().build();
}

describe('nodemailer submits with an API key as the password', () => {
  it('over STARTTLS (the 587 role): a multipart message with an attachment and a non-ASCII subject, its own Message-ID and Date kept', async () => {
    const { s, auth } = await prepared();
    const subject = 'Ihre Rechnung für März ✓';
    const sent = await composed({
      from: `Acme Billing <${s.from}>`,
      to: 'ada@example.net',
      cc: 'bob@example.net',
      subject,
      text: 'Hallo Ada,\nanbei die Rechnung.\n.\nEine Zeile, die mit einem Punkt beginnt, steht darüber.\n',
      html: '<p>Hallo <b>Ada</b>, anbei die Rechnung.</p>',
      attachments: [{ filename: 'rechnung.pdf', content: BLOB, contentType: 'application/pdf' }],
      messageId: `<nodemailer-${randomBytes(6).toString('hex')}@app.example.org>`,
      date: new Date('2026-03-10T11:59:30Z'),
    });
    expect(sent.toString('latin1')).toMatch(/^Message-ID: /m);
    expect(sent.toString('latin1')).toMatch(/^Subject: =\?UTF-8\?/m);
    const envelope = { from: s.from, to: ['ada@example.net', 'bob@example.net'] };
    const response = await nodemailerSubmit(submission, 'starttls', auth, envelope, sent);
    const id = queuedId(response);
    await expectDelivered({ s, id, sent, envelope, subject, clientIds: true });
  });

  it('over implicit TLS (the 465 role): a hand-written message without Message-ID or Date gets both', async () => {
    const { s, auth } = await prepared();
    const sent = Buffer.from(
      [
        `From: ${s.from}`,
        'To: carol@example.net',
        'Subject: Your export is ready',
        'MIME-Version: 1.0',
        'Content-Type: multipart/mixed; boundary="==part-7f3a=="',
        '',
        'This is a multi-part message in MIME format.',
        '--==part-7f3a==',
        'Content-Type: text/plain; charset=utf-8',
        'Content-Transfer-Encoding: 8bit',
        '',
        'Grüße, Carol.',
        '.a line that starts with a dot',
        '..and one with two',
        'trailing spaces   ',
        '',
        '--==part-7f3a==',
        'Content-Type: application/octet-stream; name="export.bin"',
        'Content-Disposition: attachment; filename="export.bin"',
        'Content-Transfer-Encoding: base64',
        '',
        ...(BLOB.toString('base64').match(/.{1,76}/g) ?? []),
        '--==part-7f3a==--',
        '',
      ].join('\r\n'),
      'utf8',
    );
    const envelope = { from: s.from, to: ['carol@example.net'] };
    const response = await nodemailerSubmit(submission, 'tls', auth, envelope, sent);
    const id = queuedId(response);
    await expectDelivered({ s, id, sent, envelope, subject: 'Your export is ready', clientIds: false });
    // The attachment decodes to its bytes.
    const parsed = await simpleParser(rig.sink.received.find((r) => r.to[0] === 'carol@example.net')!.raw);
    expect(parsed.attachments[0]?.content.equals(BLOB)).toBe(true);
  });
});

describe("Python's smtplib submits with an API key as the password", () => {
  const pythonMessage = (s: Sender, to: string, extra: Partial<PythonMessage> = {}): PythonMessage => ({
    from: `Acme Shop <${s.from}>`,
    to,
    subject: 'Bestellbestätigung Nr. 1042 – vielen Dank',
    text: 'Hallo,\n\nwir haben Ihre Bestellung erhalten.\n.\nGrüße\n',
    html: '<p>Hallo,</p><p>wir haben Ihre Bestellung <em>erhalten</em>.</p>',
    attachment: { filename: 'beleg.bin', content_b64: BLOB.toString('base64'), type: 'application/octet-stream' },
    ...extra,
  });

  for (const [mode, role, clientIds] of [
    ['starttls', '587', true],
    ['tls', '465', false],
  ] as [SubmissionMode, string, boolean][]) {
    it(`over ${mode === 'tls' ? 'implicit TLS' : 'STARTTLS'} (the ${role} role), Message-ID and Date ${clientIds ? 'set by the client and kept' : 'left out and added'}`, async () => {
      const { s, auth } = await prepared();
      // Two RCPT addresses, one of them named in no header (as a Bcc the client removed itself).
      const envelope = { from: s.from, to: [`dora-${role}@example.net`, `ed-${role}@example.net`] };
      const message = pythonMessage(
        s,
        envelope.to[0]!,
        clientIds ? { message_id: `<py-${randomBytes(6).toString('hex')}@app.example.org>`, date: 'Tue, 10 Mar 2026 11:58:00 +0000' } : {},
      );
      const result = await pythonSubmit(submission, mode, auth, envelope, message);
      expect(result.code).toBe(250);
      const id = queuedId(`${result.code} ${result.reply}`);
      expect(result.sent.toString('latin1')).toMatch(/^Subject: =\?utf-8\?/im);
      expect(/^Message-ID:/im.test(result.sent.toString('latin1'))).toBe(clientIds);
      await expectDelivered({ s, id, sent: result.sent, envelope, subject: message.subject, clientIds });
    });
  }
});

describe('GET /emails?source', () => {
  it('lists a submitted email under smtp and an API send under api; any other value is 422 invalid_request', async () => {
    const { s, auth } = await prepared();
    const sent = await composed({ from: s.from, to: 'gus@example.net', subject: 'Listed', text: 'Hi' });
    const smtpId = queuedId(await nodemailerSubmit(submission, 'starttls', auth, { from: s.from, to: ['gus@example.net'] }, sent));
    const api = await rig.service.api('POST', '/emails', { key: s.key, body: receipt(s.from, 'hal@example.net') });
    expect(api.status, JSON.stringify(api.body)).toBe(200);
    const apiId = api.body.id as string;

    const ids = async (query: string) => {
      const res = await rig.service.api('GET', `/emails${query}`, { key: s.key });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return (res.body.data as { id: string; source: string }[]).map((e) => [e.id, e.source]);
    };
    expect(await ids('?source=smtp')).toEqual([[smtpId, 'smtp']]);
    expect(await ids('?source=api')).toEqual([[apiId, 'api']]);
    expect((await ids('')).sort()).toEqual(
      [
        [apiId, 'api'],
        [smtpId, 'smtp'],
      ].sort(),
    );
    const apiEmail = await rig.service.api('GET', `/emails/${apiId}`, { key: s.key });
    expect(apiEmail.body).toMatchObject({ source: 'api', template: 'receipt' });

    for (const bad of ['bogus', 'SMTP', '']) {
      const res = await rig.service.api('GET', `/emails?source=${bad}`, { key: s.key });
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message, `source=${bad}`).toContain('source');
    }
    // Both delivered, so that later tests' sink holds only their own.
    await rig.engine.runOnce();
    expect(rig.sink.received.map((r) => r.to[0]).sort()).toEqual(['gus@example.net', 'hal@example.net']);
  });
});

describe('Message-ID de-duplication (decisions.md section 10)', () => {
  /** A message with a fixed Message-ID, as a client retrying it would send it again byte for byte. */
  const withMessageId = (s: Sender, messageId: string, to: string) =>
    composed({ from: s.from, to, subject: 'Password reset', text: 'Your code is 424242.', messageId, date: new Date('2026-03-10T11:00:00Z') });

  it('the same Message-ID from the same account, retried after a lost reply, gets the same id and is sent once', async () => {
    const { service, sink, engine } = rig;
    const { s, auth } = await prepared();
    const messageId = `<retry-${randomBytes(6).toString('hex')}@app.example.org>`;
    const to = 'ivy@example.net';
    const envelope = { from: s.from, to: [to] };
    const pm: PythonMessage = {
      from: s.from,
      to,
      subject: 'Password reset',
      text: 'Your code is 424242.\n',
      message_id: messageId,
      date: 'Tue, 10 Mar 2026 11:00:00 +0000',
    };

    // The first attempt: the whole message and its final dot go out, then the connection drops before the reply.
    await pythonSubmit(submission, 'tls', auth, envelope, pm, { dropReply: true });
    const deadline = Date.now() + 10_000;
    while ((await emailRows(service, s.account.id)).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const logged = await emailRows(service, s.account.id);
    expect(logged, 'the message whose reply was lost is queued').toHaveLength(1);

    // The retry gets the id of the message already queued, and so does a third attempt over the other port.
    const retry = await pythonSubmit(submission, 'starttls', auth, envelope, pm);
    expect(retry.code).toBe(250);
    expect(queuedId(`250 ${retry.reply}`)).toBe(logged[0]!.id);
    const third = await pythonSubmit(submission, 'tls', auth, envelope, pm);
    expect(queuedId(`250 ${third.reply}`)).toBe(logged[0]!.id);
    expect(await emailRows(service, s.account.id)).toHaveLength(1);

    await engine.runOnce();
    await engine.runOnce();
    const mine = () => sink.received.filter((r) => r.to[0] === to);
    expect(mine().map((r) => r.from)).toEqual([verpAddress(logged[0]!.id, 0, HOST, service.deps.secretKey)]);
    const email = await service.api('GET', `/emails/${logged[0]!.id}`, { key: s.key });
    expect(email.body.events.filter((e: { status: string }) => e.status === 'delivered')).toHaveLength(1);
    // One message counted: one recipient against today's quota, one sent.
    expect(await accountRow(service, s.account.id)).toMatchObject({ sentTodayCount: 1, totalSent: 1 });

    // A fourth, also with nodemailer and a reply that arrives: the same id, and still nothing sent again.
    const again = await nodemailerSubmit(submission, 'starttls', auth, envelope, await withMessageId(s, messageId, to));
    expect(queuedId(again)).toBe(logged[0]!.id);
    await engine.runOnce();
    expect(mine()).toHaveLength(1);
  });

  it('the same Message-ID submitted on two connections at once is one email, sent once', async () => {
    const { service, sink, engine } = rig;
    const { s, auth } = await prepared();
    const to = 'lou@example.net';
    const sent = await withMessageId(s, `<twice-${randomBytes(6).toString('hex')}@app.example.org>`, to);
    const replies = await Promise.all(
      (['starttls', 'tls', 'starttls', 'tls'] as const).map((mode) => nodemailerSubmit(submission, mode, auth, { from: s.from, to: [to] }, sent)),
    );
    const ids = new Set(replies.map(queuedId));
    expect(ids.size).toBe(1);
    expect((await emailRows(service, s.account.id)).map((e) => e.id)).toEqual([...ids]);
    await engine.runOnce();
    expect(sink.received.filter((r) => r.to[0] === to)).toHaveLength(1);
  });

  it('submissions of one account committed in one batch: a Message-ID queued earlier in the batch answers the later ones with its id', async () => {
    // Four commits issued in one turn share one batch of the group commit, in this order: x, y, x, x. On Postgres their
    // readings are taken ahead together, before any of them wrote, so the later x's learn of the first from the
    // batch itself (server/core/submission.ts carrySubmission); on SQLite each reads in its turn.
    const { service, sink, engine } = rig;
    const { s } = await prepared();
    const deps = service.deps;
    const auth = await authenticateSubmission(deps, 'wordpress', s.key);
    const tag = randomBytes(6).toString('hex');
    const x = `<batch-x-${tag}@app.example.org>`;
    const y = `<batch-y-${tag}@app.example.org>`;
    const submission = (messageId: string, to: string) => plainSubmission(deps, s.from, messageId, to);
    const batch = [submission(x, 'xa@example.net'), submission(y, 'ya@example.net'), submission(x, 'xb@example.net'), submission(x, 'xc@example.net')];
    const answers = await Promise.all(batch.map((one) => commitSubmission(deps, auth, one)));
    expect(answers).toEqual([
      { id: batch[0]!.id, duplicate: false },
      { id: batch[1]!.id, duplicate: false },
      { id: batch[0]!.id, duplicate: true },
      { id: batch[0]!.id, duplicate: true },
    ]);
    expect((await emailRows(service, s.account.id)).map((e) => e.id).sort()).toEqual([batch[0]!.id, batch[1]!.id].sort());
    // Two messages counted, one recipient each.
    expect(await accountRow(service, s.account.id)).toMatchObject({ sentTodayCount: 2, totalSent: 2 });
    await engine.runOnce();
    expect(
      sink.received
        .map((r) => r.to[0])
        .filter((to) => /^(xa|xb|xc|ya)@/.test(to!))
        .sort(),
    ).toEqual(['xa@example.net', 'ya@example.net']);
  });

  it('the same Message-ID from another account is a new email, and from the same account once 24 hours have passed', async () => {
    const { service, sink, engine } = rig;
    const a = await prepared();
    const b = await prepared();
    const tag = randomBytes(6).toString('hex');
    // Two Message-IDs: one seen again near the end of the window, one seen again only after it (a sighting within the
    // window could be read as renewing it; each check stands apart from that reading).
    const near = `<near-${tag}@app.example.org>`;
    const past = `<past-${tag}@app.example.org>`;
    const to = 'jo@example.net';
    const submit = async (x: typeof a, messageId: string, mode: SubmissionMode = 'starttls') =>
      queuedId(await nodemailerSubmit(submission, mode, x.auth, { from: x.s.from, to: [to] }, await withMessageId(x.s, messageId, to)));
    const verp = (id: string) => verpAddress(id, 0, HOST, service.deps.secretKey);

    const nearA = await submit(a, near);
    const pastA = await submit(a, past);
    const nearB = await submit(b, near);
    expect(new Set([nearA, pastA, nearB]).size).toBe(3);
    await engine.runOnce();
    const mine = () => sink.received.filter((r) => r.to[0] === to).map((r) => r.from);
    expect(mine().sort()).toEqual([verp(nearA), verp(pastA), verp(nearB)].sort());

    // A minute before the 24 hours are up: still the same id, nothing sent.
    service.clock.advance(DAY - 60_000);
    expect(await submit(a, near, 'tls')).toBe(nearA);
    expect(await submit(b, near, 'tls')).toBe(nearB);
    // Past them: a new email, sent again.
    service.clock.advance(60_001);
    const pastLater = await submit(a, past, 'tls');
    expect(pastLater).not.toBe(pastA);
    await engine.runOnce();
    expect(mine().slice(3)).toEqual([verp(pastLater)]);
    expect((await emailRows(service, a.s.account.id)).map((e) => e.id).sort()).toEqual([nearA, pastA, pastLater].sort());
    expect((await emailRows(service, b.s.account.id)).map((e) => e.id)).toEqual([nearB]);
  });
});

describe('Message-ID de-duplication before the per-message checks', () => {
  it('a retry of a message that spent the last quota or credit is answered with its id, not refused (as an Idempotency-Key replay is)', async () => {
    const { service, sink, engine } = rig;
    for (const spend of ['quota', 'credits'] as const) {
      const { s, auth } = await prepared();
      const to = `kai-${spend}@example.net`;
      const messageId = `<last-${spend}-${randomBytes(6).toString('hex')}@app.example.org>`;
      const sent = await composed({ from: s.from, to, subject: 'Last one', text: 'The last message today.', messageId });
      const id = queuedId(await nodemailerSubmit(submission, 'starttls', auth, { from: s.from, to: [to] }, sent));
      // That message took what was left.
      if (spend === 'quota') await useQuota(service, s.account.id, 0);
      else await exhaustCredits(service, s.account.id);
      // A new message is refused now, as POST /emails is...
      const fresh = await composed({ from: s.from, to, subject: 'One more', text: 'Over the limit.' });
      await expect(nodemailerSubmit(submission, 'starttls', auth, { from: s.from, to: [to] }, fresh)).rejects.toMatchObject({
        responseCode: spend === 'quota' ? 451 : 550,
      });
      // ...but the client whose reply was lost, retrying the one already queued, learns its id and nothing is sent again.
      const retried = await nodemailerSubmit(submission, 'starttls', auth, { from: s.from, to: [to] }, sent).catch((err: { response?: string }) =>
        String(err.response),
      );
      expect(retried, spend).toBe(`250 2.0.0 Ok: queued as ${id}`);
      await engine.runOnce();
      expect(sink.received.filter((r) => r.to[0] === to)).toHaveLength(1);
    }
  });
});

describe('the customer database', () => {
  let pgServer: TestPostgres;
  beforeAll(async () => {
    pgServer = await startPostgres({ certificate: 'trusted' });
  }, 120_000);
  afterAll(() => pgServer?.stop());

  it("gets the submitted email with source 'smtp' and the message as submitted, then its delivered event", { timeout: 60_000 }, async () => {
    const { s, auth } = await prepared();
    const connected = await rig.service.api('POST', '/database', { key: s.key, body: { url: pgServer.url('localhost') } });
    expect(connected.status, JSON.stringify(connected.body)).toBe(200);
    const writer = createCustomerDbWriter(rig.service.deps);
    const client = await pgServer.connect();
    try {
      const text = 'Hello Lea,\r\nyour parcel left the warehouse.\r\n';
      const html = '<p>Hello Lea, your parcel <b>left</b> the warehouse.</p>';
      const sent = await composed({ from: s.from, to: 'lea@example.net', subject: 'Versandbestätigung', text, html });
      const id = queuedId(await nodemailerSubmit(submission, 'starttls', auth, { from: s.from, to: ['lea@example.net'] }, sent));
      await writer.runOnce();
      const row = (await client.query('select * from service.emails where id = $1', [id])).rows[0];
      expect(row).toMatchObject({
        account_id: s.account.id,
        source: 'smtp',
        from_address: s.from,
        to_addresses: ['lea@example.net'],
        subject: 'Versandbestätigung',
        template: null,
        status: 'sent',
      });
      // The message as submitted, byte for byte, instead of rendered parts.
      expect(row).toMatchObject({ html: null, text: null });
      expect(Buffer.isBuffer(row.raw) && row.raw.equals(sent), 'raw is the submitted message').toBe(true);

      await rig.engine.runOnce();
      await writer.runOnce();
      const events = (await client.query('select recipient, status from service.events where email_id = $1', [id])).rows;
      expect(events).toEqual([{ recipient: 'lea@example.net', status: 'delivered' }]);
    } finally {
      await writer.stop();
      await client.end();
    }
  });
});

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { submittedMessages } from '../db/schema/index.js';
import { sql } from 'drizzle-orm';
import { execute, queryRows } from '../db/sql.js';
import { PRUNE_BATCH, PRUNE_EVERY_MS, pruneStatement, pruneSubmittedMessageIds } from '../server/core/submission.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { DAY, type Sender, bulkRows, emailRows, expectPlanThroughIndex, newSender, queued, queuedRecipientsOf } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { type SubmissionRig, startSubmission } from './helpers/submission.js';

/**
 * The submission server's edges (docs/api/decisions.md section 10, issue 35 point 1): what EHLO offers before and
 * after TLS, SIZE, the bounds it shares with inbound (early talkers, connections per address, idle time, bare LF), a
 * message with no body and one whose header never ends, the key's rate limit counted per message, and nothing of a key
 * in the logs. Refusals of the rules are tests/submission-refusals.test.ts; delivery is tests/submission-delivery.test.ts.
 */

const MAX_BYTES = 400_000;
let service: TestService;
let rig: SubmissionRig;
let s: Sender;
const open: RawSmtp[] = [];

beforeAll(async () => {
  service = await startService({ SUBMISSION_MAX_MESSAGE_BYTES: String(MAX_BYTES), RATE_LIMIT_PER_KEY: '1000' });
  rig = await startSubmission(service, { maxPerAddress: 3, socketTimeoutMs: 400 });
  s = await newSender(service);
});

afterAll(async () => {
  await rig.close();
  await service.close();
});

afterEach(() => {
  for (const c of open.splice(0)) c.close();
});

const plain = (key: string) => Buffer.from(`\0anything\0${key}`).toString('base64');

/** A client on the STARTTLS port after STARTTLS and EHLO, authenticated with `key`. */
async function authenticated(key = s.key): Promise<RawSmtp> {
  const { client } = await RawSmtp.connect(rig.port);
  open.push(client);
  await client.command('EHLO client.example');
  const secure = await client.startTls();
  open.push(secure);
  await secure.command('EHLO client.example');
  expect(await secure.command(`AUTH PLAIN ${plain(key)}`)).toMatch(/^235 /);
  return secure;
}

describe('EHLO', () => {
  it('on the STARTTLS port: STARTTLS and SIZE, no AUTH before TLS; AUTH PLAIN LOGIN after it', async () => {
    const { client, banner } = await RawSmtp.connect(rig.port);
    open.push(client);
    expect(banner).toMatch(/^220 mx\.mailstead\.test ESMTP/);
    const before = await client.command('EHLO client.example');
    expect(before).toContain('STARTTLS');
    expect(before).toContain(`SIZE ${MAX_BYTES}`);
    expect(before).not.toMatch(/AUTH/);
    const secure = await client.startTls();
    open.push(secure);
    const after = await secure.command('EHLO client.example');
    expect(after).toMatch(/250[- ]AUTH PLAIN LOGIN/);
    expect(after).not.toContain('STARTTLS');
  });

  it('on the implicit-TLS port: AUTH PLAIN LOGIN at once, no STARTTLS', async () => {
    const { client } = await RawSmtp.connectSecure(rig.securePort);
    open.push(client);
    const ehlo = await client.command('EHLO client.example');
    expect(ehlo).toMatch(/250[- ]AUTH PLAIN LOGIN/);
    expect(ehlo).not.toContain('STARTTLS');
    expect(await client.command(`AUTH PLAIN ${plain(s.key)}`)).toMatch(/^235 /);
  });
});

describe('the bounds it shares with inbound SMTP', () => {
  it('a client that talks before the greeting is refused 421 and closed', async () => {
    const { client } = await RawSmtp.connect(rig.port, { greet: false });
    open.push(client);
    client.write('EHLO early.example\r\n');
    // smtp-server answers a whole line sent early itself; the start of one held back is the server's own check.
    expect(await client.reply()).toMatch(/^421 .*(You talk too soon|You talked before the greeting)/);
    expect(await client.closedByServer()).toBe(true);
  });

  it('more connections at once from one address than the cap: 421 for the one past it', async () => {
    const clients = [];
    for (let i = 0; i < 3; i++) {
      const { client, banner } = await RawSmtp.connect(rig.port);
      open.push(client);
      expect(banner).toMatch(/^220 /);
      clients.push(client);
    }
    const { client, banner } = await RawSmtp.connect(rig.port);
    open.push(client);
    expect(banner).toMatch(/^421 4\.7\.0 Too many connections from your address/);
  });

  it('more clients at once than maxClients: the one past it is greeted 421 and closed', async () => {
    const small = await startSubmission(service, { maxClients: 2 });
    const mine: RawSmtp[] = [];
    try {
      for (let i = 0; i < 2; i++) {
        const { client, banner } = await RawSmtp.connect(small.port);
        mine.push(client);
        expect(banner).toMatch(/^220 /);
      }
      const { client, banner } = await RawSmtp.connect(small.port);
      mine.push(client);
      expect(banner).toMatch(/^421 .*Too many connected clients/);
      expect(await client.closedByServer()).toBe(true);
    } finally {
      for (const c of mine) c.close();
      await small.close();
    }
  });

  it('a session that outlives maxSessionMs is closed, however busy it keeps', async () => {
    const short = await startSubmission(service, { maxSessionMs: 600, socketTimeoutMs: 5_000 });
    const { client } = await RawSmtp.connect(short.port);
    open.push(client);
    try {
      const started = Date.now();
      // A NOOP every 100 ms: never idle, and closed all the same once its 600 ms are up.
      while (!client.closed && Date.now() - started < 5_000) {
        client.write('NOOP\r\n');
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(client.closed).toBe(true);
      expect(Date.now() - started).toBeLessThan(3_000);
    } finally {
      await short.close();
    }
  });

  it('an idle client is told 421 and closed after the idle bound', async () => {
    const { client } = await RawSmtp.connect(rig.port);
    open.push(client);
    expect(await client.reply(5_000)).toMatch(/^421 /);
    expect(await client.closedByServer()).toBe(true);
  });

  it('a bare LF in DATA is 550 5.6.0 and nothing is queued', async () => {
    const client = await authenticated();
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^250 /);
    expect(await client.command('RCPT TO:<ada@example.net>')).toMatch(/^250 /);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write(`From: ${s.from}\r\nSubject: x\r\n\r\nline one\nline two\r\n.\r\n`);
    expect(await client.reply()).toMatch(/^550 5\.6\.0 Bare CR or LF/);
    expect(await emailRows(service, s.account.id)).toEqual([]);
    expect(await queuedRecipientsOf(service, s.account.id)).toEqual([]);
    expect(await service.deps.metrics.registry.metrics()).toMatch(/mailstead_submission_refused_total\{stage="data",code="550"\} [1-9]/);
  });

  it('a message past SUBMISSION_MAX_MESSAGE_BYTES is 552 5.3.4, and nothing is queued', async () => {
    const client = await authenticated();
    expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^250 /);
    expect(await client.command('RCPT TO:<ada@example.net>')).toMatch(/^250 /);
    expect(await client.command('DATA')).toMatch(/^354 /);
    client.write(`From: ${s.from}\r\nSubject: big\r\n\r\n${'x'.repeat(998)}\r\n`.repeat(1 + Math.ceil(MAX_BYTES / 1000)));
    client.write('.\r\n');
    expect(await client.reply()).toMatch(/^552 5\.3\.4 /);
    expect(await emailRows(service, s.account.id)).toEqual([]);
  });
});

describe('what the header may be', () => {
  it('a message that is all header (no blank line, no body) is queued with Message-ID and Date added', async () => {
    const client = await authenticated();
    await client.command(`MAIL FROM:<${s.from}>`);
    await client.command('RCPT TO:<ada@example.net>');
    await client.command('DATA');
    client.write(`From: ${s.from}\r\nSubject: header only\r\n.\r\n`);
    const answer = await client.reply();
    const id = /^250 2\.0\.0 Ok: queued as (\S+)$/.exec(answer)?.[1];
    expect(id, answer).toBeDefined();
    expect(await service.deps.metrics.registry.metrics()).toMatch(/mailstead_submission_accepted_total [1-9]/);
    const raw = (await queued(service, id!)).message!.raw!.toString('latin1');
    expect(raw).toMatch(
      new RegExp(`^From: ${s.from}\\r\\nSubject: header only\\r\\nMessage-ID: <${id}@mx\\.mailstead\\.test>\\r\\nDate: [^\\r]+\\r\\n\\r\\n$`),
    );
  });

  it('a header that never ends within 256 KB is 552 5.3.4', async () => {
    const client = await authenticated();
    await client.command(`MAIL FROM:<${s.from}>`);
    await client.command('RCPT TO:<ada@example.net>');
    await client.command('DATA');
    // 330 KB of header fields, under SIZE (400 KB).
    client.write(`From: ${s.from}\r\n${'X-Long: y\r\n'.repeat(30_000)}.\r\n`);
    expect(await client.reply()).toMatch(/^552 5\.3\.4 The message header exceeds 262144 bytes/);
    expect((await emailRows(service, s.account.id)).map((e) => e.subject)).not.toContain('');
  });
});

describe('the key', () => {
  it("each message counts one request against the key's rate limit: past it, MAIL FROM is 450 4.7.1", async () => {
    const limited = await startService({ RATE_LIMIT_PER_KEY: '2' });
    const limitedRig = await startSubmission(limited);
    try {
      const sender = await newSender(limited);
      // A key of its own: newSender's calls to the API took requests of the operator's key.
      const key = await limited.newKey(sender.account.id);
      const { client } = await RawSmtp.connectSecure(limitedRig.securePort);
      open.push(client);
      await client.command('EHLO client.example');
      expect(await client.command(`AUTH PLAIN ${plain(key)}`)).toMatch(/^235 /);
      for (let i = 0; i < 2; i++) {
        expect(await client.command(`MAIL FROM:<${sender.from}>`)).toMatch(/^250 /);
        expect(await client.command('RSET')).toMatch(/^250 /);
      }
      expect(await client.command(`MAIL FROM:<${sender.from}>`)).toMatch(/^450 4\.7\.1 Rate limit reached: over 2 requests a minute from this key/);
      limited.clock.advance(61_000);
      expect(await client.command(`MAIL FROM:<${sender.from}>`)).toMatch(/^250 /);
    } finally {
      await limitedRig.close();
      await limited.close();
    }
  });

  it('never appears in a log line, whether AUTH succeeds or fails', async () => {
    const before = service.logger.entries.length;
    await authenticated();
    const { client } = await RawSmtp.connectSecure(rig.securePort);
    open.push(client);
    await client.command('EHLO client.example');
    const wrong = `${s.key.slice(0, -4)}abcd`;
    expect(await client.command(`AUTH PLAIN ${plain(wrong)}`)).toMatch(/^535 5\.7\.8 /);
    const lines = JSON.stringify(service.logger.entries.slice(before));
    expect(lines).toContain('submission.authenticated');
    expect(lines).toContain('submission.refused');
    for (const secret of [s.key, wrong, s.key.slice(3, 20), plain(s.key)]) expect(lines).not.toContain(secret);
  });
});

it('Message-IDs older than 24 hours are forgotten', async () => {
  const db = service.deps.db;
  const now = service.clock.now();
  const emailId = (await emailRows(service, s.account.id))[0]?.id;
  expect(emailId, 'an email of an earlier test').toBeDefined();
  await db.insert(submittedMessages).values([
    { accountId: s.account.id, messageId: '<old@client.example>', emailId: emailId!, createdAt: now - 25 * 3_600_000 },
    { accountId: s.account.id, messageId: '<new@client.example>', emailId: emailId!, createdAt: now - 23 * 3_600_000 },
  ]);
  expect(await pruneSubmittedMessageIds({ db }, now)).toBe(1);
  expect((await db.select({ id: submittedMessages.messageId }).from(submittedMessages)).map((r) => r.id)).toContain('<new@client.example>');
});

/** A message with a Message-ID of its own, submitted and queued (250). */
let submitted = 0;
async function submitWithId(): Promise<void> {
  const client = await authenticated();
  expect(await client.command(`MAIL FROM:<${s.from}>`)).toMatch(/^250 /);
  expect(await client.command('RCPT TO:<ada@example.net>')).toMatch(/^250 /);
  expect(await client.command('DATA')).toMatch(/^354 /);
  client.write(`From: ${s.from}\r\nMessage-ID: <prune-${++submitted}-${process.pid}@client.example>\r\nSubject: x\r\n\r\nhello\r\n.\r\n`);
  expect(await client.reply()).toMatch(/^250 /);
}

describe('a backlog of Message-IDs past the window', () => {
  /** `n` entries, created a millisecond apart from `at` on, the last numbered first (so no order but created_at's is oldest first). */
  const staleRows = async (emailId: string, n: number, at: number, tag: string) =>
    await execute(
      service.deps.db,
      sql`insert into submitted_messages (account_id, message_id, email_id, created_at)
          select ${s.account.id}, '<' || ${tag} || '-' || g || '@client.example>', ${emailId}, cast(${at} as bigint) + ${n} - g from (${sql.raw(bulkRows(service, n))}) as bulk`,
    );
  const staleLeft = async (tag: string) =>
    (await queryRows<{ n: number }>(service.deps.db, sql`select count(*) as n from submitted_messages where message_id like ${`<${tag}-%`}`))[0]!.n;

  it('is forgotten a bounded batch at a time, oldest first', async () => {
    const emailId = (await emailRows(service, s.account.id))[0]!.id;
    const old = service.clock.now() - 2 * DAY;
    await staleRows(emailId, 5, old, 'batch');
    expect(await pruneSubmittedMessageIds({ db: service.deps.db }, service.clock.now(), 2)).toBe(2);
    const left = await queryRows<{ id: string }>(
      service.deps.db,
      sql`select message_id as id from submitted_messages where message_id like '<batch-%' order by created_at`,
    );
    expect(left.map((r) => r.id)).toEqual(['<batch-3@client.example>', '<batch-2@client.example>', '<batch-1@client.example>']);
    expect(await pruneSubmittedMessageIds({ db: service.deps.db }, service.clock.now(), 10)).toBe(3);
  });

  it('a full batch lets the next submission forget again at once, until a batch comes back short', async () => {
    const emailId = (await emailRows(service, s.account.id))[0]!.id;
    service.clock.advance(PRUNE_EVERY_MS);
    await staleRows(emailId, PRUNE_BATCH + 1, service.clock.now() - 2 * DAY, 'backlog');
    await submitWithId();
    expect(Number(await staleLeft('backlog'))).toBe(1);
    await submitWithId();
    expect(Number(await staleLeft('backlog'))).toBe(0);
    // That batch came back short: the next is an hour away.
    await staleRows(emailId, 1, service.clock.now() - 2 * DAY, 'after');
    await submitWithId();
    expect(Number(await staleLeft('after'))).toBe(1);
  });

  it('finds them through the index on created_at, never by reading every entry (the plan of its statement)', async () => {
    const emailId = (await emailRows(service, s.account.id))[0]!.id;
    await staleRows(emailId, 5000, service.clock.now() - DAY / 2, 'plan');
    await execute(service.deps.db, sql`analyze submitted_messages`);
    const db = service.deps.db;
    // The 'plan-' entries are all within the window: the statement reads the index's old end and finds none.
    const statement = pruneStatement(db, service.clock.now(), PRUNE_BATCH);
    await expectPlanThroughIndex(service, statement, 'submitted_messages', 'submitted_messages_created_idx');
    await execute(db, sql`delete from submitted_messages where message_id like '<plan-%'`);
  });
});

it('a submission with a Message-ID forgets those past the window, at most once an hour', async () => {
  const db = service.deps.db;
  const emailId = (await emailRows(service, s.account.id))[0]?.id;
  expect(emailId, 'an email of an earlier test').toBeDefined();
  const stale = async (messageId: string) =>
    await db.insert(submittedMessages).values({ accountId: s.account.id, messageId, emailId: emailId!, createdAt: service.clock.now() - DAY - 1 });
  const kept = async () => (await db.select({ id: submittedMessages.messageId }).from(submittedMessages)).map((r) => r.id);

  // An hour after any earlier test's submission, the prune is due: the next submission forgets the stale entry.
  service.clock.advance(PRUNE_EVERY_MS);
  await stale('<stale-1@client.example>');
  await submitWithId();
  expect(await kept()).not.toContain('<stale-1@client.example>');
  // Within the hour it is not run again; once the hour is up, it is.
  await stale('<stale-2@client.example>');
  service.clock.advance(PRUNE_EVERY_MS - 1);
  await submitWithId();
  expect(await kept()).toContain('<stale-2@client.example>');
  service.clock.advance(1);
  await submitWithId();
  expect(await kept()).not.toContain('<stale-2@client.example>');
});

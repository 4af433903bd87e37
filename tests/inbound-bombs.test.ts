import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AUTH_LIMITS, scanHeaderBlock } from '../server/customer-db/inbound/auth-limits.js';
import { UNPARSABLE_ATTACHMENT } from '../server/customer-db/inbound/parse-message.js';
import { createInboundParser } from '../server/customer-db/inbound/parser.js';
import { INLINE_BYTES } from '../mta/inbound/receive.js';
import { createSpoolWriter } from '../db/inbound-spool.js';
import { verdictsOf } from '../server/customer-db/inbound/verdicts.js';
import type { InboundWrite } from '../db/customer/writes.js';
import type { SpooledInboundWrite } from '../server/core/customer-db-outbox.js';
import { loadConfig } from '../server/shared/config.js';
import { createMemoryLogger } from '../server/shared/logger.js';
import { scratchDatabases } from './helpers/customer-db.js';
import { TestDnsServer } from './helpers/dns-server.js';
import {
  type ServiceProcess,
  connectSendingDomain,
  createAccountWithCli,
  processApi,
  processEnv,
  runningProcesses,
  startServiceProcess,
} from './helpers/service-process.js';
import { freePort } from '../scripts/lib/free-port.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';
import { type HealthPolls, quantile, startHealthPoller } from './helpers/health-poller.js';
import { RawSmtp } from './helpers/raw-smtp.js';

/**
 * One small message from anyone could hold the service. mailauth's header parser is quadratic in
 * folded lines (70,000 of them, 280 KB, froze /healthz for 39 s), its DKIM verifier hashes the body once per distinct
 * `l=` (2,000 signatures on 2.2 MB: a minute), large messages were checked on the event loop, and small ones shared
 * one thread, where a 240 KB bomb held another account's mail back 32 s. Now what reaches mailauth is bounded
 * (auth-limits.ts), every parse runs in worker threads, and a thread held by one message is stopped and its other
 * messages parsed again without it.
 */

const folded = (lines: number) => `X-Folded: start\r\n${' x\r\n'.repeat(lines)}`;
const dkimSignatures = (n: number) =>
  Array.from(
    { length: n },
    (_, i) => `DKIM-Signature: v=1; a=rsa-sha256; c=simple/simple; d=bomb.example; s=k${i}; l=${i + 1}; h=from; bh=AAAA; b=AAAA\r\n`,
  ).join('');

describe('scanHeaderBlock: what may reach mailauth (AUTH_LIMITS)', () => {
  const head = (fields: string) => Buffer.from(`From: Someone <someone@example.org>\r\nSubject: hi\r\n${fields}\r\n`);
  const cases: [string, string, string | null][] = [
    ['an ordinary header', 'To: x@example.com\r\n', null],
    [`a field of ${AUTH_LIMITS.fieldLines} lines`, folded(AUTH_LIMITS.fieldLines - 1), null],
    [`a field of ${AUTH_LIMITS.fieldLines + 1} lines`, folded(AUTH_LIMITS.fieldLines), `a header field over ${AUTH_LIMITS.fieldLines} lines`],
    [
      `${AUTH_LIMITS.headerLines + 1} lines in short fields`,
      Array.from({ length: AUTH_LIMITS.headerLines }, (_, i) => `X-${i}: y\r\n`).join(''),
      `header block over ${AUTH_LIMITS.headerLines} lines`,
    ],
    [`${AUTH_LIMITS.dkimSignatures} DKIM signatures`, dkimSignatures(AUTH_LIMITS.dkimSignatures).replace(/ l=\d+;/g, ''), null],
    [
      `${AUTH_LIMITS.dkimSignatures + 1} DKIM signatures`,
      dkimSignatures(AUTH_LIMITS.dkimSignatures + 1).replace(/ l=\d+;/g, ''),
      `over ${AUTH_LIMITS.dkimSignatures} DKIM signatures`,
    ],
    [`${AUTH_LIMITS.bodyLengths} distinct l=`, dkimSignatures(AUTH_LIMITS.bodyLengths), null],
    [
      `${AUTH_LIMITS.bodyLengths + 1} distinct l=`,
      dkimSignatures(AUTH_LIMITS.bodyLengths + 1),
      `over ${AUTH_LIMITS.bodyLengths} distinct DKIM body lengths (l=)`,
    ],
    ['a folded l= counts once per value', dkimSignatures(5).replace(/ l=\d+;/g, ' l=\r\n 7;'), null],
  ];
  it.each(cases)('%s', (_label, fields, reason) => {
    const scan = scanHeaderBlock(head(fields));
    expect(scan.within ? null : scan.reason).toBe(reason);
  });

  it(`a block over ${AUTH_LIMITS.headerBytes} bytes is past the limits (the reader hands over at most one byte more)`, () => {
    const block = Buffer.alloc(AUTH_LIMITS.headerBytes + 1, 'a');
    expect(scanHeaderBlock(block)).toEqual({ within: false, reason: `header block over ${AUTH_LIMITS.headerBytes} bytes` });
  });

  it('finds the From addresses for DMARC when nothing is signed', () => {
    expect(scanHeaderBlock(head('From: "B" <b@example.net>,\r\n c@example.com\r\n'))).toEqual({
      within: true,
      dkimSignatures: 0,
      from: ['someone@example.org', 'b@example.net', 'c@example.com'],
    });
  });
});

describe('verdictsOf on the bombs: stored with DKIM and DMARC temperror, in a bounded time', () => {
  const deps = {
    config: { mailHostname: 'mx.mailstead.test' },
    resolver: {
      txt: async () => ({ status: 'nxdomain' as const }),
      mx: async () => ({ status: 'nxdomain' as const }),
      a: async () => ({ status: 'nxdomain' as const }),
      aaaa: async () => ({ status: 'nxdomain' as const }),
    } as never,
    logger: createMemoryLogger(),
  };
  const w = { remoteAddress: '192.0.2.1', helo: 'bomb.example', mailFrom: 'a@bomb.example' };

  it('70,000 folded lines (280 KB): mailauth is not given it', async () => {
    const raw = Buffer.from(`From: a@bomb.example\r\nSubject: bomb\r\n${folded(70_000)}\r\nbody\r\n`);
    const started = performance.now();
    expect(await verdictsOf(deps, raw, w)).toMatchObject({ dkim: 'temperror', dmarc: 'temperror' });
    // Unbounded, this one message took mailauth 39 s of one thread.
    expect(performance.now() - started).toBeLessThan(5000);
    expect(deps.logger.entries).toContainEqual(
      expect.objectContaining({ event: 'inbound.authenticate_limited', reason: `header block over ${AUTH_LIMITS.headerBytes} bytes` }),
    );
  });

  it('2,000 DKIM signatures with distinct l= on 2.2 MB', async () => {
    const raw = Buffer.from(`${dkimSignatures(2000)}From: a@bomb.example\r\nSubject: bomb\r\n\r\n${'y'.repeat(78).concat('\r\n').repeat(28_000)}`);
    expect(raw.length).toBeGreaterThan(2.2e6);
    const started = performance.now();
    expect(await verdictsOf(deps, raw, w)).toMatchObject({ dkim: 'temperror', dmarc: 'temperror' });
    expect(performance.now() - started).toBeLessThan(5000);
  });
});

describe('the parse threads: a message that holds its thread', () => {
  let dns: TestDnsServer;
  let dataDir: string;
  const key = createHash('sha256').update('bombs').digest();
  beforeAll(async () => {
    dns = await TestDnsServer.start();
    dns.add('sender.example', { type: 'TXT', data: 'v=spf1 ip4:192.0.2.10 -all' });
    dataDir = mkdtempSync(join(tmpdir(), 'mailstead-bombs-'));
  });
  afterAll(async () => {
    await dns.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const stalling = new URL('./fixtures/workers/stalling-parser.mjs', import.meta.url);
  const parserDeps = () => ({
    config: loadConfig({ DATA_DIR: dataDir, DNS_SERVERS: dns.address, MAIL_HOSTNAME: 'mx.mailstead.test' }),
    logger: createMemoryLogger(),
    secretKey: key,
  });
  let n = 0;
  function inboundWrite(subject: string, extra = ''): SpooledInboundWrite {
    const raw = `From: Orders <orders@sender.example>\r\nTo: <support@shop.example>\r\nSubject: ${subject}\r\n\r\nHello ${extra}\r\n`;
    return {
      kind: 'inbound',
      id: `0190c3a0-0000-7000-8000-${String(++n).padStart(12, '0')}`,
      spoolId: null,
      raw: Buffer.from(raw),
      accountId: 'acct',
      toAddresses: ['support@shop.example'],
      mailFrom: 'orders@sender.example',
      remoteAddress: '192.0.2.10',
      helo: 'mail.sender.example',
      receivedAt: Date.parse('2026-03-10T12:00:00Z'),
      size: raw.length,
    };
  }

  it('the other messages of its batch are parsed with their checks; it goes without them, or whole as received', async () => {
    const deps = parserDeps();
    const parser = createInboundParser(deps, { workerUrl: stalling, stallMs: 300 });
    try {
      // The held thread is stopped after 300 ms of its CPU; unstopped, this would wait for ever (the test's timeout).
      const [before, withChecks, always, after] = await parser.parseAll([
        inboundWrite('before'),
        inboundWrite('held with checks', 'HOLD-WITH-CHECKS'),
        inboundWrite('held always', 'HOLD-ALWAYS'),
        inboundWrite('after'),
      ]);
      for (const [row, subject] of [
        [before, 'before'],
        [after, 'after'],
      ] as const) {
        expect(row).toMatchObject({ subject, spf: 'pass', dkim: 'none' });
      }
      expect(withChecks).toMatchObject({ subject: 'held with checks', spf: null, dkim: null, dmarc: null });
      expect(always).toMatchObject({ subject: '', spf: null, attachments: [expect.objectContaining({ filename: UNPARSABLE_ATTACHMENT.filename })] });
      const events = deps.logger.entries.map((e) => e.event);
      expect(events).toContain('inbound.parse_stalled');
      const overBudget = deps.logger.entries.filter((e) => e.event === 'inbound.parse_over_budget').map((e) => [e.id, e.withVerdicts]);
      expect(overBudget.sort()).toEqual(
        [
          [(withChecks as InboundWrite).id, true],
          [(always as InboundWrite).id, true],
          [(always as InboundWrite).id, false],
        ].sort(),
      );
      // The parser goes on: the next batch is parsed in a new thread.
      expect(await parser.parseAll([inboundWrite('next')])).toEqual([expect.objectContaining({ subject: 'next', spf: 'pass' })]);
    } finally {
      await parser.close();
    }
  }, 90_000);

  it("mailauth's console.log lines (a signature's l= past the body) do not reach stdout, where the JSON log lines go", async () => {
    const deps = parserDeps();
    const parser = createInboundParser(deps);
    const written: string[] = [];
    const original = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
      written.push(String(chunk));
      return original(chunk, ...rest);
    }) as typeof process.stdout.write;
    try {
      const signed = inboundWrite('l= past the body');
      const raw = Buffer.concat([
        Buffer.from('DKIM-Signature: v=1; a=rsa-sha256; c=simple/simple; d=sender.example; s=k; l=99999; h=from; bh=AAAA; b=AAAA\r\n'),
        signed.raw!,
      ]);
      const [row] = await parser.parseAll([{ ...signed, raw, size: raw.length }]);
      expect(row).toMatchObject({ subject: 'l= past the body', dkim: expect.any(String) });
      // The thread's stdout reaches this one's asynchronously.
      await new Promise((r) => setTimeout(r, 200));
    } finally {
      process.stdout.write = original;
      await parser.close();
    }
    expect(written.join('')).not.toContain('EXPECTING');
  }, 30_000);

  it('a large message held before its verdicts is streamed again without them', async () => {
    const deps = parserDeps();
    const parser = createInboundParser(deps, { workerUrl: stalling, stallMs: 300 });
    try {
      const id = '0190c3a0-0000-7000-8000-0000000000aa';
      const spool = createSpoolWriter(dataDir, key, id);
      const body = `From: a@sender.example\r\nSubject: large and held\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=big.bin\r\n\r\n${'z'.repeat(600_000)}\r\n--b--\r\n`;
      spool.append(Buffer.from(body));
      await spool.finish();
      const w: SpooledInboundWrite = {
        ...inboundWrite('unused'),
        id,
        spoolId: id,
        raw: undefined,
        mailFrom: 'HOLD-WITH-CHECKS@sender.example',
        size: body.length,
      };
      const events = [];
      for await (const event of parser.parseSpooled(w)) events.push('chunk' in event ? { chunk: event.chunk.byteLength } : event);
      expect(events[0]).toEqual({ verdicts: { spf: null, dkim: null, dmarc: null } });
      expect(events).toContainEqual({ attachment: { filename: 'big.bin', contentType: 'application/octet-stream' } });
      expect(events).toContainEqual({ attachmentEnd: { size: 600_000 } });
      expect(events.at(-1)).toMatchObject({ parsed: { subject: 'large and held' } });
      expect(deps.logger.entries.filter((e) => e.event === 'inbound.parse_over_budget')).toEqual([expect.objectContaining({ id, withVerdicts: true })]);
    } finally {
      await parser.close();
    }
  }, 60_000);
});

describe('the bombs over SMTP, into the customer databases', () => {
  // The service as `npm start` runs it, in its own process: what /healthz measures is the service's own event loop and
  // heap, not the test runner's (whose larger heap made every full collection the service asks for slower).
  let dns: TestDnsServer;
  let pgServer: TestPostgres;
  let dataDir: string;
  let proc: ServiceProcess;
  let port: number;
  let target: { key: string; domain: string };
  let other: { key: string; domain: string };
  const customers: pg.Client[] = [];
  let targetDb: pg.Client;
  let otherDb: pg.Client;

  beforeAll(async () => {
    [dns, pgServer] = await Promise.all([TestDnsServer.start(), startPostgres({ certificate: 'trusted' })]);
    dataDir = mkdtempSync(join(tmpdir(), 'mailstead-bombs-'));
    port = await freePort();
    const env = processEnv(dataDir, { DNS_SERVERS: dns.address, SMTP_HOST: '127.0.0.1', SMTP_PORT: String(port) });
    proc = await startServiceProcess(env);
    const scratch = scratchDatabases(pgServer, 'bombs_');
    const senders = [];
    for (const [name, domain] of [
      ['Bombed', 'bombed-shop.example.com'],
      ['Other', 'other-shop.example.com'],
    ] as const) {
      const { key } = await createAccountWithCli(env, name);
      await connectSendingDomain(proc, dataDir, key, domain);
      const db = await scratch.fresh();
      expect((await processApi(proc, key, 'POST', '/database', { url: db.url })).status).toBe(200);
      customers.push(await pgServer.connect(db.name));
      senders.push({ key, domain });
    }
    [target, other] = senders as [typeof target, typeof other];
    [targetDb, otherDb] = customers as [pg.Client, pg.Client];
    for (let i = 0; i < 100 && !proc.logs.some((l) => l.includes('"smtp.listening"')); i++) await new Promise((r) => setTimeout(r, 50));
  }, 120_000);
  afterAll(async () => {
    for (const child of runningProcesses) child.kill('SIGKILL');
    for (const c of customers) await c.end().catch(() => undefined);
    await dns?.stop();
    await pgServer?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  /** Sends a message (a string, or the DATA bytes already ended with CRLF.CRLF) and resolves with the final reply. */
  async function send(to: string, message: string | Buffer): Promise<string> {
    const { client } = await RawSmtp.connect(port);
    try {
      const replies = await client.envelope('someone@bomb.example', [to]);
      expect(replies.at(-1)).toMatch(/^250 /);
      expect(await client.command('DATA')).toMatch(/^354 /);
      client.write(typeof message === 'string' ? `${message}\r\n.\r\n` : message);
      return await client.reply();
    } finally {
      client.close();
    }
  }

  const landed = async (db: pg.Client, subject: string) =>
    (await db.query('select subject, spf, dkim, dmarc from service.inbound where subject = $1', [subject])).rows[0];

  it("three bombs are stored with DKIM and DMARC temperror while /healthz answers within 100 ms at p99, and another account's message lands within 5 s", async () => {
    const bombs = [
      { subject: 'bomb: 70,000 folded lines', raw: `From: a@bomb.example\r\nSubject: bomb: 70,000 folded lines\r\n${folded(70_000)}\r\nbody` },
      { subject: 'bomb: 60,000 folded lines', raw: `From: a@bomb.example\r\nSubject: bomb: 60,000 folded lines\r\n${folded(59_000)}\r\nbody` },
      {
        subject: 'bomb: 2,000 DKIM signatures',
        raw: `${dkimSignatures(2000)}From: a@bomb.example\r\nSubject: bomb: 2,000 DKIM signatures\r\n\r\n${'y'.repeat(78).concat('\r\n').repeat(28_000)}`,
      },
    ];
    // One is small enough to travel inline (the shared threads), the others are spooled (the solo threads).
    expect(bombs.map((b) => b.raw.length > INLINE_BYTES)).toEqual([true, false, true]);

    // Both databases connected and migrated, and the parse threads started: what is measured is the bombs.
    for (const [s, db] of [
      [target, targetDb],
      [other, otherDb],
    ] as const) {
      expect(await send(`warm@${s.domain}`, 'From: customer@example.org\r\nSubject: warm up\r\n\r\nHello')).toMatch(/^250 /);
      for (let i = 0; i < 600 && !(await landed(db, 'warm up')); i++) await new Promise((r) => setTimeout(r, 50));
    }

    // Each bomb's DATA encoded before polling begins: sending it then copies no 2.5 MB string in the test's process.
    const data = bombs.map((b) => Buffer.from(`${b.raw}\r\n.\r\n`));
    const poller = await startHealthPoller(proc.port);
    let polls: HealthPolls;
    try {
      for (const bytes of data) expect(await send(`anyone@${target.domain}`, bytes)).toMatch(/^250 /);
      const sentAt = performance.now();
      expect(await send(`support@${other.domain}`, 'From: customer@example.org\r\nSubject: an ordinary message\r\n\r\nHello')).toMatch(/^250 /);
      let theirs;
      while (!(theirs = await landed(otherDb, 'an ordinary message')) && performance.now() - sentAt < 30_000) await new Promise((r) => setTimeout(r, 25));
      expect(theirs).toBeDefined();
      expect(performance.now() - sentAt).toBeLessThan(5000);
      for (const bomb of bombs) {
        let row;
        const started = performance.now();
        while (!(row = await landed(targetDb, bomb.subject)) && performance.now() - started < 60_000) await new Promise((r) => setTimeout(r, 50));
        expect(row, bomb.subject).toEqual({ subject: bomb.subject, spf: expect.anything(), dkim: 'temperror', dmarc: 'temperror' });
      }
    } finally {
      polls = await poller.stop();
    }
    const { latencies, slow } = polls;
    const p99 = quantile(latencies, 0.99);
    process.stdout.write(
      `bombs: /healthz p50 ${quantile(latencies, 0.5).toFixed(0)} ms, p99 ${p99.toFixed(0)} ms, max ${latencies.at(-1)!.toFixed(0)} ms of ${latencies.length}; over 50 ms: ${slow.join(', ') || 'none'}\n`,
    );
    expect(latencies.length).toBeGreaterThan(20);
    expect(p99, `p99 of ${latencies.length} /healthz requests`).toBeLessThan(100);
  }, 120_000);
});

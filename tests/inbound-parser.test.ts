import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { getPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PARSE_NICE, ParserStoppedError, createInboundParser } from '../server/customer-db/inbound/parser.js';
import type { SpooledInboundWrite } from '../server/core/customer-db-outbox.js';
import { loadConfig } from '../server/shared/config.js';
import { createMemoryLogger } from '../server/shared/logger.js';
import { createSpoolWriter } from '../db/inbound-spool.js';
import { TestDnsServer } from './helpers/dns-server.js';

/**
 * The inbound parse thread (server/customer-db/inbound/parser.ts): small received messages are checked and parsed off the event
 * loop, in a worker thread at a lower priority, with the SPF and DMARC lookups of one sender shared; a thread that
 * dies fails the parses it held and the next parse starts a new one.
 */

let dns: TestDnsServer;
beforeAll(async () => {
  dns = await TestDnsServer.start();
  dns.add('sender.example', { type: 'TXT', data: 'v=spf1 ip4:192.0.2.10 -all' });
  dns.add('_dmarc.sender.example', { type: 'TXT', data: 'v=DMARC1; p=reject' });
});
afterAll(() => dns.stop());

const config = () => loadConfig({ DATA_DIR: '/tmp/unused', DNS_SERVERS: dns.address, MAIL_HOSTNAME: 'mx.mailstead.test' });

function write(n: number, remoteAddress = '192.0.2.10'): SpooledInboundWrite {
  const raw = [
    'From: Orders <orders@sender.example>',
    'To: <support@shop.example>',
    `Subject: Order ${n}`,
    `Message-ID: <order-${n}@sender.example>`,
    'Content-Type: text/plain; charset=utf-8',
    '',
    `Order ${n} has shipped.`,
    '',
  ].join('\r\n');
  return {
    kind: 'inbound',
    id: `0190c3a0-0000-7000-8000-${String(n).padStart(12, '0')}`,
    spoolId: null,
    raw: Buffer.from(raw),
    accountId: 'acct',
    toAddresses: ['support@shop.example'],
    mailFrom: 'orders@sender.example',
    remoteAddress,
    helo: 'mail.sender.example',
    receivedAt: Date.parse('2026-03-10T12:00:00Z'),
    size: raw.length,
  };
}

/** The nice value of each thread of this process (Linux /proc: field 19 of a task's stat). */
function threadNices(): number[] {
  return readdirSync('/proc/self/task').map((tid) => Number(readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]));
}

describe('createInboundParser', () => {
  it('parses in a thread of its own, reniced, with the SPF, DKIM and DMARC verdicts from DNS', async () => {
    const parser = createInboundParser({ config: config(), logger: createMemoryLogger() });
    try {
      // Below the process's own priority, whatever that is.
      const niced = Math.min(19, getPriority() + PARSE_NICE);
      const before = threadNices().filter((n) => n === niced).length;
      const { raw: _, ...withoutBytes } = write(9);
      const [passed, broken, failed] = await parser.parseAll([write(1), withoutBytes, write(2, '198.51.100.7')]);
      // Each message has its own outcome: one that cannot be parsed fails alone.
      expect(broken).toEqual(new Error('the write does not hold its message'));
      expect(passed).toMatchObject({ id: write(1).id, subject: 'Order 1', spf: 'pass', dkim: 'none', dmarc: 'pass', toAddresses: ['support@shop.example'] });
      expect((passed as { text: string }).text).toContain('Order 1 has shipped.');
      expect(failed).toMatchObject({ id: write(2).id, spf: 'fail', dmarc: 'fail' });
      expect(threadNices().filter((n) => n === niced).length).toBe(before + 1);
    } finally {
      await parser.close();
    }
  });

  it('asks DNS once for the same sender within the minute', async () => {
    const parser = createInboundParser({ config: config(), logger: createMemoryLogger() });
    try {
      dns.queries = [];
      await parser.parseAll([3, 4, 5, 6].map((n) => write(n)));
      const spf = dns.queries.filter((q) => q.name === 'sender.example' && q.type === 'TXT');
      const dmarc = dns.queries.filter((q) => q.name === '_dmarc.sender.example');
      expect(spf).toHaveLength(1);
      expect(dmarc).toHaveLength(1);
    } finally {
      await parser.close();
    }
  });

  it('a thread that dies fails the parse it held, and the next parse starts a new one', async () => {
    const logger = createMemoryLogger();
    const parser = createInboundParser({ config: config(), logger }, { workerUrl: new URL('./fixtures/workers/crashing-parser.mjs', import.meta.url) });
    try {
      await expect(parser.parseAll([write(7)])).rejects.toThrow(ParserStoppedError);
      await expect(parser.parseAll([write(8)])).rejects.toThrow(/the inbound parser stopped \(exit 3\)/);
    } finally {
      await parser.close();
    }
  });

  it("a large message's solo thread is kept for the next one when its reader stops at the last event, as the writer does", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-parser-'));
    const key = createHash('sha256').update('parser').digest();
    const parser = createInboundParser({
      config: loadConfig({ DATA_DIR: dataDir, DNS_SERVERS: dns.address, MAIL_HOSTNAME: 'mx.mailstead.test' }),
      logger: createMemoryLogger(),
      secretKey: key,
    });
    const niced = Math.min(19, getPriority() + PARSE_NICE);
    const threads = () => threadNices().filter((n) => n === niced).length;
    const before = threads();
    try {
      for (const n of [1, 2]) {
        const id = `0190c3a0-0000-7000-8000-00000000005${n}`;
        const body = `From: a@sender.example\r\nSubject: large ${n}\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=big.bin\r\n\r\n${'z'.repeat(300_000)}\r\n--b--\r\n`;
        const spool = createSpoolWriter(dataDir, key, id);
        spool.append(Buffer.from(body));
        await spool.finish();
        // As server/customer-db/inbound/store.ts reads it: event by event up to the parsed fields, then return().
        const events = parser.parseSpooled({ ...write(n), id, spoolId: id, raw: undefined, size: body.length });
        let last: unknown;
        for (let next = await events.next(); !next.done; next = await events.next()) {
          last = next.value;
          if ('parsed' in next.value) break;
        }
        await events.return(undefined);
        expect(last).toMatchObject({ parsed: { subject: `large ${n}` } });
        // One solo thread, started by the first message and still there after each: not one started per message.
        expect(threads()).toBe(before + 1);
      }
    } finally {
      await parser.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 30_000);
});

import { eq } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { settings } from '../db/schema/index.js';
import { dashboardClient } from './helpers/dashboard.js';
import { expectDocumented } from './helpers/openapi.js';
import {
  emailRows,
  expectError,
  expectOk,
  getAccount,
  idempotencyRow,
  newSender,
  outboundMessagesOf,
  queuedRecipientsOf,
  receipt,
  sendEmail,
} from './helpers/sending.js';
import { startService, type TestService, sqliteStoreOf } from './helpers/service.js';
import { one } from '../db/sql.js';

/**
 * When the service's storage fails (docs/api/decisions.md section 13): a request that could not be recorded answers
 * `503 unavailable` naming the cause, never `502 send_failed` (which says the mail server refused the message), and
 * leaves nothing half-recorded; reads never write, so they answer on a full disk too. The full disk is SQLite's own:
 * `max_page_count` held at the database's size makes every write that needs another page fail with SQLITE_FULL, as
 * a disk without space does (SQLite answers ENOSPC with SQLITE_FULL).
 */

let service: TestService;

beforeEach(async () => {
  // A fresh database each: the first list on it must not be what makes its cursor key.
  service = await startService();
});
afterEach(async () => {
  await service?.close();
});

/** Fills the disk: no page beyond the ones the database has (and none of them free). */
function fillDisk(): () => void {
  const sqlite = sqliteStoreOf(service.deps).sqlite;
  expect(sqlite.pragma('freelist_count', { simple: true })).toBe(0);
  const pages = sqlite.pragma('page_count', { simple: true }) as number;
  expect(sqlite.pragma(`max_page_count = ${pages}`, { simple: true })).toBe(pages);
  return () => void sqlite.pragma('max_page_count = 4294967294');
}

describe('a send while the disk is full', () => {
  it('answers 503 unavailable naming the cause, records nothing of it, and the same request goes through once there is space', async () => {
    const s = await newSender(service, { credits: 5 });
    // A message of 50 KB: its rows need pages the full disk has no room for.
    const body = {
      from: s.from,
      to: ['ann@example.net', 'bob@example.net'],
      template: { name: 'notification', subject: 'Your report', body: 'line of the report\n'.repeat(2500) },
    };
    const headers = { 'Idempotency-Key': 'order-full' };
    const before = await getAccount(service, s.key);
    const freeSpace = fillDisk();
    let res;
    try {
      res = await sendEmail(service, s.key, body, { headers });
      expectError(
        res,
        503,
        'unavailable',
        /^The service could not record this request: its storage is full \(no space left for DATA_DIR\)\. Nothing was sent\. Retry later\.$/,
      );
      expectDocumented(res);
      // Without a key as well.
      expectError(await sendEmail(service, s.key, body), 503, 'unavailable', /storage is full/);
      // Reads go on, on the full disk.
      const log = await service.api('GET', '/emails', { key: s.key });
      expect(log.status).toBe(200);
      expect(log.body.data).toEqual([]);
    } finally {
      freeSpace();
    }
    // Nothing half-recorded: no log entry (not even a failed one), no queue rows, no counters, no charge, the key free.
    expect(await emailRows(service, s.account.id)).toEqual([]);
    expect(await outboundMessagesOf(service, s.account.id)).toEqual([]);
    expect(await queuedRecipientsOf(service, s.account.id)).toEqual([]);
    const after = await getAccount(service, s.key);
    expect(after.sending).toEqual(before.sending);
    expect(after.credits).toEqual(before.credits);
    expect(await idempotencyRow(service, s.account.id, 'order-full')).toBeUndefined();
    expect(service.logger.entries.some((e) => e.event === 'send.store_failed')).toBe(true);
    expect(service.logger.entries.some((e) => e.event === 'send.queue_failed')).toBe(false);
    // The store's failure shows on /healthz for its window.
    expect((await fetch(`${service.url}/healthz`)).status).toBe(503);

    const retry = await sendEmail(service, s.key, body, { headers });
    expectOk(retry);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect((await emailRows(service, s.account.id)).map((r) => r.status)).toEqual(['sent']);
    expect(await queuedRecipientsOf(service, s.account.id)).toHaveLength(2);
  });

  it('any other change the disk cannot take is 503 unavailable too, not a 500', async () => {
    const s = await newSender(service);
    const freeSpace = fillDisk();
    try {
      // Keys are small rows: they fill what room the keys table's pages still have, then the next one needs a page
      // (well before the 50 live keys an account may hold).
      let res;
      for (let i = 0; i < 45; i++) {
        res = await service.api('POST', '/keys', { key: s.key, body: { name: `key ${i} ${'x'.repeat(50)}` } });
        if (res.status !== 201) break;
      }
      expectError(res!, 503, 'unavailable', /storage is full/);
      expectDocumented(res!);
      expect(service.logger.entries.some((e) => e.event === 'http.store_unavailable')).toBe(true);
    } finally {
      freeSpace();
    }
  });
});

describe('reads never write', () => {
  it('the first GET /emails on a fresh database pages with a cursor while the store takes no writes at all', async () => {
    // The cursor key is made when the database is migrated, before any list asks for it.
    expect((await one(service.deps.db.select().from(settings).where(eq(settings.key, 'cursor_hmac_key'))))?.value).toMatch(/^[0-9a-f]{64}$/);
    const s = await newSender(service);
    const ids: string[] = [];
    for (const to of ['a@example.net', 'b@example.net', 'c@example.net']) {
      const res = await sendEmail(service, s.key, receipt(s.from, to));
      expectOk(res);
      ids.push(res.body.id);
    }
    // Any write now fails (SQLITE_READONLY): a read that wrote would fail with it.
    const sqlite = sqliteStoreOf(service.deps).sqlite;
    sqlite.pragma('query_only = 1');
    try {
      const first = await service.api('GET', '/emails?limit=2', { key: s.key });
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      expect(first.body.data.map((e: { id: string }) => e.id)).toEqual([ids[2], ids[1]]);
      expect(first.body.nextCursor).toEqual(expect.any(String));
      const second = await service.api('GET', `/emails?limit=2&cursor=${encodeURIComponent(first.body.nextCursor)}`, { key: s.key });
      expect(second.status, JSON.stringify(second.body)).toBe(200);
      expect(second.body).toEqual({ data: [expect.objectContaining({ id: ids[0] })], nextCursor: null });
      expect((await service.api('GET', `/emails/${ids[0]}`, { key: s.key })).status).toBe(200);
    } finally {
      sqlite.pragma('query_only = 0');
    }
  });
});

describe('the dashboard on storage that takes no writes', () => {
  it('still shows its pages (a session it cannot touch stays open) and answers a change it cannot record with a 503 page naming the cause', async () => {
    const client = await dashboardClient(service);
    const sqlite = sqliteStoreOf(service.deps).sqlite;
    sqlite.pragma('query_only = 1');
    try {
      service.clock.advance(60_000);
      const page = await client.get('/dashboard/accounts');
      expect(page.status).toBe(200);
      const refused = await client.post('/dashboard/accounts', { name: 'Made on a full disk' });
      expect(refused.status).toBe(503);
      expect(await refused.text()).toContain('The service could not record this request: its storage is read-only. Retry later.');
      expect(service.logger.entries.some((e) => e.event === 'dashboard.store_unavailable')).toBe(true);
    } finally {
      sqlite.pragma('query_only = 0');
    }
  });
});

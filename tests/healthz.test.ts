import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STORE_FAULT_WINDOW_MS, storeFaultOf } from '../server/shared/store-health.js';
import { startService, type TestService, sqliteStoreOf } from './helpers/service.js';

/**
 * GET /healthz: 200 while the database answers; 503 `unavailable` when it does not, and for STORE_FAULT_WINDOW_MS after
 * a request failed on the database's storage itself (a damaged file fails only the requests that read its damaged
 * pages, never `select 1`), so a Docker health check sees it. An error about one request (a constraint) does not count.
 */

let service: TestService;
let key: string;

beforeAll(async () => {
  service = await startService();
  key = (await service.newAccount({ name: 'Health' })).key;
  const sqlite = sqliteStoreOf(service.deps).sqlite;
  // What a damaged page would throw, from inside an insert the API makes; and a refusal about the row alone.
  sqlite.function('store_fault', () => {
    throw Object.assign(new Error('database disk image is malformed'), { code: 'SQLITE_CORRUPT' });
  });
  sqlite.exec(`CREATE TRIGGER store_fault BEFORE INSERT ON suppressions WHEN NEW.address LIKE 'corrupt%' BEGIN SELECT store_fault(); END`);
  sqlite.exec(`CREATE TRIGGER row_refused BEFORE INSERT ON suppressions WHEN NEW.address LIKE 'refused%' BEGIN SELECT RAISE(ABORT, 'refused'); END`);
});
afterAll(async () => {
  await service?.close();
});

const health = async () => {
  const res = await fetch(`${service.url}/healthz`);
  return { status: res.status, body: (await res.json()) as unknown };
};
const suppress = (address: string) => service.api('POST', '/suppressions', { key, body: { address } });

describe('GET /healthz', () => {
  it('a constraint refusal is a 500 about one request: still healthy', async () => {
    expect((await suppress('refused@example.net')).status).toBe(500);
    expect(await health()).toEqual({ status: 200, body: { status: 'ok', deliveryMode: 'direct', state: 'sqlite' } });
  });

  it('after a request failed on the storage: 503 unavailable for the window, then healthy again', async () => {
    // The request itself could not be recorded: 503 unavailable naming the cause (docs/api/decisions.md section 13).
    const failed = await suppress('corrupt@example.net');
    expect(failed.status).toBe(503);
    expect(failed.body.error).toEqual({
      code: 'unavailable',
      message: 'The service could not record this request: its database file is damaged. Retry later.',
    });
    expect(await health()).toEqual({ status: 503, body: { status: 'unavailable', deliveryMode: 'direct', state: 'sqlite' } });
    service.clock.advance(STORE_FAULT_WINDOW_MS - 1);
    expect((await health()).status).toBe(503);
    service.clock.advance(1);
    expect(await health()).toEqual({ status: 200, body: { status: 'ok', deliveryMode: 'direct', state: 'sqlite' } });
  });

  it('which codes are the store’s', () => {
    for (const code of [
      'SQLITE_CORRUPT',
      'SQLITE_CORRUPT_INDEX',
      'SQLITE_NOTADB',
      'SQLITE_IOERR_FSYNC',
      'SQLITE_FULL',
      'SQLITE_CANTOPEN',
      'EIO',
      'ENOSPC',
      'EROFS',
      'EDQUOT',
    ]) {
      expect(storeFaultOf({ code }), code).toBe(true);
    }
    // drizzle's wrapping of a failed `db.run(sql...)`: the store's code is its cause's.
    expect(storeFaultOf(Object.assign(new Error('Failed to run the query'), { cause: { code: 'SQLITE_FULL' } }))).toBe(true);
    for (const err of [
      { code: 'SQLITE_CONSTRAINT_TRIGGER' },
      { code: 'SQLITE_BUSY' },
      { code: 'ECONNRESET' },
      { code: 'EIOX' },
      new Error('x'),
      null,
      'SQLITE_CORRUPT',
    ]) {
      expect(storeFaultOf(err)).toBe(false);
    }
  });
});

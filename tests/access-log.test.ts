import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { LogFields } from '../server/shared/logger.js';
import { newSender, newSubSender, receipt } from './helpers/sending.js';
import { type TestService, startService } from './helpers/service.js';
import { execute } from '../db/sql.js';

/**
 * The access log: one `http.request` line per request, after its answer, with the method, the
 * route pattern, the status, the duration, a request id and the acting account; for errors (401, 404, 405, 422, 500)
 * as for successes; never a header, a key, a token, a body or the raw path.
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(() => service?.close());
beforeEach(() => {
  service.logger.entries.length = 0;
});

const requestLines = (): LogFields[] => service.logger.entries.filter((e) => e.event === 'http.request');

/** The one access line logged since the test began (or since `from`). */
function onlyLine(from = 0): LogFields {
  const lines = requestLines().slice(from);
  expect(lines).toHaveLength(1);
  return lines[0]!;
}

describe('http.request: one line per request', () => {
  it('a success: method, route pattern, status, duration, request id and the acting account, and nothing else', async () => {
    const { account, key } = await service.newAccount();
    expect((await service.api('GET', '/account', { key })).status).toBe(200);
    const line = onlyLine();
    expect(Object.keys(line).sort()).toEqual(['accountId', 'durationMs', 'event', 'level', 'method', 'requestId', 'route', 'status']);
    expect(line).toMatchObject({ level: 'info', method: 'GET', route: '/api/v1/account', status: 200, accountId: account.id });
    expect(line.requestId).toMatch(UUID);
    expect(typeof line.durationMs).toBe('number');
    expect(line.durationMs as number).toBeGreaterThanOrEqual(0);
    expect(Number.isFinite(line.durationMs)).toBe(true);
  });

  it('each request its own id', async () => {
    const { key } = await service.newAccount();
    await service.api('GET', '/account', { key });
    await service.api('GET', '/account', { key });
    const [a, b] = requestLines();
    expect(a!.requestId).not.toBe(b!.requestId);
  });

  it('the route is the pattern, never the path: an id or an address in the path is not logged', async () => {
    const sender = await newSender(service);
    const address = 'someone.private@example.org';
    service.logger.entries.length = 0;
    const res = await service.api('DELETE', `/suppressions/${encodeURIComponent(address)}`, { key: sender.key });
    expect(res.status).toBe(404);
    expect(onlyLine()).toMatchObject({ method: 'DELETE', route: '/api/v1/suppressions/:address', status: 404, accountId: sender.account.id });
    const id = '0190d7a8-0000-7000-8000-000000000000';
    await service.api('GET', `/emails/${id}`, { key: sender.key });
    expect(onlyLine(1)).toMatchObject({ route: '/api/v1/emails/:id', status: 404 });
    const all = JSON.stringify(service.logger.entries);
    expect(all).not.toContain('someone.private');
    expect(all).not.toContain(id);
  });

  it('acting for a sub-account: its id', async () => {
    const { key } = await service.newAccount();
    const sub = await newSubSender(service, key);
    service.logger.entries.length = 0;
    expect((await service.api('GET', '/account', { key, account: sub.id })).status).toBe(200);
    expect(onlyLine()).toMatchObject({ route: '/api/v1/account', status: 200, accountId: sub.id });
  });

  it('401 (no key, a wrong key): logged with the route, no account', async () => {
    await service.api('GET', '/emails');
    await service.api('GET', '/emails', { key: 'ms_notakey0000000000000000000000000000' });
    const lines = requestLines();
    expect(lines).toHaveLength(2);
    for (const line of lines) expect(line).toMatchObject({ level: 'info', method: 'GET', route: '/api/v1/emails', status: 401, accountId: null });
  });

  it('404 for a path no route serves, 405 for a method a path does not take: logged, the route null', async () => {
    expect((await service.api('GET', '/nowhere/at/all')).status).toBe(404);
    expect(onlyLine()).toMatchObject({ method: 'GET', route: null, status: 404, accountId: null });
    expect((await service.api('PUT', '/emails')).status).toBe(405);
    expect(onlyLine(1)).toMatchObject({ method: 'PUT', route: null, status: 405 });
    const root = await fetch(`${service.url}/`);
    expect(root.status).toBe(404);
    expect(onlyLine(2)).toMatchObject({ method: 'GET', route: null, status: 404 });
  });

  it('422 for a bad body: logged with the account; the body is not', async () => {
    const sender = await newSender(service);
    service.logger.entries.length = 0;
    const res = await service.api('POST', '/emails', { key: sender.key, body: { ...receipt(sender.from, 'x@example.net'), secretNote: 'body-marker-4f2a' } });
    expect(res.status).toBe(422);
    expect(onlyLine()).toMatchObject({ method: 'POST', route: '/api/v1/emails', status: 422, accountId: sender.account.id });
    expect(JSON.stringify(service.logger.entries)).not.toContain('body-marker-4f2a');
  });

  it('500: logged at the status, with the id the answer and the error line give', async () => {
    await execute(service.deps.db, sql`alter table customer_db_writes rename to customer_db_writes_gone`);
    let res: Response;
    try {
      res = await fetch(`${service.url}/metrics`);
    } finally {
      await execute(service.deps.db, sql`alter table customer_db_writes_gone rename to customer_db_writes`);
    }
    expect(res.status).toBe(500);
    const body = (await res.json()) as { error: { message: string } };
    const line = onlyLine();
    expect(line).toMatchObject({ method: 'GET', route: '/metrics', status: 500 });
    expect(body.error.message).toContain(String(line.requestId));
    expect(service.logger.entries.find((e) => e.event === 'http.unhandled_error')).toMatchObject({ requestId: line.requestId });
  });

  it('the probes (/healthz, /metrics) at debug when they answer 2xx, so a health check and a scraper do not fill the log', async () => {
    await fetch(`${service.url}/healthz`);
    await fetch(`${service.url}/metrics`);
    expect(requestLines().map((l) => [l.route, l.status, l.level])).toEqual([
      ['/healthz', 200, 'debug'],
      ['/metrics', 200, 'debug'],
    ]);
  });
});

describe('never a key, a token or a header value', () => {
  it('no Authorization value, key, account header value or body in any line, whatever the answer', async () => {
    const sender = await newSender(service);
    const sub = await newSubSender(service, sender.key);
    const revoked = await service.newKey(sender.account.id);
    const list = await service.api('GET', '/keys', { key: sender.key });
    const revokedId = (list.body.data as { id: string; prefix: string }[]).find((k) => revoked.startsWith(k.prefix))!.id;
    expect((await service.api('DELETE', `/keys/${revokedId}`, { key: sender.key })).status).toBe(204);
    service.logger.entries.length = 0;

    const wrong = 'ms_wrongwrongwrongwrongwrongwrongwrong1';
    await service.api('GET', '/account', { key: sender.key });
    await service.api('GET', '/account', { key: sender.key, account: sub.id });
    await service.api('GET', '/account', { key: wrong });
    await service.api('GET', '/account', { key: revoked });
    await service.api('POST', '/emails', { key: sender.key, body: receipt(sender.from, 'reader@example.net') });
    await service.api('GET', '/account', { key: sender.key, headers: { 'x-forwarded-for': '203.0.113.9', cookie: 'session=cookie-marker' } });
    await fetch(`${service.url}/metrics`, { headers: { authorization: `Bearer ${wrong}` } });

    expect(requestLines()).toHaveLength(7);
    const all = JSON.stringify(service.logger.entries);
    for (const secret of [sender.key, revoked, wrong, 'Bearer', 'reader@example.net', 'R-1001', 'cookie-marker', '203.0.113.9']) {
      expect(all, secret).not.toContain(secret);
    }
    // The key's prefix (what identifies it in the API) is not there either: the account id is enough.
    expect(all).not.toContain(sender.key.slice(0, 11));
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { customerDbWrites } from '../db/schema/index.js';
import { type SpooledInboundWrite, openWrite, queueCustomerDbWrite } from '../server/core/customer-db-outbox.js';
import { encryptSecret, openBytes, sealBytes } from '../server/shared/secrets.js';
import { withinBudget } from '../server/customer-db/writer.js';
import { storeDatabaseRow } from './helpers/customer-db.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * A received message in the outbox of the customer-database writer: its bytes sealed apart from the JSON (no base64
 * inside it), nothing of it in clear, opened back whole; a write queued by the earlier format (the bytes as base64
 * inside the sealed JSON) still opens.
 */

let service: TestService;
let accountId: string;
const MESSAGE = Buffer.from('Subject: Where is my order 4471?\r\n\r\nHello, the parcel has not arrived.\r\n');

beforeAll(async () => {
  service = await startService();
  accountId = (await service.newAccount()).account.id;
  await storeDatabaseRow(service, accountId, 'postgres://u:p@db.example:5432/app?sslmode=verify-full');
});
afterAll(() => service.close());

const inbound = (raw?: Buffer): SpooledInboundWrite => ({
  kind: 'inbound',
  id: '0190c3a0-0000-7000-8000-000000000001',
  spoolId: null,
  ...(raw ? { raw } : {}),
  accountId,
  toAddresses: ['support@shop.example'],
  mailFrom: 'ann@example.net',
  remoteAddress: '192.0.2.1',
  helo: 'mail.example.net',
  receivedAt: service.clock.now(),
  size: MESSAGE.length,
});

describe('a received message in the outbox', () => {
  it('is sealed as bytes beside the JSON, nothing in clear, and opens back whole', async () => {
    const key = service.deps.secretKey!;
    await service.deps.db.transaction(async () => queueCustomerDbWrite(service.deps, accountId, inbound(MESSAGE), service.clock.now()));
    const row = (await service.deps.db.select().from(customerDbWrites)).at(-1)!;
    expect(row.rawSealed).toBeInstanceOf(Buffer);
    expect(row.rawSealed!.includes('order 4471')).toBe(false);
    expect(row.payloadSealed).not.toContain(MESSAGE.toString('base64').slice(0, 16));
    // The bytes, not base64 of them: the sealed form is the message plus its 29 bytes of version, nonce and tag.
    expect(row.rawSealed!.length).toBe(MESSAGE.length + 29);
    expect(openBytes(key, row.rawSealed!, `customer-db-write-raw:${row.id}`)).toEqual(MESSAGE);
    // Another row's context does not open it.
    expect(() => openBytes(key, row.rawSealed!, 'customer-db-write-raw:other')).toThrow();
    const opened = openWrite(key, row);
    expect(opened.write).toMatchObject({ kind: 'inbound', toAddresses: ['support@shop.example'] });
    expect((opened.write as SpooledInboundWrite).raw).toEqual(MESSAGE);
  });

  it('a write queued in the earlier format (base64 inside the JSON) still opens', async () => {
    const key = service.deps.secretKey!;
    const row = (await service.deps.db.select().from(customerDbWrites)).at(-1)!;
    const legacy = {
      ...row,
      rawSealed: null,
      payloadSealed: encryptSecret(key, JSON.stringify({ ...inbound(), raw: MESSAGE.toString('base64') }), `customer-db-write:${row.id}`),
    };
    expect((openWrite(key, legacy).write as SpooledInboundWrite).raw).toEqual(MESSAGE);
  });

  it('sealed bytes that were tampered with do not open', () => {
    const key = service.deps.secretKey!;
    const sealed = sealBytes(key, MESSAGE, 'ctx');
    sealed[sealed.length - 1]! ^= 1;
    expect(() => openBytes(key, sealed, 'ctx')).toThrow();
  });
});

describe('a batch of the writer', () => {
  it('is cut where the sealed JSON and the sealed message bytes pass the budget, and always holds its first row', () => {
    const row = (json: number, raw: number | null) =>
      ({ payloadSealed: 'x'.repeat(json), rawSealed: raw === null ? null : Buffer.alloc(raw) }) as Parameters<typeof withinBudget>[0][number];
    const rows = [row(100, 400), row(100, null), row(100, 400), row(100, 0)];
    expect(withinBudget(rows, 1000)).toHaveLength(2);
    expect(withinBudget(rows, 1100)).toHaveLength(3);
    expect(withinBudget(rows, 1200)).toHaveLength(4);
    // One message larger than the whole budget still goes, alone.
    expect(withinBudget([row(10, 5000), row(10, 10)], 1000)).toHaveLength(1);
  });
});

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { asc, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Db, openDatabase } from '../db/client.js';
import { openPostgres } from '../db/pg/state.js';
import { accounts } from '../db/schema/accounts.js';
import { emails } from '../db/schema/emails.js';
import { containsNoCase, indexedBy, isOneOf, isOneOfPlaceholder, isSame, isTrue, listParam, queryRows } from '../db/sql.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';

/** The SQL fragments written for both engines (db/sql.ts): each gives the same rows on SQLite and on Postgres. */

let server: TestPostgres;
let dataDir: string;
const engines: { name: string; db: Db; close: () => Promise<void> | void }[] = [];

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'mailstead-fragments-'));
  const sqlite = openDatabase(dataDir);
  engines.push({ name: 'sqlite', db: sqlite.db, close: () => sqlite.close() });
  server = await startPostgres({ certificate: 'trusted' });
  await server.admin('create database fragments');
  const pg = await openPostgres({ host: '127.0.0.1', port: server.port, database: 'fragments', user: server.user, password: server.password, ssl: false });
  engines.push({ name: 'postgres', db: pg.db, close: () => pg.close() });
  for (const { db } of engines) {
    await db.insert(accounts).values([
      { id: 'a1', name: 'Acme 100%', createdAt: 1, dailyQuota: 10 },
      { id: 'a2', name: 'acme_two', createdAt: 1, dailyQuota: 10, parentId: 'a1' },
      { id: 'a3', name: 'Other', createdAt: 1, dailyQuota: 10 },
    ]);
    const email = { fromAddress: 'f@x.test', to: ['t@x.test'], subject: 's', template: 't', status: 'sent' as const, createdAt: 1 };
    await db.insert(emails).values([
      { ...email, id: 'e1', accountId: 'a1', sandbox: true },
      { ...email, id: 'e2', accountId: 'a1', sandbox: false },
    ]);
  }
}, 120_000);

afterAll(async () => {
  for (const e of engines) await e.close();
  await server?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const ids = async (db: Db, where: ReturnType<typeof sql>) =>
  (await db.select({ id: accounts.id }).from(accounts).where(where).orderBy(asc(accounts.id))).map((r) => r.id);

describe.each(['sqlite', 'postgres'])('on %s', (name) => {
  const db = () => engines.find((e) => e.name === name)!.db;

  it('isOneOf: a list of any length in one statement', async () => {
    expect(await ids(db(), isOneOf(db(), accounts.id, ['a1', 'a3', 'nobody']))).toEqual(['a1', 'a3']);
    expect(await ids(db(), isOneOf(db(), accounts.id, []))).toEqual([]);
  });

  it('isOneOfPlaceholder with listParam: the list given when a prepared statement runs', async () => {
    const q = db()
      .select({ id: accounts.id })
      .from(accounts)
      .where(isOneOfPlaceholder(db(), accounts.id, 'ids'))
      .orderBy(asc(accounts.id))
      .prepare();
    expect((await q.execute({ ids: listParam(db(), ['a2', 'a3']) })).map((r) => r.id)).toEqual(['a2', 'a3']);
    expect((await q.execute({ ids: listParam(db(), ['a1']) })).map((r) => r.id)).toEqual(['a1']);
  });

  it('isSame: two nulls are the same', async () => {
    expect(await ids(db(), isSame(db(), accounts.parentId, null))).toEqual(['a1', 'a3']);
    expect(await ids(db(), isSame(db(), accounts.parentId, 'a1'))).toEqual(['a2']);
  });

  it('isTrue: a boolean column', async () => {
    const rows = await db().select({ id: emails.id }).from(emails).where(isTrue(db(), emails.sandbox));
    expect(rows).toEqual([{ id: 'e1' }]);
  });

  it('containsNoCase: case ignored, % and _ literal', async () => {
    expect(await ids(db(), containsNoCase(db(), accounts.name, 'ACME'))).toEqual(['a1', 'a2']);
    expect(await ids(db(), containsNoCase(db(), accounts.name, '100%'))).toEqual(['a1']);
    expect(await ids(db(), containsNoCase(db(), accounts.name, 'e_t'))).toEqual(['a2']);
    expect(await ids(db(), containsNoCase(db(), accounts.name, '0%z'))).toEqual([]);
  });

  it('indexedBy: the named index on SQLite, nothing on Postgres', async () => {
    const rows = await queryRows<{ id: string }>(db(), sql`select id from accounts${indexedBy(db(), 'accounts_parent_idx')} where parent_id = ${'a1'}`);
    expect(rows).toEqual([{ id: 'a2' }]);
    expect(await ids(db(), sql`${eq(accounts.id, 'a3')}`)).toEqual(['a3']);
  });
});

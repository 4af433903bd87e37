import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getTableConfig } from 'drizzle-orm/sqlite-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type SqliteStore } from '../db/client.js';
import { openPostgres, type PgStore } from '../db/pg/state.js';
import { StateCopyError, copyState, tablesInCopyOrder } from '../db/state-copy.js';
import { SPOOL_CHUNK, createSpoolWriter, openSpool, sealedFromPages } from '../db/inbound-spool.js';
import { type TestPostgres, startPostgres } from './helpers/postgres.js';

/**
 * `state copy` (db/state-copy.ts): every table of a DATA_DIR into an empty Postgres, counted and compared. Here the
 * SQLite database holds two rows in every table, every column filled with a value of its kind (booleans, JSON, bytes,
 * rowid numbers), made from the schema itself so a table added later is covered without a change here; but for
 * the inbound spool's table, which stays empty on SQLite: its rows are the records of DATA_DIR's spool files, two
 * messages the queued writes read (and an orphan file that none reads, left behind).
 */

let server: TestPostgres;
let dataDir: string;
let sqliteStore: SqliteStore;
const SPOOL_TABLE = 'inbound_spool_records';
const spoolKey = randomBytes(32);
/** The spooled messages of the two queued writes (their spool_id values, as fillEveryTable makes them). */
const spooled = new Map([
  ['customer_db_writes.spool_id.0', randomBytes(SPOOL_CHUNK * 2 + 1000)],
  ['customer_db_writes.spool_id.1', randomBytes(10)],
]);
/** Their records: 3 data records and the end record, 1 and the end record. */
const SPOOL_RECORDS = 6;

async function writeSpoolFile(id: string, message: Buffer): Promise<void> {
  const writer = createSpoolWriter(dataDir, spoolKey, id);
  writer.append(message);
  await writer.finish();
}

const target = (database: string) => ({ host: '127.0.0.1', port: server.port, database, user: server.user, password: server.password, ssl: false as const });

/** Two rows in every table, parents first; each column given a value of its kind, foreign keys the parent's. */
function fillEveryTable(store: SqliteStore): void {
  const made = new Map<string, unknown[]>();
  for (const t of tablesInCopyOrder()) {
    const config = getTableConfig(t.table);
    const refs = new Map<string, { table: string; column: string }>();
    for (const fk of config.foreignKeys) {
      const ref = fk.reference();
      refs.set(ref.columns[0]!.name, { table: getTableConfig(ref.foreignTable).name, column: ref.foreignColumns[0]!.name });
    }
    if (t.name === 'change_counters' || t.name === 'settings') store.sqlite.exec(`delete from ${t.name}`);
    if (t.name === SPOOL_TABLE) continue;
    for (let i = 0; i < 2; i++) {
      const values = t.columns.map((c) => {
        const ref = refs.get(c.name);
        if (ref) {
          if (ref.table === t.name) return i === 0 ? null : made.get(`${t.name}.${ref.column}`)?.[0];
          return made.get(`${ref.table}.${ref.column}`)?.[i];
        }
        const enumValues = (c as unknown as { enumValues?: string[] }).enumValues;
        switch (c.columnType) {
          case 'SQLiteBoolean':
            return i;
          case 'SQLiteBlobBuffer':
            return Buffer.from([i, 0, 255, 10]);
          case 'SQLiteTextJson':
            return JSON.stringify({ z: i, a: [`${t.name}`, null] });
          case 'SQLiteInteger':
          case 'SQLiteTimestamp':
            return 1_700_000_000_000 + i;
          default:
            return enumValues && enumValues.length > 0 ? enumValues[i % enumValues.length] : `${t.name}.${c.name}.${i}`;
        }
      });
      store.sqlite
        .prepare(`insert into "${t.name}" (${t.columns.map((c) => `"${c.name}"`).join(', ')}) values (${values.map(() => '?').join(', ')})`)
        .run(...values);
      t.columns.forEach((c, k) => {
        made.set(`${t.name}.${c.name}`, [...(made.get(`${t.name}.${c.name}`) ?? []), values[k]]);
      });
    }
  }
}

beforeAll(async () => {
  server = await startPostgres({ certificate: 'trusted' });
  dataDir = mkdtempSync(join(tmpdir(), 'mailstead-copy-'));
  sqliteStore = openDatabase(dataDir);
  fillEveryTable(sqliteStore);
  for (const [id, message] of spooled) await writeSpoolFile(id, message);
  await writeSpoolFile('orphan', randomBytes(100));
}, 120_000);

afterAll(async () => {
  sqliteStore?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  await server?.stop();
});

async function freshTarget(name: string): Promise<PgStore> {
  await server.admin(`create database ${name}`);
  return openPostgres(target(name));
}

describe('state copy', () => {
  it('copies every table, counts each on both sides and compares them row for row', async () => {
    const pgStore = await freshTarget('copy_all');
    try {
      const report = await copyState(sqliteStore.sqlite, pgStore.pool, { dryRun: false, dataDir });
      expect(report.tables.length).toBe(tablesInCopyOrder().length);
      for (const t of report.tables)
        expect(t, t.name).toMatchObject(t.name === SPOOL_TABLE ? { source: SPOOL_RECORDS, target: SPOOL_RECORDS } : { source: 2, target: 2 });
      expect(report.spool).toEqual({ messages: 2, records: SPOOL_RECORDS });
      // Every table compared row for row, the change counters (raised by the triggers of the rows copied) only counted.
      expect(report.compared.map((c) => c.name).sort()).toEqual(
        tablesInCopyOrder()
          .map((t) => t.name)
          .filter((n) => n !== 'change_counters')
          .sort(),
      );
      for (const c of report.compared) expect(c.rows, c.name).toBe(c.name === SPOOL_TABLE ? SPOOL_RECORDS : 2);
      // The spool's records as a Postgres node reads them: each message opens to its bytes; the orphan is not copied.
      const page = async (id: string, from: number) =>
        (await pgStore.pool.query('select seq, record from inbound_spool_records where spool_id = $1 and seq >= $2 order by seq limit 4', [id, from])).rows.map(
          (r: { seq: string | number; record: Buffer }) => ({ seq: Number(r.seq), record: r.record }),
        );
      for (const [id, message] of spooled) {
        const chunks: Buffer[] = [];
        for await (const chunk of openSpool(sealedFromPages(page, id), spoolKey, id)) chunks.push(chunk as Buffer);
        expect(Buffer.concat(chunks).equals(message), id).toBe(true);
      }
      expect((await page('orphan', 0)).length).toBe(0);
      // The rowid numbers kept, and the sequence moved past them: the next row numbers itself after them.
      const { rows } = await pgStore.pool.query(
        `insert into webhook_attempts (delivery_id, attempt, attempted_at, delivered) select delivery_id, 9, 1, true from webhook_attempts limit 1 returning seq`,
      );
      expect(rows[0].seq).toBe(Math.max(...(sqliteStore.sqlite.prepare('select seq from webhook_attempts').pluck().all() as number[])) + 1);
    } finally {
      await pgStore.close();
    }
  });

  it('--dry-run counts what it would copy and writes nothing', async () => {
    const pgStore = await freshTarget('copy_dry');
    try {
      const report = await copyState(sqliteStore.sqlite, pgStore.pool, { dryRun: true, dataDir });
      expect(report.dryRun).toBe(true);
      expect(report.tables.every((t) => t.source === (t.name === SPOOL_TABLE ? SPOOL_RECORDS : 2))).toBe(true);
      expect(report.spool).toEqual({ messages: 2, records: SPOOL_RECORDS });
      const { rows } = await pgStore.pool.query('select count(*)::int as n from accounts');
      expect(rows[0].n).toBe(0);
    } finally {
      await pgStore.close();
    }
  });

  it('refuses a target that holds rows, and leaves it as it was', async () => {
    const pgStore = await freshTarget('copy_twice');
    try {
      await copyState(sqliteStore.sqlite, pgStore.pool, { dryRun: false, dataDir });
      await expect(copyState(sqliteStore.sqlite, pgStore.pool, { dryRun: false, dataDir })).rejects.toThrow(StateCopyError);
      const { rows } = await pgStore.pool.query('select count(*)::int as n from accounts');
      expect(rows[0].n).toBe(2);
    } finally {
      await pgStore.close();
    }
  });
});

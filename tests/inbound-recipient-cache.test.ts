import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../db/client.js';
import { execute, queryRow } from '../db/sql.js';
import { RECEIVING_CACHE_DOMAINS, judgeRecipient, receivingCacheSize } from '../mta/inbound/recipients.js';
import { loadConfig } from '../server/shared/config.js';
import { type OtherConnection, openTestStore, otherConnectionTo, plainSql, stateOnPostgres } from './helpers/test-state.js';

/**
 * The RCPT check keeps what it decided per domain while the `recipients` change counter stands still (triggers raise it
 * on every change to domains, accounts' parents and customer databases). Each change that decides where mail goes is
 * made here and the very next RCPT must see it, whether this process or another connection (the CLI) made it. On the
 * run's engine: DATA_DIR's SQLite file and a second connection to it, or a Postgres state database and a second client.
 */

const RECEIVING = JSON.stringify({ ownership: 'published', signing: 'published', spf: 'published', receiving: 'published' });
const NOT_RECEIVING = JSON.stringify({ ownership: 'published', signing: 'published', spf: 'published', receiving: 'missing' });

let dir: string;
let store: Store;
let other: OtherConnection;
let deps: Parameters<typeof judgeRecipient>[0];

/** Plain SQL, `?` for each parameter, run by one writer: this process (the product's handle) or another connection. */
type Writer = (statement: string, params: unknown[]) => Promise<unknown>;
const here: Writer = (statement, params) => execute(store.db, plainSql(statement, params));
const elsewhere: Writer = (statement, params) => other.query(statement, params);
const run = (db: Writer, statement: string, ...params: unknown[]) => db(statement, params);

async function account(db: Writer, id: string, parentId: string | null = null): Promise<void> {
  await run(
    db,
    `insert into accounts (id, parent_id, name, created_at, daily_quota, sent_today_count, total_sent, total_bounced, total_complained,
       credits_balance, credits_total_purchased, credits_total_used, grace_emails_used) values (?, ?, ?, 0, 1000, 0, 0, 0, 0, 0, 0, 0, 0)`,
    id,
    parentId,
    id,
  );
}

async function domain(db: Writer, id: string, accountId: string, name: string, recordStatus = RECEIVING): Promise<void> {
  await run(
    db,
    `insert into domain_keys (id, account_id, name, token, selector, dkim_public_key, dkim_private_key_sealed, created_at) values (?, ?, ?, 't', 's', 'p', 'k', 0)`,
    `key-${id}`,
    accountId,
    name,
  );
  await run(
    db,
    `insert into domains (id, account_id, name, key_id, record_status, created_at, last_checked_at) values (?, ?, ?, ?, ?, 0, 0)`,
    id,
    accountId,
    name,
    `key-${id}`,
    recordStatus,
  );
}

async function database(db: Writer, accountId: string): Promise<void> {
  await run(
    db,
    `insert into customer_databases (account_id, connection_id, url_sealed, host, port, database, "user", ssl_mode, state, schema_version, failures, next_attempt_at, updated_at, created_at)
     values (?, ?, 'x', 'h', 5432, 'd', 'u', 'require', 'connected', 1, 0, 0, 0, 0)`,
    accountId,
    `conn-${accountId}`,
  );
}

const judged = (address: string) => judgeRecipient(deps, address);
const mailbox = (address: string, accountId: string) => ({ kind: 'mailbox', address, accountId });
const refused = { kind: 'refused' };

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mailstead-rcpt-cache-'));
  store = await openTestStore(dir);
  other = await otherConnectionTo(store, dir);
  deps = { db: store.db, config: loadConfig({ DATA_DIR: dir, MAIL_HOSTNAME: 'mx.mailstead.test' }), secretKey: Buffer.alloc(32, 1) };
  await account(here, 'acct-a');
  await domain(here, 'dom-a', 'acct-a', 'a.example');
  await database(here, 'acct-a');
});

afterEach(async () => {
  await other.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe.each([
  ['this process', here],
  ['another connection (the CLI)', elsewhere],
])('the RCPT check sees at once a change made by %s', (_who, writer) => {
  it('a domain that stops receiving, and starts again', async () => {
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
    await run(writer, `update domains set record_status = ? where id = 'dom-a'`, NOT_RECEIVING);
    expect(await judged('y@a.example')).toEqual(refused);
    await run(writer, `update domains set record_status = ? where id = 'dom-a'`, RECEIVING);
    expect(await judged('y@a.example')).toEqual(mailbox('y@a.example', 'acct-a'));
  });

  it('a domain deleted, and added to another account', async () => {
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
    await run(writer, `delete from domains where id = 'dom-a'`);
    expect(await judged('x@a.example')).toEqual(refused);
    await account(writer, 'acct-b');
    await database(writer, 'acct-b');
    await domain(writer, 'dom-b', 'acct-b', 'a.example');
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-b'));
  });

  it('a database removed, and connected again', async () => {
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
    await run(writer, `delete from customer_databases where account_id = 'acct-a'`);
    expect(await judged('x@a.example')).toEqual(refused);
    await database(writer, 'acct-a');
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
  });

  it('a sub-account receiving through its parent’s database, until the parent’s database goes, or the account does', async () => {
    await account(writer, 'acct-sub', 'acct-a');
    await domain(writer, 'dom-sub', 'acct-sub', 'sub.example');
    expect(await judged('x@sub.example')).toEqual(mailbox('x@sub.example', 'acct-sub'));
    await run(writer, `delete from customer_databases where account_id = 'acct-a'`);
    expect(await judged('x@sub.example')).toEqual(refused);
    await database(writer, 'acct-a');
    expect(await judged('x@sub.example')).toEqual(mailbox('x@sub.example', 'acct-sub'));
    await run(writer, `delete from accounts where id = 'acct-sub'`);
    expect(await judged('x@sub.example')).toEqual(refused);
  });

  it('an unknown domain refused, then added', async () => {
    expect(await judged('x@new.example')).toEqual(refused);
    await domain(writer, 'dom-new', 'acct-a', 'new.example');
    expect(await judged('x@new.example')).toEqual(mailbox('x@new.example', 'acct-a'));
  });
});

it('writes that decide nothing about receiving leave the cache alone (sends update accounts and databases all the time)', async () => {
  const counter = async () => (await queryRow<{ n: number }>(store.db, sql`select n from change_counters where name = 'recipients'`))!.n;
  const before = await counter();
  await run(elsewhere, `update accounts set total_sent = total_sent + 1, sent_today_count = sent_today_count + 1 where id = 'acct-a'`);
  await run(elsewhere, `update customer_databases set last_ok_at = 1, failures = 0, updated_at = 2 where account_id = 'acct-a'`);
  await run(elsewhere, `update domains set last_checked_at = 5 where id = 'dom-a'`);
  expect(await counter()).toBe(before);
  await run(elsewhere, `update domains set record_status = ? where id = 'dom-a'`, NOT_RECEIVING);
  expect(await counter()).toBe(before + 1);
});

it(
  'a client trying made-up names cannot grow the cache without bound: past its bound it starts again, answers unchanged',
  async () => {
    for (let i = 0; i < RECEIVING_CACHE_DOMAINS * 2 + 10; i++) {
      expect(await judged(`x@made-up-${i}.example`)).toEqual(refused);
      expect(receivingCacheSize(store.db)).toBeLessThanOrEqual(RECEIVING_CACHE_DOMAINS);
    }
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
    await run(elsewhere, `update domains set record_status = ? where id = 'dom-a'`, NOT_RECEIVING);
    expect(await judged('x@a.example')).toEqual(refused);
    // On Postgres each of these 20,010 RCPTs is two round trips to the server: longer than the suite's 20 s default.
  },
  stateOnPostgres() ? 180_000 : undefined,
);

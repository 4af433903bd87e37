import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type SqliteStore, clientOf, databasePath, openDatabase } from '../db/client.js';
import { RECEIVING_CACHE_DOMAINS, judgeRecipient, receivingCacheSize } from '../mta/inbound/recipients.js';
import { loadConfig } from '../server/shared/config.js';

/**
 * The RCPT check keeps what it decided per domain while the `recipients` change counter stands still (triggers raise it
 * on every change to domains, accounts' parents and customer databases). Each change that decides where mail goes is
 * made here and the very next RCPT must see it, whether this process or another connection (the CLI) made it.
 */

const RECEIVING = JSON.stringify({ ownership: 'published', signing: 'published', spf: 'published', receiving: 'published' });
const NOT_RECEIVING = JSON.stringify({ ownership: 'published', signing: 'published', spf: 'published', receiving: 'missing' });

let dir: string;
let store: SqliteStore;
let other: Database.Database;
let deps: Parameters<typeof judgeRecipient>[0];

const run = (db: Database.Database, statement: string, ...params: unknown[]) => db.prepare(statement).run(...params);

function account(db: Database.Database, id: string, parentId: string | null = null): void {
  run(
    db,
    `insert into accounts (id, parent_id, name, created_at, daily_quota, sent_today_count, total_sent, total_bounced, total_complained,
       credits_balance, credits_total_purchased, credits_total_used, grace_emails_used) values (?, ?, ?, 0, 1000, 0, 0, 0, 0, 0, 0, 0, 0)`,
    id,
    parentId,
    id,
  );
}

function domain(db: Database.Database, id: string, accountId: string, name: string, recordStatus = RECEIVING): void {
  run(
    db,
    `insert into domain_keys (id, account_id, name, token, selector, dkim_public_key, dkim_private_key_sealed, created_at) values (?, ?, ?, 't', 's', 'p', 'k', 0)`,
    `key-${id}`,
    accountId,
    name,
  );
  run(
    db,
    `insert into domains (id, account_id, name, key_id, record_status, created_at, last_checked_at) values (?, ?, ?, ?, ?, 0, 0)`,
    id,
    accountId,
    name,
    `key-${id}`,
    recordStatus,
  );
}

function database(db: Database.Database, accountId: string): void {
  run(
    db,
    `insert into customer_databases (account_id, connection_id, url_sealed, host, port, database, user, ssl_mode, state, schema_version, failures, next_attempt_at, updated_at, created_at)
     values (?, ?, 'x', 'h', 5432, 'd', 'u', 'require', 'connected', 1, 0, 0, 0, 0)`,
    accountId,
    `conn-${accountId}`,
  );
}

const judged = (address: string) => judgeRecipient(deps, address);
const mailbox = (address: string, accountId: string) => ({ kind: 'mailbox', address, accountId });
const refused = { kind: 'refused' };

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'mailstead-rcpt-cache-'));
  store = openDatabase(dir);
  other = new Database(databasePath(dir));
  other.pragma('foreign_keys = ON');
  other.pragma('busy_timeout = 5000');
  deps = { db: store.db, config: loadConfig({ DATA_DIR: dir, MAIL_HOSTNAME: 'mx.mailstead.test' }), secretKey: Buffer.alloc(32, 1) };
  const here = clientOf(store.db);
  account(here, 'acct-a');
  domain(here, 'dom-a', 'acct-a', 'a.example');
  database(here, 'acct-a');
});

afterEach(() => {
  other.close();
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe.each([
  ['this process', () => clientOf(store.db)],
  ['another connection (the CLI)', () => other],
])('the RCPT check sees at once a change made by %s', (_who, writer) => {
  it('a domain that stops receiving, and starts again', async () => {
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
    run(writer(), `update domains set record_status = ? where id = 'dom-a'`, NOT_RECEIVING);
    expect(await judged('y@a.example')).toEqual(refused);
    run(writer(), `update domains set record_status = ? where id = 'dom-a'`, RECEIVING);
    expect(await judged('y@a.example')).toEqual(mailbox('y@a.example', 'acct-a'));
  });

  it('a domain deleted, and added to another account', async () => {
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
    run(writer(), `delete from domains where id = 'dom-a'`);
    expect(await judged('x@a.example')).toEqual(refused);
    account(writer(), 'acct-b');
    database(writer(), 'acct-b');
    domain(writer(), 'dom-b', 'acct-b', 'a.example');
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-b'));
  });

  it('a database removed, and connected again', async () => {
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
    run(writer(), `delete from customer_databases where account_id = 'acct-a'`);
    expect(await judged('x@a.example')).toEqual(refused);
    database(writer(), 'acct-a');
    expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
  });

  it('a sub-account receiving through its parent’s database, until the parent’s database goes, or the account does', async () => {
    account(writer(), 'acct-sub', 'acct-a');
    domain(writer(), 'dom-sub', 'acct-sub', 'sub.example');
    expect(await judged('x@sub.example')).toEqual(mailbox('x@sub.example', 'acct-sub'));
    run(writer(), `delete from customer_databases where account_id = 'acct-a'`);
    expect(await judged('x@sub.example')).toEqual(refused);
    database(writer(), 'acct-a');
    expect(await judged('x@sub.example')).toEqual(mailbox('x@sub.example', 'acct-sub'));
    run(writer(), `delete from accounts where id = 'acct-sub'`);
    expect(await judged('x@sub.example')).toEqual(refused);
  });

  it('an unknown domain refused, then added', async () => {
    expect(await judged('x@new.example')).toEqual(refused);
    domain(writer(), 'dom-new', 'acct-a', 'new.example');
    expect(await judged('x@new.example')).toEqual(mailbox('x@new.example', 'acct-a'));
  });
});

it('writes that decide nothing about receiving leave the cache alone (sends update accounts and databases all the time)', () => {
  const counter = () => clientOf(store.db).prepare(`select n from change_counters where name = 'recipients'`).pluck().get() as number;
  const before = counter();
  run(other, `update accounts set total_sent = total_sent + 1, sent_today_count = sent_today_count + 1 where id = 'acct-a'`);
  run(other, `update customer_databases set last_ok_at = 1, failures = 0, updated_at = 2 where account_id = 'acct-a'`);
  run(other, `update domains set last_checked_at = 5 where id = 'dom-a'`);
  expect(counter()).toBe(before);
  run(other, `update domains set record_status = ? where id = 'dom-a'`, NOT_RECEIVING);
  expect(counter()).toBe(before + 1);
});

it('a client trying made-up names cannot grow the cache without bound: past its bound it starts again, answers unchanged', async () => {
  for (let i = 0; i < RECEIVING_CACHE_DOMAINS * 2 + 10; i++) {
    expect(await judged(`x@made-up-${i}.example`)).toEqual(refused);
    expect(receivingCacheSize(store.db)).toBeLessThanOrEqual(RECEIVING_CACHE_DOMAINS);
  }
  expect(await judged('x@a.example')).toEqual(mailbox('x@a.example', 'acct-a'));
  run(other, `update domains set record_status = ? where id = 'dom-a'`, NOT_RECEIVING);
  expect(await judged('x@a.example')).toEqual(refused);
});

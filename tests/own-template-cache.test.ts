import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type SqliteStore, clientOf, databasePath, openDatabase } from '../db/client.js';
import {
  TEMPLATE_HEADS_CACHED,
  type TemplateInput,
  createTemplate,
  deleteTemplate,
  replaceTemplate,
  resolveOwnTemplate,
  templateHeadsCached,
} from '../server/core/own-templates.js';
import { FakeClock } from './helpers/clock.js';

/**
 * A send's template lookup (which template, which version, which layout) is kept per account, parent and name while the
 * `templates` change counter stands still; triggers raise it on every change to templates, their versions and accounts'
 * parents (db/migrations/0018_templates_change_counter.sql). Each change is made here, by this process or by another
 * connection (the CLI, an operator's sqlite3), and the very next send must render what it made.
 */

let dir: string;
let store: SqliteStore;
let other: Database.Database;
const clock = new FakeClock(Date.UTC(2026, 10, 28));

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

const template = (html: string, layout: string | null = null): TemplateInput => ({
  kind: 'template',
  subject: 'Hello {{ name }}',
  html,
  text: null,
  layout,
  variables: { name: { kind: 'text', required: true } },
});
const layout = (html: string): TemplateInput => ({ kind: 'layout', subject: null, html, text: null, layout: null, variables: {} });

const top = { id: 'acct-a', parentId: null };
const sub = { id: 'acct-sub', parentId: 'acct-a' };

/** What a send by `who` of `name` renders: the version and the html, or null when no own template has that name. */
async function sent(who: { id: string; parentId: string | null }, name: string): Promise<{ version: number; html: string } | null> {
  const resolved = await resolveOwnTemplate(store.db, who, name);
  return resolved ? { version: resolved.version, html: resolved.compiled.render({ name: 'Ada' }).html } : null;
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'mailstead-template-cache-'));
  store = openDatabase(dir);
  other = new Database(databasePath(dir));
  other.pragma('foreign_keys = ON');
  other.pragma('busy_timeout = 5000');
  account(clientOf(store.db), 'acct-a');
  account(clientOf(store.db), 'acct-sub', 'acct-a');
});

afterEach(() => {
  other.close();
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('a send sees at once what this process changed', () => {
  it('a new version, then the template deleted', async () => {
    expect(await sent(top, 'greeting')).toBeNull();
    await createTemplate(store.db, clock, top, 'greeting', template('<p>One {{ name }}</p>'));
    expect(await sent(top, 'greeting')).toMatchObject({ version: 1, html: expect.stringContaining('One Ada') });
    await replaceTemplate(store.db, clock, top, 'greeting', template('<p>Two {{ name }}</p>'));
    expect(await sent(top, 'greeting')).toMatchObject({ version: 2, html: expect.stringContaining('Two Ada') });
    await deleteTemplate(store.db, top, 'greeting');
    expect(await sent(top, 'greeting')).toBeNull();
  });

  it('a layout replaced under a template that names it', async () => {
    await createTemplate(store.db, clock, top, 'brand', layout('<div class="old">{{ content }}</div>'));
    await createTemplate(store.db, clock, top, 'greeting', template('<p>Hi {{ name }}</p>', 'brand'));
    expect((await sent(top, 'greeting'))?.html).toContain('class="old"');
    await replaceTemplate(store.db, clock, top, 'brand', { ...layout('<div class="new">{{ content }}</div>'), kind: null });
    expect((await sent(top, 'greeting'))?.html).toContain('class="new"');
  });

  it("a sub-account's copy shadows its parent's, and the parent's is back when the copy goes", async () => {
    await createTemplate(store.db, clock, top, 'greeting', template('<p>Parent {{ name }}</p>'));
    expect((await sent(sub, 'greeting'))?.html).toContain('Parent Ada');
    await createTemplate(store.db, clock, sub, 'greeting', template('<p>Own {{ name }}</p>'));
    expect((await sent(sub, 'greeting'))?.html).toContain('Own Ada');
    await deleteTemplate(store.db, sub, 'greeting');
    expect((await sent(sub, 'greeting'))?.html).toContain('Parent Ada');
  });

  it("a sub-account's template in its parent's layout takes its own layout of that name once it has one", async () => {
    await createTemplate(store.db, clock, top, 'brand', layout('<div class="parent">{{ content }}</div>'));
    await createTemplate(store.db, clock, sub, 'greeting', template('<p>Hi {{ name }}</p>', 'brand'));
    expect((await sent(sub, 'greeting'))?.html).toContain('class="parent"');
    await createTemplate(store.db, clock, sub, 'brand', layout('<div class="own">{{ content }}</div>'));
    expect((await sent(sub, 'greeting'))?.html).toContain('class="own"');
  });
});

describe('a send sees at once what another connection (the CLI, sqlite3) changed', () => {
  beforeEach(async () => {
    await createTemplate(store.db, clock, top, 'greeting', template('<p>One {{ name }}</p>'));
    expect((await sent(top, 'greeting'))?.version).toBe(1);
  });

  it('a version added and made current', async () => {
    run(
      other,
      `insert into template_versions (template_id, version, subject, html, text, layout, variables, created_at)
       select template_id, 2, subject, '<p>Two {{ name }}</p>', text, layout, variables, created_at from template_versions where version = 1`,
    );
    run(other, `update templates set version = 2 where name = 'greeting'`);
    expect(await sent(top, 'greeting')).toMatchObject({ version: 2, html: expect.stringContaining('Two Ada') });
  });

  it('the template deleted, with the account that owned it', async () => {
    run(other, `delete from templates where name = 'greeting'`);
    expect(await sent(top, 'greeting')).toBeNull();
    await createTemplate(store.db, clock, top, 'greeting', template('<p>Back {{ name }}</p>'));
    expect((await sent(top, 'greeting'))?.html).toContain('Back Ada');
    run(other, `delete from accounts where id = 'acct-a'`);
    expect(await sent(top, 'greeting')).toBeNull();
  });

  it('the template renamed', async () => {
    run(other, `update templates set name = 'hi-note' where name = 'greeting'`);
    expect(await sent(top, 'greeting')).toBeNull();
    expect((await sent(top, 'hi-note'))?.html).toContain('One Ada');
  });
});

it('the lookup is served from memory while the counter stands still, and read again once it moves', async () => {
  await createTemplate(store.db, clock, top, 'greeting', template('<p>One {{ name }}</p>'));
  expect((await sent(top, 'greeting'))?.version).toBe(1);
  // A change the triggers cannot see (they are dropped for it): the kept lookup still answers, which shows it is kept.
  run(other, `drop trigger templates_changed_templates_update`);
  run(other, `drop trigger templates_changed_template_versions_insert`);
  run(
    other,
    `insert into template_versions (template_id, version, subject, html, text, layout, variables, created_at)
     select template_id, 2, subject, '<p>Two {{ name }}</p>', text, layout, variables, created_at from template_versions where version = 1`,
  );
  run(other, `update templates set version = 2 where name = 'greeting'`);
  expect((await sent(top, 'greeting'))?.version).toBe(1);
  run(other, `update change_counters set n = n + 1 where name = 'templates'`);
  expect(await sent(top, 'greeting')).toMatchObject({ version: 2, html: expect.stringContaining('Two Ada') });
});

it('writes that change no lookup leave the counter alone (a send updates its account every time)', async () => {
  const counter = () => clientOf(store.db).prepare(`select n from change_counters where name = 'templates'`).pluck().get() as number;
  await createTemplate(store.db, clock, top, 'greeting', template('<p>One {{ name }}</p>'));
  const before = counter();
  run(other, `update accounts set total_sent = total_sent + 1, sent_today_count = sent_today_count + 1, credits_balance = 5 where id = 'acct-a'`);
  run(other, `update templates set updated_at = 5 where name = 'greeting'`);
  expect((await sent(top, 'greeting'))?.version).toBe(1);
  expect(counter()).toBe(before);
  run(other, `update accounts set parent_id = null where id = 'acct-sub'`);
  expect(counter()).toBe(before + 1);
});

it('sends naming made-up templates cannot grow the cache without bound: past its bound it starts again, answers unchanged', async () => {
  await createTemplate(store.db, clock, top, 'greeting', template('<p>One {{ name }}</p>'));
  for (let i = 0; i < TEMPLATE_HEADS_CACHED * 2 + 10; i++) {
    expect(await sent(top, `made-up-${i}`)).toBeNull();
    expect(templateHeadsCached(store.db)).toBeLessThanOrEqual(TEMPLATE_HEADS_CACHED);
  }
  expect((await sent(top, 'greeting'))?.version).toBe(1);
  await replaceTemplate(store.db, clock, top, 'greeting', template('<p>Two {{ name }}</p>'));
  expect((await sent(top, 'greeting'))?.version).toBe(2);
});

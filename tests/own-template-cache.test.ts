import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../db/client.js';
import { execute, queryRow } from '../db/sql.js';
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
import { type OtherConnection, openTestStore, otherConnectionTo, plainSql, stateOnPostgres } from './helpers/test-state.js';

/**
 * A send's template lookup (which template, which version, which layout) is kept per account, parent and name while the
 * `templates` change counter stands still; triggers raise it on every change to templates, their versions and accounts'
 * parents (db/migrations/0018_templates_change_counter.sql). Each change is made here, by this process or by another
 * connection (the CLI, an operator's sqlite3 or psql), and the very next send must render what it made. On the run's
 * engine: DATA_DIR's SQLite file and a second connection to it, or a Postgres state database and a second client.
 */

let dir: string;
let store: Store;
let other: OtherConnection;
const clock = new FakeClock(Date.UTC(2026, 10, 28));

const run = async (on: OtherConnection | 'here', statement: string, ...params: unknown[]) =>
  on === 'here' ? await execute(store.db, plainSql(statement, params)) : await on.query(statement, params);

async function account(on: OtherConnection | 'here', id: string, parentId: string | null = null): Promise<void> {
  await run(
    on,
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

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mailstead-template-cache-'));
  store = await openTestStore(dir);
  other = await otherConnectionTo(store, dir);
  await account('here', 'acct-a');
  await account('here', 'acct-sub', 'acct-a');
});

afterEach(async () => {
  await other.close();
  await store.close();
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

describe('a send sees at once what another connection (the CLI, sqlite3, psql) changed', () => {
  beforeEach(async () => {
    await createTemplate(store.db, clock, top, 'greeting', template('<p>One {{ name }}</p>'));
    expect((await sent(top, 'greeting'))?.version).toBe(1);
  });

  it('a version added and made current', async () => {
    await run(
      other,
      `insert into template_versions (template_id, version, subject, html, text, layout, variables, created_at)
       select template_id, 2, subject, '<p>Two {{ name }}</p>', text, layout, variables, created_at from template_versions where version = 1`,
    );
    await run(other, `update templates set version = 2 where name = 'greeting'`);
    expect(await sent(top, 'greeting')).toMatchObject({ version: 2, html: expect.stringContaining('Two Ada') });
  });

  it('the template deleted, with the account that owned it', async () => {
    await run(other, `delete from templates where name = 'greeting'`);
    expect(await sent(top, 'greeting')).toBeNull();
    await createTemplate(store.db, clock, top, 'greeting', template('<p>Back {{ name }}</p>'));
    expect((await sent(top, 'greeting'))?.html).toContain('Back Ada');
    await run(other, `delete from accounts where id = 'acct-a'`);
    expect(await sent(top, 'greeting')).toBeNull();
  });

  it('the template renamed', async () => {
    await run(other, `update templates set name = 'hi-note' where name = 'greeting'`);
    expect(await sent(top, 'greeting')).toBeNull();
    expect((await sent(top, 'hi-note'))?.html).toContain('One Ada');
  });
});

it('the lookup is served from memory while the counter stands still, and read again once it moves', async () => {
  await createTemplate(store.db, clock, top, 'greeting', template('<p>One {{ name }}</p>'));
  expect((await sent(top, 'greeting'))?.version).toBe(1);
  // A change the triggers cannot see (they are dropped for it): the kept lookup still answers, which shows it is kept.
  const on = store.engine === 'postgres' ? { update: ' on templates', insert: ' on template_versions' } : { update: '', insert: '' };
  await run(other, `drop trigger templates_changed_templates_update${on.update}`);
  await run(other, `drop trigger templates_changed_template_versions_insert${on.insert}`);
  await run(
    other,
    `insert into template_versions (template_id, version, subject, html, text, layout, variables, created_at)
     select template_id, 2, subject, '<p>Two {{ name }}</p>', text, layout, variables, created_at from template_versions where version = 1`,
  );
  await run(other, `update templates set version = 2 where name = 'greeting'`);
  expect((await sent(top, 'greeting'))?.version).toBe(1);
  await run(other, `update change_counters set n = n + 1 where name = 'templates'`);
  expect(await sent(top, 'greeting')).toMatchObject({ version: 2, html: expect.stringContaining('Two Ada') });
});

it('writes that change no lookup leave the counter alone (a send updates its account every time)', async () => {
  const counter = async () => (await queryRow<{ n: number }>(store.db, sql`select n from change_counters where name = 'templates'`))!.n;
  await createTemplate(store.db, clock, top, 'greeting', template('<p>One {{ name }}</p>'));
  const before = await counter();
  await run(other, `update accounts set total_sent = total_sent + 1, sent_today_count = sent_today_count + 1, credits_balance = 5 where id = 'acct-a'`);
  await run(other, `update templates set updated_at = 5 where name = 'greeting'`);
  expect((await sent(top, 'greeting'))?.version).toBe(1);
  expect(await counter()).toBe(before);
  await run(other, `update accounts set parent_id = null where id = 'acct-sub'`);
  expect(await counter()).toBe(before + 1);
});

it(
  'sends naming made-up templates cannot grow the cache without bound: past its bound it starts again, answers unchanged',
  async () => {
    await createTemplate(store.db, clock, top, 'greeting', template('<p>One {{ name }}</p>'));
    for (let i = 0; i < TEMPLATE_HEADS_CACHED * 2 + 10; i++) {
      expect(await sent(top, `made-up-${i}`)).toBeNull();
      expect(templateHeadsCached(store.db)).toBeLessThanOrEqual(TEMPLATE_HEADS_CACHED);
    }
    expect((await sent(top, 'greeting'))?.version).toBe(1);
    await replaceTemplate(store.db, clock, top, 'greeting', template('<p>Two {{ name }}</p>'));
    expect((await sent(top, 'greeting'))?.version).toBe(2);
    // On Postgres each of these sends is two round trips to the server or more: longer than the suite's 20 s default.
  },
  stateOnPostgres() ? 180_000 : undefined,
);

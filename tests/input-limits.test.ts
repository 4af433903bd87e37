import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emails } from '../db/schema/index.js';
import { assertRenderedSize, MAX_MAILBOX_INPUT, MAX_RECIPIENT_INPUT, MAX_TAG_VALUE } from '../server/core/send-request.js';
import { MAX_RENDERED_BYTES, TEMPLATES, VARIABLE_LIMITS, type VariableDef } from '../server/core/templates.js';
import { ApiError } from '../server/shared/errors.js';
import { newId } from '../server/shared/ids.js';
import { LISTS, PAGE_BYTE_BUDGET, toPage } from '../server/api/http/paging.js';
import { emailRows, expectError, expectOk, newSender, queued, type Sender, sendEmail } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * Input bounded everywhere: every template variable has a declared limit in the templates table
 * (a subject-like line 998 characters, a link 8192 characters, body text 100 KB of UTF-8), the rendered message at
 * most 1 MB, `from`/`replyTo`/`to` bounded as given, tag values 256; each limit tested at its boundary. And list
 * answers bounded in bytes: a page stops before a row that would take it past PAGE_BYTE_BUDGET, even over rows
 * stored before these limits.
 */

let service: TestService;
let s: Sender;

beforeAll(async () => {
  service = await startService({ DEFAULT_DAILY_QUOTA: '100000' });
  s = await newSender(service, { credits: 100_000 });
});
afterAll(async () => {
  await service.close();
});

/** The smallest valid value of a variable, so a send of only required ones passes. */
const minimal = (def: VariableDef): string => (def.kind === 'url' ? 'https://example.com/' : 'x');

/** A value of exactly `size` of the limit's unit: plain ASCII, or for a link an https URL of that length. */
function sized(def: VariableDef, size: number): string {
  return def.kind === 'url' ? `https://example.com/${'a'.repeat(size - 'https://example.com/'.length)}` : 'a'.repeat(size);
}

function templateBody(name: string, vars: Record<string, string>, extra: Record<string, unknown> = {}) {
  const required = Object.fromEntries(
    Object.entries(TEMPLATES[name]!.variables)
      .filter(([, d]) => d.required)
      .map(([k, d]) => [k, minimal(d)]),
  );
  return { from: s.from, to: 'customer@example.net', template: { name, ...required, ...vars }, sandbox: true, ...extra };
}

const everyVariable = Object.entries(TEMPLATES).flatMap(([name, def]) => Object.entries(def.variables).map(([variable, d]) => [name, variable, d] as const));

describe('template variables: each bounded by its declared limit', () => {
  it('every variable of every template declares a limit', () => {
    expect(everyVariable.length).toBeGreaterThan(0);
    for (const [, , d] of everyVariable) expect(Object.keys(VARIABLE_LIMITS)).toContain(d.limit);
    // The policy as decided: subject-like and short fields one header line, notification's body 100 KB.
    expect(TEMPLATES.notification!.variables.subject!.limit).toBe('line');
    expect(TEMPLATES.notification!.variables.body!.limit).toBe('body');
    expect(VARIABLE_LIMITS.line).toEqual({ max: 998, unit: 'characters' });
    expect(VARIABLE_LIMITS.body).toEqual({ max: 100 * 1024, unit: 'bytes' });
    expect(MAX_RENDERED_BYTES).toBe(1024 * 1024);
  });

  it.each(everyVariable)('%s.%s: exactly its limit passes, one more is 422 invalid_request naming it', async (name, variable, def) => {
    const { max, unit } = VARIABLE_LIMITS[def.limit];
    const at = await sendEmail(service, s.key, templateBody(name, { [variable]: sized(def, max) }));
    expectOk(at);
    const over = await sendEmail(service, s.key, templateBody(name, { [variable]: sized(def, max + 1) }));
    expectError(
      over,
      422,
      'invalid_request',
      unit === 'bytes' ? `template.${variable}: must be at most 100 KB (${max} bytes of UTF-8)` : `template.${variable}: must be at most ${max} characters`,
    );
  });

  it('a line counts characters, not UTF-16 units: 998 emoji pass, 999 are refused', async () => {
    expectOk(await sendEmail(service, s.key, templateBody('notification', { subject: '📬'.repeat(998) })));
    expectError(
      await sendEmail(service, s.key, templateBody('notification', { subject: '📬'.repeat(999) })),
      422,
      'invalid_request',
      'template.subject: must be at most 998 characters',
    );
  });

  it('a body counts bytes of UTF-8: 51,200 two-byte characters pass, one more byte is refused', async () => {
    expectOk(await sendEmail(service, s.key, templateBody('notification', { body: 'é'.repeat(51_200) })));
    expectError(
      await sendEmail(service, s.key, templateBody('notification', { body: `${'é'.repeat(51_200)}a` })),
      422,
      'invalid_request',
      /^template\.body: must be at most 100 KB/,
    );
  });

  it('the stored subject of the largest notification is its 998 characters, and nothing is stored for a refused one', async () => {
    const before = (await emailRows(service, s.account.id)).length;
    const subject = 's'.repeat(998);
    const res = await sendEmail(service, s.key, { ...templateBody('notification', { subject, body: 'b' }), sandbox: false });
    expectOk(res);
    expect((await queued(service, res.body.id)).message!.subject).toBe(subject);
    expectError(await sendEmail(service, s.key, templateBody('notification', { subject: `${subject}s`, body: 'b' })), 422, 'invalid_request');
    expect(await emailRows(service, s.account.id)).toHaveLength(before + 1);
  });

  it('a refusal never echoes a huge unknown variable or tag name', async () => {
    const huge = 'k'.repeat(100_000);
    for (const body of [templateBody('receipt', { total: '$1', [huge]: 'x' }), templateBody('receipt', { total: '$1' }, { tags: { [huge]: 'x' } })]) {
      const res = await sendEmail(service, s.key, body);
      expectError(res, 422, 'invalid_request');
      expect(res.body.error.message.length).toBeLessThan(300);
    }
  });
});

describe('the rendered message: at most 1 MB', () => {
  const rendered = (bytes: number) => ({ subject: 's', html: 'h'.repeat(bytes - 2), text: 't' });

  it('exactly 1 MB (subject, html and text together) passes; one byte more is 422 invalid_request naming template', () => {
    expect(() => assertRenderedSize(rendered(MAX_RENDERED_BYTES))).not.toThrow();
    let err: unknown;
    try {
      assertRenderedSize(rendered(MAX_RENDERED_BYTES + 1));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ code: 'invalid_request', status: 422, message: expect.stringMatching(/^template: the rendered message .* at most 1 MB/) });
  });

  it('counts bytes of UTF-8, not characters', () => {
    expect(() => assertRenderedSize({ subject: '', html: 'é'.repeat(MAX_RENDERED_BYTES / 2), text: '' })).not.toThrow();
    expect(() => assertRenderedSize({ subject: 'a', html: 'é'.repeat(MAX_RENDERED_BYTES / 2), text: '' })).toThrow(ApiError);
  });

  it('the largest variables the templates take render within it (escaping included)', async () => {
    // Quotes become &quot; (six bytes) in html: the worst a 100 KB body can do.
    const res = await sendEmail(service, s.key, {
      ...templateBody('notification', { subject: '"'.repeat(998), body: '"'.repeat(100 * 1024) }),
      sandbox: false,
    });
    expectOk(res);
  });
});

describe('addresses and tags as given', () => {
  const pad = (value: string, length: number) => `${' '.repeat(length - value.length)}${value}`;

  it(`from: ${MAX_MAILBOX_INPUT} characters pass, one more is 422 naming from`, async () => {
    expectOk(await sendEmail(service, s.key, { ...templateBody('welcome', {}), from: pad(`"Acme" <${s.from}>`, MAX_MAILBOX_INPUT) }));
    expectError(
      await sendEmail(service, s.key, { ...templateBody('welcome', {}), from: pad(`"Acme" <${s.from}>`, MAX_MAILBOX_INPUT + 1) }),
      422,
      'invalid_request',
      `from: must be at most ${MAX_MAILBOX_INPUT} characters`,
    );
  });

  it(`replyTo: ${MAX_MAILBOX_INPUT} characters pass, one more is 422 naming replyTo`, async () => {
    expectOk(await sendEmail(service, s.key, templateBody('welcome', {}, { replyTo: pad('help@example.org', MAX_MAILBOX_INPUT) })));
    expectError(
      await sendEmail(service, s.key, templateBody('welcome', {}, { replyTo: pad('help@example.org', MAX_MAILBOX_INPUT + 1) })),
      422,
      'invalid_request',
      `replyTo: must be at most ${MAX_MAILBOX_INPUT} characters`,
    );
  });

  it(`to: a recipient of ${MAX_RECIPIENT_INPUT} characters passes, one more is 422 naming to`, async () => {
    expectOk(await sendEmail(service, s.key, templateBody('welcome', {}, { to: pad('ann@example.net', MAX_RECIPIENT_INPUT) })));
    expectError(
      await sendEmail(service, s.key, templateBody('welcome', {}, { to: [pad('ann@example.net', MAX_RECIPIENT_INPUT + 1)] })),
      422,
      'invalid_request',
      `to.0: must be at most ${MAX_RECIPIENT_INPUT} characters`,
    );
  });

  it(`a tag value of ${MAX_TAG_VALUE} characters passes, one more is 422 naming the tag`, async () => {
    expectOk(await sendEmail(service, s.key, templateBody('welcome', {}, { tags: { plan: 'v'.repeat(MAX_TAG_VALUE) } })));
    expectError(
      await sendEmail(service, s.key, templateBody('welcome', {}, { tags: { plan: 'v'.repeat(MAX_TAG_VALUE + 1) } })),
      422,
      'invalid_request',
      `tags.plan: must be at most ${MAX_TAG_VALUE} characters`,
    );
  });
});

describe('list answers bounded in bytes', () => {
  /** Log entries written straight to the database, as rows stored before the input limits could be. */
  async function insertLogRows(accountId: string, subjects: string[]): Promise<string[]> {
    const ids: string[] = [];
    for (const subject of subjects) {
      const now = service.clock.now();
      const id = newId(now);
      await service.deps.db.insert(emails).values({
        id,
        accountId,
        fromAddress: 'billing@example.com',
        to: ['customer@example.net'],
        subject,
        template: 'notification',
        status: 'sandboxed',
        sandbox: true,
        createdAt: now,
      });
      ids.push(id);
      service.clock.advance(1);
    }
    return ids;
  }

  it('GET /emails?limit=100 over rows with huge subjects answers pages under the budget, and a walk sees each row once', async () => {
    const owner = await newSender(service);
    // Twelve 300 KB subjects: three fit in 1 MiB, a fourth would not.
    const ids = await insertLogRows(
      owner.account.id,
      Array.from({ length: 12 }, (_, i) => `${i}`.padEnd(300 * 1024, 'x')),
    );
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await fetch(`${service.base}/emails?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, {
        headers: { authorization: `Bearer ${owner.key}` },
      });
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(Buffer.byteLength(text)).toBeLessThanOrEqual(PAGE_BYTE_BUDGET + 1024);
      const page = JSON.parse(text) as { data: { id: string }[]; nextCursor: string | null };
      expect(page.data).toHaveLength(page.nextCursor === null ? 12 - seen.length : 3);
      seen.push(...page.data.map((e) => e.id));
      cursor = page.nextCursor;
      pages++;
    } while (cursor !== null && pages < 10);
    expect(pages).toBe(4);
    expect(seen).toEqual([...ids].reverse());
  });

  it('a row larger than the whole budget is a page of its own: a page always has a row', async () => {
    const owner = await newSender(service);
    const ids = await insertLogRows(owner.account.id, ['small one', 'h'.repeat(PAGE_BYTE_BUDGET + 10), 'small two']);
    const first = await service.api('GET', '/emails?limit=100', { key: owner.key });
    expect(first.status).toBe(200);
    expect(first.body.data.map((e: { id: string }) => e.id)).toEqual([ids[2]]);
    const second = await service.api('GET', `/emails?limit=100&cursor=${encodeURIComponent(first.body.nextCursor)}`, { key: owner.key });
    expect(second.body.data.map((e: { id: string }) => e.id)).toEqual([ids[1]]);
    const third = await service.api('GET', `/emails?limit=100&cursor=${encodeURIComponent(second.body.nextCursor)}`, { key: owner.key });
    expect(third.body).toEqual({ data: [expect.objectContaining({ id: ids[0] })], nextCursor: null });
  });

  it('toPage at the boundary: rows whose JSON makes exactly the budget share a page; one byte more moves the second row on', async () => {
    const db = service.deps.db;
    const page = { limit: 100, after: null };
    const row = (id: string, bytes: number) => {
      const base = JSON.stringify({ id, pad: '' }).length;
      return { id, pad: 'p'.repeat(bytes - base) };
    };
    const ids = [newId(1), newId(2), newId(3)];
    const half = PAGE_BYTE_BUDGET / 2;
    const exact = await toPage(db, LISTS.emails, 'acct', page, [row(ids[0]!, half), row(ids[1]!, half), row(ids[2]!, 100)]);
    expect(exact.data.map((r) => r.id)).toEqual(ids.slice(0, 2));
    expect(exact.nextCursor).not.toBeNull();
    const over = await toPage(db, LISTS.emails, 'acct', page, [row(ids[0]!, half), row(ids[1]!, half + 1), row(ids[2]!, 100)]);
    expect(over.data.map((r) => r.id)).toEqual(ids.slice(0, 1));
    expect(over.nextCursor).not.toBeNull();
    const all = await toPage(db, LISTS.emails, 'acct', page, [row(ids[0]!, 100), row(ids[1]!, 100)]);
    expect(all).toEqual({ data: [expect.objectContaining({ id: ids[0] }), expect.objectContaining({ id: ids[1] })], nextCursor: null });
  });

  it('toPage reads a lazy list no further than the page needs', async () => {
    let pulled = 0;
    function* rows() {
      for (let i = 0; i < 1000; i++) {
        pulled++;
        yield { id: newId(i), pad: 'p'.repeat(400 * 1024) };
      }
    }
    const page = await toPage(service.deps.db, LISTS.emails, 'acct', { limit: 100, after: null }, rows());
    expect(page.data).toHaveLength(2);
    expect(pulled).toBe(3);
  });
});

import { and, desc, eq, lt, lte, sql } from 'drizzle-orm';
import { type Db, pointReads } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import {
  type AccountRow,
  type DeclaredVariable,
  type TemplateKind,
  type TemplateRow,
  type TemplateVersionRow,
  accounts,
  templateVersions,
  templates,
} from '../../db/schema/index.js';
import type { Clock } from '../shared/clock.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { type CompiledTemplate, type Declarations, checkLayoutSource, checkTemplateSource, compileTemplate } from './template-language.js';
import { findTemplate } from './templates.js';
import { lockRows, one, queryRow } from '../../db/sql.js';

/**
 * An account's own templates and layouts (docs/api/decisions.md section 9): saved as versions, looked up for a send in
 * the acting account, then its parent, then the built-ins. The language itself (Liquid, its limits, layouts, CSS) is
 * template-language.ts; this module keeps the rules of names, counts, versions, layouts in use and tenancy.
 */

/** The limits of section 9, as data. */
export const OWN_TEMPLATE_LIMITS = {
  /** Templates and layouts together, per account. */
  templates: 100,
  /** UTF-8 bytes of subject, html and text together. */
  sourceBytes: 256 * 1024,
  /** Versions kept per template; older ones are dropped. */
  versions: 50,
} as const;

/** A template's source as a request gives it (validated by the route's schema). */
export interface TemplateInput {
  kind: TemplateKind;
  subject: string | null;
  html: string | null;
  text: string | null;
  layout: string | null;
  variables: Declarations;
}

/** Where a template comes from, as a reader of the acting account sees it. */
export type Origin = 'own' | 'parent';

/** A saved template (or layout) with the source of its current version. */
export interface OwnTemplate {
  row: TemplateRow;
  version: TemplateVersionRow;
  origin: Origin;
}

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  current: db
    .select({ row: templates, version: templateVersions })
    .from(templates)
    .innerJoin(templateVersions, and(eq(templateVersions.templateId, templates.id), eq(templateVersions.version, templates.version)))
    .where(and(eq(templates.accountId, p('accountId')), eq(templates.name, p('name'))))
    .prepare(),
  parentOf: db
    .select({ parentId: accounts.parentId })
    .from(accounts)
    .where(eq(accounts.id, p('id')))
    .prepare(),
  // A send's lookups read no source: the compiled template is cached by these ids and versions.
  head: db
    .select({ id: templates.id, accountId: templates.accountId, kind: templates.kind, version: templates.version, layout: templateVersions.layout })
    .from(templates)
    .innerJoin(templateVersions, and(eq(templateVersions.templateId, templates.id), eq(templateVersions.version, templates.version)))
    .where(and(eq(templates.accountId, p('accountId')), eq(templates.name, p('name'))))
    .prepare(),
  layoutHead: db
    .select({ id: templates.id, kind: templates.kind, version: templates.version })
    .from(templates)
    .where(and(eq(templates.accountId, p('accountId')), eq(templates.name, p('name'))))
    .prepare(),
  source: db
    .select()
    .from(templateVersions)
    .where(and(eq(templateVersions.templateId, p('templateId')), eq(templateVersions.version, p('version'))))
    .prepare(),
}));

/** The accounts whose templates the acting account reads, nearest first: itself, then its parent. */
function chainOf(account: Pick<AccountRow, 'id' | 'parentId'>): { id: string; origin: Origin }[] {
  return account.parentId
    ? [
        { id: account.id, origin: 'own' },
        { id: account.parentId, origin: 'parent' },
      ]
    : [{ id: account.id, origin: 'own' }];
}

async function currentOf(db: Db, accountId: string, name: string): Promise<{ row: TemplateRow; version: TemplateVersionRow } | undefined> {
  return await one(statements(db).current.execute({ accountId, name }));
}

/** The template of this name the account reads: its own, else its parent's (built-ins are not stored). */
export async function findOwnTemplate(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>, name: string): Promise<OwnTemplate | undefined> {
  for (const { id, origin } of chainOf(account)) {
    const found = await currentOf(db, id, name);
    if (found) return { ...found, origin };
  }
  return undefined;
}

/** The layout a template of `ownerId` names: the owner's own, else the owner's parent's. */
async function findLayout(db: Db, ownerId: string, name: string): Promise<{ row: TemplateRow; version: TemplateVersionRow } | undefined> {
  const own = await currentOf(db, ownerId, name);
  if (own) return own.row.kind === 'layout' ? own : undefined;
  const parentId = (await one(statements(db).parentOf.execute({ id: ownerId })))?.parentId;
  if (!parentId) return undefined;
  const inherited = await currentOf(db, parentId, name);
  return inherited?.row.kind === 'layout' ? inherited : undefined;
}

export const templateNotFound = (name: string) => new ApiError('template_not_found', `No template named ${name} on this account.`);

/** Every template and layout the account reads (own first, shadowing its parent's by name), sorted by name. */
export async function listOwnTemplates(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>): Promise<OwnTemplate[]> {
  const byName = new Map<string, OwnTemplate>();
  for (const { id, origin } of chainOf(account)) {
    const rows = await db
      .select({ row: templates, version: templateVersions })
      .from(templates)
      .innerJoin(templateVersions, and(eq(templateVersions.templateId, templates.id), eq(templateVersions.version, templates.version)))
      .where(eq(templates.accountId, id));
    for (const r of rows) if (!byName.has(r.row.name)) byName.set(r.row.name, { ...r, origin });
  }
  return [...byName.values()].sort((a, b) => (a.row.name < b.row.name ? -1 : a.row.name > b.row.name ? 1 : 0));
}

/** A template's kept versions, newest first, below `before` when given. */
export async function templateVersionsOf(db: Db, templateId: string, before: number | null, limit: number): Promise<TemplateVersionRow[]> {
  return await db
    .select()
    .from(templateVersions)
    .where(
      before === null ? eq(templateVersions.templateId, templateId) : and(eq(templateVersions.templateId, templateId), lt(templateVersions.version, before)),
    )
    .orderBy(desc(templateVersions.version))
    .limit(limit);
}

function sourceBytes(input: Pick<TemplateInput, 'subject' | 'html' | 'text'>): number {
  return Buffer.byteLength(input.subject ?? '', 'utf8') + Buffer.byteLength(input.html ?? '', 'utf8') + Buffer.byteLength(input.text ?? '', 'utf8');
}

/**
 * The source checked as section 9 asks before anything is saved: the shape a kind needs, its size, the language's
 * rules (template-language.ts), and a layout it names (one of the account's layouts, or its parent's), compiled
 * together with it so a clash shows now and not at the first send.
 */
async function checkSource(db: Db, accountId: string, input: TemplateInput): Promise<void> {
  const size = sourceBytes(input);
  if (size > OWN_TEMPLATE_LIMITS.sourceBytes) {
    throw new ApiError(
      'invalid_template',
      `The source (subject, html and text) must be at most 256 KB (${OWN_TEMPLATE_LIMITS.sourceBytes} bytes of UTF-8); this one is ${size} bytes.`,
    );
  }
  if (input.kind === 'layout') {
    if (input.subject !== null) throw new ApiError('invalid_request', 'subject: a layout has no subject; its templates give theirs');
    if (input.layout !== null) throw new ApiError('invalid_request', 'layout: a layout cannot name a layout');
    if (input.html === null) throw new ApiError('invalid_request', 'html: is required for a layout, and must hold {{ content }} once');
    checkLayoutSource({ html: input.html, text: input.text, variables: input.variables });
    return;
  }
  if (input.subject === null) throw new ApiError('invalid_request', 'subject: is required');
  if (input.html === null && input.text === null) throw new ApiError('invalid_request', 'html: a template needs html, text or both');
  const source = { subject: input.subject, html: input.html, text: input.text, variables: input.variables };
  checkTemplateSource(source);
  if (input.layout !== null) {
    const layout = await findLayout(db, accountId, input.layout);
    if (!layout) throw new ApiError('invalid_request', `layout: no layout named ${input.layout} on this account`);
    compileTemplate(source, layoutSourceOf(layout.version));
  }
}

function layoutSourceOf(v: TemplateVersionRow) {
  return { html: v.html, text: v.text, variables: v.variables };
}

function assertNotBuiltIn(name: string): void {
  if (findTemplate(name)) throw new ApiError('template_exists', `${name} is the name of a built-in template; choose another name.`);
}

/** POST /templates: a new template (or layout) at version 1. */
export async function createTemplate(db: Db, clock: Clock, account: Pick<AccountRow, 'id'>, name: string, input: TemplateInput): Promise<OwnTemplate> {
  await checkSource(db, account.id, input);
  assertNotBuiltIn(name);
  return await db.transaction(async (tx) => {
    // The account held (on Postgres): its count of templates, and the name, cannot be raced.
    await lockRows(tx, accounts, accounts.id, [account.id]);
    if (await currentOf(db, account.id, name)) throw new ApiError('template_exists', `A template named ${name} already exists on this account.`);
    const [counted] = await tx.select({ n: sql<number>`count(*)` }).from(templates).where(eq(templates.accountId, account.id));
    if ((counted?.n ?? 0) >= OWN_TEMPLATE_LIMITS.templates) {
      throw new ApiError('template_limit', `This account already has ${OWN_TEMPLATE_LIMITS.templates} templates (layouts included); delete one first.`);
    }
    const now = clock.now();
    const row: TemplateRow = { id: newId(now), accountId: account.id, name, kind: input.kind, version: 1, createdAt: now, updatedAt: now };
    await tx.insert(templates).values(row);
    const version = await insertVersion(tx, row.id, 1, input, now);
    return { row, version, origin: 'own' as const };
  });
}

type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

async function insertVersion(tx: Tx, templateId: string, version: number, input: TemplateInput, now: number): Promise<TemplateVersionRow> {
  const row: TemplateVersionRow = {
    templateId,
    version,
    subject: input.kind === 'layout' ? null : input.subject,
    html: input.html,
    text: input.text,
    layout: input.kind === 'layout' ? null : input.layout,
    variables: input.variables,
    createdAt: now,
  };
  await tx.insert(templateVersions).values(row);
  // The newest versions are kept; an older one goes.
  await tx
    .delete(templateVersions)
    .where(and(eq(templateVersions.templateId, templateId), lte(templateVersions.version, version - OWN_TEMPLATE_LIMITS.versions)));
  return row;
}

/**
 * PUT /templates/{name}: the source replaced, as a new version. Only the account's own: a built-in is read-only, and
 * a sub-account's copy of a parent's template is made with POST under the same name.
 */
export async function replaceTemplate(
  db: Db,
  clock: Clock,
  account: Pick<AccountRow, 'id'>,
  name: string,
  given: Omit<TemplateInput, 'kind'> & { kind: TemplateKind | null },
): Promise<OwnTemplate> {
  if (findTemplate(name)) throw new ApiError('conflict', `${name} is a built-in template and cannot be changed; create your own under another name.`);
  const existing = await currentOf(db, account.id, name);
  if (!existing) throw templateNotFound(name);
  if (given.kind !== null && existing.row.kind !== given.kind) {
    throw new ApiError('invalid_request', `kind: ${name} is a ${existing.row.kind}; its kind cannot change (create a new one instead)`);
  }
  const input: TemplateInput = { ...given, kind: existing.row.kind };
  await checkSource(db, account.id, input);
  if (input.kind === 'layout') assertLayoutFits(account.id, name, input, await templatesUsing(db, account.id, name));
  return await db.transaction(async (tx) => {
    // The account held (on Postgres): one new version at a time, and no layout deleted under it meanwhile.
    await lockRows(tx, accounts, accounts.id, [account.id]);
    const current = await currentOf(db, account.id, name);
    if (!current) throw templateNotFound(name);
    const now = clock.now();
    const next = current.row.version + 1;
    await tx.update(templates).set({ version: next, updatedAt: now }).where(eq(templates.id, current.row.id));
    const version = await insertVersion(tx, current.row.id, next, input, now);
    return { row: { ...current.row, version: next, updatedAt: now }, version, origin: 'own' as const };
  });
}

/** A template that uses a layout, with the account it belongs to. */
interface LayoutUser {
  owner: string;
  row: TemplateRow;
  version: TemplateVersionRow;
}

/**
 * The templates whose current version names the layout `name` of `accountId`: the account's own, and its
 * sub-accounts' that have no layout of that name of their own (theirs would be the one they use).
 */
async function templatesUsing(db: Db, accountId: string, name: string): Promise<LayoutUser[]> {
  const subs = await db.select({ id: accounts.id }).from(accounts).where(eq(accounts.parentId, accountId));
  const users: LayoutUser[] = [];
  for (const owner of [accountId, ...subs.map((s) => s.id)]) {
    if (owner !== accountId && (await currentOf(db, owner, name))) continue;
    const rows = await db
      .select({ row: templates, version: templateVersions })
      .from(templates)
      .innerJoin(templateVersions, and(eq(templateVersions.templateId, templates.id), eq(templateVersions.version, templates.version)))
      .where(and(eq(templates.accountId, owner), eq(templateVersions.layout, name)))
      .orderBy(templates.name);
    users.push(...rows.map((r) => ({ owner, ...r })));
  }
  return users;
}

const userName = (accountId: string, u: LayoutUser) => (u.owner === accountId ? u.row.name : `${u.row.name} (sub-account ${u.owner})`);

/**
 * A layout's new source compiled with each template that uses it, so a change that would break one (a variable of
 * the layout a template declares otherwise, CSS past the element cap once put together) is refused at save, never
 * found at a send.
 */
function assertLayoutFits(accountId: string, name: string, layout: TemplateInput, users: LayoutUser[]): void {
  for (const u of users) {
    try {
      compileTemplate(
        { subject: u.version.subject ?? '', html: u.version.html, text: u.version.text, variables: u.version.variables },
        { html: layout.html, text: layout.text, variables: layout.variables },
      );
    } catch (err) {
      if (!(err instanceof ApiError) || err.code !== 'invalid_template') throw err;
      throw new ApiError('invalid_template', `With this source the layout ${name} would break the template ${userName(accountId, u)}: ${err.message}`);
    }
  }
}

/** DELETE /templates/{name}: the template and its versions; a layout still named by templates stays (409 template_in_use). */
export async function deleteTemplate(db: Db, account: Pick<AccountRow, 'id'>, name: string): Promise<void> {
  if (findTemplate(name)) throw new ApiError('conflict', `${name} is a built-in template and cannot be deleted.`);
  await db.transaction(async (tx) => {
    // The account held (on Postgres): no template names this layout meanwhile.
    await lockRows(tx, accounts, accounts.id, [account.id]);
    const existing = await currentOf(db, account.id, name);
    if (!existing) throw templateNotFound(name);
    if (existing.row.kind === 'layout') {
      const users = (await templatesUsing(db, account.id, name)).map((u) => userName(account.id, u));
      if (users.length > 0) {
        throw new ApiError(
          'template_in_use',
          `The layout ${name} is still named by ${users.length} template${users.length === 1 ? '' : 's'}: ${users.slice(0, 10).join(', ')}${users.length > 10 ? ', …' : ''}.`,
        );
      }
    }
    await tx.delete(templates).where(eq(templates.id, existing.row.id));
  });
}

/** Compiled templates by template version and layout version: a send compiles a version once. */
const COMPILED_CACHE_SIZE = 256;
const compiled = new Map<string, CompiledTemplate>();

async function compiledOf(key: string, build: () => Promise<CompiledTemplate>): Promise<CompiledTemplate> {
  const hit = compiled.get(key);
  if (hit) {
    // Most recently used last: the oldest entry is the first the map yields.
    compiled.delete(key);
    compiled.set(key, hit);
    return hit;
  }
  const made = await build();
  compiled.set(key, made);
  if (compiled.size > COMPILED_CACHE_SIZE) compiled.delete(compiled.keys().next().value!);
  return made;
}

/** An own template ready to render for a send: which version, and the variables it takes. */
export interface ResolvedTemplate {
  name: string;
  version: number;
  variables: Record<string, DeclaredVariable>;
  compiled: CompiledTemplate;
}

/**
 * The own template a send names, compiled (from the cache when this version was compiled before), or undefined when
 * neither the account nor its parent has one of that name (the send then tries the built-ins). A layout removed since
 * the template was saved (the in-use check makes that rare) renders the template without one.
 */
export async function resolveOwnTemplate(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>, name: string): Promise<ResolvedTemplate | undefined> {
  const head = await headOf(db, account, name);
  if (!head) return undefined;
  const { found, layout } = head;
  const key = `${found.id}:${found.version}:${layout ? `${layout.id}:${layout.version}` : '-'}`;
  const made = await compiledOf(key, async () => {
    const q = statements(db);
    const v = await one(q.source.execute({ templateId: found.id, version: found.version }));
    const l = layout ? await one(q.source.execute({ templateId: layout.id, version: layout.version })) : undefined;
    if (!v) throw new Error(`template ${found.id} has no version ${found.version}`);
    try {
      return compileTemplate({ subject: v.subject ?? '', html: v.html, text: v.text, variables: v.variables }, l ? layoutSourceOf(l) : null);
    } catch (err) {
      // A pair that compiled when each was saved and no longer does (a parent's layout changed under a sub-account's
      // template, say): a refusal of the send's template, as POST /emails names its refusals.
      if (err instanceof ApiError && err.code === 'invalid_template') {
        throw new ApiError('invalid_request', `template.name: the template ${name} no longer compiles with its layout: ${err.message}`);
      }
      throw err;
    }
  });
  return { name, version: found.version, variables: made.variables, compiled: made };
}

/** Which saved template, and which layout, a send of `name` by an account renders: ids and versions only. */
interface Head {
  found: { id: string; version: number };
  layout: { id: string; version: number } | undefined;
}

/** (account, parent, name) triples whose lookup is kept at most; a cache grown past it (made-up names) starts again. */
export const TEMPLATE_HEADS_CACHED = 10_000;

/**
 * What a send's lookup found per account, parent and name (null: no own template of that name), kept while the
 * `templates` change counter stands still: triggers raise it whenever a template, a version or an account's parent
 * changes, whoever writes (db/migrations/0018_templates_change_counter.sql). A send then costs one counter read
 * instead of a join per account of the chain and one or two for the layout.
 */
const headCaches = new WeakMap<Db, { stamp: number; heads: Map<string, Head | null> }>();

/** How many lookups the send's cache holds (for tests). */
export function templateHeadsCached(db: Db): number {
  return headCaches.get(db)?.heads.size ?? 0;
}

async function headOf(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>, name: string): Promise<Head | null> {
  let cache = headCaches.get(db);
  if (!cache) headCaches.set(db, (cache = { stamp: -1, heads: new Map() }));
  const stamp = (await pointReads(db, () => queryRow<{ n: number }>(db, sql`select n from change_counters where name = 'templates'`)))!.n;
  if (stamp !== cache.stamp || cache.heads.size >= TEMPLATE_HEADS_CACHED) {
    cache.heads.clear();
    cache.stamp = stamp;
  }
  const key = `${account.id}\n${account.parentId ?? ''}\n${name}`;
  const known = cache.heads.get(key);
  if (known !== undefined) return known;
  const head = await lookUpHead(db, account, name);
  // Kept only while the counter it was read under stands (another lookup may have seen it move meanwhile).
  if (cache.stamp === stamp) cache.heads.set(key, head);
  return head;
}

async function lookUpHead(db: Db, account: Pick<AccountRow, 'id' | 'parentId'>, name: string): Promise<Head | null> {
  const q = statements(db);
  let head: { id: string; accountId: string; kind: TemplateKind; version: number; layout: string | null } | undefined;
  for (const { id } of chainOf(account)) {
    head = await one(q.head.execute({ accountId: id, name }));
    if (head) break;
  }
  if (head?.kind !== 'template') return null;
  const layout = head.layout ? await layoutHeadOf(db, head.accountId, head.layout) : undefined;
  return { found: { id: head.id, version: head.version }, layout: layout ? { id: layout.id, version: layout.version } : undefined };
}

/** The layout a template of `ownerId` names, ids only: the owner's own, else the owner's parent's. */
async function layoutHeadOf(db: Db, ownerId: string, name: string): Promise<{ id: string; version: number } | undefined> {
  const q = statements(db);
  const own = await one(q.layoutHead.execute({ accountId: ownerId, name }));
  if (own) return own.kind === 'layout' ? own : undefined;
  const parentId = (await one(q.parentOf.execute({ id: ownerId })))?.parentId;
  if (!parentId) return undefined;
  const inherited = await one(q.layoutHead.execute({ accountId: parentId, name }));
  return inherited?.kind === 'layout' ? inherited : undefined;
}

/** Compiles an unsaved source for a preview (POST /templates/{name}/render with a source): nothing is stored. */
export async function compileUnsaved(db: Db, account: Pick<AccountRow, 'id'>, input: TemplateInput): Promise<CompiledTemplate> {
  await checkSource(db, account.id, input);
  if (input.kind === 'layout') {
    return compileTemplate(
      // A template needs a subject: a layout has none, so its preview takes a sample one.
      { subject: 'Preview', html: '<p>The content of a template goes here.</p>', text: 'The content of a template goes here.', variables: {} },
      { html: input.html, text: input.text, variables: input.variables },
    );
  }
  const layout = input.layout ? await findLayout(db, account.id, input.layout) : undefined;
  return compileTemplate(
    { subject: input.subject ?? '', html: input.html, text: input.text, variables: input.variables },
    layout ? layoutSourceOf(layout.version) : null,
  );
}

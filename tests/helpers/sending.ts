import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { type SQL, and, asc, eq, sql } from 'drizzle-orm';
import { expect } from 'vitest';
import {
  type AccountRow,
  accounts,
  domains,
  emails,
  type EmailRow,
  idempotencyKeys,
  type OutboundMessageRow,
  type OutboundRecipientRow,
  outboundMessages,
  outboundRecipients,
  type RecordKind,
  type RecordStatus,
} from '../../db/schema/index.js';
import type { Db } from '../../db/client.js';
import type { ReadAhead, WriteLock } from '../../db/group-commit.js';
import { newId } from '../../server/shared/ids.js';
import type { Scope } from '../../server/core/scopes.js';
import { type ApiResponse, type TestService, refuseInsertsInto } from './service.js';
import { replaceDep } from './replace-dep.js';
import { one, queryRows } from '../../db/sql.js';

/**
 * Sending fixtures: an account with a domain that may send (records marked as DNS would show them, no resolver
 * needed), send bodies, direct reads of the send log and the outbound queue, and a raw HTTP client for headers fetch
 * would not send as written.
 */

/** What DNS is taken to show for a connected domain: nothing yet, ownership only, or everything sending needs. */
export type DomainState = 'pending' | 'ownership' | 'sending';

const RECORDS: Record<DomainState, Record<RecordKind, RecordStatus>> = {
  pending: { ownership: 'pending', spf: 'pending', receiving: 'pending', signing: 'pending' },
  ownership: { ownership: 'published', spf: 'pending', receiving: 'pending', signing: 'pending' },
  sending: { ownership: 'published', spf: 'published', receiving: 'published', signing: 'published' },
};

let domainCounter = 0;
/** A domain name no other account of the run has claimed. */
export const uniqueDomain = (label = 'mail'): string => `${label}-${process.pid}-${++domainCounter}.example.com`;

/** Connects `name` through POST /domains (for the sub-account named by `account`, if any) and sets its record statuses. */
export async function connectDomain(service: TestService, key: string, name: string, opts: { account?: string; state?: DomainState } = {}): Promise<string> {
  const res = await service.api('POST', '/domains', { key, account: opts.account, body: { name } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  const id = res.body.id as string;
  await setDomainState(service, id, opts.state ?? 'sending');
  return id;
}

export async function setDomainState(service: TestService, domainId: string, state: DomainState): Promise<void> {
  await service.deps.db.update(domains).set({ recordStatus: RECORDS[state] }).where(eq(domains.id, domainId));
}

export interface Sender {
  account: AccountRow;
  key: string;
  domain: string;
  domainId: string;
  /** A bare sender address on the domain. */
  from: string;
}

/** A new top-level account with a domain that may send. */
export async function newSender(service: TestService, opts: { name?: string; credits?: number; scopes?: readonly Scope[] } = {}): Promise<Sender> {
  const { account, key } = await service.newAccount(opts);
  const domain = uniqueDomain();
  const domainId = await connectDomain(service, key, domain);
  return { account, key, domain, domainId, from: `billing@${domain}` };
}

export interface SubSender {
  id: string;
  domain: string;
  domainId: string;
  from: string;
}

/** A sub-account of `parent` (acted for with the parent's key and X-Service-Account) with its own sending domain. */
export async function newSubSender(service: TestService, parentKey: string, name = 'Shop sub-account'): Promise<SubSender> {
  const res = await service.api('POST', '/accounts', { key: parentKey, body: { name } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  const id = res.body.id as string;
  const domain = uniqueDomain('sub');
  const domainId = await connectDomain(service, parentKey, domain, { account: id });
  return { id, domain, domainId, from: `orders@${domain}` };
}

/** A valid receipt send request. */
export function receipt(from: string, to: string | string[] = 'customer@example.net', extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { from, to, template: { name: 'receipt', receiptNumber: 'R-1001', paidOn: '2026-03-10', paymentMethod: 'Visa 4242', total: '$42.00' }, ...extra };
}

export function sendEmail(
  service: TestService,
  key: string,
  body: unknown,
  opts: { account?: string; headers?: Record<string, string> } = {},
): Promise<ApiResponse> {
  return service.api('POST', '/emails', { key, body, account: opts.account, headers: opts.headers });
}

/** The error envelope with this status and code (and, when given, exactly this message). */
export function expectError(res: ApiResponse, status: number, code: string, message?: string | RegExp): void {
  expect({ status: res.status, body: res.body }).toEqual({ status, body: { error: { code, message: expect.any(String) } } });
  if (typeof message === 'string') expect(res.body.error.message).toBe(message);
  else if (message) expect(res.body.error.message).toMatch(message);
}

export function expectOk(res: ApiResponse): void {
  expect({ status: res.status, body: res.body }).toMatchObject({ status: 200, body: { id: expect.any(String) } });
}

export async function accountRow(service: TestService, id: string): Promise<AccountRow> {
  const row = await one(service.deps.db.select().from(accounts).where(eq(accounts.id, id)));
  if (!row) throw new Error(`no account ${id}`);
  return row;
}

export async function updateAccount(service: TestService, id: string, patch: Partial<typeof accounts.$inferInsert>): Promise<void> {
  await service.deps.db.update(accounts).set(patch).where(eq(accounts.id, id));
}

/** GET /account for the key's account, or for the sub-account named by `account`. */
export async function getAccount(service: TestService, key: string, account?: string): Promise<any> {
  const res = await service.api('GET', '/account', { key, account });
  expect(res.status).toBe(200);
  return res.body;
}

export async function emailRows(service: TestService, accountId: string): Promise<EmailRow[]> {
  return await service.deps.db.select().from(emails).where(eq(emails.accountId, accountId)).orderBy(asc(emails.id));
}

export async function outboundMessagesOf(service: TestService, accountId: string): Promise<OutboundMessageRow[]> {
  return await service.deps.db.select().from(outboundMessages).where(eq(outboundMessages.accountId, accountId));
}

/** The queued message of one email and its recipient rows. */
export async function queued(service: TestService, emailId: string): Promise<{ message: OutboundMessageRow | undefined; recipients: OutboundRecipientRow[] }> {
  const message = await one(service.deps.db.select().from(outboundMessages).where(eq(outboundMessages.id, emailId)));
  const recipients = await service.deps.db
    .select()
    .from(outboundRecipients)
    .where(eq(outboundRecipients.messageId, emailId))
    .orderBy(asc(outboundRecipients.id));
  return { message, recipients };
}

/** Every recipient row queued for the account. */
export async function queuedRecipientsOf(service: TestService, accountId: string): Promise<OutboundRecipientRow[]> {
  return (
    await service.deps.db
      .select({ r: outboundRecipients })
      .from(outboundRecipients)
      .innerJoin(outboundMessages, eq(outboundMessages.id, outboundRecipients.messageId))
      .where(eq(outboundMessages.accountId, accountId))
  ).map((x) => x.r);
}

/** Logs `n` sandbox sends for the account directly, as `n` sandbox POST /emails at the current time would. */
export async function fillSandboxLog(service: TestService, accountId: string, n: number): Promise<void> {
  const now = service.clock.now();
  const rows = Array.from({ length: n }, () => ({
    id: newId(now),
    accountId,
    fromAddress: 'billing@example.com',
    to: ['customer@example.net'],
    subject: 'Your receipt',
    template: 'receipt',
    status: 'sandboxed' as const,
    sandbox: true,
    createdAt: now,
  }));
  for (let i = 0; i < rows.length; i += 200) await service.deps.db.insert(emails).values(rows.slice(i, i + 200));
}

/** SHA-256 hex of the exact bytes the harness sends for `body`, as the service fingerprints an idempotent request. */
export const fingerprintOf = (body: unknown): string => createHash('sha256').update(JSON.stringify(body)).digest('hex');

/** A claim held by a request that never answered, as the service stores one. */
export async function insertRunningClaim(service: TestService, accountId: string, key: string, body: unknown, claimedAt = service.clock.now()): Promise<void> {
  await service.deps.db.insert(idempotencyKeys).values({
    accountId,
    key,
    fingerprint: fingerprintOf(body),
    claimToken: 'held-by-a-lost-request',
    state: 'running',
    response: null,
    claimedAt,
    completedAt: null,
  });
}

export async function idempotencyRow(service: TestService, accountId: string, key: string) {
  return await one(
    service.deps.db
      .select()
      .from(idempotencyKeys)
      .where(and(eq(idempotencyKeys.accountId, accountId), eq(idempotencyKeys.key, key))),
  );
}

/**
 * Makes the durable queue refuse every insert (a trigger's abort, not a failure of the store: a full disk is
 * `503 unavailable`, tests/full-disk.test.ts).
 */
export async function breakQueue(service: TestService): Promise<() => Promise<void>> {
  return await refuseInsertsInto(service, 'outbound_recipients');
}

export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}

interface RawOptions {
  headers?: Record<string, string>;
  body?: string;
  /** An already connected socket to send the request on. */
  socket?: Socket;
}

/**
 * One request over node:http, whose headers go out exactly as given (fetch may drop an empty header value).
 * Paths are relative to /api/v1.
 */
export function rawRequest(service: TestService, method: string, path: string, opts: RawOptions = {}): Promise<RawResponse> {
  const url = new URL(`${service.base}${path}`);
  return new Promise((resolve, reject) => {
    const socket = opts.socket;
    const target = { host: url.hostname, port: url.port, path: `${url.pathname}${url.search}`, method, headers: opts.headers };
    const req = request(socket ? { ...target, createConnection: () => socket } : target, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        try {
          body = text === '' ? null : JSON.parse(text);
        } catch {
          // not JSON: the test sees the raw text
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}

/** `n` connections to the service, each connected before any is used, for requests that must arrive together. */
export function connectSockets(service: TestService, n: number): Promise<Socket[]> {
  const url = new URL(service.base);
  return Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const socket = connect(Number(url.port), url.hostname, () => resolve(socket));
          socket.once('error', reject);
        }),
    ),
  );
}

/** `n` distinct recipient addresses. */
export const recipients = (n: number, domain = 'example.net'): string[] => Array.from({ length: n }, (_, i) => `user${i + 1}@${domain}`);

export const DAY = 86_400_000;

/** The numbers 1 to n as rows of one column g, on the service's engine (bulk rows inserted in one statement). */
export const bulkRows = (target: TestService, n: number): string =>
  target.deps.store.engine === 'postgres'
    ? `select generate_series(1, ${n}) as g`
    : `with recursive n(g) as (select 1 union all select g + 1 from n where g < ${n}) select g from n`;

/** Ends the account's trial and grace window: its sends now answer `402 no_credits`. */
export async function exhaustCredits(service: TestService, accountId: string): Promise<void> {
  const now = service.clock.now();
  await updateAccount(service, accountId, { creditsBalance: 0, freeUntil: now - 365 * DAY, graceStartedAt: now - 365 * DAY });
}

/** Counts recipients against today's quota so that `left` remain. */
export async function useQuota(service: TestService, accountId: string, left = 0): Promise<void> {
  const row = await accountRow(service, accountId);
  const day = new Date(service.clock.now()).toISOString().slice(0, 10);
  await updateAccount(service, accountId, { sentTodayDay: day, sentTodayCount: row.dailyQuota - left });
}

/** An operator's suspension (the CLI's `accounts suspend`), which the API cannot lift. */
export async function suspendByOperator(service: TestService, accountId: string, reason: string): Promise<void> {
  await updateAccount(service, accountId, { suspendedBy: 'operator', suspendedReason: reason, suspendedAt: service.clock.now() });
}

export interface CommitGate {
  /** Resolves once `n` commits are held: the sends behind them have passed every check before their commit. */
  arrived(n: number): Promise<void>;
  /** Lets the held commits run (in the order they arrived) and stops holding; the service's own commit is back. */
  release(): void;
}

/**
 * Holds the first `hold` send commits (the group commit's `run`, where a send's transaction starts) until released,
 * so a test can change the world between a send's early checks and its commit. Later commits pass straight through.
 */
export function gateCommits(service: TestService, hold: number): CommitGate {
  const original = service.deps.commits;
  const held: (() => void)[] = [];
  const watchers: { n: number; resolve: () => void }[] = [];
  const notify = () => {
    for (const w of watchers.filter((w) => held.length >= w.n)) {
      watchers.splice(watchers.indexOf(w), 1);
      w.resolve();
    }
  };
  // Every other member of the group commit kept: only run is held.
  replaceDep(service.deps, 'commits', {
    ...original,
    run<T, R = never>(fn: (db: Db, ahead?: Promise<R>) => T | Promise<T>, ahead?: ReadAhead<R>, lock?: WriteLock): Promise<T> {
      if (held.length >= hold) return original.run(fn, ahead, lock);
      const wait = new Promise<void>((resolve) => held.push(resolve));
      notify();
      return wait.then(() => original.run(fn, ahead, lock));
    },
  });
  return {
    arrived: (n) =>
      new Promise<void>((resolve) => {
        watchers.push({ n, resolve });
        notify();
      }),
    release() {
      replaceDep(service.deps, 'commits', original);
      for (const go of held) go();
    },
  };
}

/**
 * The engine's plan of `statement` reads `table` through `index`, never by a scan of the whole table: Postgres's
 * `explain (format json)` names the index and no Seq Scan; SQLite's `explain query plan` searches with the index and
 * has no SCAN of the table.
 */
export async function expectPlanThroughIndex(target: TestService, statement: SQL, table: string, index: string): Promise<void> {
  const db = target.deps.db;
  if (target.deps.store.engine === 'postgres') {
    const [plan] = await queryRows<{ 'QUERY PLAN': unknown }>(db, sql`explain (format json) ${statement}`);
    const text = JSON.stringify(plan!['QUERY PLAN']);
    expect(text).toContain(index);
    expect(text).not.toContain('Seq Scan');
  } else {
    const details = (await queryRows<{ detail: string }>(db, sql`explain query plan ${statement}`)).map((p) => p.detail);
    expect(details).toContainEqual(expect.stringContaining(`USING INDEX ${index}`));
    expect(details.filter((d) => new RegExp(`^SCAN ${table}\\b`).test(d))).toEqual([]);
  }
}

import { createHash } from 'node:crypto';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { openDatabase } from '../../db/client.js';
import { createGroupCommit } from '../../db/group-commit.js';
import { ApiError } from '../../server/shared/errors.js';
import { jsonBody } from '../../server/api/http/body.js';
import { parseInput } from '../../server/api/http/validate.js';
import { newId } from '../../server/shared/ids.js';
import { SANDBOX_LIMIT } from '../../server/core/sending.js';
import { renderChecked, sendRequestSchema, toSendRequest } from '../../server/core/send-request.js';

/**
 * The floor under a send (the targets: sandbox 0.5, queued 0.3 of a bare route), for bench:send-api: the least
 * `POST /emails` must do, with every read served from memory, as a send path redesigned around memory would:
 *
 * - the key: the SHA-256 of the bearer secret looked up in a Map (keys loaded from the benchmark's own database, as
 *   stored: hashes only), its scope checked; a per-key request count (the rate limit);
 * - the account's state (suspended, daily quota, credit) from memory;
 * - the body through the service's own validation and template rendering (send-request.ts, http/validate.ts);
 * - the from-domain and the suppression lists as Map and Set lookups, the sandbox count per account in memory;
 * - the send's rows (below) written through the service's group commit, the 200 answered once the WAL is fdatasynced.
 *
 * Nothing else: no idempotency, no access log, no metrics, no delivery (a queued send's rows wait), no view of
 * another connection's changes (a real one would have to see keys revoked and accounts suspended by the CLI). Its
 * rate against the bare route (bare-hono.ts) in the same run is what any design of the send path can hope for on the
 * machine. Run by send-api.ts after the service stopped, on the service's data directory (BENCH_DATA_DIR).
 */

const dataDir = process.env.BENCH_DATA_DIR;
if (!dataDir) throw new Error('BENCH_DATA_DIR: the data directory of the service the benchmark ran');
const store = openDatabase(dataDir, { mustExist: true });
const commits = createGroupCommit(store, store.syncWal);

interface MemoryAccount {
  suspended: boolean;
  dailyQuota: number;
  sentToday: number;
  credits: number;
  sandboxSends: number;
}

const keys = new Map<string, { accountId: string; scopes: string[]; requests: number }>();
for (const row of store.sqlite.prepare('select key_hash, account_id, scopes from api_keys where revoked_at is null').all() as {
  key_hash: string;
  account_id: string;
  scopes: string;
}[]) {
  keys.set(row.key_hash, { accountId: row.account_id, scopes: JSON.parse(row.scopes) as string[], requests: 0 });
}
const accounts = new Map<string, MemoryAccount>();
for (const row of store.sqlite.prepare('select id, suspended_by, daily_quota, sent_today_count, credits_balance from accounts').all() as {
  id: string;
  suspended_by: string | null;
  daily_quota: number;
  sent_today_count: number;
  credits_balance: number;
}[]) {
  accounts.set(row.id, {
    suspended: row.suspended_by !== null,
    dailyQuota: row.daily_quota,
    sentToday: row.sent_today_count,
    credits: row.credits_balance,
    sandboxSends: 0,
  });
}
const domains = new Map<string, { ready: boolean; keyId: string }>();
for (const row of store.sqlite.prepare('select account_id, name, record_status, key_id from domains').all() as {
  account_id: string;
  name: string;
  record_status: string;
  key_id: string;
}[]) {
  const status = JSON.parse(row.record_status) as Record<string, string>;
  domains.set(`${row.account_id} ${row.name}`, {
    ready: status.ownership === 'published' && status.spf === 'published' && status.signing === 'published',
    keyId: row.key_id,
  });
}
const suppressed = new Set<string>();
for (const row of store.sqlite.prepare('select account_id, address from suppressions').all() as { account_id: string; address: string }[]) {
  suppressed.add(`${row.account_id} ${row.address.toLowerCase()}`);
}

/**
 * `emails` (default): the service's tables, with the indexes the API and the delivery engine need: a sandbox send's log
 * row; a queued send's log row, its rendered message and a queue row per recipient. `plain` (SEND_FLOOR_LOG=plain):
 * one row in a table with no index but its integer key, holding the log columns and, for a queued send, the rendered
 * message and the recipients: the cheapest a durable send can be, a bound no design that keeps sends queryable and
 * deliverable reaches.
 */
const plain = process.env.SEND_FLOOR_LOG === 'plain';
if (plain) {
  store.sqlite.exec(
    'create table if not exists floor_log (seq integer primary key, id text not null, account_id text not null, from_address text not null, "to" text not null, subject text not null, template text not null, status text not null, tags text, sandbox integer not null, html text, text text, created_at integer not null)',
  );
}
const q = {
  insertLog: store.sqlite.prepare(
    `insert into ${plain ? 'floor_log' : 'emails'} (id, account_id, from_address, "to", subject, template, status, tags, sandbox, created_at${plain ? ', html, text' : ''}) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?${plain ? ', ?, ?' : ''})`,
  ),
  insertMessage: store.sqlite.prepare(
    'insert into outbound_messages (id, account_id, domain_key_id, from_header, from_address, reply_to_header, message_id, subject, html, text, created_at, expires_at) values (?, ?, ?, ?, ?, null, ?, ?, ?, ?, ?, ?)',
  ),
  insertRecipient: store.sqlite.prepare(
    "insert into outbound_recipients (id, message_id, account_id, recipient, recipient_domain, status, next_attempt_at, created_at) values (?, ?, ?, ?, ?, 'queued', ?, ?)",
  ),
};
const DELIVERY_WINDOW_MS = 7 * 24 * 3600 * 1000;
const RATE_LIMIT = 100_000_000;

const app = new Hono();
app.onError((err, c) => {
  if (err instanceof ApiError) return c.json({ error: { code: err.code, message: err.message } }, err.status as 400);
  return c.json({ error: { code: 'internal', message: String(err) } }, 500);
});
app.post('/emails', async (c) => {
  // (1) the key and its scope, and the rate limit.
  const secret = c.req.header('authorization')?.replace(/^Bearer /, '') ?? '';
  const key = keys.get(createHash('sha256').update(secret).digest('hex'));
  if (!key) throw new ApiError('invalid_key', 'The API key is not valid.');
  if (!key.scopes.includes('emails:send')) throw new ApiError('insufficient_scope', 'The key lacks emails:send.');
  if (++key.requests > RATE_LIMIT) throw new ApiError('rate_limited', 'Too many requests.');
  // (3), (4) the account's state.
  const account = accounts.get(key.accountId)!;
  if (account.suspended) throw new ApiError('suspended', 'The account is suspended.');
  if (account.sentToday >= account.dailyQuota) throw new ApiError('quota_exceeded', 'Daily quota reached.');
  if (account.credits <= 0) throw new ApiError('no_credits', 'No credits.');
  // (5) the body, rendered.
  const raw = Buffer.from(await c.req.arrayBuffer());
  const send = toSendRequest(parseInput(sendRequestSchema, jsonBody(raw)));
  const rendered = renderChecked(send.template);
  // (6), (7) the from-domain, the suppression list.
  const domain = domains.get(`${key.accountId} ${send.from.domain}`);
  if (domain === undefined) throw new ApiError('domain_not_yours', 'Not your domain.');
  if (!domain.ready) throw new ApiError('domain_not_ready', 'The domain is not verified.');
  for (const r of send.to)
    if (suppressed.has(`${key.accountId} ${r.address.toLowerCase()}`)) throw new ApiError('recipient_suppressed', 'A recipient is suppressed.');
  if (send.sandbox && account.sandboxSends >= SANDBOX_LIMIT) throw new ApiError('sandbox_limit', 'Sandbox limit reached.');
  if (!send.sandbox && account.sentToday + send.to.length > account.dailyQuota) throw new ApiError('quota_exceeded', 'Daily quota reached.');
  // The rows, durable before the answer.
  const now = Date.now();
  const id = newId(now);
  const to = JSON.stringify(send.to.map((r) => r.address));
  const tags = send.tags ? JSON.stringify(send.tags) : null;
  const status = send.sandbox ? 'sandboxed' : 'sent';
  await commits.run(() => {
    const content = plain && !send.sandbox ? [rendered.html, rendered.text] : plain ? [null, null] : [];
    q.insertLog.run(id, key.accountId, send.from.address, to, rendered.subject, send.template.name, status, tags, send.sandbox ? 1 : 0, now, ...content);
    if (send.sandbox || plain) return;
    q.insertMessage.run(
      id,
      key.accountId,
      domain.keyId,
      send.from.address,
      send.from.address,
      `<${id}@floor.bench.test>`,
      rendered.subject,
      rendered.html,
      rendered.text,
      now,
      now + DELIVERY_WINDOW_MS,
    );
    for (const r of send.to) q.insertRecipient.run(newId(now), id, key.accountId, r.address, r.domain, now, now);
  });
  if (send.sandbox) account.sandboxSends++;
  else {
    account.sentToday += send.to.length;
    account.credits -= send.to.length;
  }
  return c.json({ id, sandbox: send.sandbox });
});

serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) =>
  process.stdout.write(`${JSON.stringify({ event: 'http.listening', port: info.port })}\n`),
);
process.on('SIGTERM', () => {
  store.close();
  process.exit(0);
});

import { and, asc, count, eq, gt, sql } from 'drizzle-orm';
import { type Db, takesLateWrites } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { FlushFailedError, type ReadAhead } from '../../db/group-commit.js';
import { markQueued } from '../../db/queue-wake.js';
import { DELIVERY_WINDOW_MS } from './delivery-schedule.js';
import { isAlwaysSuppressed, isSimulatorDomain } from './simulator.js';
import { type AccountRow, type EmailSource, accounts, domainKeys, domains, emails, outboundMessages, outboundRecipients } from '../../db/schema/index.js';
import { DAY_MS, leaseNow } from '../shared/clock.js';
import type { Deps } from './deps.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { formatMailbox } from './addresses.js';
import type { RequestContext } from './context.js';
import { deriveFlags } from './domain-checks.js';
import { type Claim, assertClaimHeld, claimIdempotencyKey, releaseClaim, settleClaim } from './idempotency.js';
import { type SendRequest, renderSend } from './send-request.js';
import { creditStatus } from './credits.js';
import { attachmentRecords, toOutbound } from './attachments.js';
import {
  type Sender,
  type Warning,
  afterSend,
  assertCredit,
  assertMaySend,
  assertQuotaFor,
  chargeOf,
  creditWarning,
  payerOf,
  recordSend,
} from './sending-policy.js';
import { suppressedRecipients } from './suppressions.js';
import type { Rendered } from './templates.js';
import { breakerSuspension, breakerTrips, suspendByBreaker } from './reputation.js';
import { databaseOwnerOf, queueCustomerDbWrite } from './customer-db-outbox.js';
import { logFailure, storeFaultOf, storeUnavailable } from '../shared/store-health.js';
import { forNoKeyUpdate, isOneOfPlaceholder, listParam, one, statementsAreRoundTrips, together } from '../../db/sql.js';

/** POST /emails as the seven checks of docs/api/contract.md, one named step each, in the spec's order; then the queue. */

export const SANDBOX_LIMIT = 1000;

export interface SendResult {
  id: string;
  sandbox: boolean;
  warning?: Warning;
}

export interface SendOutcome {
  result: SendResult;
  replayed: boolean;
}

/**
 * The send request as the edge read it from the body, or the refusal its reading gave (invalid JSON, an invalid
 * field): the core gives that verdict at check 5, in its turn, not when the body was read.
 */
export type ParsedSend = { ok: true; value: SendRequest } | { ok: false; error: ApiError };

interface SendInput {
  deps: Deps;
  ctx: RequestContext;
  /** The body's bytes as sent: the Idempotency-Key's fingerprint. */
  rawBody: Buffer;
  body: ParsedSend;
  idempotencyKey: string | null;
}

/** The answer while the store takes no writes (a flush of its WAL failed): nothing can be queued until a restart. */
const storeClosed = () => storeUnavailable(null, { closed: true, outcome: NOTHING_SENT })!;

const NOTHING_SENT = 'Nothing was sent';

export async function sendEmail({ deps, ctx, rawBody, body: parsed, idempotencyKey }: SendInput): Promise<SendOutcome> {
  // (1) key, scope and account header: the route's guard has run.
  if (deps.storeHealth.unsafe()) throw storeClosed();
  // (2) the Idempotency-Key.
  let claim: Claim | null = null;
  if (idempotencyKey !== null) {
    let claimed;
    try {
      claimed = await claimIdempotencyKey(deps.db, ctx.account.id, idempotencyKey, rawBody, deps.clock.now(), leaseNow(deps.clock), deps.config.nodeName);
    } catch (err) {
      throw unrecorded(deps, ctx, err) ?? err;
    }
    if (claimed.kind === 'replay') {
      // The answer it repeats may be committed and not yet on disk (its send still waits for the flush): a replay
      // acknowledges it too, so it waits for a flush after it (an empty write of the group commit resolves only then).
      await deps.commits.run(() => undefined);
      return { result: claimed.response as SendResult, replayed: true };
    }
    claim = claimed.claim;
  }
  try {
    // (5) is worked out here, outside the commit (the template looked up, the message rendered; the edge parsed the body); its
    // verdict is given in its turn, inside the commit, after (3) and (4).
    const body = await renderBody(deps, ctx, parsed);
    // (3), (4), (5), (6), (7) in order, in one transaction of the group commit, on fresh rows.
    const result = await commitSend(deps, ctx, body, claim);
    return { result, replayed: false };
  } catch (err) {
    // A send committed but not known durable settled its claim in that commit: there is nothing to release. A release
    // that fails (the store closed to writes meanwhile) never hides the answer; the claim lapses after 15 s.
    if (claim && !(err instanceof ApiError && err.code === 'internal_error')) {
      try {
        await releaseClaim(deps.db, claim);
      } catch (releaseErr) {
        logFailure(deps, 'send.claim_release_failed', releaseErr, { accountId: ctx.account.id });
      }
    }
    throw err;
  }
}

/**
 * The acting account and its parent, read afresh inside the send's transaction and held by it to its end (rows locked
 * in id order on Postgres: db/sql.ts forNoKeyUpdate), so no other send spends the same last credit or quota slot meanwhile.
 */
export async function loadSender(deps: Pick<Deps, 'db'>, accountId: string): Promise<Sender> {
  const rows = await statements(deps.db).sender.execute({ id: accountId });
  const acting = rows.find((a) => a.id === accountId);
  if (!acting) throw new ApiError('account_not_found', 'The account no longer exists.');
  const parent = acting.parentId ? (rows.find((a) => a.id === acting.parentId) ?? null) : null;
  return { acting, parent };
}

/** What a send reads before it writes, in one statement (statements' `reading`). */
export interface SendReading {
  sender: Sender;
  /** The from-domain, when it is the acting account's. */
  domain: { recordStatus: Parameters<typeof deriveFlags>[0]; keyId: string } | undefined;
  /** How many of the recipients the account's suppression list and its parent's hold. */
  onLists: number;
  /** The account whose database receives the send's content (its own, else its parent's), or null. */
  databaseOwner: string | null;
  /** The `keys` change counter (core/keys.ts keyStamp) in the same snapshot, where the reading folds it in; else null. */
  keysStamp: string | null;
}

/**
 * loadSender, and with the same rows what checks 6 and 7 and the customer-database write read. On Postgres in one
 * statement (each statement is a round trip), the account rows unlocked in a batch that writes their counters late
 * (db/late-writes.ts); on SQLite, which has none, in the simple reads it folds: its subqueries cost SQLite three times
 * as much (58 against 19 µs a send here, one fifth of a sandbox send's CPU).
 */
export async function readForSend(deps: Pick<Deps, 'db'>, accountId: string, domain: string, addresses: readonly string[]): Promise<SendReading> {
  return statementsAreRoundTrips(deps.db) ? readFolded(deps, accountId, domain, addresses) : readApart(deps, accountId, domain, addresses);
}

/** What readFolded reads, one read at a time: the same rows and the same answers. */
async function readApart(deps: Pick<Deps, 'db'>, accountId: string, domain: string, addresses: readonly string[]): Promise<SendReading> {
  const sender = await loadSender(deps, accountId);
  const [found] = await statements(deps.db).domainByName.execute({ accountId, name: domain });
  const lists = [sender.acting.id, ...(sender.parent ? [sender.parent.id] : [])];
  const listed = addresses.length > 0 ? await suppressedRecipients(deps.db, lists, [...addresses]) : [];
  return {
    sender,
    domain: found ? { recordStatus: found.recordStatus, keyId: found.keyId } : undefined,
    onLists: listed.length,
    databaseOwner: await databaseOwnerOf(deps.db, accountId),
    keysStamp: null,
  };
}

async function readFolded(deps: Pick<Deps, 'db'>, accountId: string, domain: string, addresses: readonly string[]): Promise<SendReading> {
  const q = statements(deps.db);
  const rows = await (takesLateWrites(deps.db) ? q.readingUnlocked : q.reading).execute({
    id: accountId,
    domain,
    addresses: listParam(
      deps.db,
      addresses.map((a) => a.toLowerCase()),
    ),
  });
  const acting = rows.find((r) => r.account.id === accountId);
  if (!acting) throw new ApiError('account_not_found', 'The account no longer exists.');
  const parent = acting.account.parentId ? rows.find((r) => r.account.id === acting.account.parentId) : undefined;
  return {
    sender: { acting: acting.account, parent: parent?.account ?? null },
    domain: acting.domainStatus !== null && acting.domainKeyId !== null ? { recordStatus: acting.domainStatus, keyId: acting.domainKeyId } : undefined,
    onLists: acting.onList + (parent?.onList ?? 0),
    // The account's own database first, else its parent's (as customer-db-outbox.ts OWNER_SQL).
    databaseOwner: acting.ownDatabase > 0 ? acting.account.id : parent && parent.ownDatabase > 0 ? parent.account.id : null,
    keysStamp: String(acting.keysStamp ?? 0),
  };
}

/** The body, and the message it renders (bounded in size), or the refusal of check 5 to give in its turn. */
type Body = { ok: true; send: SendRequest; rendered: Rendered; templateVersion: number | null } | { ok: false; error: ApiError };

async function renderBody(deps: Pick<Deps, 'db'>, ctx: RequestContext, parsed: ParsedSend): Promise<Body> {
  if (!parsed.ok) return parsed;
  try {
    const send = parsed.value;
    return { ok: true, send, ...(await renderSend(deps.db, ctx.account, send)) };
  } catch (err) {
    // Anything but a refusal is a fault of ours: a 500 now, not a verdict later.
    if (!(err instanceof ApiError)) throw err;
    return { ok: false, error: err };
  }
}

/** The columns of the email's log entry that come from the request. */
function logEntryOf(ctx: RequestContext, { send, rendered, templateVersion }: { send: SendRequest; rendered: Rendered; templateVersion: number | null }) {
  return {
    accountId: ctx.account.id,
    fromAddress: send.from.address,
    to: send.to.map((r) => r.address),
    subject: rendered.subject,
    template: send.template.name,
    templateVersion,
    attachments: send.attachments.length > 0 ? attachmentRecords(send.attachments) : null,
    tags: send.tags,
    sandbox: send.sandbox,
  };
}

const p = sql.placeholder;
/** The outer account row's id inside a subquery (drizzle leaves a column of a one-table select unqualified). */
const outerAccountId = sql.raw('accounts.id');
/** The acting account's from-domain with its signing key, as checkFromDomain joins them (`d`, `k`). */
const fromDomain = sql`from domains d join domain_keys k on k.id = d.key_id where d.account_id = ${p('id')} and d.name = ${p('domain')}`;

/**
 * The send's reading, in one statement: the rows of `sender`, each with what checks 6 and 7 and the queue read of
 * it: the acting account's from-domain (its state and signing key id, on every row alike), how many of the
 * recipients the row's suppression list holds, and whether the row's account has a database of its own.
 */
function readingOf(db: Db) {
  return db
    .select({
      account: accounts,
      domainStatus: sql`(select d.record_status ${fromDomain})`.mapWith(domains.recordStatus),
      domainKeyId: sql<string | null>`(select k.id ${fromDomain})`,
      onList:
        sql<number>`(select count(*) from suppressions s where s.account_id = ${outerAccountId} and ${isOneOfPlaceholder(db, sql`s.address`, 'addresses')})`.mapWith(
          Number,
        ),
      ownDatabase: sql<number>`(select count(*) from customer_databases c where c.account_id = ${outerAccountId})`.mapWith(Number),
      // For a key the request's guard took unread (core/keys.ts KeyCheck): confirmed by this snapshot's stamp.
      keysStamp: sql<number>`(select n from change_counters where name = 'keys')`.mapWith(Number),
    })
    .from(accounts)
    .where(sql`${accounts.id} in (${p('id')}, (select a.parent_id from accounts a where a.id = ${p('id')}))`)
    .orderBy(asc(accounts.id));
}

const statements = definePrepared((db) => ({
  // The acting account and its parent in one read, in id order: locked in that order on Postgres.
  sender: forNoKeyUpdate(
    db,
    db
      .select()
      .from(accounts)
      .where(sql`${accounts.id} in (${p('id')}, (select a.parent_id from accounts a where a.id = ${p('id')}))`)
      .orderBy(asc(accounts.id)),
  ).prepare(),
  // The acting accounts of a batch's sends and their parents, in id order (lockSenders).
  lockSenders: forNoKeyUpdate(
    db,
    db
      .select({ id: accounts.id })
      .from(accounts)
      .where(
        sql`${isOneOfPlaceholder(db, accounts.id, 'ids')} or ${accounts.id} in (select a.parent_id from accounts a where ${isOneOfPlaceholder(db, sql`a.id`, 'ids')})`,
      )
      .orderBy(asc(accounts.id)),
  ).prepare(),
  // The send's reading, locked (readingOf).
  reading: forNoKeyUpdate(db, readingOf(db)).prepare(),
  // The same, unlocked: in a batch that writes the account counters late (sending-policy.ts COUNTED_LATE).
  readingUnlocked: readingOf(db).prepare(),
  // Only what the check reads: the key row holds the sealed private key, which a send never needs.
  domainByName: db
    .select({ recordStatus: domains.recordStatus, keyId: domainKeys.id })
    .from(domains)
    .innerJoin(domainKeys, eq(domainKeys.id, domains.keyId))
    .where(and(eq(domains.accountId, sql.placeholder('accountId')), eq(domains.name, sql.placeholder('name'))))
    .prepare(),
  insertEmail: db
    .insert(emails)
    .values({
      id: p('id'),
      accountId: p('accountId'),
      fromAddress: p('fromAddress'),
      to: p('to'),
      subject: p('subject'),
      template: p('template'),
      source: p('source'),
      templateVersion: p('templateVersion'),
      attachments: p('attachments'),
      status: p('status'),
      tags: p('tags'),
      sandbox: p('sandbox'),
      createdAt: p('createdAt'),
    })
    .prepare(),
  insertMessage: db
    .insert(outboundMessages)
    .values({
      id: p('id'),
      accountId: p('accountId'),
      domainKeyId: p('domainKeyId'),
      fromHeader: p('fromHeader'),
      fromAddress: p('fromAddress'),
      replyToHeader: p('replyToHeader'),
      messageId: p('messageId'),
      subject: p('subject'),
      html: p('html'),
      text: p('text'),
      attachments: p('attachments'),
      raw: p('raw'),
      createdAt: p('createdAt'),
      expiresAt: p('expiresAt'),
    })
    .prepare(),
  insertRecipient: db
    .insert(outboundRecipients)
    .values({
      id: p('id'),
      messageId: p('messageId'),
      accountId: p('accountId'),
      recipient: p('recipient'),
      recipientDomain: p('recipientDomain'),
      status: 'queued',
      nextAttemptAt: p('nextAttemptAt'),
      createdAt: p('createdAt'),
    })
    .prepare(),
  sandboxCount: db
    .select({ n: count() })
    .from(emails)
    .where(and(eq(emails.accountId, sql.placeholder('accountId')), eq(emails.status, 'sandboxed'), gt(emails.createdAt, sql.placeholder('since'))))
    .prepare(),
}));

/** The from-domain's signing key id, once the domain is this account's and ready to send. */
export async function checkFromDomain(deps: Pick<Deps, 'config' | 'db'>, account: Pick<AccountRow, 'id'>, domain: string): Promise<string> {
  return fromDomainKey(deps, domain, await one(statements(deps.db).domainByName.execute({ accountId: account.id, name: domain })));
}

/** Check 6 on the from-domain as read (undefined: not this account's): its signing key id, or the refusal. */
export function fromDomainKey(
  deps: Pick<Deps, 'config'>,
  domain: string,
  found: { recordStatus: Parameters<typeof deriveFlags>[0]; keyId: string } | undefined,
): string {
  if (!found) throw new ApiError('domain_not_yours', `The domain ${domain} is not connected to this account.`);
  const flags = deriveFlags(found.recordStatus, deps.config.smtpRelayUrl !== null);
  if (!flags.ownershipVerified) throw new ApiError('domain_not_ready', `The domain ${domain} is not verified yet: publish its records and call verify.`);
  if (!flags.sending) throw new ApiError('domain_not_ready', `Sending is not enabled for ${domain}: publish its Signing and SPF records and call verify.`);
  return found.keyId;
}

/** The recipients on the account's suppression list or its parent's, or the simulator's suppressed@ (always listed). */
export async function listedRecipients(deps: Pick<Deps, 'db'>, sender: Sender, addresses: string[]): Promise<string[]> {
  const ids = [sender.acting.id, ...(sender.parent ? [sender.parent.id] : [])];
  const onLists = new Set(await suppressedRecipients(deps.db, ids, addresses));
  return addresses.filter((a) => onLists.has(a) || isAlwaysSuppressed(a));
}

/** Check 7: the account's list and its parent's; and the mailbox simulator's suppressed@, which is always listed. */
async function checkSuppressions(deps: Pick<Deps, 'db'>, sender: Sender, send: SendRequest): Promise<void> {
  const listed = await listedRecipients(
    deps,
    sender,
    send.to.map((r) => r.address),
  );
  if (listed.length > 0) throw new ApiError('recipient_suppressed', `Suppressed recipients, nothing was sent: ${listed.join(', ')}.`);
}

async function sandboxSendsToday(deps: Pick<Deps, 'db'>, accountId: string, now: number): Promise<number> {
  return (await one(statements(deps.db).sandboxCount.execute({ accountId, since: now - DAY_MS })))?.n ?? 0;
}

/**
 * The send itself, in one transaction of the group commit: the idempotency claim is still this request's (a stall
 * past its 15 s may have let another request take the key); checks 3 to 7 in the spec's order, on rows no other
 * send can change before this one commits (so the quota or the last credit cannot be spent twice): locked, or, in a
 * batch on Postgres that writes the counters late, read unlocked and counted at its commit under a guard that the
 * checks still hold (sending-policy.ts COUNTED_LATE; the batch runs again locked if not); then the log entry, the
 * queue rows, the counters, the charge and the idempotent answer. The promise resolves only once all of it is
 * durable; a refusal rolls back what the transaction had begun and writes nothing.
 */
async function commitSend(
  deps: Pick<Deps, 'clock' | 'commits' | 'config' | 'db' | 'logger' | 'secretKey' | 'storeHealth'>,
  ctx: RequestContext,
  body: Body,
  claim: Claim | null,
): Promise<SendResult> {
  // The idempotency claim still this request's, and everything checks 3 to 7 and the queue read, in one statement,
  // before any of them gives its verdict (issued together: a claim taken over is still the error given first). On
  // Postgres the group commit issues it ahead, with the other sends' of its batch (db/group-commit.ts ReadAhead).
  const readSend = (tx: Db) =>
    together(tx, [
      () => (claim ? assertClaimHeld(tx, claim) : Promise.resolve()),
      () => readForSend(deps, ctx.account.id, body.ok ? body.send.from.domain : '', body.ok ? body.send.to.map((r) => r.address) : []),
    ]);
  // What a send reads and writes of what other sends read: its account's row and its parent's.
  const readAhead: ReadAhead<SendRead> = {
    read: readSend,
    keys: ([, { sender }]) => [sender.acting.id, ...(sender.parent ? [sender.parent.id] : [])],
    carry: carrySend,
    lock: { keys: [ctx.account.id], take: lockSenders, late: true },
  };
  try {
    const committed = await deps.commits.run(async (tx, ahead, handOn) => {
      const now = deps.clock.now();
      const [, reading] = await (ahead ?? readSend(tx));
      // (1) a key the guard took unread is live, in this transaction's reading (core/keys.ts KeyCheck).
      await ctx.keyCheck?.confirmedBy(tx, reading.keysStamp);
      const { sender } = reading;
      // (3) whether the account, and for a sub-account its parent, may send at all.
      assertMaySend(sender, now);
      // (4) whether the paying account has credit.
      assertCredit(sender, deps.config, now);
      // (5) the body and the message it renders; a send with more recipients than the quota has left is refused once
      // they are known (a sandbox send runs this check too, though it is not counted).
      if (!body.ok) throw body.error;
      const { send, rendered } = body;
      const base = logEntryOf(ctx, body);
      assertQuotaFor(sender, send.to.length, now);
      // (6) the from-domain.
      const domainKeyId = fromDomainKey(deps, send.from.domain, reading.domain);
      // (7) the suppression lists, the parent's too for a sub-account (read again, by address, only to name them).
      if (reading.onLists > 0 || send.to.some((r) => isAlwaysSuppressed(r.address))) await checkSuppressions(deps, sender, send);
      const id = newId(now);
      const q = statements(deps.db);
      let result: SendResult;
      let written = false;
      if (send.sandbox) {
        if ((await sandboxSendsToday(deps, ctx.account.id, now)) >= SANDBOX_LIMIT) {
          throw new ApiError('sandbox_limit', `${SANDBOX_LIMIT} sandbox sends in the last 24 hours; try again later.`);
        }
        const logged = q.insertEmail.execute({ ...base, source: 'api', id, status: 'sandboxed', createdAt: now });
        // Its log entry issued (what the next sandbox send counts), its rows unchanged: for the next send (carrySend).
        handOn?.(sender);
        await logged;
        // Not charged, but the answer still tells a trial or grace account where it stands.
        const payer = payerOf(sender);
        result = withWarning({ id, sandbox: true }, creditWarning(payer, creditStatus(payer, deps.config, now)));
      } else {
        const queued = await queueSend(deps, sender, {
          id,
          log: base,
          message: {
            domainKeyId,
            fromHeader: formatMailbox(send.from),
            fromAddress: send.from.address,
            replyToHeader: send.replyTo ? formatMailbox(send.replyTo) : null,
            messageId: `<${id}@${deps.config.mailHostname}>`,
            ...rendered,
            attachments: send.attachments.length > 0 ? toOutbound(send.attachments) : null,
            raw: null,
          },
          content: { html: rendered.html, text: rendered.text, raw: null },
          recipients: send.to,
          databaseOwner: reading.databaseOwner,
          now,
          ...(handOn ? { handOn } : {}),
        });
        written = queued.written;
        result = withWarning({ id, sandbox: false }, queued.warning);
      }
      if (claim) await settleClaim(tx, claim, result, now);
      return { result, written };
    }, readAhead);
    return committed.result;
  } catch (err) {
    if (err instanceof ApiError) throw err;
    // Committed, the disk did not confirm it: the send is queued (and its idempotent answer settled), so it is
    // neither logged failed nor answered 502 ("nothing was sent"). A retry under the same key replays its answer.
    if (err instanceof FlushFailedError) {
      logFailure(deps, 'send.unconfirmed', err, { accountId: ctx.account.id });
      throw new ApiError(
        'internal_error',
        'The send was queued but the disk did not confirm it was stored: it may still be sent. Once the service has been restarted, retry with the same Idempotency-Key to get its answer, or look for it in GET /emails before sending again.',
      );
    }
    // The store failed (a full disk): the transaction rolled back, so nothing of the send is recorded, and no failed
    // send can be logged either.
    const unavailable = unrecorded(deps, ctx, err);
    if (unavailable) throw unavailable;
    // The queue could not take the message: log the send as failed, answer 502.
    deps.logger.error('send.queue_failed', { accountId: ctx.account.id, err });
    if (body.ok) await logFailedSend(deps, logEntryOf(ctx, body));
    throw new ApiError('send_failed', 'The mail server did not accept the message; nothing was sent. Retry later.');
  }
}

/**
 * The acting accounts `ids` and their parents locked in id order, as a send's reading locks its own two (on Postgres; a
 * batch's sends and submissions, before they run: db/group-commit.ts WriteLock).
 */
export async function lockSenders(db: Db, ids: readonly string[]): Promise<void> {
  await statements(db).lockSenders.execute({ ids: listParam(db, ids) });
}

/** What commitSend reads before its checks: the idempotency claim still held (its answer unused), and the reading. */
type SendRead = [unknown, SendReading];

/**
 * A send's reading after a send before it of the same accounts in the same batch (db/group-commit.ts ReadAhead.carry):
 * its own, taken ahead, with the account rows as that send handed them on (queueSend). A send changes nothing else a
 * send reads (the from-domain, the suppression lists, the customer database, another key's claim), so the next send
 * skips its read, which on Postgres is a round trip, and need not wait for the one before to be answered.
 */
function carrySend(reading: SendRead, handed: unknown): SendRead | undefined {
  const after = handed as Sender | undefined;
  if (!after || after.acting.id !== reading[1].sender.acting.id || after.parent?.id !== reading[1].sender.parent?.id) return undefined;
  return [reading[0], { ...reading[1], sender: after }];
}

/**
 * A send the store could not record (a full disk): 503 naming the cause (docs/api/decisions.md section 13), never 502
 * send_failed, which says the mail server did not accept the message. Null when the failure was not the store's.
 */
function unrecorded(deps: Pick<Deps, 'logger' | 'storeHealth'>, ctx: RequestContext, err: unknown): ApiError | null {
  const unavailable = storeUnavailable(err, { closed: deps.storeHealth.unsafe() && storeFaultOf(err), outcome: NOTHING_SENT });
  if (unavailable) logFailure(deps, 'send.store_failed', err, { accountId: ctx.account.id });
  return unavailable;
}

/** A send that passed its checks, as queueSend writes it. */
export interface AcceptedSend {
  id: string;
  /** The log entry's columns from the request. */
  log: ReturnType<typeof logEntryOf> & { source?: EmailSource };
  /** The outbound row's columns: a rendered message (subject, html, text, attachments) or a submitted one (`raw`). */
  message: {
    domainKeyId: string;
    fromHeader: string;
    fromAddress: string;
    replyToHeader: string | null;
    messageId: string;
    subject: string;
    html: string;
    text: string;
    attachments: ReturnType<typeof toOutbound> | null;
    raw: Buffer | null;
  };
  /** What the customer's database keeps of the content. */
  content: { html: string | null; text: string | null; raw: Buffer | null };
  recipients: readonly { address: string; domain: string }[];
  /** The account whose database receives the content, when the caller read it already (undefined: looked up here). */
  databaseOwner?: string | null;
  now: number;
  /** Given the account rows as the send leaves them, once its writes are issued (db/group-commit.ts HandOn). */
  handOn?: (after: Sender) => void;
}

/**
 * A send queued, inside the transaction that checked it: the log entry (`sent`), the message and a row per recipient
 * (the delivery engine wakes once the batch is durable), the customer-database write, the counters, the reputation
 * breaker and the charge. The same for `POST /emails` and for SMTP submission.
 */
export async function queueSend(
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'secretKey'>,
  sender: Sender,
  accepted: AcceptedSend,
): Promise<{ warning: Warning | undefined; written: boolean }> {
  const { id, log, message, recipients, now } = accepted;
  const q = statements(deps.db);
  const source = log.source ?? 'api';
  // A row per recipient, in one statement however many there are.
  const rows = recipients.map((r) => ({
    id: newId(now),
    messageId: id,
    accountId: log.accountId,
    recipient: r.address,
    recipientDomain: r.domain,
    status: 'queued' as const,
    nextAttemptAt: now,
    createdAt: now,
  }));
  const reputed = recipients.filter((r) => !isSimulatorDomain(r.domain)).length;
  const { charge, warning } = chargeOf(payerOf(sender), deps.config, now);
  const after = afterSend(sender, { recipients: recipients.length, reputed, charge, now });
  // Only a send that moved the account's own counters can be what reaches `paused`.
  const trips = reputed > 0 && breakerTrips(after.acting, reputed);
  // The writes need none of each other's answers: issued together (one round trip on Postgres), in this order.
  const writing = together(deps.db, [
    () => q.insertEmail.execute({ ...log, source, id, status: 'sent', createdAt: now }),
    () => q.insertMessage.execute({ id, accountId: log.accountId, ...message, createdAt: now, expiresAt: now + DELIVERY_WINDOW_MS }),
    // The content goes to the customer's own database (the service keeps it only until delivered).
    () =>
      queueCustomerDbWrite(
        deps,
        log.accountId,
        {
          kind: 'email',
          id,
          ...log,
          source,
          template: source === 'smtp' ? null : log.template,
          subject: log.subject,
          html: accepted.content.html,
          text: accepted.content.text,
          raw: accepted.content.raw,
          tags: log.tags,
          status: 'sent',
          createdAt: now,
        },
        now,
        accepted.databaseOwner,
      ),
    () => (rows.length === 1 ? q.insertRecipient.execute(rows[0]!) : deps.db.insert(outboundRecipients).values(rows)),
    () => recordSend(deps.db, sender, after, { recipients: recipients.length, reputed, charge, now }),
  ]);
  // Its writes issued: the rows as the send leaves them (suspended, if the breaker trips), for the next send of the
  // same accounts in the batch (commitSend's carrySend).
  accepted.handOn?.(trips ? { ...after, acting: { ...after.acting, ...breakerSuspension(after.acting, now) } } : after);
  const [, , written] = await writing;
  // The delivery engine wakes once this batch is durable, and delivery starts at once.
  markQueued(deps.db, 'recipients');
  if (trips) await suspendByBreaker(deps, after.acting, now);
  return { warning, written };
}

function withWarning(result: SendResult, warning: Warning | undefined): SendResult {
  return warning ? { ...result, warning } : result;
}

async function logFailedSend(
  deps: Pick<Deps, 'clock' | 'db' | 'logger'>,
  base: Omit<typeof emails.$inferInsert, 'id' | 'status' | 'createdAt'>,
): Promise<void> {
  const now = deps.clock.now();
  try {
    await deps.db.insert(emails).values({ ...base, id: newId(now), status: 'failed', error: 'The mail server did not accept the message.', createdAt: now });
  } catch (err) {
    deps.logger.error('send.failed_log_failed', { err });
  }
}

import { and, desc, eq, isNull, lt, sql } from 'drizzle-orm';
import { z } from 'zod';
import { PROSE_MESSAGE, isProse, labelSchema } from './text-rules.js';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { type AccountRow, accounts } from '../../db/schema/index.js';
import { DAY_MS, iso } from '../shared/clock.js';
import type { Deps } from './deps.js';
import { ApiError, notFound } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import type { PageRequest, RequestContext } from './context.js';
import { type CreditsView, creditStatus, creditsView } from './credits.js';
import { effectiveQuota, sentToday } from './quota.js';
import { type Tier, gradeTier } from './tiers.js';
import { forUpdate, lockRows, one } from '../../db/sql.js';

export const MAX_SUB_ACCOUNTS = 200;

export interface AccountView {
  id: string;
  name: string;
  parentId: string | null;
  createdAt: string;
  sending: {
    tier: Tier;
    totalSent: number;
    totalBounced: number;
    totalComplained: number;
    sentToday: number;
    dailyQuota: number;
    effectiveQuota: number;
    suspended: boolean;
    suspendedReason?: string;
  };
  credits: CreditsView;
}

export const accountNameSchema = labelSchema(2, 80);
/** Kept verbatim: it is the exact message of every refused send. */
export const suspensionReasonSchema = z
  .string()
  .min(15, 'must be 15 to 500 characters')
  .max(500, 'must be 15 to 500 characters')
  .refine(isProse, PROSE_MESSAGE);

/**
 * The operator's own inputs (CLI and dashboard), looser than the customer's: a reason of any length up to 500 (the
 * 15-character floor is for the API), and whole numbers at least these.
 */
export const operatorSuspensionReasonSchema = z
  .string()
  .trim()
  .min(1, 'must not be empty')
  .max(500, 'must be at most 500 characters')
  .refine(isProse, PROSE_MESSAGE);
export const OPERATOR_NUMBER_MIN = { credits: 0, dailyQuota: 1, amount: 1 } as const;

/** An operator's number as typed: decimal digits only, a safe integer, at least `min`; null when it is not. */
export function readOperatorNumber(text: string, min: number): number | null {
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(Number(text)) || Number(text) < min) return null;
  return Number(text);
}

export const createSubAccountInput = z.strictObject({ name: accountNameSchema });
export const suspendInput = z
  .strictObject({ suspended: z.boolean(), reason: suspensionReasonSchema.optional() })
  .refine((v) => !v.suspended || v.reason !== undefined, { path: ['reason'], message: 'is required when suspended is true' });

const statements = definePrepared((db) => ({
  byId: db
    .select()
    .from(accounts)
    .where(eq(accounts.id, sql.placeholder('id')))
    .prepare(),
  subById: db
    .select()
    .from(accounts)
    .where(and(eq(accounts.id, sql.placeholder('id')), eq(accounts.parentId, sql.placeholder('parentId'))))
    .prepare(),
}));

export async function findAccount(db: Db, id: string): Promise<AccountRow | undefined> {
  return await one(statements(db).byId.execute({ id }));
}

/**
 * For a write after an await (key generation, a DNS lookup, a database probe): the account may have been deleted
 * meanwhile (a sub-account, by its parent), and the rows written for it would fail their foreign key. 404
 * account_not_found, as for a request that came after the deletion. Run it in the write's transaction: the row is
 * held to its end (`FOR UPDATE` on Postgres, where a deletion on another connection could otherwise land between this
 * read and the write; on SQLite the transaction holds the whole database).
 */
export async function assertAccountExists(db: Db, id: string): Promise<void> {
  const held = await one(forUpdate(db, db.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, id))));
  if (!held) throw new ApiError('account_not_found', 'The account was deleted while this request was under way.');
}

/** A sub-account of `parentId`, or undefined: a foreign id and an unknown id look the same. */
export async function findSubAccount(db: Db, parentId: string, id: string): Promise<AccountRow | undefined> {
  return await one(statements(db).subById.execute({ id, parentId }));
}

/** The Account resource. A sub-account's credits are its own zero record, in the state of the parent that pays. */
export async function accountView(deps: Pick<Deps, 'db' | 'clock' | 'config'>, row: AccountRow, parent?: AccountRow): Promise<AccountView> {
  const now = deps.clock.now();
  const tier = gradeTier(row);
  const payer = row.parentId === null ? row : (parent ?? (await findAccount(deps.db, row.parentId)));
  if (!payer) throw new Error(`account ${row.id} has no parent row`);
  const status = creditStatus(payer, deps.config, now);
  const sending: AccountView['sending'] = {
    tier,
    totalSent: row.totalSent,
    totalBounced: row.totalBounced,
    totalComplained: row.totalComplained,
    sentToday: sentToday(row, now),
    dailyQuota: row.dailyQuota,
    effectiveQuota: effectiveQuota(row.dailyQuota, tier),
    suspended: row.suspendedBy !== null,
  };
  if (row.suspendedBy !== null) sending.suspendedReason = row.suspendedReason ?? '';
  const credits =
    row.parentId === null ? creditsView(row, status) : { ...creditsView(row, { state: status.state, graceDaysLeft: 0, graceEmailsLeft: 0 }), freeUntil: null };
  return { id: row.id, name: row.name, parentId: row.parentId, createdAt: iso(row.createdAt), sending, credits };
}

/** A new top-level account (operator CLI): trial from now, optional purchased credits. */
export async function createTopLevelAccount(
  deps: Pick<Deps, 'db' | 'clock' | 'config'>,
  input: { name: string; credits?: number; dailyQuota?: number },
): Promise<AccountRow> {
  const now = deps.clock.now();
  const credits = input.credits ?? 0;
  return (await one(
    deps.db
      .insert(accounts)
      .values({
        id: newId(now),
        parentId: null,
        name: input.name,
        createdAt: now,
        dailyQuota: input.dailyQuota ?? deps.config.defaultDailyQuota,
        freeUntil: now + deps.config.trialDays * DAY_MS,
        creditsBalance: credits,
        creditsTotalPurchased: credits,
      })
      .returning(),
  ))!;
}

/** POST /accounts: one level only, at most MAX_SUB_ACCOUNTS per account. */
export async function createSubAccount({
  deps,
  ctx,
  input,
}: {
  deps: Pick<Deps, 'clock' | 'config' | 'db'>;
  ctx: RequestContext;
  input: z.output<typeof createSubAccountInput>;
}): Promise<AccountView> {
  if (ctx.viaHeader) throw new ApiError('conflict', 'A sub-account cannot open a sub-account: send this request without X-Service-Account.');
  if (ctx.account.parentId !== null) throw new ApiError('conflict', 'A sub-account cannot open a sub-account: only one level is allowed.');
  const now = deps.clock.now();
  const row = await deps.db.transaction(async (tx) => {
    // The parent held first (on Postgres): two creations at once cannot both pass the count.
    await lockRows(tx, accounts, accounts.id, [ctx.account.id]);
    const count = (await one(tx.select({ n: sql<number>`count(*)` }).from(accounts).where(eq(accounts.parentId, ctx.account.id))))?.n ?? 0;
    if (count >= MAX_SUB_ACCOUNTS) throw new ApiError('limit_reached', `This account already has ${MAX_SUB_ACCOUNTS} sub-accounts.`);
    return (await one(
      tx
        .insert(accounts)
        .values({ id: newId(now), parentId: ctx.account.id, name: input.name, createdAt: now, dailyQuota: deps.config.defaultDailyQuota })
        .returning(),
    ))!;
  });
  return await accountView(deps, row, ctx.account);
}

export async function listSubAccounts({
  deps,
  ctx,
  page,
}: {
  deps: Pick<Deps, 'clock' | 'config' | 'db'>;
  ctx: RequestContext;
  page: PageRequest;
}): Promise<AccountView[]> {
  const rows = await deps.db
    .select()
    .from(accounts)
    .where(and(eq(accounts.parentId, ctx.account.id), page.after ? lt(accounts.id, page.after) : undefined))
    .orderBy(desc(accounts.id))
    .limit(page.limit + 1);
  const views: AccountView[] = [];
  for (const r of rows) views.push(await accountView(deps, r, ctx.account));
  return views;
}

async function requireSubAccount(deps: Pick<Deps, 'db'>, ctx: RequestContext, id: string): Promise<AccountRow> {
  const row = await findSubAccount(deps.db, ctx.account.id, id);
  if (!row) throw notFound('sub-account');
  return row;
}

export async function getSubAccount({ deps, ctx, id }: { deps: Pick<Deps, 'clock' | 'config' | 'db'>; ctx: RequestContext; id: string }): Promise<AccountView> {
  return await accountView(deps, await requireSubAccount(deps, ctx, id), ctx.account);
}

/** DELETE /accounts/{id}: the row goes, and with it (by foreign key cascade) everything under it. */
export async function deleteSubAccount({ deps, ctx, id }: { deps: Pick<Deps, 'db' | 'logger'>; ctx: RequestContext; id: string }): Promise<void> {
  const row = await requireSubAccount(deps, ctx, id);
  await deps.db.delete(accounts).where(eq(accounts.id, row.id));
  deps.logger.info('account.deleted', { accountId: row.id, parentId: ctx.account.id });
}

/**
 * POST /accounts/{id}/suspend. The API may place a suspension and lift one it placed, unless the sub-account's own
 * rates still grade as paused; one placed by the operator or the reputation breaker is a matter for support.
 */
export async function setSuspensionByApi({
  deps,
  ctx,
  id,
  input,
}: {
  deps: Pick<Deps, 'clock' | 'config' | 'db'>;
  ctx: RequestContext;
  id: string;
  input: z.output<typeof suspendInput>;
}): Promise<AccountView> {
  // One transaction: an operator's suspension committed by the CLI between the read and the write is never overwritten.
  return await deps.db.transaction(async () => {
    // The sub-account held (on Postgres) from its read to its write.
    await lockRows(deps.db, accounts, accounts.id, [id]);
    return await setSuspension(deps, ctx, id, input);
  });
}

async function setSuspension(
  deps: Pick<Deps, 'clock' | 'config' | 'db'>,
  ctx: RequestContext,
  id: string,
  input: z.output<typeof suspendInput>,
): Promise<AccountView> {
  const row = await requireSubAccount(deps, ctx, id);
  const lockedBy = row.suspendedBy !== null && row.suspendedBy !== 'api' ? row.suspendedBy : null;
  if (lockedBy) {
    throw new ApiError(
      'conflict',
      `This sub-account was suspended by ${lockedBy === 'operator' ? 'the operator' : 'the reputation breaker'}; only support can change that.`,
    );
  }
  if (!input.suspended && gradeTier(row) === 'paused') {
    throw new ApiError('conflict', "The sub-account's own bounce and complaint rates still grade as paused; sending cannot be resumed.");
  }
  let updated: AccountRow | undefined;
  if (input.suspended) {
    updated = await one(
      deps.db
        .update(accounts)
        .set({ suspendedBy: 'api', suspendedReason: input.reason ?? '', suspendedAt: row.suspendedAt ?? deps.clock.now() })
        .where(eq(accounts.id, row.id))
        .returning(),
    );
  } else if (row.suspendedBy === 'api') {
    updated = await liftSuspension(deps.db, row.id);
  }
  return await accountView(deps, updated ?? row, ctx.account);
}

async function liftSuspension(db: Db, id: string): Promise<AccountRow | undefined> {
  return await one(db.update(accounts).set({ suspendedBy: null, suspendedReason: null, suspendedAt: null }).where(eq(accounts.id, id)).returning());
}

/** Operator: a suspension the API cannot lift. */
export async function suspendByOperator(deps: Pick<Deps, 'db' | 'clock'>, id: string, reason: string): Promise<AccountRow | undefined> {
  return await one(
    deps.db.update(accounts).set({ suspendedBy: 'operator', suspendedReason: reason, suspendedAt: deps.clock.now() }).where(eq(accounts.id, id)).returning(),
  );
}

/** Operator: lifts any suspension, whoever placed it. */
export async function unsuspendByOperator(deps: Pick<Deps, 'db'>, id: string): Promise<AccountRow | undefined> {
  return await liftSuspension(deps.db, id);
}

export async function setDailyQuota(deps: Pick<Deps, 'db'>, id: string, dailyQuota: number): Promise<AccountRow | undefined> {
  return await one(deps.db.update(accounts).set({ dailyQuota }).where(eq(accounts.id, id)).returning());
}

/** Adds purchased credits; the account is back to `ok` and a later run-out opens a fresh grace window. */
export async function grantCredits(deps: Pick<Deps, 'db'>, id: string, amount: number): Promise<AccountRow | undefined> {
  const granted = await one(
    deps.db
      .update(accounts)
      .set({
        creditsBalance: sql`${accounts.creditsBalance} + ${amount}`,
        creditsTotalPurchased: sql`${accounts.creditsTotalPurchased} + ${amount}`,
        graceStartedAt: null,
        graceEmailsUsed: 0,
      })
      // Counts stay whole numbers JavaScript holds exactly: past 2^53 - 1 a further grant would add nothing.
      .where(
        and(
          eq(accounts.id, id),
          isNull(accounts.parentId),
          sql`${accounts.creditsBalance} <= ${Number.MAX_SAFE_INTEGER - amount}`,
          sql`${accounts.creditsTotalPurchased} <= ${Number.MAX_SAFE_INTEGER - amount}`,
        ),
      )
      .returning(),
  );
  if (granted === undefined && (await findAccount(deps.db, id))?.parentId === null) {
    throw new ApiError('invalid_request', `The grant would take the account's credits past ${Number.MAX_SAFE_INTEGER}.`);
  }
  return granted;
}

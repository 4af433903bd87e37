import { and, desc, eq, lt, sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { type SuppressionReason, type SuppressionRow, suppressions } from '../../db/schema/index.js';
import { iso } from '../shared/clock.js';
import type { Deps } from './deps.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { addressKey, parseAddress } from './addresses.js';
import type { PageRequest, RequestContext } from './context.js';
import { isOneOfPlaceholder, listParam, one, queryRows } from '../../db/sql.js';

export interface SuppressionView {
  id: string;
  address: string;
  reason: SuppressionReason;
  detail: string;
  createdAt: string;
}

/** How an address is keyed on the list: as a send's recipient is (addresses.ts addressKey). */
export const suppressionKey = addressKey;

export const suppressionFilter = z.strictObject({
  address: z.string().trim().min(1, 'must be 1 to 320 characters').max(320, 'must be 1 to 320 characters').transform(suppressionKey).optional(),
  limit: z.string().optional(),
  cursor: z.string().optional(),
});

/** An address as given, before it is parsed (spaces around it are trimmed): at most this long, like the filter. */
export const MAX_ADDRESS_INPUT = 320;

export const addSuppressionInput = z.strictObject({
  address: z
    .string()
    .max(MAX_ADDRESS_INPUT, `must be at most ${MAX_ADDRESS_INPUT} characters`)
    .transform((v, ctx) => {
      const r = parseAddress(v);
      if (!r.ok) {
        ctx.addIssue({ code: 'custom', message: r.reason });
        return z.NEVER;
      }
      return suppressionKey(r.value.address);
    }),
});

/** The Suppression resource of docs/api/contract.md (the API's lists and the dashboard's). */
export function suppressionView(row: SuppressionRow): SuppressionView {
  return { id: row.id, address: row.address, reason: row.reason, detail: row.detail, createdAt: iso(row.createdAt) };
}

export async function listSuppressions({
  deps,
  ctx,
  page,
  address,
}: {
  deps: Pick<Deps, 'db'>;
  ctx: RequestContext;
  page: PageRequest;
  address?: string | undefined;
}): Promise<SuppressionView[]> {
  return (
    await deps.db
      .select()
      .from(suppressions)
      .where(
        and(
          eq(suppressions.accountId, ctx.account.id),
          address !== undefined ? eq(suppressions.address, address) : undefined,
          page.after ? lt(suppressions.id, page.after) : undefined,
        ),
      )
      .orderBy(desc(suppressions.id))
      .limit(page.limit + 1)
  ).map(suppressionView);
}

/**
 * Lists `address` on an account unless it is already there; returns the entry and whether it is new. Used by the
 * API (manual) and by the mail engine (bounce, complaint).
 */
export async function suppress(
  db: Db,
  accountId: string,
  address: string,
  reason: SuppressionReason,
  detail: string,
  now: number,
): Promise<{ row: SuppressionRow; created: boolean }> {
  const lower = address.toLowerCase();
  const inserted = await one(
    db
      .insert(suppressions)
      .values({ id: newId(now), accountId, address: lower, reason, detail, createdAt: now })
      .onConflictDoNothing()
      .returning(),
  );
  if (inserted) return { row: inserted, created: true };
  const existing = await one(
    db
      .select()
      .from(suppressions)
      .where(and(eq(suppressions.accountId, accountId), eq(suppressions.address, lower))),
  );
  if (!existing) throw new Error('suppression vanished during insert');
  return { row: existing, created: false };
}

export async function addSuppression({ deps, ctx, address }: { deps: Pick<Deps, 'clock' | 'db'>; ctx: RequestContext; address: string }): Promise<{
  entry: SuppressionView;
  created: boolean;
}> {
  const { row, created } = await suppress(deps.db, ctx.account.id, address, 'manual', '', deps.clock.now());
  return { entry: suppressionView(row), created };
}

/** DELETE /suppressions/{address}: only this account's list; a parent's list is left as it is. */
export async function removeSuppression({ deps, ctx, address }: { deps: Pick<Deps, 'db'>; ctx: RequestContext; address: string }): Promise<void> {
  const lower = suppressionKey(address);
  const removed = await deps.db
    .delete(suppressions)
    .where(and(eq(suppressions.accountId, ctx.account.id), eq(suppressions.address, lower)))
    .returning({ id: suppressions.id });
  if (removed.length === 0) throw new ApiError('not_found', `${lower} is not on this account's suppression list.`);
}

// Lists travel as one parameter (db/sql.ts) so one compiled statement serves any number of accounts and recipients.
const statements = definePrepared((db) => ({
  listed: db
    .select({ address: suppressions.address })
    .from(suppressions)
    .where(and(isOneOfPlaceholder(db, suppressions.accountId, 'accounts'), isOneOfPlaceholder(db, suppressions.address, 'addresses')))
    .prepare(),
}));

/** Why the account or its parent has suppressed `address` (a reason per list it is on, the account's first), or [] when neither has. */
export async function suppressionReasons(db: Db, account: { id: string; parentId: string | null }, address: string): Promise<SuppressionReason[]> {
  const acting = account.id;
  const parent = account.parentId ?? account.id;
  const rows = await queryRows<{ reason: SuppressionReason }>(
    db,
    sql`select reason from suppressions where address = ${address.toLowerCase()} and account_id in (${acting}, ${parent})
       order by account_id = ${acting} desc`,
  );
  return rows.map((r) => r.reason);
}

/** The recipients (as given) that any of `accountIds` has suppressed. */
export async function suppressedRecipients(db: Db, accountIds: string[], recipients: string[]): Promise<string[]> {
  const rows = await statements(db).listed.execute({
    accounts: listParam(db, accountIds),
    addresses: listParam(
      db,
      recipients.map((r) => r.toLowerCase()),
    ),
  });
  const listed = new Set(rows.map((r) => r.address));
  return recipients.filter((r) => listed.has(r.toLowerCase()));
}
